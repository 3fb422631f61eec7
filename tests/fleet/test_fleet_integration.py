"""Fleets on the real embedded stack (Mooncake master + emulated endpoints + local gate).

* a width-12 steady-state run with 3 windows (short windows, high time scale);
* a width-4 batch run with 3 runs (the stack restarted between runs), its endpoints answering
  and counting as vLLM 0.24.0 (``stack.vllm_version``): the analysis takes their GPU hits from
  the calls, not from a prefix cache counter that counts waiting requests at every step;
* ``kill -9`` of ``adev fleet`` inside window 2, then ``adev fleet --resume``: window 1 stays
  valid, window 2 is invalid, later windows are measured, no record duplicated or lost;
and the measurement stage reads every run.
"""
from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from adev.config import ROOT, load_stack
from adev.records import RunDir

pytestmark = pytest.mark.integration

S = 25.0  # time scale of these tests
WAIT_S = 900.0  # wall seconds any wait of these tests allows: three times the slowest's need here
LEASE_S = 12.5  # model seconds: 500 ms real at S (a real lease much shorter fails slow reads
# on this loaded 2-core machine)


def stack_dict(state_dir: Path, scale: float = S) -> dict:
    """The embedded stack at time scale ``scale`` with a 500 ms real lease, in ``state_dir``."""
    st = dataclasses.asdict(load_stack(time_scale=scale))
    st["state_dir"] = str(state_dir)
    st["store"]["lease_ttl_s"] = LEASE_S * scale / S
    st["stream_interval"] = 0   # as stack_toml
    return st


def stack_toml(state_dir: Path) -> str:
    """``stacks/embedded.toml`` in ``state_dir`` with :data:`LEASE_S` and one stream event per
    decode macro step (a third less host work per run; no figure these tests check depends on
    it)."""
    src = (ROOT / "stacks" / "embedded.toml").read_text()
    out = (src.replace("[stack]\n", f'[stack]\nstate_dir = "{state_dir}"\n', 1)
           .replace("lease_ttl_s = 5.0", f"lease_ttl_s = {LEASE_S}")
           .replace("stream_interval = 1 ", "stream_interval = 0 "))
    assert f"lease_ttl_s = {LEASE_S}" in out and "stream_interval = 0 " in out, "embedded.toml changed"
    return out


def check_records(rd: RunDir) -> None:
    """No record duplicated; every started session has exactly one end record."""
    calls = rd.read("calls")
    dup = [k for k, v in Counter((c["call_id"], c["attempt"]) for c in calls).items() if v > 1]
    assert not dup, f"duplicated call records: {dup[:5]}"
    ss = rd.read("sessions")
    starts = Counter(s["session_id"] for s in ss if s["status"] == "started")
    ends = Counter(s["session_id"] for s in ss if s["status"] != "started")
    assert max(starts.values()) == 1 and max(ends.values()) == 1
    assert set(starts) == set(ends)
    for kind in ("windows", "events", "sessions", "scrapes"):
        assert rd.torn_lines(kind) == 0


def measured(run_path: Path):
    """The measurement stage's per-window table of the run (and its summary reads it)."""
    from adev.analysis.report import summarise_run
    from adev.analysis.run import load_run
    from adev.analysis.windows import window_table
    assert "gross saving" in summarise_run(run_path)
    return window_table(load_run(run_path))


def test_steady_width12_three_windows(tmp_path, state_dir):
    from adev.fleet.config import fleet_from_dict
    from adev.fleet.runner import run_fleet
    cfg = fleet_from_dict({
        "width": 12, "protocol": "steady", "stagger_s": 5.0, "pause_s": 0.0,
        "windows": {"count": 3, "length_s": 150.0}, "warmup": {"max_s": 1200.0},
        "stack": stack_dict(state_dir), "results_dir": str(tmp_path), "live": "plain",
        "report": False})
    out = run_fleet(cfg)
    assert out.exit_code == 0, out.summary
    rd = RunDir(out.run_dir)
    ws = rd.read("windows")
    assert [(w["index"], w["valid"]) for w in ws] == [(1, True), (2, True), (3, True)]
    ev = [e["event"] for e in rd.read("events")]
    assert "regime" in ev
    check_records(rd)
    calls = rd.read("calls")
    assert len(calls) > 50 and {c["endpoint"] for c in calls} == {"coder", "reasoner"}
    sc = rd.read("scrapes")
    assert {s["target"] for s in sc} == {"coder", "reasoner", "master"}
    assert sum(s["ok"] for s in sc) >= 0.9 * len(sc)
    tab = measured(out.run_dir)
    assert set(tab["window"]) >= {1, 2, 3}


