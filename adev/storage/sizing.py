"""Capacity planning and the restore-versus-recompute crossover (pure arithmetic).

Capacity (the vendor sizing method): ``capacity = concurrent sessions x KV per session x
retention factor``. adev splits it over the two store tiers:

    RAM tier  = sessions x KV per session                 (the live sessions' working set)
    disk tier = sessions x KV per session x retention     (what the retention window keeps)
    blocks    = ceil(bytes / bytes per block)
    hours a disk tier of D bytes retains = D / (new KV bytes per hour of a run)

Crossover (the source study of tiered offloading): restoring a context from a tier pays the tier's
p99 block retrieval latency ``T_p99``; recomputing it pays ``L x t_prefill`` with
``t_prefill = TTFT / context length`` (seconds per token). They match at

    L_crossover = T_p99 / t_prefill

tokens; contexts longer than that gain from the tier. As in the source, ``T_p99`` is one block's
retrieval (fio's p99 completion latency at 16 jobs), i.e. a context's blocks are taken to be
read in parallel.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class Capacity:
    sessions: int
    kv_per_session_bytes: float
    retention: float
    bytes_per_block: int
    ram_bytes: float
    ram_blocks: int
    disk_bytes: float
    disk_blocks: int
    new_kv_bytes_per_hour: float | None = None
    disk_hours: float | None = None          # hours of new KV the disk tier retains
    disk_hours_for_bytes: float | None = None  # the disk size those hours refer to


def capacity(sessions: int, kv_per_session_bytes: float, retention: float, bytes_per_block: int,
             *, new_kv_bytes_per_hour: float | None = None,
             disk_bytes: float | None = None) -> Capacity:
    """RAM and disk tier sizes (see the module doc); with a run's new-KV rate, the hours a disk
    tier of ``disk_bytes`` (default: the planned disk tier) retains."""
    if sessions <= 0:
        raise ValueError("sessions must be > 0")
    if kv_per_session_bytes <= 0 or bytes_per_block <= 0:
        raise ValueError("KV per session and bytes per block must be > 0")
    if retention < 1:
        raise ValueError("retention factor must be >= 1 (the disk tier holds at least the "
                         "working set)")
    ram = sessions * kv_per_session_bytes
    disk = ram * retention
    cap = Capacity(sessions=sessions, kv_per_session_bytes=kv_per_session_bytes,
                   retention=retention, bytes_per_block=bytes_per_block, ram_bytes=ram,
                   ram_blocks=math.ceil(ram / bytes_per_block), disk_bytes=disk,
                   disk_blocks=math.ceil(disk / bytes_per_block))
    if new_kv_bytes_per_hour is not None:
        if new_kv_bytes_per_hour <= 0:
            raise ValueError("new KV per hour must be > 0")
        d = disk if disk_bytes is None else disk_bytes
        cap.new_kv_bytes_per_hour = new_kv_bytes_per_hour
        cap.disk_hours_for_bytes = d
        cap.disk_hours = d / new_kv_bytes_per_hour
    return cap


@dataclass
class Crossover:
    t_p99_s: float
    t_prefill_s_per_token: float
    crossover_tokens: float
    contexts: list[tuple[int, float, bool]]  # (context tokens, recompute seconds, gains)


def crossover(t_p99_s: float, t_prefill_s_per_token: float,
              contexts: list[int] | None = None) -> Crossover:
    """``L = T_p99 / t_prefill`` and, per context length, recompute time ``L x t_prefill`` and
    whether it exceeds ``T_p99`` (the tier gains)."""
    if not t_p99_s > 0 or not t_prefill_s_per_token > 0:
        raise ValueError("T_p99 and t_prefill must be > 0")
    L = t_p99_s / t_prefill_s_per_token
    rows = [(n, n * t_prefill_s_per_token, n * t_prefill_s_per_token > t_p99_s)
            for n in (contexts or [])]
    return Crossover(t_p99_s, t_prefill_s_per_token, L, rows)
