"""The round loop with a deterministic in-process model (no HTTP): rounds, resend rule, tool
errors, context rule, degradation, gate pause, cancellation, concurrency."""
from __future__ import annotations

import asyncio
import json
import time

import pytest

from adev.client.retry import LLMError
from adev.clock import RunClock
from adev.emulator.policies.base import PolicyReply, ToolCall
from adev.emulator.policies.oracle import OraclePolicy
from adev.gate.base import GateResult
from adev.gate.local import LocalGate
from adev.records import CallRecord, RunDir
from adev.session.loop import SessionContext, run_session
from adev.session.roles import load_roles
from adev.tasks import SPEC_FILE_LINE

from .fakes import PolicyLLM, ScriptedPolicy, call
from .tinytask import tiny_task


def seed_for(oracle: OraclePolicy, rounds: int) -> int:
    return next(s for s in range(1000) if oracle.rounds_needed(s) == rounds)


class FakeGate:
    name = "fake"

    def __init__(self, verdicts=("pass",), hold=False, on_run=None):
        self.verdicts = list(verdicts)
        self.hold = hold            # runs wait until ``release`` is set
        self.release = asyncio.Event()
        self.running = asyncio.Event()   # set when a run has started
        self.requests = []
        self.on_run = on_run
        self.events = []

    async def start(self):
        pass

    async def setup(self, sid):
        self.events.append(("setup", sid))

    async def cleanup(self, sid):
        self.events.append(("cleanup", sid))

    async def close(self):
        pass

    async def run(self, req):
        self.requests.append(req)
        if self.on_run:
            self.on_run(req)
        self.running.set()
        if self.hold:
            await self.release.wait()
        v = self.verdicts.pop(0) if len(self.verdicts) > 1 else self.verdicts[0]
        return GateResult(verdict=v, passed=1, failed=int(v != "pass"), real_duration_s=0.01)


def make_ctx(tmp_path, policy, gate=None, *, mml=65536, clock=None, roles=None, **kw):
    rd = RunDir.create("run", base=tmp_path)
    clock = clock or RunClock()
    llm = PolicyLLM(policy, run_dir=rd, clock=clock, max_model_len=mml)
    ctx = SessionContext(run_dir=rd, clock=clock, llm=llm, gate=gate or LocalGate(),
                         roles=roles or load_roles(), **kw)
    return ctx, llm, rd


@pytest.mark.parametrize("rounds", [1, 2, 3])
async def test_oracle_rounds_with_real_gate(tmp_path, rounds):
    task = tiny_task()
    oracle = OraclePolicy(tasks={"calc": task})
    seed = seed_for(oracle, rounds)
    ctx, llm, rd = make_ctx(tmp_path, oracle)
    out = await run_session(ctx, task, seed, "s1")
    assert (out.status, out.rounds, out.acceptance) == ("passed", rounds, "pass"), out.reason
    gates = rd.read("gates")
    agent = [g for g in gates if g["suite"] == "agent"]
    assert [g["verdict"] for g in agent] == ["fail"] * (rounds - 1) + ["pass"]
    assert [g["suite"] for g in gates][-1] == "acceptance" and gates[-1]["passed"] == 1
    assert all(g["executor"] == "local" for g in gates)
    sess = rd.read("sessions")
    assert [s["status"] for s in sess] == ["started", "passed"]
    assert sess[-1]["rounds"] == rounds and sess[-1]["calls"] == out.calls == len(llm.requests)
    assert sess[-1]["acceptance"] == "pass" and sess[-1]["reason"] is None
    # every request carries the session seed; roles go to their logical endpoints
    assert {r["seed"] for r in llm.requests} == {seed}
    ep = {r["role"]: r["endpoint"] for r in llm.requests}
    assert ep["architect"] == "reasoner" and ep["implementer"] == "coder"
    assert all(t["ok"] for t in rd.read("tools"))
    assert (tmp_path / "run" / "workspaces" / "s1" / "calc" / "ops.py").exists()