def test_batch_width4_three_runs(tmp_path, state_dir):
    from adev.fleet.config import fleet_from_dict
    from adev.fleet.runner import run_fleet
    stack = {**stack_dict(state_dir, 2 * S), "vllm_version": "0.24.0"}
    cfg = fleet_from_dict({
        "width": 4, "protocol": "batch", "runs": 3, "pause_s": 0.0,
        "stack": stack,  # whole sessions, three times: a faster clock
        "results_dir": str(tmp_path), "live": "plain",
        "report": False})
    out = run_fleet(cfg)
    assert out.exit_code == 0, out.summary
    rd = RunDir(out.run_dir)
    ws = rd.read("windows")
    assert [(w["index"], w["protocol"], w["valid"]) for w in ws] == \
        [(1, "batch", True), (2, "batch", True), (3, "batch", True)]
    check_records(rd)
    ss = [s for s in rd.read("sessions") if s["status"] not in ("started",)]
    assert len(ss) == 12 and all(s["status"] != "cancelled" for s in ss)
    # the stack was restarted between runs: its counters start from zero in every run
    first = {}
    for s in rd.read("scrapes"):
        if s["target"] == "coder" and s["ok"]:
            w = next((w for w in ws if w["t0"] - 1 <= s["t"] <= w["t1"] + 1), None)
            if w and w["index"] not in first:
                first[w["index"]] = s["samples"]
    assert len(first) == 3
    tab = measured(out.run_dir)
    assert set(tab["window"]) >= {1, 2, 3}
    # each run on its own stack's held clock: the run's timeline goes on across the restarts
    # (only the restart's own time between runs), and the client's TTFT is the model's in every
    # run, not only the first
    for a, b in zip(ws, ws[1:], strict=False):
        assert 0 < b["t0"] - a["t1"] < 3000.0, (a, b)
    assert (tab["ttft_model_err_p50"].abs() < 0.01).all(), tab["ttft_model_err_p50"].tolist()
    check_release_counting(out.run_dir, tab)


def check_release_counting(run_path: Path, tab) -> None:
    """Endpoints that answer vLLM 0.24.0: the run records the release, and each window's GPU
    hits come from the calls' cached tokens less the store's hits. They equal the emulator's own
    per-request GPU tokens of the calls sent in the window (a batch window holds its run's calls
    whole), while the prefix cache counter, which counts a waiting request at every step, reads
    at least as much."""
    import json

    from adev.analysis import counters as C
    from adev.analysis.run import load_run
    eps = json.loads((run_path / "endpoints.json").read_text())
    assert {v["server_version"] for v in eps.values()} == {"0.24.0+adev.emulator"}
    run = load_run(run_path)
    rows = tab[tab["endpoint"] != "ALL"]
    assert len(rows) == 6
    for _, f in rows.iterrows():
        assert "cached_tokens" in f["gpu_tokens_source"], f["gpu_tokens_source"]
        c = run.calls
        c = c[(c["endpoint"] == f["endpoint"]) & (c["t_sent"] >= f["t0"]) & (c["t_sent"] < f["t1"])]
        truth = float(c["srv_tok_gpu"].sum())
        assert abs(f["gpu_tokens"] - truth) <= 0.01 * f["prompt_tokens"], (f["gpu_tokens"], truth)
        counted = C.counter_delta(run.scrapes[f["endpoint"]], C.PREFIX_HITS, f["t0"], f["t1"])
        assert counted.ok and counted.value >= truth


def _write_files(tmp_path: Path, state_dir: Path) -> tuple[Path, Path]:
    stack = tmp_path / "stack.toml"
    stack.write_text(stack_toml(state_dir))
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f"""[fleet]
width = 6
protocol = "steady"
stagger_s = 5.0
time_scale = {S}
stack = "{stack}"
results_dir = "{tmp_path / 'runs'}"
live = "plain"
report = false
[fleet.windows]
count = 3
length_s = 150.0
[fleet.warmup]
max_s = 1200.0
""")
    return fleet, stack


def _adev(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "adev.cli", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def test_kill9_in_window2_then_resume(tmp_path, state_dir):
    fleet, _ = _write_files(tmp_path, state_dir)
    p = _adev("fleet", "--config", str(fleet))
    run_path = None
    deadline = time.monotonic() + WAIT_S
    try:
        while time.monotonic() < deadline:
            time.sleep(0.2)
            runs = list((tmp_path / "runs").glob("fleet-*"))
            if runs:
                run_path = runs[0]
                evs = RunDir(run_path).read("events")
                w2 = [e for e in evs if e["event"] == "window_open" and e["detail"]["index"] == 2]
                if w2:
                    time.sleep(1.0)  # well inside window 2 (150 model s = 6 s wall, more while held)
                    break
            assert p.poll() is None, p.stdout.read()
        else:
            pytest.fail("window 2 never opened")
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    finally:
        if p.poll() is None:
            p.kill()
    rd = RunDir(run_path)
    before = {k: rd.read(k) for k in ("calls", "sessions", "windows", "scrapes", "gates")}
    assert [(w["index"], w["valid"]) for w in before["windows"]] == [(1, True)]
    r = _adev("fleet", "--resume", str(run_path))
    text, _ = r.communicate(timeout=WAIT_S)
    assert r.returncode == 0, text
    rd = RunDir(run_path)
    ws = rd.read("windows")
    got = [(w["index"], w["valid"]) for w in ws]
    assert got == [(1, True), (2, False), (3, True), (4, True)], got
    assert "interrupted" in ws[1]["reason"]
    # nothing written before the crash was lost or rewritten
    for kind, recs in before.items():
        now = rd.read(kind)
        assert now[:len(recs)] == recs, kind
    check_records(rd)
    sids = {s["session_id"] for s in rd.read("sessions")}
    assert any(s.startswith("e1-") for s in sids)
    assert ws[2]["t0"] > ws[1]["t1"]
    tab = measured(run_path)
    assert set(tab["window"]) >= {1, 3, 4}
    # the resumed process (the last user of the stack its predecessor started) stopped it
    from adev.stack import read_state
    assert read_state(str(state_dir)) is None
