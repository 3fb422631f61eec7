"""The real stages a fleet runs on (the only place the fleet touches them):
the stack (:func:`adev.stack.running_stack`), the gate executors
(:mod:`adev.gate.registry`), the sessions (:func:`adev.session.loop.run_session`)
with the one LLM client and the reuse ledger (``LedgerHook``), and the measurement
stage's summary and report.
"""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from .. import event_loop
from ..client.llm import Endpoint, LLMClient


def running_stack(config):
    """The fleet's stack, held exclusively: its figures come from the endpoints' counters."""
    from ..stack import running_stack as rs
    return rs(config, exclusive=True)


def stack_usage(info):
    from ..stack import process_usage
    return process_usage(info)


def list_tasks() -> list[str]:
    from ..tasks import list_tasks as lt
    return list(lt())


@contextlib.asynccontextmanager
async def open_gate(kind: str) -> AsyncIterator[Any]:
    """The fleet's gate executor, started once for the whole fleet and closed at the end."""
    from ..gate.registry import make_gate
    gate = make_gate(kind, where="fleet.gate")
    await gate.start()
    try:
        yield gate
    finally:
        await gate.close()


class CountingClient(LLMClient):
    """The one LLM client, reporting calls in flight (and each session's role and round) to the
    fleet's live state. Nothing else changes."""

    def __init__(self, *args: Any, state: Any = None, **kw: Any):
        super().__init__(*args, **kw)
        self.state = state

    async def chat(self, endpoint: str, messages: list[dict[str, Any]], **kw: Any):
        st = self.state
        if st is None:
            return await super().chat(endpoint, messages, **kw)
        tok = st.call_started(endpoint, kw.get("session_id", ""), kw.get("role", ""),
                              kw.get("round", 0), self.clock.now())
        try:
            return await super().chat(endpoint, messages, **kw)
        finally:
            st.call_finished(endpoint, tok)


@contextlib.asynccontextmanager
async def make_sessions(cfg: Any, info: Any, run_dir: Any, clock: Any, state: Any,
                        gate: Any) -> AsyncIterator[Any]:
    """A launcher ``await launch(task, seed, session_id)`` running real sessions."""
    from ..analysis.ledger_worker import LedgerProcess
    from ..session.loop import SessionContext, run_session
    from ..session.roles import load_roles
    from ..tasks import load_task

    roles = load_roles()
    if cfg.roles:
        roles = roles.with_overrides({r: {"endpoint": ep} for r, ep in cfg.roles.items()})
    ledger = LedgerProcess(run_dir)  # parsing and hashing off the sessions' event loop
    model_for = getattr(info, "model_for", None)
    eps = {name: Endpoint(name=name, base_url=url,
                          model=model_for(name) if model_for else getattr(info, "model", None),
                          max_model_len=getattr(getattr(info, "profile", None), "max_model_len",
                                                None))
           for name, url in info.endpoints.items()}
    llm = CountingClient(eps, clock=clock, run_dir=run_dir, ledger=ledger,
                         pool_size=max(16, 4 * cfg.width), seed=cfg.seed, state=state)
    ctx = SessionContext(run_dir=run_dir, clock=clock, llm=llm, gate=gate, roles=roles,
                         endpoint_map=dict(cfg.endpoints),
                         gate_pause_s=cfg.pause_s if cfg.pause_s > 0 else None,
                         keep_workspaces=cfg.keep_workspaces, role_context=cfg.context,
                         spec=cfg.spec, later_rounds=cfg.later_rounds)
    tasks: dict[str, Any] = {}

    async def launch(task: str, seed: int, session_id: str) -> Any:
        if task not in tasks:
            tasks[task] = load_task(task)
        try:
            return await run_session(ctx, tasks[task], seed, session_id)
        finally:
            ledger.forget(session_id)

    try:
        await llm.discover()
        run_dir.write_json("endpoints.json", llm.described())   # the servers' releases
        state.server_versions = {n: ep.server_version for n, ep in llm.endpoints.items()
                                 if ep.server_version}
        await llm.warm(cfg.width)  # a connection per session slot and endpoint, before t=0
        for name in getattr(cfg, "tasks", None) or list_tasks():  # load before the clock matters
            if name not in tasks:
                tasks[name] = await asyncio.to_thread(load_task, name)
        with event_loop.quiet_gc():
            yield launch
    finally:
        await llm.aclose()
        ledger.close()


def summarise(run_path: Path) -> str:
    """The measurement stage's run summary (printed at the end of a fleet)."""
    from ..analysis.report import summarise_run
    out = summarise_run(run_path)
    return out if isinstance(out, str) else str(out)


def report(run_path: Path) -> Path | None:
    """Write the full report of the run (``adev report``) and return its path."""
    from ..analysis.report import write_report
    return write_report([run_path])