async def test_resend_rule_round_n_begins_with_round_n_minus_1(tmp_path):
    task = tiny_task()
    oracle = OraclePolicy(tasks={"calc": task})
    ctx, llm, _ = make_ctx(tmp_path, oracle, later_rounds="all")
    out = await run_session(ctx, task, seed_for(oracle, 3), "s1")
    assert out.rounds == 3
    for n in (2, 3):
        last_prev = [r for r in llm.requests if r["round"] == n - 1][-1]
        first = next(r for r in llm.requests if r["round"] == n)
        k = len(last_prev["messages"])
        # behind each agent's own system message (role_context "per-role", the default)
        assert first["messages"][1:k] == last_prev["messages"][1:]
        # then the rest of that turn, the gate report with the failing test, the role prompt
        report = [m for m in first["messages"][k:] if m["role"] == "user"
                  and m["content"].startswith(f"## Gate report, round {n - 1}: FAIL")]
        assert len(report) == 1 and "tests/test_" in report[0]["content"]
        assert first["messages"][-1]["content"].startswith("## Role: architect")
        assert f"This is round {n} of 3" in first["messages"][-1]["content"]
    # cached tokens grow by round (first call of each round vs the previous round's first)
    firsts = [next(c for c in out.call_tokens if c[0] == n) for n in (1, 2, 3)]
    assert firsts[0][3] < firsts[1][3] < firsts[2][3]
    # the shared leading text: system prompt + the spec's opening and where the rest is (the
    # default, spec = "file"), the same in every call
    lead = task.shared_prefix(ctx.roles.system_prompt, ctx.spec)
    assert ctx.spec == "file" and lead.endswith(SPEC_FILE_LINE)
    assert all(r["messages"][0]["content"].startswith(lead) for r in llm.requests)


async def test_fix_rounds_run_only_the_implementers_and_the_integrator(tmp_path):
    """``later_rounds = "fix"``: round 1 runs every role; rounds 2 and 3 the implementers (one per
    module) and the integrator, whose first calls begin with the previous round's full text and
    its gate report; the session still passes in the round the oracle needs."""
    task = tiny_task()
    oracle = OraclePolicy(tasks={"calc": task})
    ctx, llm, rd = make_ctx(tmp_path, oracle, later_rounds="fix")
    out = await run_session(ctx, task, seed_for(oracle, 3), "s1")
    assert (out.status, out.rounds, out.acceptance) == ("passed", 3, "pass"), out.reason
    roles = {n: {r["role"] for r in llm.requests if r["round"] == n} for n in (1, 2, 3)}
    assert roles[1] == {"architect", "contract", "test_writer", "implementer", "integrator"}
    assert roles[2] == roles[3] == {"implementer", "integrator"}
    for n in (2, 3):
        last_prev = [r for r in llm.requests if r["round"] == n - 1][-1]
        first = next(r for r in llm.requests if r["round"] == n)
        k = len(last_prev["messages"])
        assert first["messages"][1:k] == last_prev["messages"][1:]
        assert first["messages"][-1]["content"].startswith("## Role: implementer")
        assert any(m["role"] == "user" and m["content"].startswith(
            f"## Gate report, round {n - 1}: FAIL") for m in first["messages"][k:])
    # the same session with every role in every round makes more calls
    ctx2, llm2, _ = make_ctx(tmp_path / "all", oracle, later_rounds="all")
    await run_session(ctx2, task, seed_for(oracle, 3), "s1")
    assert len(llm.requests) < len(llm2.requests)
    assert {r["role"] for r in llm2.requests if r["round"] == 3} == roles[1]


async def test_parallel_implementers_start_from_same_history(tmp_path):
    task = tiny_task()
    oracle = OraclePolicy(tasks={"calc": task})
    ctx, llm, _ = make_ctx(tmp_path, oracle)
    await run_session(ctx, task, seed_for(oracle, 1), "s1")
    impl_first = [r for r in llm.requests if r["role"] == "implementer"
                  and r["messages"][-1]["role"] == "user"
                  and r["messages"][-1]["content"].startswith("## Role: implementer")]
    assert len(impl_first) == 2
    a, b = (r["messages"] for r in impl_first)
    assert a[1:-1] == b[1:-1] and a[-1] != b[-1]    # behind each one's own system message


