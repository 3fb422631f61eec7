"""adev.event_loop: one choice of loop for every adev process, and the GC guard."""
import asyncio
import gc

import pytest

from adev import event_loop
from adev.config import ConfigError


async def _loop_type() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_auto_uses_uvloop_when_installed(monkeypatch):
    pytest.importorskip("uvloop")
    monkeypatch.delenv(event_loop.ENV, raising=False)
    assert event_loop.loop_name().startswith("uvloop ")
    assert event_loop.run(_loop_type()).startswith("uvloop")


def test_asyncio_can_be_forced(monkeypatch):
    monkeypatch.setenv(event_loop.ENV, "asyncio")
    assert event_loop.loop_name() == "asyncio"
    assert event_loop.run(_loop_type()).startswith("asyncio")


def test_a_bad_choice_names_the_variable_and_the_choices(monkeypatch):
    monkeypatch.setenv(event_loop.ENV, "trio")
    coro = _loop_type()
    with pytest.raises(ConfigError, match=r"ADEV_EVENT_LOOP: 'trio'.*auto, uvloop, asyncio"):
        event_loop.run(coro)
    assert coro.cr_frame is None  # closed, not left un-awaited


def test_uvloop_required_but_missing_is_a_clear_error(monkeypatch):
    import builtins
    real = builtins.__import__

    def no_uvloop(name, *a, **kw):
        if name == "uvloop":
            raise ImportError("no uvloop here")
        return real(name, *a, **kw)
    monkeypatch.setattr(builtins, "__import__", no_uvloop)
    monkeypatch.setenv(event_loop.ENV, "uvloop")
    with pytest.raises(ConfigError, match="uvloop is not installed"):
        event_loop.loop_name()
    monkeypatch.setenv(event_loop.ENV, "auto")
    assert event_loop.loop_name() == "asyncio"  # auto falls back


def test_quiet_gc_freezes_the_set_up_and_undoes_it():
    before = gc.get_threshold()
    with event_loop.quiet_gc():
        assert gc.get_threshold() == event_loop.GC_THRESHOLDS and gc.get_freeze_count() > 0
        a = []
        a.append(a)  # a cycle made while frozen is still collected
        del a
        assert gc.collect() >= 1
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_scheduling_reports_the_threads_policy():
    s = event_loop.scheduling()
    assert s.startswith(("SCHED_OTHER nice", "SCHED_BATCH", "SCHED_FIFO", "SCHED_RR")), s
    if s.startswith("SCHED_OTHER"):  # the default is not spelled out in benchmark headers
        assert event_loop.describe().endswith(event_loop.loop_name())


_RT_CHILD = r"""
import os, sys, threading
from adev import event_loop
from adev.config import ConfigError
try:
    after = event_loop.set_realtime("fleet.client_realtime")
except ConfigError as e:
    print("REFUSED", e); sys.exit(0)
seen = {"loop": after, "describe": event_loop.describe()}
t = threading.Thread(target=lambda: seen.__setitem__("thread", event_loop.scheduling()))
t.start(); t.join()
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(w, event_loop.scheduling().encode()); os._exit(0)
os.waitpid(pid, 0)
seen["child"] = os.read(r, 100).decode()
print("OK", seen)
"""


def test_set_realtime_schedules_only_the_loops_thread():
    """SCHED_FIFO for the calling thread; threads and processes it starts later are normal
    (the ledger process, executors, a stack, the gate). Where the privilege is missing the
    refusal is a ConfigError naming the field; as root it must succeed."""
    import ast
    import os
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", _RT_CHILD], capture_output=True, text=True,
                         timeout=60, check=True).stdout.strip()
    if out.startswith("REFUSED"):
        assert os.geteuid() != 0 or "SCHED_FIFO was refused" in out, out
        assert "fleet.client_realtime: true needs root" in out and "allowed values: false" in out
        pytest.skip("realtime scheduling is refused here: " + out)
    seen = ast.literal_eval(out.removeprefix("OK "))
    assert seen["loop"] == f"SCHED_FIFO {event_loop.REALTIME_PRIORITY}"
    assert seen["describe"].endswith(", SCHED_FIFO 1")
    assert seen["thread"].startswith("SCHED_OTHER") and seen["child"].startswith("SCHED_OTHER")


def test_set_realtime_refused_names_the_field_and_the_allowed_values(monkeypatch):
    import os

    def refuse(*a):
        raise PermissionError(1, "Operation not permitted")
    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    with pytest.raises(ConfigError, match=r"^--client-realtime: true needs root, CAP_SYS_NICE.*"
                                          r"allowed values: false"):
        event_loop.set_realtime("--client-realtime")
    monkeypatch.delattr(os, "SCHED_FIFO")
    with pytest.raises(ConfigError, match="not supported on this system; allowed values: false"):
        event_loop.set_realtime("fleet.client_realtime")
