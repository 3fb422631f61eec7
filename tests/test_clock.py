"""The held clock shared by a stack's processes (adev/clock.py), on a hand-moved source."""
from __future__ import annotations

import asyncio
import math
import os
from pathlib import Path

import pytest

from adev.clock import HeldClock, RunClock, open_held_clock


class Wall:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_a_hold_stops_the_clock_and_its_release_resumes_it_where_it_stopped(tmp_path):
    HeldClock.create(tmp_path / "clock")
    w = Wall()
    a, b = HeldClock(tmp_path / "clock", w), HeldClock(tmp_path / "clock", w)  # two processes
    assert a() == 100.0
    a.set_hold(0, 102.0)           # a read whose modelled end is at 102
    w.t = 101.0
    assert b() == 101.0            # not reached yet: the clock runs
    w.t = 105.0
    assert b() == 102.0 and b.held_s() == pytest.approx(3.0)
    a.set_hold(0, math.inf)        # the read ended at wall 105: 3 s held, folded into D
    assert b() == 102.0
    w.t = 106.5
    assert b() == 103.5 and a() == 103.5 and a.held_s() == pytest.approx(3.0)


def test_two_holders_the_earliest_holds_and_time_is_not_counted_twice(tmp_path):
    w = Wall()
    a = HeldClock.create(tmp_path / "clock")
    a.source = w
    b = HeldClock(tmp_path / "clock", w)
    a.set_hold(0, 101.0)
    b.set_hold(1, 102.0)
    w.t = 110.0                    # both behind: the clock stands at 101
    assert a() == 101.0
    b.set_hold(1, math.inf)        # b's read ends: the clock stays at 101 (a still holds)
    assert a() == 101.0
    w.t = 112.0
    a.set_hold(0, math.inf)        # a's ends: held 11 s in all, not 11 + 8
    w.t = 113.0
    assert b() == 102.0 and b.held_s() == pytest.approx(11.0)


def test_holder_names_the_slot_that_stops_the_clock(tmp_path):
    w = Wall()
    c = HeldClock.create(tmp_path / "clock")
    c.source = w
    assert c.holder() is None      # nothing held
    c.set_hold(0, 103.0)
    c.set_hold(40, 102.0)          # a request slot with the earlier hold
    w.t = 101.0
    assert c.holder() is None      # holds ahead of the clock stop nothing yet
    w.t = 102.5
    assert c.holder() == 40        # the clock stands at 102: the request slot stops it
    c.set_hold(40, math.inf)       # 0.5 s held, folded into D: the clock is at 102 again
    assert c.holder() is None
    w.t = 104.0                    # 103.5 unheld, past slot 0's 103
    assert c.holder() == 0


def test_a_hold_already_in_the_past_holds_the_clock_where_it_is(tmp_path):
    w = Wall()
    c = HeldClock.create(tmp_path / "clock")
    c.source = w
    w.t = 105.0
    c.set_hold(3, 101.0)           # never back to 101
    w.t = 107.0
    assert c() == 105.0
    with pytest.raises(ValueError, match="slot: expected 0..127"):
        c.set_hold(128, 1.0)


def test_run_clock_on_a_held_clock_sleeps_model_time(tmp_path):
    c = HeldClock.create(tmp_path / "clock")
    rc = RunClock(time_scale=10.0, source=c)
    assert open_held_clock(tmp_path).path == c.path and open_held_clock(tmp_path / "none") is None
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "clock").write_bytes(bytes(16 + 32 * 16))   # another layout: 32 slots
    assert open_held_clock(tmp_path / "old") is None

    async def main():
        c.set_hold(0, rc.t0 + 0.01)    # model time stops at 0.1 for 0.05 wall seconds
        loop = asyncio.get_running_loop()
        loop.call_later(0.06, c.set_hold, 0, math.inf)
        t = loop.time()
        await rc.sleep(0.3)            # 0.03 wall s of model time + the hold
        return loop.time() - t
    took = asyncio.run(main())
    assert rc.now() >= 0.3 and took >= 0.06 + 0.02


