"""Routing decisions worked by hand: soft-sticky, least-loaded, round-robin; stickiness and the
traffic matrix."""
from __future__ import annotations

import pytest

from adev.replay.routing import Router


def test_soft_sticky_by_hand():
    r = Router(2, 2, "soft-sticky", threshold_tokens=1000)
    a = r.route("A", 5000, 100)        # scores [0, 0] -> p0 (tie: fewer routed, lower index)
    assert (a.prefill, a.decode, a.initial, a.sticky) == (0, 0, True, None)
    b = r.route("B", 3000, 50)         # scores [5000, 0] -> p1; budgets [100, 0] -> d1
    assert (b.prefill, b.decode) == (1, 1)
    r.prefill_done(a, 5000)            # scores [0, 3000]
    c = r.route("B", 200, 10)          # preferred p1: 3000 - 0 > 1000 -> spill to p0
    assert (c.prefill, c.preferred, c.sticky) == (0, 1, False)
    # budgets [100, 50] -> +10 on d1 (lowest budget 50)
    assert c.decode == 1 and r.budget == [100, 60]
    r.prefill_done(b, 3000)            # scores [200, 0]
    d = r.route("A", 700, 5)           # preferred p0: 200 - 0 <= 1000 -> stays
    assert (d.prefill, d.sticky) == (0, True)
    assert r.stickiness() == 0.5       # 2 later turns, 1 kept
    assert r.matrix == [[1, 2], [0, 1]]
    assert r.matrix_shares()[0][1] == 0.5
    assert r.preferred == {"A": 0, "B": 1}  # a spill keeps the preference


def test_least_loaded_and_round_robin():
    r = Router(2, 2, "least-loaded")
    r.route("A", 100, 10)
    x = r.route("A", 100, 10)          # A prefers p0, but least-loaded ignores it
    assert (x.prefill, x.sticky) == (1, False)
    rr = Router(2, 2, "round-robin")
    got = [(q.prefill, q.decode) for q in (rr.route(s, 9999, 1) for s in "ABCD")]
    assert got == [(0, 0), (1, 1), (0, 0), (1, 1)]


def test_call_done_releases_budget_and_bad_policy():
    r = Router(1, 2)
    a = r.route("A", 10, 300)
    r.call_done(a, 300)
    assert r.budget == [0, 0]
    with pytest.raises(ValueError, match="allowed values: soft-sticky, least-loaded"):
        Router(2, 2, "random")
