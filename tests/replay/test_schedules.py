"""Schedules: the clipped log-normal fit, the long-gap rule worked by hand, short-gap and
timestamp timing on a fast run clock."""
from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

from adev.clock import RunClock
from adev.replay.format import Call
from adev.replay.schedules import (
    ClippedLogNormal,
    LongGapPolicy,
    describe_fit,
    run_long_gap,
    run_short_gap,
    run_timestamps,
)


def test_fit_matches_published_distribution():
    d = ClippedLogNormal.fit()
    # analytic figures of the fitted distribution within 1% of the targets
    for got, want in ((d.mean(), 10.36), (d.quantile(.5), 5.16), (d.quantile(.9), 23.44),
                      (d.quantile(.99), 80.56)):
        assert got == pytest.approx(want, rel=0.01)
    # 100k fixed-seed samples within 3% (sampling error), capped at 300 s
    x = d.sample(100_000, seed=0)
    assert x.max() <= 300.0
    assert np.mean(x) == pytest.approx(10.36, rel=0.03)
    for q, want in ((50, 5.16), (90, 23.44), (99, 80.56)):
        assert np.percentile(x, q) == pytest.approx(want, rel=0.03)
    assert (d.sample(10, 3) == d.sample(10, 3)).all()
    assert "mu=" in describe_fit(d, 0) and "p99" in describe_fit(d, 0)


def test_clipped_mean_formula():
    d = ClippedLogNormal(mu=0.0, sigma=1.0, cap=2.0)
    x = d.sample(400_000, seed=1)
    assert d.mean() == pytest.approx(float(x.mean()), rel=0.01)
    # without a binding cap the mean is exp(mu + sigma^2 / 2)
    assert ClippedLogNormal(0.0, 0.5, 1e9).mean() == pytest.approx(math.exp(0.125))


def test_long_gap_rule_by_hand():
    p = LongGapPolicy([2] * 5, gap=10, max_in_flight=2)
    assert p.target() == 3                 # min(10, 5 sessions left - 2 slots)
    assert p.pick(2) == [0, 1]            # first turns need no gap
    p.done(0)
    assert p.pick(1) == [2]
    p.done(1)
    assert p.pick(1) == [3]
    p.done(2)
    assert p.pick(1) == [4]
    p.done(3)                              # 4 done; session 0 has seen 3 since its turn
    assert p.pick(1) == [0] and p.relaxed == 1  # 3 of the 10: relaxed
    p.done(4)
    assert p.target() == 3 and p.pick(1) == [1] and p.relaxed == 2   # 5 - 3 = 2 since
    p.done(0)                              # session 0 finished: 4 left, target 2
    assert p.target() == 2 and p.pick(1) == [2] and p.relaxed == 3
    p.done(1)                              # 3 left, target 1
    assert p.target() == 1 and p.pick(1) == [3]
    p.done(2)                              # 2 left: no more than the slots, target 0
    assert p.target() == 0 and p.pick(2) == [4] and p.relaxed == 5
    p.done(3)
    p.done(4)
    assert p.finished and p.completed == 10


def test_long_gap_waits_while_slots_are_full():
    p = LongGapPolicy([2] * 8, gap=10, max_in_flight=2)   # target min(10, 8 - 2) = 6
    assert p.pick(2) == [0, 1]
    for s in (1, 0):                       # both done: 2 completions, each has seen 1 or 0
        p.done(s)
    assert p.pick(2) == [2, 3]             # first turns
    p.done(2)                              # session 1 has seen 2 of 6; session 3 in flight
    assert p.pick(1) == [4]                # a first turn is free to go
    p.done(3)
    p.done(4)                              # 5 completions; since(1) = 4, since(0) = 5
    assert p.pick(2) == [5, 6] and p.relaxed == 0
    p.done(5)
    p.done(6)                              # 7 completions: since(1) = 6 >= 6, since(0) = 7
    assert p.pick(2) == [7, 1] and p.relaxed == 1


def _run(p: LongGapPolicy, order=lambda fl: 0):
    """Drive ``p`` with slots always offered; yields (others completed since the session's last
    turn, target at the start, sessions left, calls in flight after the pick)."""
    ended: dict[int, int] = {}
    in_flight: list[int] = []
    out = []
    while not p.finished:
        target, left = p.target(), p.remaining_sessions()
        new = p.pick(p.max_in_flight - len(in_flight))
        out += [(p.completed - ended[s] if s in ended else None, target, left,
                 len(in_flight) + len(new)) for s in new]
        in_flight += new
        s = in_flight.pop(order(in_flight))
        p.done(s)
        ended[s] = p.completed
    return out


def test_long_gap_waits_for_128_others():
    n = 200                                # enough sessions: the full gap until 144 are left
    p = LongGapPolicy([3] * n, gap=128, max_in_flight=16)
    starts = _run(p)
    later = [(w, t, left) for w, t, left, _ in starts if w is not None]
    assert len(later) == 2 * n
    assert all(w >= t for w, t, _ in later)
    assert all(w >= 128 for w, _, left in later if left >= 128 + 16)
    assert p.relaxed == sum(w < 128 for w, _, _ in later) and p.completed == 3 * n


def test_long_gap_keeps_the_slots_filled_as_sessions_finish():
    """Sessions of very different lengths: as they finish the gap falls, and the slots stay
    full while at least 16 sessions are left (a schedule that relaxes only when idle runs
    most of such a trace with a few calls in flight)."""
    import random
    rng = random.Random(0)
    turns = [rng.choice([2, 3, 5, 10, 30]) for _ in range(160)]
    p = LongGapPolicy(turns, gap=128, max_in_flight=16)
    starts = _run(p, order=lambda fl: rng.randrange(len(fl)))
    assert len(starts) == sum(turns)
    assert all(fl == 16 for _, _, left, fl in starts if left > 16)
    assert all(w is None or w >= t for w, t, _, _ in starts)


