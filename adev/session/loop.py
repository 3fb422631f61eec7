"""The round loop of one agent session (docs/design.md §2): :func:`run_session`.

Round 1 is: architect -> contract -> test writer -> implementers (one per module, in parallel)
-> integrator -> gate. A later round carries out the fixes the integrator assigned: implementers
-> integrator -> gate (``later_rounds = "fix"``, the default; ``"all"``: every role again). Up to
``max_rounds`` (3) rounds; the session passes when the agent-written suite passes at a gate.
Every model call sends::

    [system: roles/system.md + task spec]            # shared by all sessions of a fleet
    (+ the agent's line: role_context "per-role")
    + history                                        # every earlier role turn of this session
    + [user: this role's prompt] + this turn's own assistant/tool messages

(with ``role_context = "per-round"`` the agent's line is a message between the earlier rounds'
history and this round's; with ``spec = "file"`` the system message carries the spec's opening
section only, the whole spec is the workspace's ``SPEC.md``, and the architect reads it in round
1, so it reaches later calls as a tool result in the history.)

and a finished role turn (its prompt, replies and tool results) is appended to ``history``;
parallel implementers start from the same history and their turns are appended in module order.
After a failing gate the report (failing tests and their messages) is appended, so round N's
prompts begin with round N-1's full text plus the failing-test text.

With ``role_context = "per-role"`` (the default; fleet ``context``) each role is an agent of its
own: its system message ends, after the spec, with a line naming the role, and an implementer's
its module too (:data:`ROLE_SYSTEM`), so every agent sends the same history behind a system
message of its own, as agent frameworks do. Sessions and agents still share the system prompt and
the spec as leading text, but an agent's prompt shares nothing past it with another agent's: an
agent's first call of a turn computes the history anew (or finds it in the store, from its own
earlier rounds). With ``"shared"`` one conversation runs through every role behind one system
message, and a role turn continues the previous turn's KV. With ``"per-round"`` the session's
earlier rounds are one conversation ahead of every agent (round N's calls all begin with the
full text of round N-1 and its gate report), and each agent's line stands before this round's
history.

Model output is untrusted: tool calls run through :class:`adev.session.tools.Workspace`, whose
errors are answered to the model as tool results. A reply without a tool call is answered with a
reminder; after ``no_tool_limit`` consecutive replies without a valid tool call the role gives up,
and if it made no valid tool call at all the session ends with reason ``no_progress``.

**Context rule** (:mod:`adev.session.context_rule`): before each call ``max_tokens`` is lowered
to the room the prompt leaves in the endpoint's context, and below a floor the oldest history is
elided; when even that is not enough -- or the endpoint answers twice that the prompt is over its
context -- the session ends with status ``ended`` and reason ``context_limit``.

Records: a ``SessionRecord`` at start and at end, a ``CallRecord`` per call attempt (by the
client), a ``ToolEvent`` per tool call and a ``GateRecord`` per gate run, all appended as they
happen. The acceptance suite (hidden from the roles) runs once after the last gate and is recorded
as its own ``GateRecord`` (suite ``acceptance``). In delayed runs the session waits
``gate_pause_s`` model seconds from the gate's start; on the stack's held clock a real run that
outlasts the pause holds model time at the pause's end until its verdict is in
(:func:`adev.clock.hold_until`), elsewhere the session waits for the verdict. On the held
clock the session's own work outside its role turns and gates (set-up, the hand-over from one
turn to the next or to the gate, clean-up) holds model time too (:meth:`_Session.hold_here`).
"""
from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..client.llm import LLMClient
from ..client.retry import ContextLengthError, LLMError
from ..client.stream import ChatResult
from ..clock import RequestHolds, RunClock, handover, held_source, hold_at, hold_until, mono, no_release, request_holds
from ..gate.base import Gate, GateRequest, GateResult
from ..records import (
    GateRecord,
    LaterRounds,
    RoleContext,
    RunDir,
    SessionRecord,
    SessionStatus,
    Suite,
    ToolEvent,
    Verdict,
)
from ..tasks import SPEC_FILE, SpecPlace
from .context_rule import ContextLimit, fit_context, message_chars
from .model_output import args_summary, call_tool, clean_text
from .roles import Role, Roles, load_roles
from .tools import Workspace, schemas

NUDGE = ("You replied without calling a tool. Act only through the tools ({tools}); call "
         "`finish` with your report when your part is done.")


