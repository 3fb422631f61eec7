"""The oracle policy: round shares, seeded mistakes, output lengths, robustness, and full
sessions of every built-in task through the real local gate (in-process model, no HTTP)."""
from __future__ import annotations

import ast
import json
from collections import Counter

import pytest

from adev.clock import RunClock
from adev.config import ConfigError, load_stack
from adev.emulator.policies.base import PolicyRequest, load_policy
from adev.emulator.policies.oracle import OraclePolicy
from adev.emulator.policies.oracle_config import OracleConfig
from adev.emulator.policies.oracle_mistakes import stub_mistake
from adev.emulator.tokenizer import Tokenizer
from adev.gate.local import LocalGate
from adev.records import RunDir
from adev.session.loop import SessionContext, run_session
from adev.session.roles import load_roles
from adev.tasks import list_tasks, load_task

from .fakes import PolicyLLM
from .tinytask import tiny_task


def test_round_shares_default():
    o = OraclePolicy()
    first20 = Counter(o.rounds_needed(s) for s in range(20))
    assert set(first20) == {1, 2, 3}
    many = Counter(o.rounds_needed(s) for s in range(4000))
    for r, share in ((1, 0.40), (2, 0.35), (3, 0.25)):
        assert abs(many[r] / 4000 - share) < 0.03, many


def test_round_shares_configurable():
    o = OraclePolicy({"round_shares": [0, 0, 1]})
    assert {o.rounds_needed(s) for s in range(50)} == {3}
    with pytest.raises(ConfigError, match="round_shares"):
        OracleConfig.from_dict({"round_shares": [0.5, 0.6, 0.1]})
    with pytest.raises(ConfigError, match="unknown key"):
        OracleConfig.from_dict({"rounds": 3})
    with pytest.raises(ConfigError, match="output_tokens.architect"):
        OracleConfig.from_dict({"output_tokens": {"architect": [0, 1]}})


def test_emulator_constructs_it_from_the_stack_config(monkeypatch):
    """The endpoint builds the oracle from the stack's ``oracle`` table; an environment variable
    of the old name changes nothing."""
    monkeypatch.setenv("ADEV_ORACLE", json.dumps({"round_shares": [0, 0, 1]}))
    stack = load_stack(None, oracle={"round_shares": [1, 0, 0], "one_call_per_turn": True})
    p = load_policy("oracle", stack, 0)
    assert p.name == "oracle" and p.rounds_needed(7) == 1 and p.config.one_call_per_turn
    d = load_policy("oracle", load_stack(None), 0)
    assert d.config == OracleConfig() and {d.rounds_needed(s) for s in range(50)} == {1, 2, 3}


def test_stack_oracle_settings_are_checked():
    with pytest.raises(ConfigError, match=r"stack\.oracle\.round_shares: expected three shares"):
        load_stack(None, oracle={"round_shares": [0.5, 0.6, 0.1]})
    with pytest.raises(ConfigError, match=r"stack\.oracle: unknown key\(s\) \['rounds'\]; allowed"):
        load_stack(None, oracle={"rounds": 3})
    with pytest.raises(ConfigError, match=r"stack\.oracle: settings of the oracle policy, but "
                                          r"stack\.policy is 'length'"):
        load_stack(None, policy="length", oracle={"thinking": True})


def test_mistakes_by_round():
    task = tiny_task()
    o = OraclePolicy(tasks={"calc": task})
    for seed in range(40):
        r = o.rounds_needed(seed)
        ms = [o.mistakes_for(task, seed, n) for n in (1, 2, 3)]
        assert [len(m) for m in ms] == [1 if n < r else 0 for n in (1, 2, 3)]
        if r == 3:
            assert ms[0] != ms[1]  # a different mistake in round 2


def test_fallback_mistake_when_task_has_none():
    src = tiny_task().reference["calc/ops.py"]
    m = stub_mistake("calc/ops.py", src)
    text = src.replace(m.find, m.replace)
    ast.parse(text)
    assert "NotImplementedError" in text and text != src
    task = tiny_task(mistakes=[])
    o = OraclePolicy(tasks={"calc": task})
    seed = next(s for s in range(100) if o.rounds_needed(s) == 2)
    assert "NotImplementedError" in o.mistakes_for(task, seed, 1)[0].replace


def _req(role_prompt: str, **kw) -> PolicyRequest:
    return PolicyRequest(model="m", messages=[{"role": "system", "content": "sys"},
                                              {"role": "user", "content": role_prompt}], **kw)