def _sessions(spec):
    return [[Call(s, k, 10, 1, t=t) for k, t in enumerate(ts)] for s, ts in spec]


def _recorder(clock, took_s):
    seen: dict[tuple[str, int], float] = {}

    async def dispatch(i, call):
        seen[(call.session, call.turn)] = clock.now()
        await clock.sleep(took_s)
    return seen, dispatch


def test_short_gap_timing():
    clock = RunClock(time_scale=50.0)
    seen, dispatch = _recorder(clock, 5.0)
    d = ClippedLogNormal(mu=math.log(20.0), sigma=1e-9)   # every interval 20 s
    ss = _sessions([("a", [None, None]), ("b", [None, None]), ("c", [None, None])])
    asyncio.run(run_short_gap(ss, dispatch, clock, active=2, stagger_s=30.0, dist=d, seed=0))
    # slot 0: a at 0, a1 at max(5, 0 + 20) = 20, then c at 25 and 45; slot 1 starts at 15
    want = {("a", 0): 0, ("a", 1): 20, ("b", 0): 15, ("b", 1): 35, ("c", 0): 25, ("c", 1): 45}
    for k, v in want.items():
        assert seen[k] == pytest.approx(v, abs=4.0), (k, seen)


def test_timestamps_speed_and_order():
    clock = RunClock(time_scale=50.0)
    seen, dispatch = _recorder(clock, 8.0)
    ss = _sessions([("a", [0.0, 10.0]), ("b", [5.0])])
    asyncio.run(run_timestamps(ss, dispatch, clock, speed=2.0))
    assert seen[("a", 0)] == pytest.approx(0.0, abs=3.0)
    assert seen[("b", 0)] == pytest.approx(2.5, abs=3.0)
    assert seen[("a", 1)] == pytest.approx(8.0, abs=3.0)   # planned 5, after a0 ends at 8


def test_run_long_gap_dispatches_every_call():
    clock = RunClock(time_scale=1000.0)
    seen, dispatch = _recorder(clock, 1.0)
    ss = _sessions([(f"s{i}", [None] * 3) for i in range(6)])
    pol = asyncio.run(run_long_gap(ss, dispatch, clock, gap=4, max_in_flight=2))
    assert len(seen) == 18 and pol.completed == 18


def _busy_recorder(clock, busy_wall_s, took_s):
    """A dispatch as the replay's: the host is busy for ``busy_wall_s`` wall seconds between the
    schedule's wake-up and the call's release, then the call stamps its release and runs
    ``took_s`` model seconds, holding the clock at its end until it has left a hold there for
    the schedule (:func:`adev.clock.handover`)."""
    import time as _time

    from adev.clock import handover, hold_at, hold_until
    seen: dict[tuple[str, int], float] = {}

    async def dispatch(i, call):
        _time.sleep(busy_wall_s)
        seen[(call.session, call.turn)] = end = clock.now()
        end += took_s
        with hold_until(clock, end):
            await clock.sleep_to(end)
            handover().leave(hold_at(clock, -math.inf))
    return seen, dispatch


def test_on_the_held_clock_calls_are_released_at_their_planned_times(tmp_path):
    """Time scale 100: the host's 0.03 wall seconds of work before each release would be 3 model
    seconds. On the stack's held clock the schedule's hold at the planned time lasts until the
    dispatch's first wait, so every call is stamped at its plan: the short gap's slots at
    0 and 5 s (stagger 10 s, 2 active), a's second turn 8 s after its first (every interval 8 s,
    each call 0.5 s long), c as soon as b has ended; the timestamps schedule's calls at t / 2 and after their session's
    previous call (0.01 s: the double's end is not held until the next call's release)."""
    from adev import clock as clk
    from adev.clock import HeldClock
    HeldClock.create(tmp_path / clk.CLOCK_FILE)
    try:
        assert clk.use_held_clock(tmp_path) is not None
        clock = RunClock(time_scale=100.0)
        seen, dispatch = _busy_recorder(clock, 0.03, 0.5)
        d = ClippedLogNormal(mu=math.log(8.0), sigma=1e-9)
        ss = _sessions([("a", [None, None]), ("b", [None]), ("c", [None])])
        t0 = clock.now()
        asyncio.run(run_short_gap(ss, dispatch, clock, active=2, stagger_s=10.0, dist=d, seed=0))
        assert seen[("a", 0)] - t0 < 0.05                      # the schedule's start
        assert seen[("b", 0)] - seen[("a", 0)] == pytest.approx(5.0, abs=1e-3)
        assert seen[("a", 1)] - seen[("a", 0)] == pytest.approx(8.0, abs=1e-3)
        # b's slot takes c when b ends, at 5.5: the slot's own work in between is no model time
        assert seen[("c", 0)] - seen[("a", 0)] == pytest.approx(5.5, abs=1e-3)
        clock = RunClock(time_scale=100.0)        # the timestamps count from the run's start
        seen, dispatch = _busy_recorder(clock, 0.03, 4.0)
        ss = _sessions([("a", [0.0, 2.0]), ("b", [3.0])])
        asyncio.run(run_timestamps(ss, dispatch, clock, speed=2.0))
        assert seen[("a", 0)] < 0.05                 # planned at 0, released at once
        assert seen[("b", 0)] == pytest.approx(1.5, abs=1e-3)
        assert seen[("a", 1)] - seen[("a", 0)] == pytest.approx(4.0, abs=1e-3)  # after a0 ends
    finally:
        clk.use_held_clock(None)