async def test_per_role_context_gives_each_agent_its_own_system_message(tmp_path):
    """``role_context = "per-role"``: every call of an agent (a role; an implementer per module)
    carries the shared leading text (system prompt + spec) and then that agent's line; the
    history behind it is the shared conversation's, so an agent's prompt shares the leading text
    with another agent's and nothing after it."""
    task = tiny_task()
    oracle = OraclePolicy(tasks={"calc": task})
    ctx, llm, _ = make_ctx(tmp_path / "a", oracle)               # "per-role": the default
    seed = seed_for(oracle, 2)
    out = await run_session(ctx, task, seed, "s1")
    assert out.status == "passed" and out.rounds == 2
    lead = task.shared_prefix(ctx.roles.system_prompt, ctx.spec)
    tails: dict[str, set[str]] = {}
    for r in llm.requests:
        sys_msg = r["messages"][0]
        assert sys_msg["role"] == "system" and sys_msg["content"].startswith(lead)
        tails.setdefault(r["role"], set()).add(sys_msg["content"][len(lead):])
    assert set(tails) == {"architect", "contract", "test_writer", "implementer", "integrator"}
    assert tails["test_writer"] == {"\nYou are the team's test writer. The team's work so far "
                                    "follows; your instructions come last.\n"}
    paths = sorted(m.path for m in task.modules)
    assert len(paths) == 2
    assert tails["implementer"] == {f"\nYou are the team's implementer of `{p}`. The team's work "
                                    "so far follows; your instructions come last.\n" for p in paths}
    every = [t for v in tails.values() for t in v]
    assert len(every) == len(set(every)) == 6        # one per agent, no two agents share one
    # the history behind it is the same as with one shared conversation: same calls, same
    # messages after the system message
    ctx2, llm2, _ = make_ctx(tmp_path / "b", OraclePolicy(tasks={"calc": task}),
                             role_context="shared")
    await run_session(ctx2, task, seed, "s1")
    assert len(llm2.requests) == len(llm.requests)
    assert all(a["messages"][0]["content"] == lead for a in llm2.requests)
    assert [a["messages"][1:] for a in llm2.requests] == [b["messages"][1:] for b in llm.requests]


async def test_per_round_context_puts_earlier_rounds_ahead_of_every_agent(tmp_path):
    """``role_context = "per-round"``: every call sends the shared system message, then the
    session's earlier rounds (so round N's calls of every agent begin with the full text of
    round N-1 and its gate report), then the agent's line, then this round's history; within a
    round the messages after the agent's line are those of one shared conversation."""
    task = tiny_task()
    oracle = OraclePolicy(tasks={"calc": task})
    seed = seed_for(oracle, 2)
    ctx, llm, _ = make_ctx(tmp_path / "a", oracle, role_context="per-round")
    out = await run_session(ctx, task, seed, "s1")
    assert out.status == "passed" and out.rounds == 2
    lead = task.shared_prefix(ctx.roles.system_prompt, ctx.spec)
    assert all(r["messages"][0] == {"role": "system", "content": lead} for r in llm.requests)
    line = "You are the team's {}. The team's work in this round follows; your instructions come last."
    paths = sorted(m.path for m in task.modules)
    r1 = [r for r in llm.requests if r["round"] == 1]
    r2 = [r for r in llm.requests if r["round"] == 2]
    # round 1: the agent's line right after the system message
    assert {r["messages"][1]["content"] for r in r1 if r["role"] == "implementer"} == {
        line.format(f"implementer of `{p}`") for p in paths}
    assert all(r["messages"][1] == {"role": "user", "content": line.format(
        r["role"].replace("_", " "))} for r in r1 if r["role"] != "implementer")
    # round 2: every call begins with round 1's whole text and the gate report, then its line
    last1 = r1[-1]["messages"]
    report = next(i for i, m in enumerate(r2[0]["messages"]) if m["role"] == "user"
                  and m["content"].startswith("## Gate report, round 1: FAIL"))
    prefix = r2[0]["messages"][:report + 1]
    assert prefix[:2] == [last1[0]] + last1[2:3]       # round 1 without the integrator's line
    for r in r2:
        assert r["messages"][:report + 1] == prefix
        assert r["messages"][report + 1]["content"] in (
            {line.format(f"implementer of `{p}`") for p in paths} if r["role"] == "implementer"
            else {line.format(r["role"].replace("_", " "))})
    # the same calls as one shared conversation, each with the agent's line inserted
    ctx2, llm2, _ = make_ctx(tmp_path / "b", OraclePolicy(tasks={"calc": task}),
                             role_context="shared")
    await run_session(ctx2, task, seed, "s1")
    assert len(llm2.requests) == len(llm.requests)
    for a, b in zip(llm2.requests, llm.requests, strict=True):
        cut = report + 1 if b["round"] == 2 else 1
        assert b["messages"][:cut] + b["messages"][cut + 1:] == a["messages"]


