"""``adev session`` argument checks and the printed summary (per call and per round)."""
from __future__ import annotations

import pytest

from adev.cli import build_parser
from adev.clock import RunClock
from adev.config import ConfigError
from adev.emulator.policies.oracle import OraclePolicy
from adev.gate.local import LocalGate
from adev.records import RunDir
from adev.session.cli import _parse_endpoints, format_summary, summarise
from adev.session.loop import SessionContext, run_session

from .fakes import PolicyLLM
from .tinytask import tiny_task


def test_parser_and_endpoint_errors():
    args = build_parser().parse_args(["session", "--task", "x", "--endpoint", "coder=http://h/v1",
                                      "--gate-pause", "300"])
    assert args.task == "x" and args.gate == "local" and args.gate_pause == 300.0
    assert _parse_endpoints(["coder=http://h:1/v1/", "reasoner=https://g/v1"]) == \
        {"coder": "http://h:1/v1", "reasoner": "https://g/v1"}
    for bad in ("coder", "coder=ftp://x", "=http://x"):
        with pytest.raises(ConfigError, match="--endpoint"):
            _parse_endpoints([bad])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["session", "--task", "x", "--gate", "cloud"])


async def test_summary_per_round(tmp_path):
    task = tiny_task()
    oracle = OraclePolicy(tasks={"calc": task})
    seed = next(s for s in range(100) if oracle.rounds_needed(s) == 2)
    rd = RunDir.create("run", base=tmp_path)
    clock = RunClock()
    ctx = SessionContext(run_dir=rd, clock=clock, llm=PolicyLLM(oracle, run_dir=rd, clock=clock),
                         gate=LocalGate())
    out = await run_session(ctx, task, seed, "s1")
    s = summarise(rd, "s1")
    assert s["calls"] == out.calls and set(s["per_round"]) == {"1", "2"}
    r1, r2 = s["per_round"]["1"], s["per_round"]["2"]
    assert r2["first_prompt_tokens"] > r1["prompt_tokens"]["max"] * 0.9
    assert [g["verdict"] for g in s["gates"]] == ["fail", "pass", "pass"]
    s.update(run_dir=str(rd.path), status=out.status, reason=out.reason,
             acceptance=out.acceptance, rounds=out.rounds, task="calc", seed=seed)
    text = format_summary(s)
    assert "round 1:" in text and "round 2:" in text and "prompt tokens per call" in text
    assert "gate round 2 acceptance: pass" in text


def test_unconfined_gate_refused_against_external_endpoints(tmp_path, capsys):
    from adev.cli import main
    argv = ["session", "--task", "kvblock-store", "--endpoint", "coder=http://127.0.0.1:9/v1",
            "--gate", "local-unconfined", "--runs-dir", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "'local-unconfined' runs model-written code unconfined" in err
    assert "--allow-unconfined-gate" in err
    assert list(tmp_path.iterdir()) == []  # refused before anything was written