def test_a_writer_killed_mid_write_does_not_stop_the_clock_for_good(tmp_path):
    import struct
    w = Wall()
    c = HeldClock.create(tmp_path / "clock")
    c.source = w
    with open(tmp_path / "clock", "r+b") as f:   # sequence number left odd, D = 2
        f.write(struct.pack("<Qd", 7, 2.0))
    assert c() == 98.0                          # readers give up waiting and read it
    c.set_hold(0, math.inf)                     # the next writer makes the number even again
    with open(tmp_path / "clock", "rb") as f:
        assert struct.unpack("<Qd", f.read(16)) == (8, 2.0)


def test_a_dead_holders_hold_is_released(tmp_path, monkeypatch):
    """An endpoint killed while it holds the clock must not stop the run's model time: a reader
    that sees the clock held past STALE_S releases the holds of processes that no longer exist."""
    import subprocess
    import sys as _sys
    import time as _time

    from adev import clock as clk
    p = tmp_path / "clock"
    c = clk.HeldClock.create(p)
    # a child process holds slot 3 far in the future, then dies without releasing it
    code = ("import sys, math; from adev.clock import HeldClock; c = HeldClock(sys.argv[1]); "
            "c.set_hold(3, c() + 1.0e-3)")
    subprocess.run([_sys.executable, "-c", code, str(p)], check=True)
    monkeypatch.setattr(clk, "STALE_S", 0.05)
    t0 = c()
    _time.sleep(0.01)
    c()
    c()                                  # at the dead holder's hold: standing still from here
    _time.sleep(0.2)
    c()                                  # still past STALE_S: the dead holder is found
    _time.sleep(0.1)
    assert c() - t0 > 0.05               # time moves again
    assert c.drop_dead() == 0            # nothing left to release
    # a live holder is kept: this process holds slot 1
    c.set_hold(1, c())
    monkeypatch.setattr(clk, "STALE_S", 0.0)
    c()
    _time.sleep(0.01)
    assert c.drop_dead() == 0
    c.set_hold(1, float("inf"))


def test_a_held_but_moving_clock_keeps_a_request_slots_hold(tmp_path, monkeypatch):
    """On a loaded host the clock is held most of the time, by holders that follow one another
    (an engine's successive plan boundaries), yet it moves. Such a clock is not stale: a request
    slot that holds it at an answer's first tokens keeps its hold until the client has read
    them, however long the clock has been held before. Only a clock standing still for
    STALE_S releases it."""
    import time as _time

    from adev import clock as clk
    monkeypatch.setattr(clk, "STALE_S", 0.05)
    c = clk.HeldClock.create(tmp_path / "clock")
    slot = clk.REQUEST_SLOTS[0]
    t_end = _time.monotonic() + 0.2
    while _time.monotonic() < t_end:            # 0.2 s held, moving 1 ms at a time
        c.set_hold(0, c() + 1e-3)
        _time.sleep(0.002)
        c()
    at = c()
    c.set_hold(slot, at)                        # the first tokens' hold, where the clock is
    c.set_hold(0, float("inf"))
    for _ in range(5):                          # read within STALE_S of standing still
        assert c() == at
        _time.sleep(0.005)
    assert c.slot_hold(slot) == at            # kept
    _time.sleep(0.1)
    c()                                         # standing still past STALE_S: released
    assert c.slot_hold(slot) == float("inf")
    _time.sleep(0.01)
    assert c() > at


