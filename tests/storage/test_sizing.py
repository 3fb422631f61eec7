"""Capacity and crossover arithmetic, hand-worked."""
from __future__ import annotations

import pytest

from adev.storage.sizing import capacity, crossover

MiB, GiB = 1 << 20, 1 << 30


def test_capacity_tiers_and_blocks():
    # 18 sessions x 6 GiB = 108 GiB RAM; x 4 retention = 432 GiB disk; 1.5 MiB blocks
    c = capacity(18, 6 * GiB, 4.0, 1_572_864)
    assert c.ram_bytes == 108 * GiB
    assert c.ram_blocks == 108 * GiB // 1_572_864 == 73_728
    assert c.disk_bytes == 432 * GiB and c.disk_blocks == 294_912
    assert c.disk_hours is None


def test_blocks_round_up():
    c = capacity(1, 5 * MiB + 1, 1.0, 5 * MiB)
    assert c.ram_blocks == 2


def test_hours_of_new_kv():
    # 432 GiB planned disk / 100 GiB per hour = 4.32 h; a given 1 TiB disk: 10.24 h
    assert capacity(18, 6 * GiB, 4.0, 1_572_864, new_kv_bytes_per_hour=100 * GiB).disk_hours \
        == pytest.approx(4.32)
    c = capacity(18, 6 * GiB, 4.0, 1_572_864, new_kv_bytes_per_hour=100 * GiB, disk_bytes=1 << 40)
    assert c.disk_hours == pytest.approx(10.24) and c.disk_hours_for_bytes == 1 << 40


def test_capacity_rejects_bad_input():
    with pytest.raises(ValueError, match="retention"):
        capacity(1, 1, 0.5, 1)
    with pytest.raises(ValueError, match="sessions"):
        capacity(0, 1, 1, 1)


def test_crossover_source_example():
    # the source's local NVMe p99 of 14.1 ms at 14,850 tok/s: L = 0.0141 * 14850 = 209.385
    x = crossover(0.0141, 1 / 14850, [128, 256, 4096])
    assert x.crossover_tokens == pytest.approx(209.385)
    assert [g for _, _, g in x.contexts] == [False, True, True]
    assert x.contexts[0][1] == pytest.approx(128 / 14850)


def test_crossover_rejects_zero():
    with pytest.raises(ValueError):
        crossover(0.0, 1e-4)
