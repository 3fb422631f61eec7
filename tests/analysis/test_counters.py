"""Counter deltas from scrapes: boundary choice, tolerance, idle boundaries, resets, gaps, labels."""
from __future__ import annotations

import pytest

from adev.analysis import counters as C
from adev.analysis.run import Scrape

HITS = "vllm:prefix_cache_hits_total"


def sc(t, v, ok=True, name=HITS, labels='{engine="0"}'):
    return Scrape(t, ok, {f"{name}{labels}": v} if ok and v is not None else {})


def test_value_takes_the_first_name_present_and_sums_matching_labels():
    s = {'a{tier="ram",e="0"}': 2.0, 'a{tier="disk",e="0"}': 3.0, 'a{tier="ram",e="1"}': 5.0,
         "b_total": 7.0}
    assert C.value(s, ("a",)) == 10.0
    assert C.value(s, ("a",), {"tier": "ram"}) == 7.0
    assert C.value(s, ("a",), {"tier": "nvme"}) is None
    assert C.value(s, ("missing", "b_total")) == 7.0
    assert C.value(s, ("b_total", "a")) == 7.0
    assert C.value({}, ("a",)) is None
    # the fallback name of a renamed counter (older vLLM)
    assert C.value({"vllm:gpu_prefix_cache_hits_total": 4.0}, C.PREFIX_HITS) == 4.0


def test_median_interval_and_default_tolerance():
    assert C.median_interval([0.0, 5.0, 5.0, 15.0, 20.0]) == 5.0     # zero gaps dropped
    assert C.median_interval([3.0]) is None and C.median_interval([2.0, 2.0]) is None
    assert C.default_tol([sc(0, 1), sc(0.5, 1), sc(1.0, 1)]) == 1.0   # at least 1 s
    assert C.default_tol([sc(0, 1), sc(4, 1), sc(8, 1), sc(20, 1)]) == 4.0
    assert C.default_tol([sc(0, 1)]) == 1.0


def test_boundary_is_the_nearest_ok_scrape_within_tolerance():
    pts = [sc(0, 0), sc(4, 10), sc(9, 30), sc(11, 35), sc(20, 50)]
    d = C.counter_delta(pts, C.PREFIX_HITS, 4.4, 10.2, tol=1.0)
    assert (d.value, d.t_from, d.t_to) == (25, 4, 11)          # 11 is 0.8 from 10.2, 9 is 1.2
    d = C.counter_delta(pts, C.PREFIX_HITS, 5.0, 10.0, tol=1.0)
    assert (d.value, d.t_from, d.t_to) == (20, 4, 9)           # exactly tol away: accepted; tie -> first
    d = C.counter_delta(pts, C.PREFIX_HITS, 5.5, 10.0, tol=1.0)
    assert d.value is None and d.reason == ("vllm:prefix_cache_hits_total of target: no OK scrape "
                                            "within 1 s of the window boundary t=5.5")
    d = C.counter_delta(pts, C.PREFIX_HITS, 0.0, 14.0, tol=1.0, target="coder")
    assert d.value is None and d.reason.endswith("boundary t=14") and "of coder" in d.reason
    d = C.counter_delta(pts, C.PREFIX_HITS, 0, 20)               # default tol: median gap 4.5
    assert (d.value, d.t_from, d.t_to, d.resets, d.gaps) == (50, 0, 20, 0, 0)
    assert d.ok and not C.NoDelta("not measured").ok


def test_resets_and_gaps_inside_the_span():
    pts = [sc(0, 100), sc(5, 150), sc(10, None, ok=False), sc(15, 20), sc(20, 20),
           sc(25, 5), sc(30, 15, name="other")]
    d = C.counter_delta(pts, C.PREFIX_HITS, 0, 25, tol=1.0)
    # 100 -> 150: +50; failed scrape: a gap; 150 -> 20: reset, +20; 20 -> 20: +0; 20 -> 5: reset, +5
    assert (d.value, d.resets, d.gaps) == (75, 2, 1)
    d = C.counter_delta(pts, C.PREFIX_HITS, 0, 30, tol=1.0)     # the last scrape lacks the counter
    assert d.value is None and "t=30" in d.reason
    d = C.counter_delta(pts, C.PREFIX_HITS, 5, 5, tol=1.0)
    assert (d.value, d.t_from, d.t_to) == (0, 5, 5)