async def test_spec_as_a_workspace_file(tmp_path):
    """``spec = "file"`` (the default): every call's leading text is the system prompt and the spec's opening
    section, the whole spec is the workspace's SPEC.md, and the architect reads it in round 1,
    so the rest of the session sees it in its history (a tool result), not in its leading text."""
    task = tiny_task()
    oracle = OraclePolicy(tasks={"calc": task})
    seed = seed_for(oracle, 1)
    ctx, llm, _ = make_ctx(tmp_path, oracle, spec="file")
    out = await run_session(ctx, task, seed, "s1")
    assert out.status == "passed"
    lead = task.shared_prefix(ctx.roles.system_prompt, "file")
    assert lead != task.shared_prefix(ctx.roles.system_prompt) and "SPEC.md" in lead
    assert task.spec.strip() not in lead
    assert all(r["messages"][0]["content"].startswith(lead) for r in llm.requests)
    arch = [r for r in llm.requests if r["role"] == "architect"]
    reads = [m for m in arch[1]["messages"] if m["role"] == "tool" and m["content"] == task.spec]
    assert len(reads) == 1                       # read once, in the architect's first step
    later = llm.requests[-1]["messages"]
    assert sum(m["role"] == "tool" and m["content"] == task.spec for m in later) == 1
    assert (tmp_path / "run" / "workspaces" / "s1" / "SPEC.md").read_text() == task.spec
    # with the spec in the prompt nobody reads a SPEC.md
    ctx2, llm2, _ = make_ctx(tmp_path / "b", OraclePolicy(tasks={"calc": task}), spec="prompt")
    await run_session(ctx2, task, seed, "s1")
    assert not any("SPEC.md" in (m.get("content") or "") for r in llm2.requests
                   for m in r["messages"][1:])


async def test_tool_errors_are_answered_and_recorded(tmp_path):
    bad = PolicyReply(content="trying", tool_calls=[
        ToolCall("write_file", json.dumps({"path": "../escape.py", "content": "x"})),
        ToolCall("delete_everything", "{}"),
        ToolCall("read_file", '{"path": '),
        ToolCall("write_file", json.dumps({"path": "/etc/x", "content": "x"}))])
    good = PolicyReply(tool_calls=[call("write_file", path="PLAN.md", content="plan"),
                                   call("finish", summary="ok")])
    policy = ScriptedPolicy([bad, good])
    ctx, llm, rd = make_ctx(tmp_path, policy, FakeGate())
    out = await run_session(ctx, tiny_task(), 0, "s1")
    tools = rd.read("tools")
    assert [t["ok"] for t in tools[:4]] == [False] * 4
    assert "leaves the workspace" in tools[0]["error"]
    assert "unknown tool" in tools[1]["error"] and "not valid JSON" in tools[2]["error"]
    assert tools[2]["args_summary"].startswith("<malformed JSON")
    second = llm.requests[1]["messages"]
    answers = [m for m in second if m["role"] == "tool"]
    assert len(answers) == 4 and all(m["content"].startswith("error: ") for m in answers)
    assert not (tmp_path / "escape.py").exists()
    # later roles only talk: the session ends with a recorded reason, nothing crashes
    assert out.status == "ended" and out.reason.startswith("no_progress: contract")
    assert rd.read("sessions")[-1]["reason"] == out.reason


async def test_length_like_policy_degrades_cleanly(tmp_path):
    policy = ScriptedPolicy(default=PolicyReply(content="so then we check the next step"))
    gate = FakeGate()
    ctx, llm, rd = make_ctx(tmp_path, policy, gate)
    out = await run_session(ctx, tiny_task(), 0, "s1")
    assert out.status == "ended" and out.reason.startswith("no_progress: architect")
    assert len(llm.requests) == 2  # no_tool_limit replies, then give up
    nudge = llm.requests[1]["messages"][-1]
    assert nudge["role"] == "user" and "without calling a tool" in nudge["content"]
    assert gate.requests == [] and ("cleanup", "s1") in gate.events
    sess = rd.read("sessions")
    assert [s["status"] for s in sess] == ["started", "ended"]


