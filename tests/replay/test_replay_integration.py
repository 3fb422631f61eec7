"""A tiny replay on the embedded stack (real Mooncake master, emulated endpoints): two
configurations, a few sessions of a Mooncake-style trace, the short-gap schedule."""
from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from adev.replay.cli import default_stack
from adev.replay.experiment import ReplayOptions, run_matrix, select_sessions
from adev.replay.format import Call, Trace

pytestmark = pytest.mark.integration


def _trace() -> Trace:
    """4 sessions x 3 turns: each turn extends the previous prompt by 4 blocks of 512 tokens."""
    calls = []
    for s in range(4):
        for k in range(3):
            blocks = [0] + [1000 * (s + 1) + j for j in range(4 * (k + 1))]
            calls.append(Call(f"s{s}", k, prompt_tokens=512 * len(blocks), output_tokens=12,
                              blocks=blocks, t=None))
    return Trace(block_tokens=512, calls=calls)


@pytest.mark.parametrize("jobs", [1, 2])
def test_tiny_replay_two_configurations(tmp_path, jobs):
    """jobs=2: the two runs at once, each in a process of its own with its own stack."""
    trace = _trace()
    sessions = select_sessions(trace, min_turns=2)
    base = default_stack(time_scale=10.0, state_dir=str(tmp_path / "stack"),
                         store=dataclasses.asdict(default_stack().store) | {"ram_gb": 2.0})
    opts = ReplayOptions(experiment="short", active=4, stagger_s=2.0, scrape_s=2.0)
    runs = asyncio.run(run_matrix(trace, sessions, base, ["recompute", "store-ram"], [0], opts,
                                  tmp_path / "out", log=lambda *a, **k: None, jobs=jobs))
    s = {p.name: json.loads((p / "summary.json").read_text()) for p in runs}
    assert set(s) == {"recompute-s0", "store-ram-s0"}
    for v in s.values():
        assert v["ok_calls"] == 12 and v["errors"] == 0, v
        assert v["exact_output_share"] == 1.0          # the replay policy's recorded length
        assert v["ttft_p50_s"] > 0 and v["throughput_rps"] > 0
        assert sum(v["traffic"].values()) == 12
    # recompute caches nothing; store-ram serves the later turns' shared prefixes
    rec = [r for r in _replay(runs[0]) if not r["initial"]]
    ram = [r for r in _replay(runs[1]) if not r["initial"]]
    assert all(not r["cached_tokens"] for r in rec)
    assert sum(r["cached_tokens"] or 0 for r in ram) >= 8 * 512 * 4 // 2
    assert s["store-ram-s0"]["evictions"] is not None


def _replay(path):
    from adev.records import RunDir
    return RunDir(path).read("replay")


