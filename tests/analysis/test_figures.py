"""adev/analysis/figures.py: the formulas' edge cases, expected values worked out by hand.

The window-level figures are checked in test_windows.py; these cover what a window test does not
reach: missing values given as None (lists from records), divisions by a zero model time without
numpy warnings, and the disk-rate fit's bounds.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from adev.analysis.figures import (
    busy_time,
    disk_rate_estimate,
    held_share,
    in_flight,
    offload_heartbeat_model_s,
    pct,
    store_read_late,
    store_read_over_profile,
    tier_tokens_from_bytes,
    ttft_model_error,
)


def test_busy_time_reads_none_as_a_missing_start_or_end():
    # [0, 2] and [1, 3] overlap -> union [0, 3] = 3 s; the call with no start and the one with
    # no end are ignored
    assert busy_time([0.0, None, 1.0, 5.0], [2.0, 9.0, 3.0, None], 0.0, 10.0) == 3.0


def test_in_flight_reads_none_as_a_missing_start_or_end():
    # only [0, 2) and [1, 4) are complete: at 0.5 one in flight, at 1.5 two, at 3 one
    got = in_flight([0.0, None, 1.0, 0.5], [2.0, 3.0, 4.0, None], [0.5, 1.5, 3.0])
    assert got.tolist() == [1, 2, 1]


def test_pct_skips_none_and_nan():
    # non-missing values 1, 3, 5, 7: median (3 + 5) / 2 = 4
    assert pct([1.0, None, 3.0, math.nan, 5.0, 7.0], 50) == 4.0
    assert math.isnan(pct([None, math.nan], 50))


def test_model_ratios_with_missing_values_and_zero_model_time_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # (1.2 - 1.0) / 1.0 = 0.2; missing observed or modelled -> NaN; modelled 0 -> NaN
        # (1 / 0 and 0 / 0 must not warn)
        err = ttft_model_error([1.2, None, 0.5, 1.0, 0.0], [1.0, 0.4, None, 0.0, 0.0])
        over = store_read_over_profile([3.0, None, 2.0, 1.0, 0.0], [2.0, 1.0, None, 0.0, 0.0])
    assert err[0] == pytest.approx(0.2) and np.isnan(err[1:]).all()
    assert over[0] == 1.5 and np.isnan(over[1:]).all()


def test_store_read_late_with_missing_values():
    # 1.0 > 0.5: late; 0.5 > 1.0: not; a missing host or modelled time: NaN
    late = store_read_late([1.0, 0.5, None, 2.0], [0.5, 1.0, 1.0, None])
    assert late[:2].tolist() == [1.0, 0.0] and np.isnan(late[2:]).all()


def test_tier_tokens_from_master_bytes():
    # 4096 stored bytes at payload scale 8 = 32768 model bytes; / 1024 bytes per token = 32
    assert tier_tokens_from_bytes(4096.0, 8.0, 1024.0) == 32.0


def test_disk_rate_fit_exact_rate():
    # load = ram / 1 GB/s + disk / 2 GB/s: (1 GB, 1 GB) -> 1.5 s, (1 GB, 0) -> 1 s,
    # (2 GB, 2 GB) -> 3 s; no request loads from disk alone, so the fit gives R_disk = 2e9 B/s
    rate = disk_rate_estimate(np.array([1e9, 1e9, 2e9]), np.array([1e9, 0.0, 2e9]),
                              np.array([1.5, 1.0, 3.0]))
    assert rate == pytest.approx(2e9, rel=1e-12)


def test_disk_rate_fit_of_tiny_loads_is_separable():
    # 1000 B from each tier at 1e11 B/s: (1000, 1000) -> 2e-8 s, (1000, 0) -> 1e-8 s,
    # (2000, 2000) -> 4e-8 s. Fitted disk time 3000 B / 1e11 B/s = 3e-8 s, far above a
    # billionth of the 7e-8 s of load time: the rate is 1e11 B/s
    rate = disk_rate_estimate(np.array([1000.0, 1000.0, 2000.0]), np.array([1000.0, 0.0, 2000.0]),
                              np.array([2e-8, 1e-8, 4e-8]))
    assert rate == pytest.approx(1e11, rel=1e-9)


def test_disk_rate_with_zero_load_times_is_not_separable():
    # three loads recorded as taking no time: the fit is all zeros, no disk time -> a reason
    got = disk_rate_estimate(np.array([1e9, 0.0, 1e9]), np.array([1e9, 1e9, 0.0]),
                             np.array([0.0, 0.0, 0.0]))
    assert got == "disk loads not separable from RAM loads (fit gave no disk time)"


def test_held_share_and_the_offload_heartbeat_in_model_time():
    # 168.9 of 452.5 wall s held: 0.37326 of the wall time
    assert held_share(168.9, 452.5) == pytest.approx(0.373260, abs=1e-6)
    assert math.isnan(held_share(1.0, 0.0))
    # a 1 wall s heartbeat at time scale 10: 10 model s with the clock never held; held 37.3%
    # of the time, 10 x 0.627 = 6.27 model s
    assert offload_heartbeat_model_s(1, 10.0, 0.0) == 10.0
    assert offload_heartbeat_model_s(1, 10.0, 0.373) == pytest.approx(6.27)
    # 5 wall s at time scale 2, held 15.1%: 10 x 0.849 = 8.49 model s
    assert offload_heartbeat_model_s(5, 2.0, 0.151) == pytest.approx(8.49)
