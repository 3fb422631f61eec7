"""The Mooncake master's counters over a window (global: the ``ALL`` row only): put allocation
failures, batch-put refusals, evictions, the master's own read bytes per tier; and the store GiB
served to requests per tier.

**Store served (GiB)** = store tokens x bytes per token / 2^30, per tier from the window's RAM/disk
split of the store tokens (:mod:`adev.analysis.window_tiers`): what the requests were served (the
endpoints' external prefix-cache hits less failed loads). Not the master's hit bytes: with the
disk tier's offload on, the master also counts as RAM hits its reads of the objects it writes to
disk (docs/measurements/nightly.md: several times the requests' RAM-served bytes with the disk
tier, equal without it), so ``master_mem_read_gib`` / ``master_file_read_gib`` keep its counters
apart."""
from __future__ import annotations

import math

import numpy as np

from . import counters as C
from .figures import refusal_share
from .run import Run
from .window_row import GiB, WindowFigures


def master_idle(run: Run):
    """The master's idle rule (:func:`adev.analysis.counters.idle_checker`) over every call of the
    run: the master serves all endpoints."""
    c = run.calls
    if not len(c):
        return C.idle_checker(np.empty(0), np.empty(0))
    return C.idle_checker(c["t_sent"].to_numpy(dtype=float), c["t_end"].to_numpy(dtype=float))


def master_block(fig: WindowFigures, run: Run, t0: float, t1: float) -> None:
    ms = run.scrapes.get("master", [])
    scale = run.payload_scale
    idle = master_idle(run)

    def d(names) -> C.Delta | C.NoDelta:
        return C.counter_delta(ms, names, t0, t1, target="master", idle=idle)

    for name, names in (("master_put_alloc_failures", C.PUT_ALLOC_FAILURES),
                        ("master_batch_put_failed_items", C.BATCH_PUT_FAILED_ITEMS),
                        ("master_batch_put_items", C.BATCH_PUT_ITEMS),
                        ("evictions", C.EVICTIONS_OK), ("eviction_attempts", C.EVICTIONS_TRIED),
                        ("evicted_keys", C.EVICTED_KEYS)):
        r = d(names)
        if r.ok:
            setattr(fig, name, r.value)
        else:
            fig.missing[name] = r.reason
    ev = d(C.EVICTED_BYTES)
    mem, fil = d(C.MEM_HIT_BYTES), d(C.FILE_HIT_BYTES)
    if scale is None:
        for k in ("evicted_bytes", "master_mem_read_gib"):
            fig.missing[k] = run.missing.get("payload_scale", "payload scale unknown")
    else:
        if ev.ok:
            fig.evicted_bytes = ev.value * scale
        else:
            fig.missing["evicted_bytes"] = ev.reason
        if mem.ok and fil.ok:
            fig.master_mem_read_gib = mem.value * scale / GiB
            fig.master_file_read_gib = fil.value * scale / GiB
        else:
            fig.missing["master_mem_read_gib"] = C.why(mem, fil)
    served_gib(fig, run.profile.bytes_per_token if run.profile is not None else None)
    if math.isnan(fig.refused_share):
        if not math.isnan(fig.master_batch_put_items) and fig.master_batch_put_items > 0:
            fig.refused_share = refusal_share(fig.master_batch_put_failed_items,
                                              fig.master_batch_put_items)
            fig.refused_source = "master batch_put_start failed items / items"
            if run.profile is not None:
                fig.refused_bytes = fig.master_batch_put_failed_items * run.profile.bytes_per_block
        else:
            fig.missing["refused_share"] = "no offered writes counted (emulator or master)"


def served_gib(fig: WindowFigures, bytes_per_token: int | None) -> None:
    """Store GiB served to requests, in all and per tier (see the module's doc)."""
    if bytes_per_token is None:
        fig.missing["store_gib_served"] = "model profile unknown (bytes per token)"
        return
    if math.isnan(fig.store_tokens):
        fig.missing["store_gib_served"] = fig.missing.get("store_tokens", "store tokens not measured")
        return
    fig.store_gib_served = fig.store_tokens * bytes_per_token / GiB
    if math.isnan(fig.store_disk_tokens):
        fig.missing["store_disk_gib"] = fig.missing.get("store_disk_tokens", "no RAM/disk split")
        return
    fig.store_disk_gib = fig.store_disk_tokens * bytes_per_token / GiB
    fig.store_ram_gib = fig.store_gib_served - fig.store_disk_gib
