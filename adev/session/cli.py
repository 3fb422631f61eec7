"""``adev session``: run one agent session end to end and write its run directory.

    adev session --task kvblock-store [--seed 3] [--stack stacks/embedded.toml]
    adev session --task kvblock-store --endpoint coder=http://gpu1:8000/v1 \\
                 --endpoint reasoner=http://gpu2:8000/v1
    adev session --task kvblock-store --gate local --gate-pause 300

Without ``--endpoint`` the stack file's stack is used (``stacks/embedded.toml`` by default),
started for the session if it is not up (and stopped after). The run directory
(``results/runs/session-...``) holds the manifest, calls, tool events, gate results, session
records, the reuse ledger and ``summary.json``; the summary printed at the end includes the
distribution of prompt tokens per call and per round.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..gate.registry import GATES


def register(sub: Any) -> None:
    p = sub.add_parser("session", help="run one agent session end to end",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", required=True, help="built-in task name (fleets/tasks/<name>) or path")
    p.add_argument("--seed", type=int, default=0, help="session seed (default 0)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--stack", metavar="FILE", help="stack file (default stacks/embedded.toml)")
    src.add_argument("--endpoint", action="append", metavar="NAME=URL", default=[],
                     help="an external OpenAI-compatible endpoint (repeatable): coder=URL, "
                          "reasoner=URL; one endpoint serves both roles")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="VAR",
                   help="environment variable holding the endpoints' API key (never recorded)")
    p.add_argument("--policy", choices=["oracle", "length", "replay"],
                   help="emulator policy (embedded stack only; overrides the stack file)")
    p.add_argument("--gate", default="local", choices=list(GATES),
                   help="gate executor: local (sandboxed on this host, default), "
                        "local-unconfined (development only) or vm")
    p.add_argument("--allow-unconfined-gate", action="store_true",
                   help="let --gate local-unconfined run code from external endpoints")
    p.add_argument("--gate-pause", type=float, metavar="S", default=None,
                   help="delayed run: the gate takes S model seconds on the session's timeline")
    p.add_argument("--max-rounds", type=int, default=3, choices=[1, 2, 3])
    p.add_argument("--runs-dir", metavar="DIR", help="parent of the run directory "
                                                     "(default results/runs)")
    p.add_argument("--roles", metavar="DIR", help="role prompts folder (default roles/)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=main)


def _parse_endpoints(items: list[str]) -> dict[str, str]:
    from ..config import ConfigError
    out: dict[str, str] = {}
    for it in items:
        name, sep, url = it.partition("=")
        if not sep or not name or not url.startswith(("http://", "https://")):
            raise ConfigError(f"--endpoint: {it!r} must be NAME=URL with an http(s) URL, e.g. "
                              "coder=http://127.0.0.1:8000/v1")
        out[name] = url.rstrip("/")
    return out


def main(args: argparse.Namespace) -> int:
    from .. import event_loop
    summary = event_loop.run(run(args))
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(format_summary(summary))
    return 0 if summary["status"] in ("passed", "failed", "ended") else 1


async def run(args: argparse.Namespace) -> dict[str, Any]:
    import os

    from ..client.llm import Endpoint, LLMClient
    from ..client.retry import LLMError
    from ..clock import RunClock, stack_run_clock
    from ..config import ConfigError, load_stack
    from ..gate.registry import check_gate_policy, make_gate
    from ..manifest import build_manifest
    from ..records import RunDir
    from ..tasks import load_task
    from .loop import SessionContext, run_session
    from .roles import load_roles

    task = load_task(args.task)
    roles = load_roles(args.roles)
    key = os.environ.get(args.api_key_env) or "EMPTY"
    stack_file = None if args.endpoint else load_stack(args.stack, policy=args.policy)
    external = stack_file is None or stack_file.mode == "external"
    check_gate_policy(args.gate, external=external, allow_unconfined=args.allow_unconfined_gate,
                      where="--gate")
    run_dir = RunDir.create(base=args.runs_dir, prefix="session")
    session_id = f"{task.name}-s{args.seed}"

    async def go(endpoints: dict[str, str], time_scale: float, stack_cfg: Any,
                 info: Any = None) -> dict[str, Any]:
        clock = stack_run_clock(info) if info is not None else RunClock(time_scale=time_scale)
        emap = {}
        if len(endpoints) == 1:
            only = next(iter(endpoints))
            emap = {"coder": only, "reasoner": only}
        run_dir.write_json("manifest.json", build_manifest(
            run_dir.run_id, config={"stack": stack_cfg, "session": {
                "task": task.name, "seed": args.seed, "gate": args.gate,
                "allow_unconfined_gate": args.allow_unconfined_gate,
                "gate_pause_s": args.gate_pause, "max_rounds": args.max_rounds,
                "endpoints": endpoints, "endpoint_map": emap}},
            seeds={"session": args.seed}, time_scale=time_scale))
        ledger = None
        try:
            from ..analysis.ledger import LedgerWriter
            ledger = LedgerWriter(run_dir)
        except ImportError:
            pass
        llm = LLMClient([Endpoint(n, u, api_key=key) for n, u in endpoints.items()],
                        clock=clock, run_dir=run_dir, ledger=ledger, pool_size=16,
                        seed=args.seed)
        gate = make_gate(args.gate, external=external, allow_unconfined=args.allow_unconfined_gate,
                         where="--gate")
        try:
            try:
                await llm.discover()
            except LLMError as e:
                if not args.endpoint:
                    raise
                raise ConfigError(f"--endpoint: {e}; is the server up and the URL its "
                                  "OpenAI base (ending in /v1)?") from None
            run_dir.write_json("endpoints.json", llm.described())   # the servers' releases
            await gate.start()
            ctx = SessionContext(run_dir=run_dir, clock=clock, llm=llm, gate=gate, roles=roles,
                                 endpoint_map=emap, gate_pause_s=args.gate_pause,
                                 max_rounds=args.max_rounds)
            outcome = await run_session(ctx, task, args.seed, session_id)
        finally:
            await gate.close()
            await llm.aclose()
            if ledger is not None:
                ledger.close()
        summary = summarise(run_dir, session_id)
        summary.update({"run_dir": str(run_dir.path), "status": outcome.status,
                        "reason": outcome.reason, "acceptance": outcome.acceptance,
                        "rounds": outcome.rounds, "task": task.name, "seed": args.seed})
        run_dir.write_json("summary.json", summary)
        return summary

    try:
        if args.endpoint:
            return await go(_parse_endpoints(args.endpoint), 1.0, None)
        from ..stack import running_stack
        async with running_stack(stack_file) as info:
            return await go(dict(info.endpoints), info.time_scale, stack_file, info)
    finally:
        run_dir.close()


def _dist(xs: list[float]) -> dict[str, float | int | None]:
    import numpy as np
    if not xs:
        return {"n": 0, "min": None, "p50": None, "p90": None, "max": None, "mean": None}
    a = np.asarray(xs, dtype=float)
    return {"n": int(a.size), "min": float(a.min()), "p50": float(np.percentile(a, 50)),
            "p90": float(np.percentile(a, 90)), "max": float(a.max()), "mean": float(a.mean())}


def summarise(run_dir: Any, session_id: str | None = None) -> dict[str, Any]:
    """Prompt/cached tokens per call and per round, gate verdicts, tool errors of a run."""
    calls = [c for c in run_dir.read("calls") if session_id in (None, c["session_id"])]
    ok = [c for c in calls if c["status"] == "ok" and c.get("prompt_tokens") is not None]
    rounds: dict[int, list[dict]] = {}
    for c in ok:
        rounds.setdefault(c["round"], []).append(c)
    per_round = {}
    for r, cs in sorted(rounds.items()):
        per_round[str(r)] = {
            "calls": len(cs),
            "prompt_tokens": _dist([c["prompt_tokens"] for c in cs]),
            "cached_tokens": _dist([c["cached_tokens"] or 0 for c in cs]),
            "first_prompt_tokens": cs[0]["prompt_tokens"],
            "first_cached_tokens": cs[0]["cached_tokens"]}
    tools = [t for t in run_dir.read("tools") if session_id in (None, t["session_id"])]
    gates = [g for g in run_dir.read("gates") if session_id in (None, g["session_id"])]
    ttft = [c["t_first_content"] - c["t_sent"] for c in ok if c.get("t_first_content")]
    return {
        "calls": len(ok), "attempts": len(calls),
        "failed_attempts": sum(c["status"] != "ok" for c in calls),
        "prompt_tokens": _dist([c["prompt_tokens"] for c in ok]),
        "prompt_tokens_total": sum(c["prompt_tokens"] for c in ok),
        "cached_tokens_total": sum(c["cached_tokens"] or 0 for c in ok),
        "last_prompt_tokens": ok[-1]["prompt_tokens"] if ok else None,
        "per_round": per_round,
        "ttft_s": _dist(ttft),
        "dispatch_delay_s": _dist([c["t_sent"] - c["t_scheduled"] for c in ok]),
        "tool_calls": len(tools), "tool_errors": sum(not t["ok"] for t in tools),
        "gates": [{"round": g["round"], "suite": g["suite"], "verdict": g["verdict"],
                   "passed": g["passed"], "failed": g["failed"], "errors": g["errors"],
                   "real_duration_s": round(g["real_duration_s"], 2),
                   "modelled_duration_s": g["modelled_duration_s"]} for g in gates],
    }


def format_summary(s: dict[str, Any]) -> str:
    def d(x: dict) -> str:
        if not x["n"]:
            return "n=0"
        return (f"n={x['n']} min={x['min']:.0f} p50={x['p50']:.0f} p90={x['p90']:.0f} "
                f"max={x['max']:.0f}")
    lines = [f"session {s['task']} seed {s['seed']}: {s['status']} after {s['rounds']} round(s)"
             + (f" ({s['reason']})" if s.get("reason") else "")
             + (f"; acceptance {s['acceptance']}" if s.get("acceptance") else ""),
             f"run dir: {s['run_dir']}",
             f"calls: {s['calls']} ok of {s['attempts']} attempts; tool calls {s['tool_calls']} "
             f"({s['tool_errors']} errors)",
             f"prompt tokens per call: {d(s['prompt_tokens'])}; total {s['prompt_tokens_total']}, "
             f"cached {s['cached_tokens_total']}"]
    for r, x in s["per_round"].items():
        lines.append(f"  round {r}: {x['calls']} calls; prompt {d(x['prompt_tokens'])}; cached "
                     f"p50={x['cached_tokens']['p50'] or 0:.0f} max="
                     f"{x['cached_tokens']['max'] or 0:.0f}; first call {x['first_prompt_tokens']} "
                     f"prompt / {x['first_cached_tokens']} cached")
    if s["ttft_s"]["n"]:
        t = s["ttft_s"]
        lines.append(f"TTFT from send (model s): p50={t['p50']:.3f} p90={t['p90']:.3f} "
                     f"max={t['max']:.3f}")
    for g in s["gates"]:
        lines.append(f"gate round {g['round']} {g['suite']}: {g['verdict']} ({g['passed']} "
                     f"passed, {g['failed']} failed, {g['errors']} errors; "
                     f"{g['real_duration_s']} s real"
                     + (f", {g['modelled_duration_s']} s modelled" if g["modelled_duration_s"]
                        is not None else "") + ")")
    return "\n".join(lines)


if __name__ == "__main__":
    from ..cli import main as _m
    sys.exit(_m(["session", *sys.argv[1:]]))
