"""Fault injection on the real embedded stack (Mooncake master + emulated endpoints + local gate).

Each test runs ``adev fleet`` (width 3, two short windows, time scale 25) as a process, injects
one fault and checks the run's records (no call lost or duplicated, the fault recorded, the
windows it touched marked) and the report's wording:

* the Mooncake master killed inside window 2;
* an emulated endpoint killed inside window 2;
* the fleet killed (SIGKILL) inside window 2, then ``--resume``;
* ``--resume`` while the fleet is still running (refused, exit 2);
* Ctrl-C at a terminal (SIGINT to the fleet's whole process group), and SIGTERM to the group.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from adev.config import ROOT
from adev.records import RunDir

from .test_fleet_integration import WAIT_S, S, check_records, stack_toml

pytestmark = pytest.mark.integration

WINDOW_S = 120.0  # model seconds: 4.8 s wall at S, longer while the host holds the clock


def write_files(tmp_path: Path, state_dir: Path, windows: int = 2) -> Path:
    stack = tmp_path / "stack.toml"
    stack.write_text(stack_toml(state_dir))
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f"""[fleet]
width = 3
protocol = "steady"
stagger_s = 5.0
time_scale = {S}
stack = "{stack}"
results_dir = "{tmp_path / 'runs'}"
live = "plain"
drain_s = 100.0
[fleet.windows]
count = {windows}
length_s = {WINDOW_S}
[fleet.warmup]
max_s = 300.0
""")
    return fleet


def adev(*args: str, group: bool = False) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "adev.cli", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=group)


def wait_window(p: subprocess.Popen, tmp_path: Path, index: int, after_s: float = 2.0,
                timeout_s: float = WAIT_S) -> Path:
    """The run directory, once window ``index`` has been open ``after_s`` wall seconds."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(0.2)
        assert p.poll() is None, p.stdout.read()
        runs = list((tmp_path / "runs").glob("fleet-*"))
        if runs and any(e["event"] == "window_open" and e["detail"]["index"] == index
                        for e in RunDir(runs[0]).read("events")):
            time.sleep(after_s)
            return runs[0]
    pytest.fail(f"window {index} never opened")


def finish(p: subprocess.Popen, timeout_s: float = WAIT_S) -> str:
    try:
        out, _ = p.communicate(timeout=timeout_s)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    print(out[-3000:])  # shown with -s or on failure
    return out


def calls_accounted(rd: RunDir) -> int:
    """No call lost: every session that ended on its own (not cancelled) has one call record per
    call it made (retries aside); returns the number of calls checked."""
    per = Counter()
    for c in rd.read("calls"):
        if c["attempt"] == 0:
            per[c["session_id"]] += 1
    n = 0
    for s in rd.read("sessions"):
        if s["status"] not in ("started", "cancelled"):
            assert per[s["session_id"]] == s["calls"], (s, per[s["session_id"]])
            n += s["calls"]
    return n


def faults_of(rd: RunDir) -> list[tuple[str, str]]:
    return [(e["detail"]["fault"], e["detail"]["state"]) for e in rd.read("events")
            if e["event"] == "fault"]


def report_text(run: Path) -> str:
    return (run / "report.md").read_text()


def test_master_killed_in_window_2(tmp_path, state_dir):
    from adev.stack import read_state
    p = adev("fleet", "--config", str(write_files(tmp_path, state_dir)))
    run = wait_window(p, tmp_path, 2)
    os.kill(read_state(str(state_dir)).master.pid, signal.SIGKILL)
    out = finish(p)
    assert p.returncode == 0, out
    rd = RunDir(run)
    check_records(rd)
    assert calls_accounted(rd) > 0
    ws = rd.read("windows")
    assert [(w["index"], w["valid"]) for w in ws] == [(1, True), (2, False)], ws
    assert ws[1]["reason"].startswith("fault: ") and "master_down" in ws[1]["faults"]
    assert ("master_down", "begin") in faults_of(rd)
    # calls after the kill carry the emulator's store errors: the store tier failed under them
    assert any(f.startswith("store_errors:") for f in ws[1]["faults"]), ws[1]
    assert "INVALID: fault: " in out and "master_down" in out
    rep = report_text(run)
    sec = rep[rep.index("## Faults and failures"):rep.index("## Per-window figures")]
    assert "calls with store errors" in sec and "master_down" in sec
    # the summary prints no store figure measured across the dead master as a measurement
    assert "store hit share: 0.00%" not in out