async def test_context_rule_elides_then_ends(tmp_path):
    roles = load_roles().with_overrides({r: {"max_tokens": 256, "step_limit": 30,
                                             "no_tool_limit": 5}
                                         for r in ("architect", "contract")})
    blob = "word " * 600  # 3,000 characters
    arch = [PolicyReply(tool_calls=[call("write_file", path="big.txt", content=blob)])] + \
        [PolicyReply(tool_calls=[call("read_file", path="big.txt")])] * 3 + \
        [PolicyReply(tool_calls=[call("finish", summary="done")])]
    contract = [PolicyReply(tool_calls=[call("read_file", path="big.txt")])] * 40
    policy = ScriptedPolicy(arch + contract)
    ctx, llm, rd = make_ctx(tmp_path, policy, FakeGate(), mml=6000, roles=roles)
    out = await run_session(ctx, tiny_task(), 0, "s1")
    assert out.status == "ended" and out.reason.startswith("context_limit"), out.reason
    elided = [r for r in llm.requests if any("[elided to fit the context" in (m.get("content") or
              "") or "[elided to fit" in json.dumps(m.get("tool_calls") or [])
              for m in r["messages"])]
    assert elided, "history was never elided"
    assert max(r["prompt_tokens"] for r in llm.requests) <= 6000
    assert all(c["status"] == "ok" for c in rd.read("calls"))
    assert rd.read("sessions")[-1]["reason"].startswith("context_limit")
    # max_tokens shrank to the room left before anything was elided
    assert min(r["max_tokens"] for r in llm.requests) >= 256


class FailingLLM(PolicyLLM):
    async def chat(self, *a, **kw):
        raise LLMError("coder: giving up after 4 attempts: HTTP 503")


async def test_llm_failure_ends_session_with_reason(tmp_path):
    rd = RunDir.create("run", base=tmp_path)
    clock = RunClock()
    ctx = SessionContext(run_dir=rd, clock=clock, llm=FailingLLM(None), gate=FakeGate())
    out = await run_session(ctx, tiny_task(), 0, "s1")
    assert out.status == "error" and "llm_error" in out.reason and "503" in out.reason
    assert rd.read("sessions")[-1]["status"] == "error"


class SiblingFailsLLM(PolicyLLM):
    """Implementer 1's call hangs (recorded as cancelled when cancelled, as the real client
    does); implementer 0's call then fails for good."""

    async def chat(self, endpoint, messages, **kw):
        cid = kw.get("call_id", "")
        if "/implementer1/" in cid:
            rec = CallRecord(run_id=self.run_dir.run_id, session_id=kw["session_id"],
                             call_id=cid, endpoint=endpoint, role=kw.get("role", ""))
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                rec.status, rec.error = "cancelled", "cancelled"
                self.run_dir.append(rec)
                raise
        if "/implementer0/" in cid:
            await asyncio.sleep(0.05)  # implementer 1's call is in flight by now
            rec = CallRecord(run_id=self.run_dir.run_id, session_id=kw["session_id"],
                             call_id=cid, endpoint=endpoint, role=kw.get("role", ""),
                             status="error", error="HTTP 503")
            self.run_dir.append(rec)
            raise LLMError("coder: giving up after 4 attempts: HTTP 503", record=rec)
        return await super().chat(endpoint, messages, **kw)


async def test_calls_cancelled_with_a_failing_sibling_are_counted(tmp_path):
    """A session's ``calls`` counts every call it made, also one cancelled in flight because a
    parallel sibling's call failed (one attempt-0 call record per counted call)."""
    task = tiny_task()
    oracle = OraclePolicy(tasks={"calc": task})
    rd = RunDir.create("run", base=tmp_path)
    llm = SiblingFailsLLM(oracle, run_dir=rd, clock=RunClock())
    ctx = SessionContext(run_dir=rd, clock=RunClock(), llm=llm, gate=FakeGate(),
                         roles=load_roles())
    out = await run_session(ctx, task, seed_for(oracle, 1), "s1")
    assert out.status == "error" and "implementer0" in out.reason
    calls = rd.read("calls")
    assert {c["status"] for c in calls if "/implementer" in c["call_id"]} == {"error", "cancelled"}
    assert rd.read("sessions")[-1]["calls"] == out.calls == len(calls)


async def test_gate_pause_waits_model_time_keeps_verdict(tmp_path):
    task = tiny_task()
    oracle = OraclePolicy(tasks={"calc": task})
    clock = RunClock(time_scale=1000.0)
    gate = FakeGate(verdicts=("fail", "pass"))
    ctx, _, rd = make_ctx(tmp_path, oracle, gate, clock=clock, gate_pause_s=300.0,
                          run_acceptance=False)
    out = await run_session(ctx, task, seed_for(oracle, 1), "s1")
    # the real verdict decides: fail in round 1 although the oracle got it right
    assert out.rounds == 2 and out.status == "passed"
    g = rd.read("gates")
    assert len(g) == 2 and g[0]["verdict"] == "fail"
    assert all(x["modelled_duration_s"] == 300.0 and x["t_end"] - x["t_start"] >= 299.9
               for x in g)
    assert all(r.modelled_duration_s == 300.0 for r in gate.requests)


