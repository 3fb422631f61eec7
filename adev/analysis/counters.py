"""Counter deltas over a window from periodic scrapes: resets and missing scrapes made explicit.

Metric names read (vLLM v1's ``/metrics``; the Mooncake master's HTTP ``/metrics``) are
listed once here, each with its fallbacks.

Rules (:func:`counter_delta`):

- **Boundary scrapes.** The value of a counter at a window boundary ``tb`` is taken from the OK
  scrape of that target, with the counter present, nearest to ``tb`` and no further than ``tol``
  (default: the target's median scrape interval, at least 1 model second). Its time is reported
  (``t_from``/``t_to``: the *counter span*). No such scrape -> the delta is None with a reason.
- **Increments.** The delta is the sum over consecutive OK scrapes in the span of
  ``v_i - v_{i-1}`` when ``v_i >= v_{i-1}``, else ``v_i`` (a **counter reset**: the process
  restarted from 0, counted in ``resets``; increments before the restart that no scrape saw are
  lost, as with Prometheus ``increase``).
- **Idle boundaries.** Counters only move while requests are outstanding. When no OK scrape is
  within ``tol`` of a boundary but the nearest OK scrape on either side is separated from it by a
  stretch in which the target had no request outstanding (``idle(ta, tb)`` true), that scrape
  stands for the boundary (e.g. a batch run whose first scrape came after its window opened but
  before its first request).
- **Failed scrapes** (``ok=False``) or scrapes lacking the counter inside the span are skipped and
  counted in ``gaps``; they only lose information when a reset falls inside the gap.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from ..client.scrape import total

# vLLM (per endpoint)
PREFIX_HITS = ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
PREFIX_QUERIES = ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
EXT_HITS = ("vllm:external_prefix_cache_hits_total",)
EXT_QUERIES = ("vllm:external_prefix_cache_queries_total",)
PROMPT_TOKENS = ("vllm:prompt_tokens_total",)
PREEMPTIONS = ("vllm:num_preemptions_total",)
# the emulator's own store-client counters (per endpoint; absent on real vLLM)
EMU_PUT_ACCEPTED = ("adev_emulator_store_put_blocks_total",)
EMU_PUT_REFUSED = ("adev_emulator_store_put_refused_blocks_total",)
EMU_PUT_SKIPPED = ("adev_emulator_store_put_skipped_blocks_total",)   # not offered after a refusal
EMU_LOAD_FAILED = ("adev_emulator_store_load_failed_blocks_total",)
EMU_HIT_BLOCKS = ("adev_emulator_store_hit_blocks_total",)   # label tier="ram"|"disk"
EMU_READ_OVERRUN = ("adev_emulator_read_path_overrun_seconds_total",)   # model seconds
# Mooncake master (global)
MEM_HIT_BYTES = ("mem_cache_hit_bytes_total", "mem_cache_hit_bytes")
FILE_HIT_BYTES = ("file_cache_hit_bytes_total", "file_cache_hit_bytes")
PUT_ALLOC_FAILURES = ("master_put_start_alloc_failures_total",)
BATCH_PUT_FAILED_ITEMS = ("master_batch_put_start_failed_items_total",)
BATCH_PUT_ITEMS = ("master_batch_put_start_items_total",)
EVICTIONS_OK = ("master_successful_evictions_total",)
EVICTIONS_TRIED = ("master_attempted_evictions_total",)
EVICTED_KEYS = ("master_evicted_key_count", "master_evicted_key_count_total")
EVICTED_BYTES = ("master_evicted_size_bytes", "master_evicted_size_bytes_total")
PROMOTED_BYTES = ("master_promotion_completed_bytes_total",)   # disk -> RAM copies (promotion on hit)
PROMOTED = ("master_promotion_completed_total",)


def value(samples: dict[str, float], names: Sequence[str],
          match: dict[str, str] | None = None) -> float | None:
    """The first of ``names`` present in ``samples`` (summed over labels, those whose labels
    include ``match``), else None."""
    for n in names:
        v = total(samples, n, **(match or {}))
        if v is not None:
            return v
    return None


@dataclass
class Delta:
    """A counter's increase ``value`` between its boundary scrapes at ``t_from`` and ``t_to``
    (``resets`` counter resets and ``gaps`` failed scrapes crossed on the way)."""
    value: float
    t_from: float
    t_to: float
    resets: int = 0
    gaps: int = 0
    ok: ClassVar[Literal[True]] = True
    reason: ClassVar[None] = None


@dataclass
class NoDelta:
    """A counter increase that cannot be measured, and why (``reason``)."""
    reason: str
    resets: int = 0
    gaps: int = 0
    ok: ClassVar[Literal[False]] = False
    value: ClassVar[None] = None
    t_from: ClassVar[None] = None
    t_to: ClassVar[None] = None


def why(*deltas: Delta | NoDelta) -> str:
    """The reason of the first of ``deltas`` that could not be measured ("" when all were)."""
    return next((d.reason for d in deltas if isinstance(d, NoDelta)), "")


def median_interval(times: Sequence[float]) -> float | None:
    t = np.asarray(sorted(times), dtype=float)
    if len(t) < 2:
        return None
    d = np.diff(t)
    d = d[d > 0]
    return float(np.median(d)) if len(d) else None


def default_tol(scrapes: Sequence) -> float:
    mi = median_interval([s.t for s in scrapes])
    return max(1.0, mi or 0.0)


def counter_delta(scrapes: Sequence, names: Sequence[str], t0: float, t1: float,
                  tol: float | None = None, target: str = "",
                  idle: Callable[[float, float], bool] | None = None,
                  match: dict[str, str] | None = None) -> Delta | NoDelta:
    """Increase of the counter ``names`` (its series whose labels include ``match``) over
    [t0, t1) from ``scrapes`` (objects with ``t``, ``ok``, ``samples``; sorted by t). See the
    module docstring for the rules."""
    what = f"{names[0]}{match or ''} of {target or 'target'}"
    if not scrapes:
        return NoDelta(f"{what}: no scrapes of {target or 'the target'}")
    tol = default_tol(scrapes) if tol is None else tol
    pts = [(s.t, value(s.samples, names, match)) if s.ok else (s.t, None) for s in scrapes]
    good = [(t, v) for t, v in pts if v is not None]
    if not good:
        return NoDelta(f"{what}: never exported (or every scrape failed)")

    def nearest(tb: float) -> int | None:
        best, bd = None, None
        for i, (t, v) in enumerate(pts):
            if v is None:
                continue
            d = abs(t - tb)
            if d <= tol + 1e-9 and (bd is None or d < bd):
                best, bd = i, d
        if best is None and idle is not None:
            after = next((i for i, (t, v) in enumerate(pts) if v is not None and t >= tb), None)
            before = next((i for i in range(len(pts) - 1, -1, -1)
                           if pts[i][1] is not None and pts[i][0] <= tb), None)
            cands = [i for i in (before, after) if i is not None
                     and idle(min(pts[i][0], tb), max(pts[i][0], tb))]
            if cands:
                best = min(cands, key=lambda i: abs(pts[i][0] - tb))
        return best

    ia, ib = nearest(t0), nearest(t1)
    if ia is None or ib is None:
        tb = t0 if ia is None else t1
        return NoDelta(f"{what}: no OK scrape within {tol:g} s of the window boundary t={tb:g}")
    if ib < ia:
        return NoDelta(f"{what}: boundary scrapes out of order")
    acc, resets, gaps = 0.0, 0, 0
    prev = pts[ia][1]
    assert prev is not None  # nearest() picks only scrapes that have the counter
    for _, v in pts[ia + 1: ib + 1]:
        if v is None:
            gaps += 1
            continue
        if v >= prev:
            acc += v - prev
        else:
            acc += v
            resets += 1
        prev = v
    return Delta(acc, pts[ia][0], pts[ib][0], resets, gaps)


def idle_checker(starts: np.ndarray, ends: np.ndarray):
    """``idle(a, b)``: True when no request interval [s, e] touches [a, b] (a request with no
    end counts as outstanding from its send onwards)."""
    s = np.asarray(starts, dtype=float)
    e = np.asarray(ends, dtype=float)
    e = np.where(np.isnan(e), np.inf, e)
    ok = ~np.isnan(s)
    s, e = s[ok], e[ok]

    def idle(a: float, b: float) -> bool:
        return not bool(np.any((s <= b) & (e >= a)))
    return idle