@dataclass
class SessionContext:
    """Everything a session needs; shared by the concurrent sessions of a fleet (no globals).

    ``endpoint_map`` maps a role's logical endpoint (``coder``/``reasoner``) to an endpoint name
    of ``llm`` (identity when absent). ``workspace_root`` holds one folder per session
    (default ``<run dir>/workspaces``). ``gate_pause_s`` set = a delayed run.
    """

    run_dir: RunDir
    clock: RunClock
    llm: LLMClient
    gate: Gate
    roles: Roles = field(default_factory=load_roles)
    endpoint_map: dict[str, str] = field(default_factory=dict)
    workspace_root: Path | None = None
    gate_pause_s: float | None = None
    max_rounds: int = 3
    run_acceptance: bool = True
    keep_workspaces: bool = True
    context_margin_tokens: int = 256
    max_file_bytes: int = 256 * 1024
    failing_text_chars: int = 6000
    role_context: RoleContext = "per-role"
    spec: SpecPlace = "file"  # where agents find the task spec (adev.tasks.SpecPlace)
    later_rounds: LaterRounds = "fix"  # roles of rounds 2 and 3 (LaterRounds)

    @property
    def ledger(self):
        """The reuse-ledger hook (``LedgerHook``); the client calls it per call."""
        return self.llm.ledger

    def workspace_for(self, session_id: str) -> Path:
        root = self.workspace_root or (self.run_dir.path / "workspaces")
        return Path(root) / session_id


@dataclass
class SessionOutcome:
    session_id: str
    task: str
    seed: int
    status: SessionStatus
    rounds: int
    reason: str | None
    calls: int
    prompt_tokens: int
    acceptance: Verdict | None
    """The hidden acceptance suite's verdict; None when it was not run."""
    workspace: str
    t_start: float
    t_end: float
    call_tokens: list[tuple[int, str, int | None, int | None]] = field(default_factory=list)
    """(round, role, prompt_tokens, cached_tokens) per successful call, in order."""