def test_idle_boundary_uses_the_scrape_across_an_idle_stretch():
    pts = [sc(10, 0), sc(15, 40), sc(20, 70)]
    seen = []

    def idle(a, b):
        seen.append((a, b))
        return b <= 10.0            # nothing outstanding before t=10
    d = C.counter_delta(pts, C.PREFIX_HITS, 2.0, 20.0, tol=1.0, idle=idle)
    assert (d.value, d.t_from, d.t_to) == (70, 10, 20) and (2.0, 10) in seen
    # not idle in between: no value
    d = C.counter_delta(pts, C.PREFIX_HITS, 2.0, 20.0, tol=1.0, idle=lambda a, b: False)
    assert d.value is None and "t=2" in d.reason
    # both sides idle: the nearer scrape stands for the boundary
    pts = [sc(0, 5), sc(10, 20), sc(20, 45), sc(30, 60)]
    d = C.counter_delta(pts, C.PREFIX_HITS, 0, 23.0, tol=1.0, idle=lambda a, b: True)
    assert (d.value, d.t_to) == (40, 20)
    d = C.counter_delta(pts, C.PREFIX_HITS, 0, 27.0, tol=1.0, idle=lambda a, b: True)
    assert (d.value, d.t_to) == (55, 30)
    # the boundary before the first or after the last scrape: only one side exists
    d = C.counter_delta(pts, C.PREFIX_HITS, 0, 50.0, tol=1.0, idle=lambda a, b: True)
    assert (d.value, d.t_to) == (55, 30)


def test_boundaries_out_of_order_and_labels():
    pts = [sc(0, 0), sc(10, 10)]
    d = C.counter_delta(pts, C.PREFIX_HITS, 10, 0, tol=1.0)
    assert d.value is None and d.reason.endswith("boundary scrapes out of order")
    lab = [Scrape(t, True, {'x{tier="ram"}': r, 'x{tier="disk"}': k})
           for t, r, k in ((0, 1, 10), (5, 4, 30))]
    assert C.counter_delta(lab, ("x",), 0, 5, tol=1.0, match={"tier": "disk"}).value == 20
    assert C.counter_delta(lab, ("x",), 0, 5, tol=1.0).value == 23
    d = C.counter_delta(lab, ("x",), 0, 5, tol=1.0, match={"tier": "nvme"}, target="coder")
    assert d.value is None
    assert d.reason == "x{'tier': 'nvme'} of coder: never exported (or every scrape failed)"
    d = C.counter_delta([], ("x",), 0, 5)
    assert d.reason == "x of target: no scrapes of the target"


@pytest.mark.parametrize("names", [C.MEM_HIT_BYTES, C.FILE_HIT_BYTES, C.EVICTED_KEYS,
                                   C.EVICTED_BYTES])
def test_master_counters_read_under_either_name(names):
    for n in names:
        pts = [Scrape(0, True, {n: 1.0}), Scrape(5, True, {n: 6.0})]
        assert C.counter_delta(pts, names, 0, 5, tol=1.0).value == 5.0


def test_why_gives_the_first_unmeasured_reason():
    ok = C.Delta(5.0, 0.0, 10.0)
    assert C.why(ok, C.NoDelta("first"), C.NoDelta("second")) == "first"
    assert C.why(ok, ok) == "" and C.why() == ""


def test_median_interval_of_two_scrapes_and_sub_second_gaps():
    assert C.median_interval([0.0, 5.0]) == 5.0                  # one gap: 5
    assert C.median_interval([0.0, 0.5, 1.0, 1.25]) == 0.5       # gaps 0.5, 0.5, 0.25
    assert C.median_interval([2.0, 2.0, 2.0]) is None             # only zero gaps


def test_a_failed_scrape_is_a_gap_even_when_it_carries_samples():
    # the failed scrape's stale 999 must not enter the sum: 10 -> 30 = +20, two gaps crossed
    pts = [sc(0, 10), Scrape(5, False, {f'{HITS}{{engine="0"}}': 999.0}),
           sc(7, None, ok=False), sc(10, 30)]
    d = C.counter_delta(pts, C.PREFIX_HITS, 0, 10, tol=1.0)
    assert (d.value, d.resets, d.gaps) == (20, 0, 2)


def test_boundary_scrape_at_exactly_the_tolerance_plus_rounding_slack():
    far = 1.0 + 1e-9                     # tol + the 1e-9 slack, the same float
    d = C.counter_delta([sc(far, 3), sc(5, 8)], C.PREFIX_HITS, 0.0, 5.0, tol=1.0)
    assert (d.value, d.t_from) == (5, far)


def test_idle_boundary_takes_an_early_scrape_before_it():
    # t1 = 12.5: no scrape within 1 s; both neighbours across an idle stretch: the scrape at 10
    # (index 1, 2.5 s away) is nearer than the one at 20 (7.5 s): 5 -> 20 = +15
    pts = [sc(0, 5), sc(10, 20), sc(20, 45), sc(30, 60)]
    d = C.counter_delta(pts, C.PREFIX_HITS, 0, 12.5, tol=1.0, idle=lambda a, b: True)
    assert (d.value, d.t_to) == (15, 10)
    # t0 = 1.5 after the first scrape (index 0) and t1 = 30: 5 -> 60 = +55
    d = C.counter_delta(pts, C.PREFIX_HITS, 1.5, 30, tol=1.0, idle=lambda a, b: True)
    assert (d.value, d.t_from) == (55, 0)
