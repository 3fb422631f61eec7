"""Store leases in model time (adev.emulator.leases), worked by hand."""
from __future__ import annotations

import pytest

from adev.emulator.leases import (
    LEASE_GRAIN_S,
    ModelLeases,
    kept_in_model_time,
    master_lease_s,
)


def test_a_lease_ends_ttl_after_its_latest_grant_in_model_time():
    m = ModelLeases(300.0)
    m.granted(["a", "b"], 10.0)          # a, b end at 310
    m.granted(["b", "c"], 50.0)          # b, c end at 350
    m.granted(["a"], 5.0)                # an older grant never shortens a lease
    assert sorted(m.live(309.9)) == ["a", "b", "c"]
    assert sorted(m.live(310.0)) == ["b", "c"]   # a's lease ended at 310: dropped
    assert len(m) == 2
    assert m.live(349.0) == ["b", "c"] and m.live(350.0) == []
    assert len(m) == 0


def test_forgotten_keys_are_not_renewed_and_a_standing_clock_keeps_leases():
    m = ModelLeases(300.0)
    m.granted(["a", "b", "c"], 0.0)
    m.forget(["b", "x"])
    for _ in range(3):                    # model time stands still: the same keys, every renewal
        assert m.live(100.0) == ["a", "c"]


def test_lease_ttl_must_be_positive():
    with pytest.raises(ValueError, match="lease ttl"):
        ModelLeases(0.0)


def test_which_leases_are_kept_in_model_time_and_the_masters_lease():
    # 300 s at time scale 10 is 30 s real: kept, and the master runs with the grain
    assert kept_in_model_time(300.0, 10.0, True)
    assert master_lease_s(300.0, 10.0, True) == LEASE_GRAIN_S == 1.0
    # a free clock: model time = 10 x wall, the master's 30 s real lease is exact
    assert not kept_in_model_time(300.0, 10.0, False)
    assert master_lease_s(300.0, 10.0, False) == 30.0
    # 5 s at 10 is 0.5 s real, under one grain: the master's own lease
    assert not kept_in_model_time(5.0, 10.0, True)
    assert master_lease_s(5.0, 10.0, True) == 0.5
