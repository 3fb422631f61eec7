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