async def test_records_on_disk_before_session_ends(tmp_path):
    seen = {}

    def on_run(req):
        seen["calls"] = len(rd.read("calls"))
        seen["tools"] = len(rd.read("tools"))
        seen["sessions"] = [s["status"] for s in rd.read("sessions")]
    task = tiny_task()
    oracle = OraclePolicy(tasks={"calc": task})
    ctx, llm, rd = make_ctx(tmp_path, oracle, FakeGate(on_run=on_run))
    await run_session(ctx, task, seed_for(oracle, 1), "s1")
    assert seen["calls"] == len(llm.requests) and seen["tools"] > 0
    assert seen["sessions"] == ["started"]


async def test_cancel_mid_session_records_cancelled(tmp_path):
    task = tiny_task()
    oracle = OraclePolicy(tasks={"calc": task})
    gate = FakeGate(hold=True)
    ctx, _, rd = make_ctx(tmp_path, oracle, gate)
    t = asyncio.create_task(run_session(ctx, task, 1, "s1"))
    await asyncio.wait_for(gate.running.wait(), 30)   # the session is inside its gate run
    t.cancel()
    with pytest.raises(asyncio.CancelledError):
        await t
    assert [s["status"] for s in rd.read("sessions")] == ["started", "cancelled"]
    assert ("cleanup", "s1") in gate.events


async def test_concurrent_sessions_share_nothing(tmp_path):
    task = tiny_task()
    oracle = OraclePolicy(tasks={"calc": task})
    ctx, llm, rd = make_ctx(tmp_path, oracle)
    seeds = [seed_for(oracle, 1), seed_for(oracle, 2), seed_for(oracle, 3)]
    outs = await asyncio.gather(*(run_session(ctx, task, s, f"s{s}") for s in seeds))
    assert [o.rounds for o in outs] == [1, 2, 3]
    assert all(o.status == "passed" for o in outs)
    assert len({o.workspace for o in outs}) == 3
    ends = [s for s in rd.read("sessions") if s["status"] != "started"]
    assert sorted(s["session_id"] for s in ends) == sorted(f"s{s}" for s in seeds)


DEEP_PATH = "/".join(["d"] * 2000) + "/x.py"
NESTED = '{"path": "x.py", "content": ' + "[" * 100_000 + "]" * 100_000 + "}"
SURROGATE = '{"path": "x\\ud800.py", "content": "x"}'  # a JSON escape of a lone surrogate


@pytest.mark.parametrize("tool,arguments,expect", [
    ("write_file", json.dumps({"path": DEEP_PATH, "content": "x"}), "nested too deeply"),
    ("write_file", NESTED, "nested too deeply"),
    ("read_file", NESTED, "nested too deeply"),
    ("write_file", SURROGATE, "not valid Unicode"),
    ("read_file", SURROGATE, "not valid Unicode"),
    ("write\ud800file", "{}", "unknown tool"),
])
async def test_hostile_tool_arguments_get_an_error_answer(tmp_path, tool, arguments, expect):
    """Model output is untrusted: a path nested 2,000 deep, JSON nested 100,000 deep or a lone
    surrogate is answered to the model as an error; the session goes on (never status error)
    and every message sent back is valid UTF-8."""
    import orjson
    bad = PolicyReply(content="trying", tool_calls=[ToolCall(tool, arguments)])
    good = PolicyReply(tool_calls=[call("write_file", path="PLAN.md", content="plan"),
                                   call("finish", summary="ok")])
    ctx, llm, rd = make_ctx(tmp_path, ScriptedPolicy([bad, good]), FakeGate())
    out = await run_session(ctx, tiny_task(), 0, "s1")
    assert out.status != "error", out.reason
    tools = rd.read("tools")
    assert tools[0]["ok"] is False and expect in tools[0]["error"], tools[0]
    assert tools[1]["ok"] and tools[1]["tool"] == "write_file"
    answer = [m for m in llm.requests[1]["messages"] if m["role"] == "tool"][0]
    assert answer["content"].startswith("error: ") and expect in answer["content"]
    for req in llm.requests:
        orjson.dumps(req["messages"])  # what the real client sends: raises on lone surrogates