def test_output_tokens_cover_the_reply():
    task = tiny_task()
    o = OraclePolicy({"thinking": True}, tasks={"calc": task})
    roles = load_roles()
    tok = Tokenizer()
    prompt = roles["test_writer"].render(round=1, max_rounds=3, task="calc", modules="")
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": prompt},
            {"role": "assistant", "content": "x", "tool_calls": []}]
    rep = o.reply(PolicyRequest(model="m", messages=msgs, seed=3, max_tokens=8192))
    assert rep.tool_calls[0].name == "write_file"
    natural = len(tok.encode(rep.content or "")) + sum(
        len(tok.encode(tok.render_tool_call(c.name, c.arguments))) for c in rep.tool_calls)
    assert rep.output_tokens >= natural
    lens = [o.reply(_req(roles["architect"].render(round=1, max_rounds=3, task="calc",
                                                   modules=""), seed=s)).output_tokens
            for s in range(30)]
    assert len(set(lens)) > 10  # a distribution, not a constant


def test_robust_to_unknown_input():
    o = OraclePolicy()
    rep = o.reply(PolicyRequest(model="m", messages=[{"role": "user", "content": "hello"}]))
    assert rep.content and not rep.tool_calls
    rep = o.reply(_req("## Role: architect\n\nThis is round 1 of 3 of task `no-such-task`."))
    assert rep.tool_calls[0].name == "finish"
    rep = o.reply(_req("## Role: architect\n\nno round line"))
    assert rep.content and not rep.tool_calls


@pytest.mark.parametrize("name", list_tasks())
async def test_builtin_task_two_rounds_real_gate(tmp_path, name):
    """Each built-in task: round 1 fails on a seeded mistake, round 2 passes, acceptance too."""
    task = load_task(name)
    oracle = OraclePolicy()
    seed = next(s for s in range(1000) if oracle.rounds_needed(s) == 2)
    rd = RunDir.create("run", base=tmp_path)
    clock = RunClock()
    llm = PolicyLLM(oracle, run_dir=rd, clock=clock, max_model_len=65536)
    ctx = SessionContext(run_dir=rd, clock=clock, llm=llm, gate=LocalGate())
    out = await run_session(ctx, task, seed, f"{name}-s{seed}")
    gates = rd.read("gates")
    assert [(g["suite"], g["verdict"]) for g in gates] == \
        [("agent", "fail"), ("agent", "pass"), ("acceptance", "pass")], gates
    assert gates[0]["failed"] >= 1 and gates[1]["passed"] == gates[0]["passed"] + \
        gates[0]["failed"] + gates[0]["errors"]
    assert out.status == "passed" and out.rounds == 2
    assert all(t["ok"] for t in rd.read("tools"))


def test_sessions_share_the_task_text_then_diverge():
    """Same role prompt, different session seeds: the visible replies (which later prompts
    resend) differ, so sessions do not replay byte-identical transcripts; same seed, same reply."""
    task = tiny_task()
    o = OraclePolicy(tasks={"calc": task})
    prompt = load_roles()["architect"].render(round=1, max_rounds=3, task="calc", modules="")
    firsts = [o.reply(_req(prompt, seed=s)).content for s in range(12)]
    assert len(set(firsts)) >= 8
    assert o.reply(_req(prompt, seed=5)).content == firsts[5]


def test_non_thinking_reply_is_its_own_length():
    """The default model does not think: no reasoning, no padding (the engine generates the
    reply's own tokens), and the note of intent is visible content that later requests resend."""
    task = tiny_task()
    o = OraclePolicy(tasks={"calc": task})
    assert o.config.thinking is False
    roles = load_roles()
    rep = o.reply(_req(roles["architect"].render(round=1, max_rounds=3, task="calc", modules=""),
                       seed=5, max_tokens=4096))
    assert rep.reasoning is None and rep.output_tokens is None
    assert "As the architect I should follow the specification" in rep.content
    assert rep.tool_calls[0].name == "list_files"
    with pytest.raises(ConfigError, match="oracle.thinking"):
        OracleConfig.from_dict({"thinking": "no"})


def test_one_call_per_turn_what_if():
    """The what-if puts a turn's scripted steps in one reply: reads, the write and finish."""
    task = tiny_task()
    o = OraclePolicy({"one_call_per_turn": True}, tasks={"calc": task})
    roles = load_roles()
    rep = o.reply(_req(roles["architect"].render(round=1, max_rounds=3, task="calc", modules=""),
                       seed=5, max_tokens=4096))
    assert [c.name for c in rep.tool_calls] == ["list_files", "write_file", "finish"]
    with pytest.raises(ConfigError, match="oracle.one_call_per_turn"):
        OracleConfig.from_dict({"one_call_per_turn": 1})