class _SessionEnd(Exception):
    def __init__(self, status: SessionStatus, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


@dataclass
class _Turn:
    messages: list[dict[str, Any]]
    finished: bool
    ok_tool_calls: int
    reason: str | None = None


ROLE_SYSTEM = ("\nYou are the team's {title}{module}. The team's work so far follows; your "
               "instructions come last.\n")
"""The line that ends an agent's own system message with ``role_context = "per-role"``
(``module``: `` of `path` `` for an implementer, else empty)."""
ROUND_AGENT = ("You are the team's {title}{module}. The team's work in this round follows; your "
               "instructions come last.")
"""With ``role_context = "per-round"``: the message naming the agent after the earlier rounds'
history and before this round's (``module`` as in :data:`ROLE_SYSTEM`)."""


def _agent_words(role: Role, path: str) -> dict[str, str]:
    """The fields of :data:`ROLE_SYSTEM` and :data:`ROUND_AGENT` for ``role`` (``path``: an
    implementer's module, else empty)."""
    return {"title": role.name.replace("_", " "), "module": f" of `{path}`" if path else ""}


class _Session:
    def __init__(self, ctx: SessionContext, task: Any, seed: int, session_id: str):
        self.ctx, self.task, self.seed, self.sid = ctx, task, seed, session_id
        self.run_id = ctx.run_dir.run_id
        self.system = {"role": "system",
                       "content": task.shared_prefix(ctx.roles.system_prompt, ctx.spec)}
        self._role_system: dict[tuple[str, str], dict[str, Any]] = {}
        self.history: list[dict[str, Any]] = []
        self.history_round: list[int] = []  # round each history message belongs to
        self.cpt = 3.0  # characters per token, measured per call
        self.calls = 0
        self.prompt_tokens = 0
        self.call_tokens: list[tuple[int, str, int | None, int | None]] = []
        self.modules_text = "\n".join(f"- `{m.path}`: {m.summary}" for m in task.modules)
        self.ws: Workspace | None = None  # set by run_session
        self._handover: Callable[[], None] = no_release  # releases the session's hand-over hold
        self._turns_running = 0

    # ---- the session's own time ------------------------------------------------------
    def hold_here(self, at: float | None = None) -> None:
        """Hold the stack's clock (if held) at model time now until :meth:`let_go`: the session is
        at work between two things the model times (a role turn's end and the next turn, the
        gate, the session's set-up and clean-up), and that work is the host's time, not the
        model's. The next holder takes over: a role turn once it holds its own request slot, a
        gate as it starts, the session's end after its clean-up."""
        release = self._handover
        self._handover = hold_at(self.ctx.clock, self.ctx.clock.now() if at is None else at)
        release()

    def let_go(self) -> None:
        """Release the hold of :meth:`hold_here` (nothing if none)."""
        self.hand_off()()

    def hand_off(self) -> Callable[[], None]:
        """The release function of the hold of :meth:`hold_here`, for another holder to call
        once it holds the clock itself; the session no longer releases it."""
        release, self._handover = self._handover, no_release
        return release

    def system_for(self, role: Role, module: Any = None) -> dict[str, Any]:
        """The system message of ``role``'s calls (``module``: an implementer's): the shared one,
        or with ``role_context = "per-role"`` the shared one and a line naming the role and
        module (:data:`ROLE_SYSTEM`)."""
        if self.ctx.role_context != "per-role":
            return self.system
        path = module.path if module is not None else ""
        msg = self._role_system.get((role.name, path))
        if msg is None:
            line = ROLE_SYSTEM.format(**_agent_words(role, path))
            msg = {"role": "system", "content": self.system["content"] + line}
            self._role_system[(role.name, path)] = msg
        return msg

    def prompt(self, role: Role, module: Any, rnd: int,
               local: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The messages of a call of ``role`` in round ``rnd`` (the module docstring): the system
        message, the history and this turn's ``local`` messages; with ``role_context =
        "per-round"`` the agent's line (:data:`ROUND_AGENT`) stands between the earlier rounds'
        history and this round's."""
        if self.ctx.role_context != "per-round":
            return [self.system_for(role, module), *self.history, *local]
        cut = bisect.bisect_left(self.history_round, rnd)  # rounds are appended in order
        path = module.path if module is not None else ""
        line = {"role": "user", "content": ROUND_AGENT.format(**_agent_words(role, path))}
        return [self.system, *self.history[:cut], line, *self.history[cut:], *local]

    def _workspace(self) -> Workspace:
        if self.ws is None:
            raise RuntimeError("the session has no workspace yet (run_session creates it)")
        return self.ws

    # ---- one role turn ---------------------------------------------------------------
    def lend_slot(self) -> _Lent:
        """A request slot of the stack's held clock (if any), holding model time where it is now."""
        holds = request_holds() if self.ctx.clock.source in (mono, held_source()) else None
        return _Lent(holds, holds.take() if holds is not None else None)

    async def run_role(self, role: Role, rnd: int, module: Any = None,
                       tag: str | None = None, lent: _Lent | None = None) -> _Turn:
        """One role turn. On the stack's held clock a request slot holds model time across the
        turn's own work between its calls (tool calls, building the next prompt), as the model has
        no term for it (:class:`adev.clock.RequestHolds`); a gate is outside any turn. Parallel
        turns pass ``lent``, slots taken together before their tasks start, so that none of them
        starts later than the others in model time."""
        lent = lent or self.lend_slot()
        slot = lent.slot
        self._turns_running += 1
        self.let_go()  # the turn's slot holds the clock from here
        try:
            return await self._run_role(role, rnd, module, tag, slot)
        finally:
            self._turns_running -= 1
            if self._turns_running == 0:  # the last of parallel turns hands over to what follows
                self.hold_here()
            lent.give_back()

    async def _run_role(self, role: Role, rnd: int, module: Any, tag: str | None,
                        slot: int | None) -> _Turn:
        ctx, st = self.ctx, role.settings
        prompt = role.render(round=rnd, max_rounds=ctx.max_rounds, task=self.task.name,
                             modules=self.modules_text,
                             module=module.path if module else "",
                             module_summary=module.summary if module else "")
        local: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        tools = schemas(st.tools)
        tools_chars = len(json.dumps(tools))
        endpoint = ctx.endpoint_map.get(st.endpoint, st.endpoint)
        tag = tag or role.name
        ok_calls = no_tool = 0
        finished = False
        reason = None
        for step in range(st.step_limit):
            messages = self.prompt(role, module, rnd, local)
            max_tokens = self.fit_context(messages, tools_chars, st.max_tokens, endpoint)
            call_id = f"{self.sid}/r{rnd}/{tag}/s{step}"
            res = await self.chat(endpoint, messages, tools, max_tokens, role, rnd, step,
                                  call_id, tools_chars, slot)
            if res is None:  # context refused twice
                raise _SessionEnd("ended", f"context_limit: {tag} round {rnd}: the endpoint "
                                  "refused the prompt as over its context")
            asst: dict[str, Any] = {"role": "assistant", "content": clean_text(res.content) or None}
            if res.tool_calls:
                asst["tool_calls"] = [{"id": clean_text(tc.id), "type": "function",
                                       "function": {"name": clean_text(tc.name),
                                                    "arguments": clean_text(tc.arguments)}}
                                      for tc in res.tool_calls]
            elif not res.content:
                asst["content"] = ""
            local.append(asst)
            if not res.tool_calls:
                no_tool += 1
                if no_tool >= st.no_tool_limit:
                    reason = f"{no_tool} replies without a valid tool call"
                    break
                local.append({"role": "user", "content": NUDGE.format(tools=", ".join(st.tools))})
                continue
            any_ok = False
            for tc in res.tool_calls:
                out = call_tool(self._workspace(), tc.name, tc.arguments, st.tools)
                self.ctx.run_dir.append(ToolEvent(
                    run_id=self.run_id, session_id=self.sid, call_id=call_id,
                    t=ctx.clock.now(), tool=tc.name[:64], ok=out.ok,
                    args_summary=args_summary(tc.name, tc.arguments, out),
                    error=out.error[:500] if out.error else None, bytes_out=out.bytes_out))
                local.append({"role": "tool", "tool_call_id": clean_text(tc.id),
                              "content": clean_text(out.text)})
                if out.ok:
                    any_ok = True
                    ok_calls += 1
                    finished = finished or out.finished
            no_tool = 0 if any_ok else no_tool + 1
            if finished:
                break
            if no_tool >= st.no_tool_limit:
                reason = f"{no_tool} replies without a valid tool call"
                break
        else:
            reason = f"step limit ({st.step_limit}) reached"
        return _Turn(local, finished, ok_calls, reason)

    async def chat(self, endpoint: str, messages: list[dict[str, Any]], tools: list, max_tokens:
                   int, role: Role, rnd: int, step: int, call_id: str,
                   tools_chars: int, slot: int | None = None) -> ChatResult | None:
        ctx = self.ctx
        for refusal in range(2):
            # counted when made: a call cancelled with its session (a parallel sibling's fault)
            # is still a call the session made, with its records
            self.calls += 1
            try:
                res = await ctx.llm.chat(
                    endpoint, messages, tools=tools, max_tokens=max_tokens,
                    temperature=role.settings.temperature, seed=self.seed, session_id=self.sid,
                    call_id=call_id if not refusal else f"{call_id}+trim", role=role.name,
                    round=rnd, step=step, hold_slot=slot)
            except ContextLengthError:
                # our estimate was low: measure it as 25% worse and re-fit, once (eliding
                # history in place: ``messages`` holds the same message dicts)
                self.cpt *= 0.8
                max_tokens = self.fit_context(messages, tools_chars, max_tokens, endpoint)
                continue
            except LLMError as e:
                raise _SessionEnd("error", f"llm_error: {call_id}: {e}") from None
            if res.prompt_tokens:
                self.prompt_tokens += res.prompt_tokens
                chars = message_chars(messages) + tools_chars
                self.cpt = max(1.0, chars / res.prompt_tokens)
            self.call_tokens.append((rnd, role.name, res.prompt_tokens, res.cached_tokens))
            return res
        return None

    # ---- the context rule ------------------------------------------------------------
    def fit_context(self, messages: list[dict[str, Any]], tools_chars: int, max_tokens: int,
                    endpoint: str) -> int:
        """Apply the context rule (module docstring, :func:`adev.session.context_rule.fit_context`);
        returns the max_tokens to use. May elide ``self.history`` in place."""
        try:
            return fit_context(messages, self.history, tools_chars, max_tokens, self.cpt,
                               self.ctx.llm.max_model_len(endpoint),
                               self.ctx.context_margin_tokens)
        except ContextLimit as e:
            raise _SessionEnd("ended", str(e)) from None

    # ---- the gate --------------------------------------------------------------------
    async def gate(self, rnd: int, suite: Suite) -> GateResult:
        ctx, task = self.ctx, self.task
        if suite == "agent":
            req = GateRequest(session_id=self.sid, workspace=self._workspace().root, round=rnd,
                              suite="agent", test_paths=list(task.test_paths),
                              needs_nvme=task.needs_block_device,
                              timeout_s=task.test_timeout_s,
                              modelled_duration_s=ctx.gate_pause_s)
        else:
            req = GateRequest(session_id=self.sid, workspace=self._workspace().root, round=rnd,
                              suite="acceptance", test_paths=list(task.acceptance_paths),
                              overlay=task.acceptance_overlay(),
                              needs_nvme=task.needs_block_device,
                              timeout_s=task.test_timeout_s, modelled_duration_s=None)
        t0 = ctx.clock.now()
        # a modelled gate holds the stack's clock (if held) at its modelled end while the real
        # run is behind it, so a slow host's gate does not stretch the model's timeline
        hold = (hold_until(ctx.clock, t0 + req.modelled_duration_s)
                if req.modelled_duration_s is not None else contextlib.nullcontext())
        # and, once the verdict is in, until the session is awake at that end (a late wake-up of
        # this process is no model time either)
        with hold:
            self.let_go()  # the gate's time is the model's (its pause, or its real run)
            try:
                res = await ctx.gate.run(req)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # an executor fault is a recorded gate error, not a crash
                res = GateResult(verdict="error", error=f"{type(e).__name__}: {e}")
            if req.modelled_duration_s is not None:
                await ctx.clock.sleep_to(t0 + req.modelled_duration_s)
            self.hold_here()
        ctx.run_dir.append(GateRecord(
            run_id=self.run_id, session_id=self.sid, round=rnd,
            executor=getattr(ctx.gate, "name", type(ctx.gate).__name__), t_start=t0,
            t_end=ctx.clock.now(), verdict=res.verdict, suite=suite, passed=res.passed,
            failed=res.failed, errors=res.errors, skipped=res.skipped,
            real_duration_s=res.real_duration_s, modelled_duration_s=req.modelled_duration_s,
            exit_code=res.exit_code, error=res.error, output_tail=res.output_tail[-4000:],
            tests=res.tests))
        return res

    # ---- the session -----------------------------------------------------------------
    def add_turn(self, turn: _Turn, rnd: int) -> None:
        self.history.extend(turn.messages)
        self.history_round.extend([rnd] * len(turn.messages))

    def check_progress(self, turn: _Turn, tag: str, rnd: int) -> None:
        if turn.ok_tool_calls == 0 and turn.reason:
            raise _SessionEnd("ended", f"no_progress: {tag} in round {rnd}: {turn.reason}")

    def planning_roles(self, rnd: int) -> tuple[str, ...]:
        """The roles that run before the implementers in round ``rnd``: all three in round 1,
        none in a later round with ``later_rounds = "fix"``."""
        if rnd > 1 and self.ctx.later_rounds == "fix":
            return ()
        return ("architect", "contract", "test_writer")

    async def run(self) -> tuple[SessionStatus, str | None, int, Verdict | None]:
        ctx, roles = self.ctx, self.ctx.roles
        rnd = 0
        verdict: Verdict | None = None
        for rnd in range(1, ctx.max_rounds + 1):
            for name in self.planning_roles(rnd):
                turn = await self.run_role(roles[name], rnd)
                self.add_turn(turn, rnd)
                self.check_progress(turn, name, rnd)
            lent = [self.lend_slot() for _ in self.task.modules]
            try:
                turns = await _gather([self.run_role(roles["implementer"], rnd, m,
                                                     tag=f"implementer{i}", lent=lent[i])
                                       for i, m in enumerate(self.task.modules)])
            finally:
                for x in lent:  # the slots of turns cancelled before they started
                    x.give_back()
            for turn in turns:
                self.add_turn(turn, rnd)
            for i, turn in enumerate(turns):
                self.check_progress(turn, f"implementer{i}", rnd)
            turn = await self.run_role(roles["integrator"], rnd)
            self.add_turn(turn, rnd)
            self.check_progress(turn, "integrator", rnd)
            res = await self.gate(rnd, "agent")
            verdict = res.verdict
            if verdict == "pass":
                return "passed", None, rnd, verdict
            report = (f"## Gate report, round {rnd}: {res.verdict.upper()} ({res.passed} passed, "
                      f"{res.failed} failed, {res.errors} errors)\n\n"
                      + res.failing_text(ctx.failing_text_chars))
            self.history.append({"role": "user", "content": report})
            self.history_round.append(rnd)
        return "failed", f"tests still failing after {rnd} rounds", rnd, verdict


@dataclass
class _Lent:
    """A request slot lent to one role turn (``slot`` None: the turn goes without)."""

    holds: RequestHolds | None
    slot: int | None

    def give_back(self) -> None:
        """Return the slot to the pool (once; later calls do nothing)."""
        if self.holds is not None and self.slot is not None:
            self.holds.give_back(self.slot)
        self.slot = None


async def _gather(coros: list) -> list:
    """Run coroutines concurrently; on the first failure the others are cancelled."""
    try:
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(c) for c in coros]
    except BaseExceptionGroup as eg:  # surface the first real failure, not the group
        first = next((e for e in eg.exceptions if not isinstance(e, asyncio.CancelledError)),
                     eg.exceptions[0])
        raise first from None
    return [t.result() for t in tasks]


async def run_session(ctx: SessionContext, task: Any, seed: int, session_id: str) -> SessionOutcome:
    """Run one session of ``task`` (a Task or a task name) to its end; see the module docstring.

    Never raises for model or gate faults (they end the session with a recorded reason);
    re-raises ``asyncio.CancelledError`` after recording status ``cancelled``.
    """
    if isinstance(task, str):
        from ..tasks import load_task
        task = await asyncio.to_thread(load_task, task)
    clock, rd = ctx.clock, ctx.run_dir
    t_start = clock.now()
    s = _Session(ctx, task, seed, session_id)
    # the session's own work outside its role turns and gates (set-up, clean-up) is the host's
    # time, not the model's: on the stack's held clock the first role turn starts at t_start, and
    # the slot's next session at this one's t_end
    s.hold_here(at=t_start)
    h = handover()
    if h is not None:  # a fleet slot held the clock at t_start up to here
        h.take()
    try:
        rd.append(SessionRecord(run_id=rd.run_id, session_id=session_id, task=task.name, t=t_start,
                                status="started", seed=seed))
        wroot = ctx.workspace_for(session_id)
        if wroot.exists():
            shutil.rmtree(wroot)
        s.ws = Workspace(wroot, max_file_bytes=ctx.max_file_bytes)
        if ctx.spec == "file":
            (wroot / SPEC_FILE).write_text(task.spec)
        status: SessionStatus = "error"
        acceptance: Verdict | None = None
        reason: str | None = None
        rounds = 0
        gate_ready = False
        try:
            await ctx.gate.setup(session_id)
            gate_ready = True
            try:
                status, reason, rounds, _ = await s.run()
            except _SessionEnd as end:
                status, reason = end.status, end.reason
                rounds = max((r for r, *_ in s.call_tokens), default=0)
            if ctx.run_acceptance and status in ("passed", "failed"):
                acc = await s.gate(rounds, "acceptance")
                acceptance = acc.verdict
        except asyncio.CancelledError:
            status, reason = "cancelled", "cancelled"
            raise
        except Exception as e:  # a bug or fault outside the model's control: recorded, not raised
            status, reason = "error", f"{type(e).__name__}: {e}"
        finally:
            s.hold_here()  # and so is the clean-up: the slot's next session starts at t_end
            rounds = rounds or max((r for r, *_ in s.call_tokens), default=0)
            t_end = clock.now()
            rd.append(SessionRecord(run_id=rd.run_id, session_id=session_id, task=task.name, t=t_end,
                                    status=status, seed=seed, rounds=rounds, reason=reason,
                                    calls=s.calls, prompt_tokens=s.prompt_tokens,
                                    acceptance=acceptance))
            if gate_ready:
                try:
                    await asyncio.shield(ctx.gate.cleanup(session_id))
                except Exception:
                    pass
            if not ctx.keep_workspaces:
                shutil.rmtree(wroot, ignore_errors=True)
        return SessionOutcome(session_id=session_id, task=task.name, seed=seed, status=status,
                              rounds=rounds, reason=reason, calls=s.calls,
                              prompt_tokens=s.prompt_tokens, acceptance=acceptance,
                              workspace=str(wroot), t_start=t_start, t_end=t_end,
                              call_tokens=s.call_tokens)
    finally:
        if h is not None:  # the slot's next session takes the hold over at t_end
            h.leave(s.hand_off())
        else:
            s.let_go()
