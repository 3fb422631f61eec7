"""The RAM/disk split of an endpoint's store tokens (adev.analysis.window_tiers), by hand from
hand-made scrapes: the endpoint's own per-tier counters first, else the master's byte shares."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd
import pytest

from adev.analysis.run import Scrape
from adev.analysis.window_row import WindowFigures
from adev.analysis.window_tiers import endpoint_split, master_split, set_tier_split

EP_SOURCE = "endpoint counters adev_emulator_store_{hit,load_failed}_blocks_total{tier}"
MASTER_SOURCE = "master byte counters (global shares)"


def _fig(store_tokens=math.nan) -> WindowFigures:
    f = WindowFigures("r", "lab", 2, 1, 0.0, 10.0, True, "steady", "coder")
    f.store_tokens = store_tokens
    return f


def emu(ram, disk, failed_ram, failed_disk, tiers=("ram", "disk")):
    """An emulated endpoint's per-tier hit and failed-load block counters."""
    s = {}
    for t, hit, lost in (("ram", ram, failed_ram), ("disk", disk, failed_disk)):
        if t in tiers:
            s[f'adev_emulator_store_hit_blocks_total{{engine="0",tier="{t}"}}'] = hit
            if lost is not None:
                s[f'adev_emulator_store_load_failed_blocks_total{{engine="0",tier="{t}"}}'] = lost
    return s


def _sc(end_samples, start_samples=None):
    return [Scrape(0.0, True, start_samples if start_samples is not None else
                   {k: 0 for k in end_samples}), Scrape(10.0, True, end_samples)]


def test_set_tier_split_splits_the_store_tokens():
    f = _fig(400.0)
    set_tier_split(f, 0.25, "src")
    assert (f.disk_fraction, f.disk_split_source) == (0.25, "src")
    assert (f.store_disk_tokens, f.store_ram_tokens) == (100.0, 300.0)
    g = _fig()
    set_tier_split(g, 0.25, "src")
    assert g.disk_fraction == 0.25 and math.isnan(g.store_disk_tokens) and math.isnan(g.store_ram_tokens)


def test_endpoint_split_hits_less_failed_loads_per_tier():
    # RAM: 80 hit blocks, 5 failed -> 75 served; disk: 20 hit, 5 failed -> 15: disk share 15 / 90
    f = _fig(900.0)
    assert endpoint_split(f, _sc(emu(80, 20, 5, 5)), 0.0, 10.0, "coder", None) is True
    assert f.disk_fraction == pytest.approx(15 / 90) and f.disk_split_source == EP_SOURCE
    assert (f.store_disk_tokens, f.store_ram_tokens) == pytest.approx((150.0, 750.0))
    # counted over the window: deltas from the start scrape, not the end values
    g = _fig(100.0)
    assert endpoint_split(g, _sc(emu(90, 30, 5, 5), emu(10, 10, 0, 0)), 0.0, 10.0, "coder", None)
    assert g.disk_fraction == pytest.approx(15 / 90)


def test_endpoint_split_one_served_block_is_enough():
    f = _fig(16.0)                       # one block served, from RAM: disk share 0
    assert endpoint_split(f, _sc(emu(1, 0, 0, 0)), 0.0, 10.0, "coder", None) is True
    assert (f.disk_fraction, f.store_disk_tokens, f.store_ram_tokens) == (0.0, 0.0, 16.0)
    g = _fig(16.0)                       # one block served, from disk: disk share 1
    assert endpoint_split(g, _sc(emu(0, 3, 0, 2)), 0.0, 10.0, "coder", None) is True
    assert (g.disk_fraction, g.store_disk_tokens, g.store_ram_tokens) == (1.0, 16.0, 0.0)


def test_endpoint_split_declines_without_counters_or_served_blocks():
    for samples in (emu(80, 20, None, None),                 # no failed-load counter (older)
                    emu(80, 20, 5, None),                    # no disk failed-load series
                    emu(80, 0, 5, 0, tiers=("ram",)),        # no disk tier series at all
                    emu(0, 20, 0, 5, tiers=("disk",)),       # no RAM tier series at all
                    emu(5, 5, 5, 5),                         # every hit's load failed
                    emu(0, 0, 0, 0)):                        # nothing served
        f = _fig(100.0)
        assert endpoint_split(f, _sc(samples), 0.0, 10.0, "coder", None) is False, samples
        assert math.isnan(f.disk_fraction) and f.disk_split_source == ""
        assert math.isnan(f.store_disk_tokens) and f.missing == {}
    assert endpoint_split(_fig(), [], 0.0, 10.0, "coder", None) is False   # never scraped


