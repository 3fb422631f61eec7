"""The Mooncake master's counters over a window (adev.analysis.window_master), by hand."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from adev.analysis.run import Scrape
from adev.analysis.window_master import master_block, master_idle
from adev.analysis.window_row import GiB, WindowFigures

from .test_windows import PROF

MIB16 = GiB // 64      # stored bytes that are 1 GiB of model bytes at payload scale 64


def _fig() -> WindowFigures:
    return WindowFigures("r", "lab", 2, 1, 0.0, 10.0, True, "steady", "ALL")


def master(alloc=0, failed=0, items=0, ev=0, tried=0, keys=0, ev_bytes=0, mem=0, file=0,
           drop=()):
    s = {"master_put_start_alloc_failures_total": alloc,
         "master_batch_put_start_failed_items_total": failed,
         "master_batch_put_start_items_total": items,
         "master_successful_evictions_total": ev, "master_attempted_evictions_total": tried,
         "master_evicted_key_count": keys, "master_evicted_size_bytes": ev_bytes,
         "mem_cache_hit_bytes_total": mem, "file_cache_hit_bytes_total": file}
    return {k: v for k, v in s.items() if k not in drop}


def _run(end, start=None, scale=64, profile=PROF, missing=None, calls=None):
    ms = [Scrape(0.0, True, start if start is not None else {k: 0 for k in end}),
          Scrape(10.0, True, end)]
    return SimpleNamespace(scrapes={"master": ms}, payload_scale=scale, profile=profile,
                           missing=missing or {}, calls=pd.DataFrame() if calls is None else calls)


def test_master_block_every_counter_by_hand():
    start = master(1, 1, 10, 1, 1, 1, 50, MIB16, 0)
    end = master(4, 5, 30, 3, 6, 8, 150, 4 * MIB16, MIB16)
    f = _fig()
    f.store_tokens, f.store_disk_tokens = 1000.0, 250.0       # the window's tier split
    master_block(f, _run(end, start), 0.0, 10.0)
    # deltas: alloc failures 3, failed items 4 of 20, evictions 2 of 5 tried, 7 keys, 100 bytes
    assert (f.master_put_alloc_failures, f.master_batch_put_failed_items, f.master_batch_put_items,
            f.evictions, f.eviction_attempts, f.evicted_keys) == (3, 4, 20, 2, 5, 7)
    assert f.evicted_bytes == 100 * 64                      # stored bytes x payload scale
    # the master's reads: 3 x 16 MiB of RAM bytes and 16 MiB of disk bytes, x 64: 3 GiB, 1 GiB
    assert (f.master_mem_read_gib, f.master_file_read_gib) == (3.0, 1.0)
    # served to requests: the store tokens' bytes, 1000 and 250 of them from disk
    bpt = PROF.bytes_per_token
    assert f.store_gib_served == pytest.approx(1000 * bpt / GiB)
    assert (f.store_disk_gib, f.store_ram_gib) == (pytest.approx(250 * bpt / GiB),
                                                   pytest.approx(750 * bpt / GiB))
    # no refusal share from the endpoints: the master's failed items / items
    assert f.refused_share == pytest.approx(0.2)
    assert f.refused_source == "master batch_put_start failed items / items"
    assert f.refused_bytes == 4 * PROF.bytes_per_block and f.missing == {}


def test_master_block_keeps_the_endpoints_refusal_share():
    f = _fig()
    f.refused_share, f.refused_source, f.refused_bytes = 0.5, "store client counters x", 9.0
    master_block(f, _run(master(failed=4, items=20)), 0.0, 10.0)
    assert (f.refused_share, f.refused_source, f.refused_bytes) == (0.5, "store client counters x", 9.0)
    assert f.master_batch_put_failed_items == 4


def test_master_block_refusals_from_one_item_or_none():
    f = _fig()
    master_block(f, _run(master(failed=1, items=1), profile=None), 0.0, 10.0)
    assert f.refused_share == 1.0 and math.isnan(f.refused_bytes) and "refused_bytes" not in f.missing
    for end in (master(items=0), master(drop=("master_batch_put_start_items_total",))):
        g = _fig()
        master_block(g, _run(end), 0.0, 10.0)
        assert math.isnan(g.refused_share) and g.refused_source == ""
        assert g.missing["refused_share"] == "no offered writes counted (emulator or master)"


def test_master_block_payload_scale_unknown_or_counters_missing():
    f = _fig()
    master_block(f, _run(master(ev_bytes=10, mem=5, file=5), scale=None,
                         missing={"payload_scale": "stack has no payload_scale"}), 0.0, 10.0)
    assert f.missing["evicted_bytes"] == f.missing["master_mem_read_gib"] == \
        "stack has no payload_scale"
    assert math.isnan(f.evicted_bytes) and math.isnan(f.master_mem_read_gib)
    g = _fig()
    master_block(g, _run(master(), scale=None), 0.0, 10.0)
    assert g.missing["evicted_bytes"] == g.missing["master_mem_read_gib"] == "payload scale unknown"
    h = _fig()
    master_block(h, _run(master(drop=("master_evicted_size_bytes", "file_cache_hit_bytes_total",
                                      "master_successful_evictions_total"))), 0.0, 10.0)
    never = "{} of master: never exported (or every scrape failed)"
    assert h.missing["evicted_bytes"] == never.format("master_evicted_size_bytes")
    assert h.missing["master_mem_read_gib"] == never.format("file_cache_hit_bytes_total")
    assert h.missing["evictions"] == never.format("master_successful_evictions_total")
    assert math.isnan(h.evictions) and h.eviction_attempts == 0 and math.isnan(h.master_mem_read_gib)
    k = _fig()                                  # file bytes exported, RAM bytes not
    master_block(k, _run(master(drop=("mem_cache_hit_bytes_total",))), 0.0, 10.0)
    assert k.missing["master_mem_read_gib"] == never.format("mem_cache_hit_bytes_total")
    assert math.isnan(k.master_file_read_gib)


def test_store_served_is_the_requests_store_tokens_not_the_masters_reads():
    """With the disk tier's offload on, the master counts its own reads of the objects it writes
    to disk as RAM hits: the GiB served come from the window's store tokens and their tier split,
    never from those counters; each input that is missing says why."""
    bpt = PROF.bytes_per_token
    f = _fig()
    f.store_tokens, f.store_disk_tokens = 2 * GiB / bpt, 0.5 * GiB / bpt
    master_block(f, _run(master(mem=40 * MIB16, file=MIB16 // 2)), 0.0, 10.0)
    assert (f.store_gib_served, f.store_ram_gib, f.store_disk_gib) == \
        (pytest.approx(2.0), pytest.approx(1.5), pytest.approx(0.5))
    assert (f.master_mem_read_gib, f.master_file_read_gib) == (40.0, 0.5)   # offload reads too
    g = _fig()
    g.missing["store_tokens"] = "no scrapes of coder"
    master_block(g, _run(master()), 0.0, 10.0)
    assert math.isnan(g.store_gib_served) and g.missing["store_gib_served"] == "no scrapes of coder"
    h = _fig()
    master_block(h, _run(master()), 0.0, 10.0)
    assert h.missing["store_gib_served"] == "store tokens not measured"
    k = _fig()
    k.store_tokens = 1000.0
    k.missing["store_disk_tokens"] = "the master counted no store reads in the window"
    master_block(k, _run(master()), 0.0, 10.0)
    assert k.store_gib_served == pytest.approx(1000 * bpt / GiB) and math.isnan(k.store_ram_gib)
    assert k.missing["store_disk_gib"] == "the master counted no store reads in the window"
    m = _fig()
    m.store_tokens = 1000.0
    master_block(m, _run(master()), 0.0, 10.0)
    assert m.missing["store_disk_gib"] == "no RAM/disk split"
    n = _fig()
    n.store_tokens = 1000.0
    master_block(n, _run(master(), profile=None), 0.0, 10.0)
    assert math.isnan(n.store_gib_served)
    assert n.missing["store_gib_served"] == "model profile unknown (bytes per token)"


def test_master_idle_over_every_call():
    calls = pd.DataFrame({"t_sent": [1.0, 20.0], "t_end": [5.0, np.nan],
                          "endpoint": ["coder", "reasoner"]})
    idle = master_idle(SimpleNamespace(calls=calls))
    # [1, 5] and [20, open): idle between them, busy where either runs
    assert idle(6.0, 19.0) and not idle(4.0, 6.0) and not idle(30.0, 40.0) and idle(0.0, 0.5)
    assert master_idle(SimpleNamespace(calls=pd.DataFrame()))(0.0, 100.0)


def test_master_block_uses_the_idle_rule_for_a_late_boundary_scrape():
    # the master's first scrape is at t=40 (tolerance 5 s: scrapes every 5 s), the window opens
    # at 0; the only call runs [50, 60]: the master was idle over [0, 40], so the t=40 scrape
    # stands for t0 and the delta is 12 items
    ms = [Scrape(float(t), True, master(items=0 if t < 50 else 12)) for t in range(40, 105, 5)]
    calls = pd.DataFrame({"t_sent": [50.0], "t_end": [60.0], "endpoint": ["coder"]})
    run = SimpleNamespace(scrapes={"master": ms}, payload_scale=64, profile=PROF, missing={},
                          calls=calls)
    f = _fig()
    master_block(f, run, 0.0, 100.0)
    assert f.master_batch_put_items == 12 and f.refused_share == 0.0
    # a call in flight over [5, 60]: not idle, no boundary scrape for t0
    run.calls = pd.DataFrame({"t_sent": [5.0], "t_end": [60.0], "endpoint": ["coder"]})
    g = _fig()
    master_block(g, run, 0.0, 100.0)
    assert math.isnan(g.master_batch_put_items) and "t=0" in g.missing["master_batch_put_items"]
