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


def test_tiny_replay_two_configurations(tmp_path):
    trace = _trace()
    sessions = select_sessions(trace, min_turns=2)
    base = default_stack(time_scale=10.0, state_dir=str(tmp_path / "stack"),
                         store=dataclasses.asdict(default_stack().store) | {"ram_gb": 2.0})
    opts = ReplayOptions(experiment="short", active=4, stagger_s=2.0, scrape_s=2.0)
    runs = asyncio.run(run_matrix(trace, sessions, base, ["recompute", "store-ram"], [0], opts,
                                  tmp_path / "out", log=lambda *a, **k: None))
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
    the same command as on the embedded stack, unchanged."""
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
                            str(ext), "--experiment", "short", "--active", "4", "--stagger-s",
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