def _master_run(mem0, file0, mem1, file1):
    ms = [Scrape(0.0, True, {"mem_cache_hit_bytes_total": mem0, "file_cache_hit_bytes_total": file0}),
          Scrape(10.0, True, {"mem_cache_hit_bytes_total": mem1, "file_cache_hit_bytes_total": file1})]
    return SimpleNamespace(scrapes={"master": ms}, calls=pd.DataFrame())


def test_master_split_byte_shares():
    f = _fig(400.0)
    master_split(f, _master_run(100, 50, 400, 150), 0.0, 10.0)   # 300 RAM, 100 disk bytes
    assert (f.disk_fraction, f.disk_split_source) == (0.25, MASTER_SOURCE)
    assert (f.store_disk_tokens, f.store_ram_tokens) == (100.0, 300.0) and f.missing == {}
    g = _fig(40.0)
    master_split(g, _master_run(0, 0, 0, 1), 0.0, 10.0)           # one disk byte
    assert (g.disk_fraction, g.store_disk_tokens, g.store_ram_tokens) == (1.0, 40.0, 0.0)


def test_master_split_no_reads():
    # the master counted nothing and the endpoint served nothing: disk share 0, tokens 0
    f = _fig(0.0)
    master_split(f, _master_run(7, 7, 7, 7), 0.0, 10.0)
    assert (f.disk_fraction, f.disk_split_source, f.store_disk_tokens, f.store_ram_tokens) == \
        (0.0, MASTER_SOURCE, 0.0, 0.0) and f.missing == {}
    # the endpoint served tokens the master did not count, or its tokens are unknown: no split
    why = "the master counted no store reads in the window"
    for tokens in (50.0, math.nan):
        g = _fig(tokens)
        master_split(g, _master_run(0, 0, 0, 0), 0.0, 10.0)
        assert math.isnan(g.disk_fraction) and g.disk_split_source == ""
        assert g.missing == {"disk_fraction": why, "store_ram_tokens": why, "store_disk_tokens": why}


def test_master_split_unknown_store_tokens_pass_on_their_reason():
    f = _fig()
    f.missing["store_tokens"] = "no scrapes of coder"
    master_split(f, _master_run(0, 0, 30, 10), 0.0, 10.0)
    assert f.disk_fraction == 0.25 and "disk_fraction" not in f.missing
    assert f.missing["store_ram_tokens"] == f.missing["store_disk_tokens"] == "no scrapes of coder"
    g = _fig()
    master_split(g, _master_run(0, 0, 30, 10), 0.0, 10.0)
    assert g.missing == {"store_ram_tokens": "", "store_disk_tokens": ""}


def test_master_split_without_master_counters():
    f = _fig(100.0)
    master_split(f, SimpleNamespace(scrapes={}, calls=pd.DataFrame()), 0.0, 10.0)
    why = "mem_cache_hit_bytes_total of master: no scrapes of master"
    assert f.missing == dict.fromkeys(("disk_fraction", "store_ram_tokens", "store_disk_tokens"), why)
    g = _fig(100.0)                        # RAM bytes exported, file bytes never
    ms = [Scrape(t, True, {"mem_cache_hit_bytes_total": 5.0}) for t in (0.0, 10.0)]
    master_split(g, SimpleNamespace(scrapes={"master": ms}, calls=pd.DataFrame()), 0.0, 10.0)
    assert g.missing["disk_fraction"] == ("file_cache_hit_bytes_total of master: never exported "
                                          "(or every scrape failed)")
    assert math.isnan(g.disk_fraction) and math.isnan(g.store_ram_tokens)


def test_master_split_uses_the_idle_rule_for_a_late_boundary_scrape():
    # the master is first scraped at t=40 (every 5 s), the window opens at 0; the only call runs
    # [50, 60]: nothing was in flight over [0, 40], so the t=40 scrape stands for t0
    ms = [Scrape(float(t), True, {"mem_cache_hit_bytes_total": 0 if t < 50 else 30,
                                  "file_cache_hit_bytes_total": 0 if t < 50 else 10})
          for t in range(40, 105, 5)]
    calls = pd.DataFrame({"t_sent": [50.0], "t_end": [60.0], "endpoint": ["coder"]})
    f = _fig(80.0)
    master_split(f, SimpleNamespace(scrapes={"master": ms}, calls=calls), 0.0, 100.0)
    assert (f.disk_fraction, f.store_disk_tokens, f.store_ram_tokens) == (0.25, 20.0, 60.0)
    # a call in flight from t=5: the counters may have moved before t=40, no split
    g = _fig(80.0)
    busy = pd.DataFrame({"t_sent": [5.0], "t_end": [60.0], "endpoint": ["coder"]})
    master_split(g, SimpleNamespace(scrapes={"master": ms}, calls=busy), 0.0, 100.0)
    assert math.isnan(g.disk_fraction) and "t=0" in g.missing["disk_fraction"]