def test_a_zombie_holders_hold_is_released(tmp_path):
    """A holder killed under a parent that has not reaped it (a zombie) holds nothing: the
    endpoint-kill fault leaves the endpoint a zombie until the stack notices."""
    import signal
    import subprocess
    import sys as _sys
    import time as _time

    from adev import clock as clk
    p = tmp_path / "clock"
    c = clk.HeldClock.create(p)
    code = ("import sys, time; from adev.clock import HeldClock; c = HeldClock(sys.argv[1]); "
            "c.set_hold(2, c() + 1.0e-3); print('held', flush=True); time.sleep(60)")
    child = subprocess.Popen([_sys.executable, "-c", code, str(p)], stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        assert c.drop_dead() == 0                       # alive: its hold stays
        os.kill(child.pid, signal.SIGKILL)
        deadline = _time.monotonic() + 5
        while _time.monotonic() < deadline:             # not reaped: a zombie
            st = Path(f"/proc/{child.pid}/stat").read_text()
            if st[st.rindex(")") + 2] == "Z":
                break
            _time.sleep(0.01)
        assert c.drop_dead() == 1
    finally:
        child.kill()
        child.wait()


def test_a_client_hold_stops_model_time_at_its_end(tmp_path):
    """hold_until: model time on the stack's held clock does not pass the hold's end while the
    block runs, and moves on once it is left; without a held clock it is a no-op."""
    import time as _time

    from adev import clock as clk
    HeldClock.create(tmp_path / clk.CLOCK_FILE)
    try:
        held = clk.use_held_clock(tmp_path)
        assert held is not None
        rc = RunClock(time_scale=10.0)
        end = rc.now() + 0.5
        with clk.hold_until(rc, end):                   # 0.05 wall seconds from now
            _time.sleep(0.2)                            # 2 model seconds of wall time
            assert end - 0.05 <= rc.now() <= end + 1e-9
        _time.sleep(0.05)
        assert end < rc.now() < end + 1.0              # moving again, from where it stood
        assert held.held_s() >= 0.14                    # ~0.15 wall seconds held
    finally:
        clk.use_held_clock(None)
    rc = RunClock(time_scale=10.0)
    with clk.hold_until(rc, 0.0):                       # no held clock: nothing held
        _time.sleep(0.05)
    assert rc.now() >= 0.45


def test_sleep_until_holds_the_clock_until_the_sleeper_is_awake(tmp_path):
    """A sleeper whose process is busy (descheduled) across its wake time still wakes at its
    model time on the held clock; a plain sleep wakes as late as the host let it."""
    import time as _time

    from adev import clock as clk
    HeldClock.create(tmp_path / clk.CLOCK_FILE)

    async def nap(until_held: bool) -> tuple[float, float]:
        end = rc.now() + 0.5                                    # 0.05 wall seconds from now
        asyncio.get_running_loop().call_later(0.03, _time.sleep, 0.2)   # busy 0.03-0.23 wall s
        if until_held:
            await clk.sleep_until(rc, end)
        else:
            await rc.sleep(end - rc.now())
        return end, rc.now()
    try:
        assert clk.use_held_clock(tmp_path) is not None
        rc = RunClock(time_scale=10.0)
        end, woke = asyncio.run(nap(True))
        assert end - clk.WAKE_TOLERANCE_S <= woke < end + 0.01    # held at 0.5 until awake
        end, woke = asyncio.run(nap(False))
        assert woke > end + 1.0                                   # 0.18 wall s late: 1.8 model s
    finally:
        clk.use_held_clock(None)


def test_arrival_from_header_takes_the_clients_stamp_within_a_second():
    from adev.clock import MAX_BACKDATE_S, arrival_from_header
    assert MAX_BACKDATE_S == 1.0
    assert arrival_from_header("9.25", 10.0) == 9.25          # the client's send stamp
    assert arrival_from_header("8.5", 10.0) == 9.0            # at most 1 s back
    assert arrival_from_header("10.5", 10.0) == 10.0          # never after now
    for bad in (None, "", "soon", "nan", "inf"):
        assert arrival_from_header(bad, 10.0) == 10.0


def test_leaving_a_stopped_stacks_held_clock(tmp_path):
    """stop_stack makes CLOCK_MONOTONIC this process's stamp source again when it was the stopped
    stack's held clock (a later run's clock must not stand on a clock whose holders are gone);
    another stack's clock stays."""
    import time as _time

    from adev import clock as clk
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    HeldClock.create(a / clk.CLOCK_FILE)
    HeldClock.create(b / clk.CLOCK_FILE)
    try:
        assert clk.use_held_clock(a) is not None
        assert clk.leave_held_clock(b) is False and clk.held_source() is not None
        assert clk.leave_held_clock(a) is True and clk.held_source() is None
        assert abs(clk.mono() - _time.monotonic()) < 0.01
        assert clk.leave_held_clock(a) is False
    finally:
        clk.use_held_clock(None)


def test_a_hand_over_releases_each_parked_hold_once_and_whatever_is_left_at_its_end():
    from adev.clock import HandOver, handing_over, handover
    released: list[str] = []
    h = HandOver()
    h.leave(lambda: released.append("a"))
    h.leave(lambda: released.append("b"))     # parking b releases a
    assert released == ["a"]
    h.take()
    h.take()                                  # nothing parked any more
    assert released == ["a", "b"]
    assert handover() is None
    with handing_over() as h2:
        assert handover() is h2
        h2.leave(lambda: released.append("c"))
    assert released == ["a", "b", "c"] and handover() is None


async def test_a_task_started_in_a_hand_over_block_sees_it():
    import asyncio

    from adev.clock import handing_over, handover
    with handing_over() as h:
        inner = await asyncio.create_task(_current())   # a task copies the context it starts in
    assert inner is h and handover() is None


async def _current():
    from adev.clock import handover
    return handover()


def test_a_detached_hold_is_released_by_its_new_owner_only():
    from adev.clock import HandOver
    released: list[str] = []
    h = HandOver()
    h.leave(lambda: released.append("a"))
    release = h.detach()
    h.leave(lambda: released.append("b"))     # parking b releases nothing detached
    assert released == []
    release()
    h.take()
    assert released == ["a", "b"]


def _held_behind(state_dir: Path, held_s: float) -> None:
    """A stack's clock file in ``state_dir`` that has been held ``held_s`` wall seconds so far
    (it reads the host's monotonic clock less that)."""
    from adev import clock as clk
    state_dir.mkdir()
    c = HeldClock.create(state_dir / clk.CLOCK_FILE)
    c.close()
    with open(state_dir / clk.CLOCK_FILE, "r+b") as f:
        f.write(clk._HEAD.pack(0, held_s))


def test_a_run_clock_goes_on_across_a_change_of_stamp_source(tmp_path):
    """A batch fleet's runs, each on a stack of its own: stack a's held clock (50 wall s behind
    the host's), the host's once a has stopped, then stack b's (20 s behind). At each change the
    run's model time goes on from its latest reading instead of jumping by the sources'
    difference (500 and 300 model s at time scale 10), and a stamp on the new source converts
    on it."""
    import time as _time

    from adev import clock as clk
    a, b = tmp_path / "a", tmp_path / "b"
    _held_behind(a, 50.0)
    _held_behind(b, 20.0)
    try:
        assert clk.use_held_clock(a) is not None
        assert abs(clk.mono() - (_time.monotonic() - 50.0)) < 0.01
        rc = RunClock(time_scale=10.0)
        t1 = rc.now()
        assert clk.leave_held_clock(a)
        t2 = rc.now()
        assert t1 <= t2 < t1 + 1.0
        assert clk.use_held_clock(b) is not None
        t3 = rc.now()
        assert t2 <= t3 < t2 + 1.0
        assert t3 <= rc.to_model(clk.mono()) < t3 + 1.0
        # a clock on a source of its own never moves with this process's
        own = RunClock(time_scale=10.0, t0=0.0, source=Wall(5.0))
        clk.use_held_clock(None)
        assert own.now() == 50.0
    finally:
        clk.use_held_clock(None)


def test_taking_the_same_held_clock_again_is_no_change_of_source(tmp_path):
    """A second use_held_clock of the stack whose clock is already the source (a client that
    opens it again) keeps the source, so run clocks on it do not re-anchor and lose no time."""
    from adev import clock as clk
    a = tmp_path / "a"
    _held_behind(a, 50.0)
    try:
        first = clk.use_held_clock(a)
        rc = RunClock(time_scale=10.0)
        gen = clk._generation
        assert clk.use_held_clock(a) is first and clk._generation == gen
        assert clk.use_held_clock(None) is None and clk._generation == gen + 1
        assert clk.use_held_clock(None) is None and clk._generation == gen + 1
        assert rc.now() >= 0.0
    finally:
        clk.use_held_clock(None)


def test_a_new_clock_file_at_the_same_path_is_a_change_of_source(tmp_path):
    """A stack restarted in the same state directory creates a new clock file there: taking it is
    a change of source (the old mapping no longer moves), so run clocks follow it."""
    from adev import clock as clk
    a = tmp_path / "a"
    _held_behind(a, 50.0)
    try:
        first = clk.use_held_clock(a)
        gen = clk._generation
        (a / clk.CLOCK_FILE).unlink()
        HeldClock.create(a / clk.CLOCK_FILE).close()
        second = clk.use_held_clock(a)
        assert second is not first and not second.same_file(first)
        assert clk._generation == gen + 1 and clk.held_source() is second
    finally:
        clk.use_held_clock(None)
