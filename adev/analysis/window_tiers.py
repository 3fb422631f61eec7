"""The RAM/disk split of an endpoint's store tokens in a window: from the endpoint's own per-tier
counters where it exports them, else from the master's byte shares; ``disk_split_source`` says
which."""
from __future__ import annotations

import math

from . import counters as C
from .figures import disk_fraction
from .run import Run
from .window_master import master_idle
from .window_row import WindowFigures


def set_tier_split(fig: WindowFigures, fraction: float, source: str) -> None:
    fig.disk_fraction = fraction
    fig.disk_split_source = source
    if not math.isnan(fig.store_tokens):
        fig.store_disk_tokens = fig.store_tokens * fraction
        fig.store_ram_tokens = fig.store_tokens - fig.store_disk_tokens


def endpoint_split(fig: WindowFigures, sc, t0: float, t1: float, endpoint: str, idle) -> bool:
    """RAM/disk split of the endpoint's store tokens from its own per-tier counters (the emulated
    endpoint's): blocks served from a tier = lookup hits in it
    (``adev_emulator_store_hit_blocks_total{tier}``) - failed loads from it
    (``adev_emulator_store_load_failed_blocks_total{tier}``). False when the endpoint does not
    export them (a real vLLM) or served nothing in the window."""
    served = {}
    for t in ("ram", "disk"):
        hit = C.counter_delta(sc, C.EMU_HIT_BLOCKS, t0, t1, target=endpoint, idle=idle, match={"tier": t})
        lost = C.counter_delta(sc, C.EMU_LOAD_FAILED, t0, t1, target=endpoint, idle=idle, match={"tier": t})
        if not (hit.ok and lost.ok):
            return False
        served[t] = hit.value - lost.value
    if served["ram"] + served["disk"] <= 0:
        return False
    set_tier_split(fig, disk_fraction(served["ram"], served["disk"]),
           "endpoint counters adev_emulator_store_{hit,load_failed}_blocks_total{tier}")
    return True


def master_split(fig: WindowFigures, run: Run, t0: float, t1: float) -> None:
    """RAM/disk split of the endpoint's store tokens from the master's byte counters (global:
    the same shares for every endpoint; used when the endpoint has no per-tier counter, as a
    real vLLM has not). With the disk tier's offload on, the master's RAM hit bytes include its
    own reads of the objects it writes to disk (:mod:`adev.analysis.window_master`), so this share
    understates the disk's part; ``disk_split_source`` names it."""
    ms = run.scrapes.get("master", [])
    idle = master_idle(run)
    d_mem = C.counter_delta(ms, C.MEM_HIT_BYTES, t0, t1, target="master", idle=idle)
    d_file = C.counter_delta(ms, C.FILE_HIT_BYTES, t0, t1, target="master", idle=idle)
    if not (d_mem.ok and d_file.ok):
        why = C.why(d_mem, d_file)
        for k in ("disk_fraction", "store_ram_tokens", "store_disk_tokens"):
            fig.missing[k] = why
        return
    src = "master byte counters (global shares)"
    if d_mem.value + d_file.value > 0:
        set_tier_split(fig, disk_fraction(d_mem.value, d_file.value), src)
    elif not math.isnan(fig.store_tokens) and fig.store_tokens == 0:
        set_tier_split(fig, 0.0, src)
    else:
        fig.missing["disk_fraction"] = "the master counted no store reads in the window"
    if math.isnan(fig.disk_fraction) or math.isnan(fig.store_tokens):
        for k in ("store_ram_tokens", "store_disk_tokens"):
            fig.missing[k] = fig.missing.get("disk_fraction") or fig.missing.get("store_tokens", "")

