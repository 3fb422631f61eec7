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
    assert p.pick(2) == [0, 1]            # first turns need no gap
    p.done(0)
    assert p.pick(1) == [2]
    p.done(1)
    assert p.pick(1) == [3]
    p.done(2)
    assert p.pick(1) == [4]
    p.done(3)                              # 4 done; session 0 has seen 3 since its turn
    assert p.pick(1) == [] and p.relaxed == 0   # others in flight: wait for the gap
    p.done(4)                              # nothing in flight, none eligible: relax once
    assert p.pick(2) == [0] and p.relaxed == 1  # session 0 has the most completions since
    p.done(0)
    assert p.pick(2) == [1] and p.relaxed == 2
    p.done(1)
    assert p.pick(2) == [2] and p.relaxed == 3
    p.done(2)                              # sessions 3, 4 left <= max_in_flight: end phase
    assert p.pick(2) == [3, 4] and p.relaxed == 5
    p.done(3)
    p.done(4)
    assert p.finished and p.completed == 10


def test_long_gap_waits_for_128_others():
    n = 200                                # enough sessions: the gap holds until the end phase
    p = LongGapPolicy([3] * n, gap=128, max_in_flight=16)
    ended: dict[int, int] = {}             # session -> completions when its last turn ended
    waited: list[tuple[int, bool]] = []    # (others completed since, end phase) per later turn
    in_flight: list[int] = []
    while not p.finished:
        end = p.remaining_sessions() <= 16
        new = p.pick(16 - len(in_flight))
        waited += [(p.completed - ended[s], end) for s in new if s in ended]
        in_flight += new
        assert len(in_flight) <= 16
        s = in_flight.pop(0)
        p.done(s)
        ended[s] = p.completed
    assert len(waited) == 2 * n
    assert all(w >= 128 for w, end in waited if not end)
    assert 0 < sum(end for _, end in waited) <= 2 * 16   # relaxed only for the last sessions
    assert p.relaxed <= 2 * 16 and p.completed == 3 * n


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
