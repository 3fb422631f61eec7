"""The Mooncake master's counters over a window (global: the ``ALL`` row only): put allocation
failures, batch-put refusals, evictions, store GiB served per tier."""
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
        for k in ("evicted_bytes", "store_gib_served"):
            fig.missing[k] = run.missing.get("payload_scale", "payload scale unknown")
    else:
        if ev.ok:
            fig.evicted_bytes = ev.value * scale
        else:
            fig.missing["evicted_bytes"] = ev.reason
        if mem.ok and fil.ok:
            fig.store_ram_gib = mem.value * scale / GiB
            fig.store_disk_gib = fil.value * scale / GiB
            fig.store_gib_served = fig.store_ram_gib + fig.store_disk_gib
        else:
            fig.missing["store_gib_served"] = C.why(mem, fil)
    if math.isnan(fig.refused_share):
        if not math.isnan(fig.master_batch_put_items) and fig.master_batch_put_items > 0:
            fig.refused_share = refusal_share(fig.master_batch_put_failed_items,
                                              fig.master_batch_put_items)
            fig.refused_source = "master batch_put_start failed items / items"
            if run.profile is not None:
                fig.refused_bytes = fig.master_batch_put_failed_items * run.profile.bytes_per_block
        else:
            fig.missing["refused_share"] = "no offered writes counted (emulator or master)"