def test_endpoint_killed_in_window_2(tmp_path, state_dir):
    from adev.stack import read_state
    # three windows: time after the kill for sessions to reach a role that calls coder
    p = adev("fleet", "--config", str(write_files(tmp_path, state_dir, windows=3)))
    run = wait_window(p, tmp_path, 2)
    os.kill(read_state(str(state_dir)).endpoints["coder"].pid, signal.SIGKILL)
    out = finish(p)
    rd = RunDir(run)
    check_records(rd)
    calls_accounted(rd)
    ws = rd.read("windows")
    assert [(w["index"], w["valid"]) for w in ws] == [(1, True), (2, False), (3, False)], ws
    assert "endpoint_down:coder" in ws[1]["faults"] and ws[1]["reason"].startswith("fault: ")
    failed = [c for c in rd.read("calls") if c["status"] == "error"]
    llm_ended = [s for s in rd.read("sessions") if (s.get("reason") or "").startswith("llm_error")]
    assert failed and llm_ended
    assert ("call_errors:coder", "begin") in faults_of(rd)
    rep = report_text(run)
    sec = rep[rep.index("## Faults and failures"):rep.index("## Per-window figures")]
    assert f"{len(failed)} failed calls" in sec, sec
    assert "sessions ended with llm_error" in sec
    assert "window 2: INVALID" in out and "window 3: INVALID" in out


def test_fleet_killed_and_resumed(tmp_path, state_dir):
    fleet = write_files(tmp_path, state_dir)
    p = adev("fleet", "--config", str(fleet))
    run = wait_window(p, tmp_path, 2)
    os.kill(p.pid, signal.SIGKILL)
    finish(p)
    rd = RunDir(run)
    before = {k: rd.read(k) for k in ("calls", "sessions", "windows", "gates")}
    r = adev("fleet", "--resume", str(run))
    out = finish(r)
    assert r.returncode == 0, out
    rd = RunDir(run)
    for kind, recs in before.items():  # nothing written before the kill lost or rewritten
        assert rd.read(kind)[:len(recs)] == recs, kind
    check_records(rd)
    calls_accounted(rd)
    ws = rd.read("windows")
    assert [(w["index"], w["valid"]) for w in ws] == [(1, True), (2, False), (3, True)], ws
    assert "interrupted" in ws[1]["reason"]
    ev = rd.read("events")
    t_resume = next(e["t"] for e in ev if e["event"] == "resume")
    assert not any(e["event"] == "regime_timeout" and e["t"] < t_resume + 5 for e in ev
                   if e["t"] >= t_resume)  # the resumed fleet warms up afresh
    assert "interrupted" in report_text(run)


def test_resume_while_the_fleet_is_alive_is_refused(tmp_path, state_dir):
    p = adev("fleet", "--config", str(write_files(tmp_path, state_dir)))
    run = wait_window(p, tmp_path, 1, after_s=0.5)
    r = adev("fleet", "--resume", str(run))
    text = finish(r, 60).strip()
    assert r.returncode == 2, text
    assert text.count("\n") == 0 and f"in use by a running fleet (pid {p.pid}" in text, text
    out = finish(p)
    assert p.returncode == 0, out
    rd = RunDir(run)
    assert [(w["index"], w["valid"]) for w in rd.read("windows")] == [(1, True), (2, True)]
    assert not any(e["event"] in ("resume", "fleet_restart") for e in rd.read("events"))
    check_records(rd)
    calls_accounted(rd)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_stop_signal_to_the_process_group(tmp_path, state_dir, sig):
    """Ctrl-C at a terminal sends SIGINT to the whole foreground process group (the fleet and
    its ledger process); a SIGTERM to the group does the same. Both stop the fleet cleanly."""
    p = adev("fleet", "--config", str(write_files(tmp_path, state_dir)), group=True)
    run = wait_window(p, tmp_path, 1)
    os.killpg(p.pid, sig)
    out = finish(p)
    assert p.returncode == 130, out
    assert "ledger process failed" not in out and "Traceback" not in out, out
    assert f"stopped early: {sig.name}" in out and "full report: " in out
    rd = RunDir(run)
    ws = rd.read("windows")
    assert len(ws) == 1 and not ws[0]["valid"] and sig.name in ws[0]["reason"]
    check_records(rd)
    calls_accounted(rd)
    assert any(e["event"] == "fleet_end" for e in rd.read("events"))
    assert (run / "ledger" / "meta.json").exists() and (run / "report.md").exists()
