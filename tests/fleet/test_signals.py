"""SIGINT stops a fleet cleanly: sessions cancelled, open window invalid, summary printed."""
import os
import signal
import subprocess
import sys
import threading

from adev.config import ROOT
from adev.records import RunDir

SCRIPT = r'''
import sys
from adev.fleet import live
from adev.fleet.cli import print_outcome
from adev.fleet.config import fleet_from_dict
from adev.fleet.runner import run_fleet
from tests.fleet.fakes import fake_deps
cfg = fleet_from_dict({"width": 3, "stagger_s": 1.0, "windows": {"count": 3, "length_s": 2000.0},
                       "warmup": {"kv_usage": 0.0, "pool_turnover": 0.5},
                       "results_dir": sys.argv[1], "live": "plain", "report": False,
                       "stack": {"time_scale": 100.0, "state_dir": sys.argv[1] + "/st"}})
opened = live.FleetState.window_opened
def window_opened(self, *a, **kw):  # tells the test, through the pipe, that a window is open
    opened(self, *a, **kw)
    print("TEST: window open", flush=True)
live.FleetState.window_opened = window_opened
out = run_fleet(cfg, deps=fake_deps(100.0, session_model_s=(100.0, 200.0)))
print_outcome(out)
sys.exit(out.exit_code)
'''


def test_sigint_stops_cleanly(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    watchdog = threading.Timer(120, p.kill)   # the pipe ends if the fleet never opens a window
    watchdog.start()
    head = []
    try:
        for line in p.stdout:                   # wait for the child to say a window is open
            head.append(line)
            if line.startswith("TEST: window open"):
                break
        assert head and head[-1].startswith("TEST: window open"), "".join(head)
        (run,) = tmp_path.glob("fleet-*")
        assert any(e["event"] == "window_open" for e in RunDir(run).read("events"))
        os.kill(p.pid, signal.SIGINT)
        out, _ = p.communicate(timeout=60)
        out = "".join(head) + out
    finally:
        watchdog.cancel()
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, out
    assert "stopped early: SIGINT" in out and "windows: 0 valid, 1 invalid" in out
    rd = RunDir(run)
    ws = rd.read("windows")
    assert len(ws) == 1 and not ws[0]["valid"] and "SIGINT" in ws[0]["reason"]
    ss = rd.read("sessions")
    started = {s["session_id"] for s in ss if s["status"] == "started"}
    ended = {s["session_id"] for s in ss if s["status"] != "started"}
    assert started == ended and any(s["status"] == "cancelled" for s in ss)
    assert any(e["event"] == "fleet_end" for e in rd.read("events"))
