"""adev.stack.usage: CPU of the stack's processes over a span."""
import subprocess
import sys
import time

from adev.stack.usage import CpuMeter


def test_busy_and_idle_processes_and_an_unreadable_pid():
    busy = subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<4: pass"])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3)"])
    try:
        m = CpuMeter({"busy": busy.pid, "idle": idle.pid, "gone": 2 ** 22 + 12345})
        time.sleep(1.5)
        u = m.read()
    finally:
        for p in (busy, idle):
            p.kill()
            p.wait()
    assert u.per_process["busy"] > 0.3          # one spinning core over ~1.5 s (machine shared)
    assert u.per_process["idle"] < 0.1
    assert u.cores == round(u.per_process["busy"] + u.per_process["idle"], 4)
    assert "gone" in u.missing and "gone" not in u.per_process
    assert u.wall_s >= 1.4