class SlowGate(FakeGate):
    async def run(self, req):
        await asyncio.sleep(0.2)        # the real run: 0.2 wall s = 20 model s at S = 100
        return await super().run(req)


@pytest.fixture
def held_clock(tmp_path):
    """The stack's held clock (a clock file in ``tmp_path``) as this process's stamp source."""
    from adev import clock as clk
    clk.HeldClock.create(tmp_path / clk.CLOCK_FILE)
    held = clk.use_held_clock(tmp_path)
    assert held is not None
    yield held
    clk.use_held_clock(None)


def held_session(tmp_path, gate, **kw):
    """(task, oracle, ctx, run dir) of a one-round oracle session at time scale 100."""
    task = tiny_task()
    oracle = OraclePolicy(tasks={"calc": task})
    ctx, _, rd = make_ctx(tmp_path, oracle, gate, clock=RunClock(time_scale=100.0),
                          run_acceptance=False, **kw)
    return task, oracle, ctx, rd


async def test_a_slow_real_gate_holds_the_stacks_clock_at_the_modelled_pause(tmp_path, held_clock):
    """With the stack's held clock, a gate whose real run outlasts its modelled pause (1 model
    s here) holds model time at the pause's end: the model's timeline sees 1 s, not 20."""
    task, oracle, ctx, rd = held_session(tmp_path, SlowGate(), gate_pause_s=1.0)
    out = await run_session(ctx, task, seed_for(oracle, 1), "s1")
    assert out.status == "passed"
    g = rd.read("gates")
    assert g and all(0.999 <= x["t_end"] - x["t_start"] <= 1.2 for x in g), g


class SlowSetupGate(FakeGate):
    """Set-up and clean-up that block the event loop (0.05 wall s = 5 model s at S = 100)."""

    async def setup(self, sid):
        time.sleep(0.05)
        await super().setup(sid)

    async def cleanup(self, sid):
        time.sleep(0.05)
        await super().cleanup(sid)


async def test_a_sessions_own_set_up_and_clean_up_hold_the_stacks_clock(tmp_path, held_clock):
    """On the stack's held clock a session's work outside its role turns and gates is no model
    time: the first call is sent at the session's start however long the gate's set-up takes,
    and the next session (as a fleet slot starts it) starts at the previous one's end however
    long its clean-up takes. Nothing stays held afterwards."""
    from adev import clock as clk
    task, oracle, ctx, rd = held_session(tmp_path, SlowSetupGate(), gate_pause_s=1.0)
    for sid in ("s1", "s2"):
        out = await run_session(ctx, task, seed_for(oracle, 1), sid)
        assert out.status == "passed", out.reason
    client_hold = held_clock.slot_hold(clk.CLIENT_SLOT)
    sessions = {(r["session_id"], r["status"]): r["t"] for r in rd.read("sessions")}
    first = {sid: min(c["t_sent"] for c in rd.read("calls") if c["session_id"] == sid)
             for sid in ("s1", "s2")}
    assert first["s1"] - sessions[("s1", "started")] < 0.5      # 5 model s if not held
    assert first["s2"] - sessions[("s2", "started")] < 0.5
    assert sessions[("s2", "started")] - sessions[("s1", "passed")] < 0.5
    assert client_hold == float("inf")
    g = rd.read("gates")
    assert g and all(0.999 <= x["t_end"] - x["t_start"] <= 1.2 for x in g), g


async def test_in_a_fleet_slot_each_session_starts_where_the_one_before_left_off(tmp_path,
                                                                                 held_clock):
    """In a fleet slot (:func:`adev.clock.handing_over`) the slot's hold passes to its session
    and each session's end hold to the next: with 20 wall ms (2 model s at S = 100) of host work
    before each session, the first starts exactly at the slot's start and the second exactly at
    the first's end. Nothing stays held afterwards."""
    from adev import clock as clk
    task, oracle, ctx, rd = held_session(tmp_path, FakeGate(), gate_pause_s=1.0)
    t0 = ctx.clock.now() + 1.0
    with clk.handing_over() as h:
        h.leave(clk.hold_at(ctx.clock, t0))
        await clk.sleep_until(ctx.clock, t0)
        for sid in ("s1", "s2"):
            time.sleep(0.02)
            # (a session that does not take the slot's hold over waits for it forever)
            out = await asyncio.wait_for(run_session(ctx, task, seed_for(oracle, 1), sid), 20.0)
            assert out.status == "passed", out.reason
        time.sleep(0.02)
    assert held_clock.slot_hold(clk.CLIENT_SLOT) == float("inf")
    sessions = {(r["session_id"], r["status"]): r["t"] for r in rd.read("sessions")}
    assert abs(sessions[("s1", "started")] - t0) < 1e-9
    assert sessions[("s1", "passed")] - t0 > 1.0 - 1e-6   # model time ran: the gate's pause
    assert abs(sessions[("s2", "started")] - sessions[("s1", "passed")]) < 1e-9
    first = min(c["t_sent"] for c in rd.read("calls") if c["session_id"] == "s2")
    assert abs(first - sessions[("s2", "started")]) < 1e-9