def test_same_command_against_emulated_endpoints_in_external_mode(tmp_path):
    """`adev replay` with a stack file in external mode, against emulated endpoints started
    beforehand (the real emulator processes and Mooncake master, reached only by their URLs):
    the same command as on the embedded stack, unchanged. The long-gap schedule: an external
    stack runs on the wall (time scale 1), where the short gap's intervals would take a minute."""
    import subprocess
    import sys

    from adev.config import ROOT
    from adev.replay.format import write_trace
    from adev.stack import start_stack, stop_stack

    base = default_stack(time_scale=10.0, state_dir=str(tmp_path / "stack"), model_clock="free",
                         configuration="store-ram",
                         store=dataclasses.asdict(default_stack().store) | {"ram_gb": 2.0})
    info = start_stack(base)
    try:
        lines = ['[stack]', 'mode = "external"', 'configuration = "store-ram"']
        for ep in base.endpoints:
            lines += ["[[stack.endpoints]]", f'name = "{ep.name}"',
                      f'base_url = "{info.endpoints[ep.name]}"', f'kv_role = "{ep.kv_role}"']
        ext = tmp_path / "external.toml"
        ext.write_text("\n".join(lines) + "\n")
        trace = tmp_path / "t.trace.jsonl"
        write_trace(_trace(), trace)
        p = subprocess.run([sys.executable, "-m", "adev.cli", "replay", str(trace), "--stack",
                            str(ext), "--experiment", "long", "--active", "4", "--stagger-s",
                            "2", "--out", str(tmp_path / "out")],
                           cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    finally:
        stop_stack(info)
    runs = [d for d in (tmp_path / "out").iterdir() if (d / "summary.json").exists()]
    assert [d.name for d in runs] == ["store-ram-s0"]
    s = json.loads((runs[0] / "summary.json").read_text())
    assert s["ok_calls"] == 12 and s["errors"] == 0, s
    assert s["exact_output_share"] == 1.0             # the emulators' replay policy
    # every call went prefill -> decode across the two producers and the two consumers
    assert sum(s["traffic"].values()) == 12
    assert {k.split(">")[0] for k in s["traffic"]} <= {"p0", "p1"}
    assert {k.split(">")[1] for k in s["traffic"]} <= {"d0", "d1"}
    # later turns find their prefix in the store the producers share
    later = [r for r in _replay(runs[0]) if not r["initial"]]
    assert sum(r["cached_tokens"] or 0 for r in later) > 0
    # the run records each server's release, as it answered GET /version
    eps = json.loads((runs[0] / "endpoints.json").read_text())
    assert set(eps) == {e.name for e in base.endpoints}
    assert {e["server_version"] for e in eps.values()} == {f"{base.vllm_version}+adev.emulator"}


def test_a_synthetic_trace_above_64k_tokens_on_the_128k_profile(tmp_path):
    """`adev trace synth`'s longest prompts (above 96K tokens) are served whole by the stack
    with the 131,072-token profile; the default 65,536-token context would cut every call."""
    from adev.replay.synth import SynthParams, synth_trace

    trace = synth_trace(SynthParams(sessions=2, calls=4, group_calls=(0, 0, 0, 1)))
    assert all(c.prompt_tokens > 98304 for c in trace.calls)
    assert select_sessions(trace, max_context=65536) == []
    sessions = select_sessions(trace, max_context=131072)
    assert sum(map(len, sessions)) == 4
    base = default_stack(time_scale=20.0, state_dir=str(tmp_path / "stack"),
                         profile="qwen3-coder-30b-a3b-128k")
    opts = ReplayOptions(experiment="short", active=2, stagger_s=1.0, scrape_s=2.0)
    runs = asyncio.run(run_matrix(trace, sessions, base, ["store-ram"], [0], opts,
                                  tmp_path / "out", log=lambda *a, **k: None))
    s = json.loads((runs[0] / "summary.json").read_text())
    assert s["ok_calls"] == 4 and s["errors"] == 0, s
    rows = _replay(runs[0])
    assert sorted(r["prompt_tokens"] for r in rows) == sorted(c.prompt_tokens for c in trace.calls)
    # each session's second call finds its first call's whole prompt (whole 16-token blocks)
    for r in rows:
        if not r["initial"]:
            first = next(c for c in trace.calls if c.session == r["session"] and c.turn == 0)
            assert r["cached_tokens"] >= first.prompt_tokens // 16 * 16 - 16


def test_a_pilot_on_the_real_store_measures_the_reads_the_time_scale_is_chosen_from(tmp_path):
    """`adev replay --time-scale auto`: one pilot (adev.replay.pace) on a real store-ram stack,
    16 sessions x 4 turns, round-robin routing: the later turns that move to the other prefill
    replica load their prefix from the real Mooncake store, and the choice follows the pilot's
    own median read ratio (kept at S = 10 where the reads keep pace or cannot keep pace even in
    real time, else the next lower step)."""
    from adev.replay.pace import MIN_LOADED, choose_time_scale, next_scale

    calls = []
    for s in range(16):
        for k in range(4):
            blocks = [1000 * (s + 1) + j for j in range(4 * (k + 1))]
            calls.append(Call(f"s{s}", k, prompt_tokens=512 * len(blocks), output_tokens=8,
                              blocks=blocks, t=None))
    trace = Trace(block_tokens=512, calls=calls)
    base = default_stack(time_scale=10.0, state_dir=str(tmp_path / "stack"))
    opts = ReplayOptions(experiment="long", active=16, stagger_s=2.0, scrape_s=2.0)
    choice = asyncio.run(choose_time_scale(trace, select_sessions(trace), base, opts,
                                           tmp_path / "out", log=lambda *a, **k: None,
                                           max_pilots=1))
    (p,) = choice.pilots
    assert p.time_scale == 10.0 and p.calls == 64
    assert p.loaded_calls >= MIN_LOADED and p.read_over_profile_p50 > 0
    want = next_scale(10.0, p.read_over_profile_p50)
    assert choice.time_scale == (10.0 if want is None else want)   # None: not even in real time
    assert choice.verified == (p.read_over_profile_p50 <= 1.0)
    man = json.loads((tmp_path / "out" / ".pace" / "pilot-store-ram-S10" / "manifest.json")
                     .read_text())
    assert man["replay"]["routing"] == "round-robin" and man["time_scale"] == 10.0
