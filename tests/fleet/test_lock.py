"""One fleet per run directory: --resume while the run's fleet is alive is refused."""
import os
import subprocess
import sys
import time

import pytest

from adev.config import ROOT, ConfigError
from adev.fleet.lock import RunLock
from adev.fleet.runner import resume_fleet
from adev.records import RunDir

from .test_signals import SCRIPT


def test_lock_is_exclusive_and_dropped_on_release(tmp_path):
    a = RunLock(tmp_path).acquire("fleet")
    with pytest.raises(ConfigError, match=f"in use by a running fleet \\(pid {os.getpid()}"):
        RunLock(tmp_path).acquire("--resume")
    a.release()
    RunLock(tmp_path).acquire("--resume").release()


def test_resume_while_the_fleet_is_alive_is_refused(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        run = None
        while time.monotonic() < deadline and run is None:
            time.sleep(0.1)
            runs = list(tmp_path.glob("fleet-*"))
            if runs and any(e["event"] == "window_open" for e in RunDir(runs[0]).read("events")):
                run = runs[0]
        assert run is not None
        n_events = len(RunDir(run).read("events"))
        with pytest.raises(ConfigError, match=f"--resume: .* in use by a running fleet \\(pid "
                                              f"{p.pid} "):
            resume_fleet(run, live="off")
        ev = RunDir(run).read("events")
        assert not any(e["event"] in ("resume", "fleet_restart") for e in ev[n_events - 1:])
    finally:
        p.kill()
        p.wait()
    # the holder is gone (killed): the kernel dropped its lock, the run can be resumed
    RunLock(run).acquire("--resume").release()