class ReceivingLLM(PolicyLLM):
    """Notes each call's send stamp, then frees its request slot as an endpoint frees it once it
    has the request, while this process is busy for 20 wall ms (2 model s at S = 100: the
    request's trip, the other process at work), then lets the other tasks run; the slot is held
    again once the answer is read, as the client does."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.stamps: dict[str, float] = {}

    async def chat(self, endpoint, messages, **kw):
        from adev import clock as clk
        self.stamps[kw.get("call_id", "")] = self.clock.now()
        slot, holds = kw.get("hold_slot"), clk.request_holds()
        if slot is not None:
            holds.release(slot)
        time.sleep(0.02)
        await asyncio.sleep(0)
        try:
            return await super().chat(endpoint, messages, **kw)
        finally:
            if slot is not None:
                holds.hold(slot)


async def test_parallel_turns_take_their_slots_together_so_their_first_calls_go_at_once(
        tmp_path, held_clock):
    """Parallel implementers take their request slots before any of them starts: while the
    first one's request travels (its slot freed, 2 model s of host time), the others' slots
    still hold model time at the turns' start, so every first call is sent at one model time."""
    task, oracle, ctx, rd = held_session(tmp_path, FakeGate())
    ctx.llm = ReceivingLLM(oracle, run_dir=rd, clock=ctx.clock)
    out = await run_session(ctx, task, seed_for(oracle, 1), "s1")
    assert out.status == "passed", out.reason
    firsts = [t for cid, t in ctx.llm.stamps.items() if "/implementer" in cid and cid.endswith("/s0")]
    assert len(firsts) == len(task.modules) >= 2
    assert max(firsts) - min(firsts) < 1e-9, firsts


class SlotLLM(PolicyLLM):
    """Notes the hold slot each call was lent and whether the clock was held during the call."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.slots: list[tuple[str, int | None]] = []

    async def chat(self, endpoint, messages, **kw):
        self.slots.append((kw.get("call_id", ""), kw.get("hold_slot")))
        await asyncio.sleep(0)   # parallel turns overlap
        return await super().chat(endpoint, messages, **kw)


async def test_a_role_turn_holds_the_stacks_clock_between_its_calls(tmp_path, held_clock):
    """On the stack's held clock each role turn takes a request slot, lends it to each of its
    calls, and gives it back at the turn's end (parallel implementers: one slot each); the gate
    runs with no slot taken."""
    from adev import clock as clk
    task, oracle, ctx, rd = held_session(tmp_path, FakeGate())
    ctx.llm = SlotLLM(oracle, run_dir=rd, clock=ctx.clock)
    taken: list[int] = []
    gate_run = ctx.gate.run

    async def gate(req):    # no request slot holds the clock while the gate runs
        taken.append(sum(1 for i in clk.REQUEST_SLOTS if held_clock.slot_hold(i) != float("inf")))
        return await gate_run(req)
    ctx.gate.run = gate
    out = await run_session(ctx, task, seed_for(oracle, 1), "s1")
    pool = clk.request_holds()
    free = len(pool._free)
    assert out.status == "passed"
    by_turn: dict[str, set] = {}
    for cid, slot in ctx.llm.slots:
        assert slot in clk.REQUEST_SLOTS
        by_turn.setdefault(cid.rsplit("/", 1)[0], set()).add(slot)
    assert all(len(s) == 1 for s in by_turn.values())           # one slot per role turn
    impl = [next(iter(s)) for t, s in by_turn.items() if "/r1/implementer" in t]
    assert len(impl) == len(task.modules) and len(set(impl)) == len(impl)   # parallel: distinct
    assert taken and taken == [0] * len(taken)
    assert free == len(clk.REQUEST_SLOTS)                          # every slot given back
