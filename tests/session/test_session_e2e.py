"""Sessions end to end on the embedded stack (real Mooncake master + emulated endpoints with the
oracle or length policy, real local gate): every built-in task completes with real verdicts,
cached tokens grow by round, the length policy degrades cleanly, and a kill -9 mid-session loses
at most the calls in flight."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from adev.client.llm import Endpoint, LLMClient
from adev.clock import RunClock
from adev.config import ROOT
from adev.emulator.policies.oracle import OraclePolicy
from adev.gate.local import LocalGate
from adev.records import RunDir
from adev.session.loop import SessionContext, run_session
from adev.tasks import list_tasks, load_task

pytestmark = pytest.mark.integration


def _ctx(info, rd, **kw):
    clock = RunClock(time_scale=info.time_scale)
    llm = LLMClient([Endpoint(n, u) for n, u in info.endpoints.items()], clock=clock,
                    run_dir=rd, pool_size=32)
    return SessionContext(run_dir=rd, clock=clock, llm=llm, gate=LocalGate(), **kw), llm


async def test_every_task_on_embedded_stack(embedded_stack, tmp_path):
    info = embedded_stack(policy="oracle")
    oracle = OraclePolicy()
    one = next(s for s in range(100) if oracle.rounds_needed(s) == 1)
    two = next(s for s in range(100) if oracle.rounds_needed(s) == 2)
    tasks = list_tasks()
    assert len(tasks) >= 3
    runs = [(t, one) for t in tasks] + [(tasks[0], two)]
    rd = RunDir.create("run", base=tmp_path)
    # one conversation through every role: a role turn continues the previous turn's KV (with
    # the default "per-role" each agent's round 2 continues its own round 1, which this small
    # stack's pool and store need not still hold)
    ctx, llm = _ctx(info, rd, role_context="shared", later_rounds="all")
    async with llm:
        await llm.discover()
        outs = await asyncio.gather(*(run_session(ctx, load_task(t), s, f"{t}-{s}")
                                      for t, s in runs))
    for (t, s), o in zip(runs, outs, strict=True):
        assert o.status == "passed" and o.acceptance == "pass", (t, s, o.reason)
        assert o.rounds == oracle.rounds_needed(s)
    gates = rd.read("gates")
    assert all(g["executor"] == "local" and g["passed"] > 0 for g in gates)
    calls = rd.read("calls")
    assert all(c["status"] == "ok" and c["server"] for c in calls)
    # the 2-round session: round 2 starts with round 1's full text, so its first call finds
    # (nearly) all of round 1's last prompt cached, and the cache grows with the round
    sid = f"{tasks[0]}-{two}"
    mine = [c for c in calls if c["session_id"] == sid]
    r1 = [c for c in mine if c["round"] == 1]
    r2 = [c for c in mine if c["round"] == 2]
    assert r2[0]["cached_tokens"] >= 0.9 * r1[-1]["prompt_tokens"]
    assert r2[0]["cached_tokens"] > max(c["cached_tokens"] for c in r1[:3])


async def test_length_policy_degrades_cleanly(embedded_stack, tmp_path):
    info = embedded_stack(policy="length")
    rd = RunDir.create("run", base=tmp_path)
    ctx, llm = _ctx(info, rd)
    roles = ctx.roles.with_overrides({"architect": {"max_tokens": 256}})
    ctx.roles = roles
    async with llm:
        await llm.discover()
        out = await run_session(ctx, list_tasks()[0], 0, "len-0")
    assert out.status == "ended" and out.reason.startswith("no_progress"), out.reason
    sess = rd.read("sessions")
    assert [s["status"] for s in sess] == ["started", "ended"] and sess[-1]["reason"]
    assert all(c["status"] == "ok" for c in rd.read("calls"))


def test_kill_mid_session_loses_at_most_calls_in_flight(embedded_stack, tmp_path):
    info = embedded_stack(policy="oracle")
    runs = tmp_path / "runs"
    argv = [sys.executable, "-m", "adev.cli", "session", "--task", list_tasks()[0], "--seed", "3",
            "--runs-dir", str(runs)]
    for n, u in info.endpoints.items():
        argv += ["--endpoint", f"{n}={u}"]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        calls_file = None
        while time.monotonic() < deadline:
            found = list(runs.glob("*/calls.jsonl")) if runs.exists() else []
            if found and sum(1 for _ in open(found[0])) >= 6:
                calls_file = found[0]
                break
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            time.sleep(0.2)
        assert calls_file is not None, "the session made no calls"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    rd = RunDir(calls_file.parent)
    for kind in ("calls", "tools", "sessions"):
        assert rd.torn_lines(kind) == 0, kind
    calls = rd.read("calls")
    assert len(calls) >= 6 and all(c["status"] == "ok" for c in calls)
    assert [s["status"] for s in rd.read("sessions")] == ["started"]
    # every tool event belongs to a call already on disk (tools run after their call ends)
    ids = {c["call_id"] for c in calls}
    assert all(t["call_id"] in ids for t in rd.read("tools"))
    assert (rd.path / "manifest.json").exists()
    # discovery recorded each server's release before the first call
    eps = json.loads((rd.path / "endpoints.json").read_text())
    assert {e["server_version"] for e in eps.values()} == {"0.26.0+adev.emulator"}
