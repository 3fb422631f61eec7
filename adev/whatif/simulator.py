"""Replay a workload through the tier models and predict per-window figures.

Every call is a few events, replayed in time order (at equal times: frees, saves, admissions,
preemptions, decode steps):

1. **admission** at ``t_admit``: the endpoint's GPU prefix pool is looked up (hits ``h`` blocks,
   capped at whole blocks of prompt length - 1); the store is looked up (``batch_is_exist``:
   leases on every present key) and serves the leading run of present blocks (from RAM, or from
   disk where only the disk holds them). ``Params.lookup`` says over which blocks:
   ``past-gpu`` (the emulator's rule) from ``h`` to the cap, the run counted from ``h``;
   ``whole`` (vLLM's Mooncake store connector, :func:`whole_prompt_lookup`) from the first block
   to the cap, the run counted from block 0 and serving the part of it past ``h``. The request
   references its hit blocks and is allocated the rest of its prompt's blocks;
2. **prefill done** at ``t_save``: its new blocks are cached in the GPU pool; as the emulator
   does, every full prompt block not loaded from the store (the GPU-hit prefix and the blocks
   after the store-hit run) is checked for existence in the store and the missing ones are put;
3. **decode**: the output's blocks are allocated in ``decode_chunks`` equal steps from
   ``t_save`` to ``t_end`` (the engine grows a decoding request by a block every ``block_size``
   tokens, allocating ahead of them);
4. **free** at ``t_end``: all its blocks join the GPU pool's LRU, the output's first;
5. **preemption** (a run's recorded preemptions, spread evenly between ``t_save`` and
   ``t_end``): the request's blocks are freed and it is admitted again (a new GPU lookup, the
   rest allocated) at the next free on its endpoint, as the engine re-admits a preempted request
   once blocks are free.

The store's eviction thread runs lazily at each event (its latest wake-up, at most one per
``tick_s``). The figures of a window count what the endpoint's counters would: hits (GPU and store),
offered and refused writes of the calls *admitted* in it, prompt tokens of the calls whose
prefill ended in it (vLLM counts ``prompt_tokens`` at the first token); the shares and the gross
saving are the functions of :mod:`adev.analysis.figures`, so each figure has one definition for a
run and its prediction.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

import numpy as np

from ..analysis.figures import busy_time, gross_saving, hit_share, refusal_share
from ..config import Staging
from ..emulator.state import device_read_rate
from .gpu import GpuPool
from .store import StoreModel, StoreRules
from .workload import Workload

GB = 1e9

Lookup = Literal["past-gpu", "whole"]
LOOKUPS: tuple[Lookup, ...] = get_args(Lookup)
"""Which blocks the store lookup covers: ``past-gpu``, those past the GPU hit (the emulator's
``adev.emulator.chunks.lookup_span``); ``whole``, every complete block of the prompt from the
first (vLLM's Mooncake store connector)."""


def whole_prompt_lookup(store: StoreModel, ids: np.ndarray, h: int, cap: int, cb: int,
                        now: float) -> tuple[int, int]:
    """vLLM's Mooncake store connector's lookup (``MooncakeStoreWorker.lookup``): one
    ``batch_is_exist`` over every complete object of the prompt's first ``cap`` blocks, from the
    first (``ids``: the prompt's block ids; objects of ``cb`` blocks keyed by their last
    block's), which leases every present one, the blocks the GPU holds included. The store's hit
    is the leading run of present objects from block 0, ``run`` blocks; it serves the part past
    the GPU hit ``h`` (the connector's ``need_to_allocate = external hit - GPU hit``, nothing
    when the run ends before ``h``). Returns (blocks served, of which from disk only)."""
    nc = cap // cb
    if nc == 0:
        return 0, 0
    keys = ids[np.arange(nc) * cb + cb - 1]
    n, ram = store.leading(keys, now)
    run = n * cb
    if run <= h:
        return 0, 0
    j = np.arange(h // cb, n)
    store.read(keys[j][~ram[j]], now)
    w = np.minimum((j + 1) * cb, run) - np.maximum(j * cb, h)
    return int(w.sum()), int(w[~ram[j]].sum())


@dataclass
class Params:
    """One tier configuration (sizes at model scale, times in model seconds)."""

    gpu_pool_tokens: int = 166512
    ram_gb: float = 32.0              # 0: no store
    lease_s: float = 5.0
    disk: bool = True
    disk_gb: float | None = None      # None: unbounded
    bytes_per_block: int = 1572864    # model-scale KV bytes of one block
    ram_read_bytes_per_s: float = 20e9
    disk_read_bytes_per_s: float = 5.45e9   # stacks/profiles/tiers/local-raid0.toml
    high_watermark: float = 0.90
    eviction_ratio: float = 0.05
    tick_s: float = 0.1
    offload_delay_s: float = 10.0
    batch_keys: int = 0               # blocks per put batch, a prefill step's worth (0: one batch)
    prefill_tokens_per_s: float = 14850.0
    ram_capacity_blocks: int | None = None   # overrides ram_gb (the stack's exact segment sizes)
    decode_chunks: int = 8            # a request's output blocks are allocated in this many steps
    chunk_blocks: int = 1             # blocks per store object (adev.emulator.chunks)
    lookup: Lookup = "past-gpu"       # which blocks a lookup covers (LOOKUPS)
    disk_writes: str = "evict"        # when a block reaches the disk tier: "evict" or "put"
    disk_only: bool = False           # disk-only: every store hit is charged at the disk tier
    staging: Staging = "serial"       # the stack's store.staging: how a staged load's hops are timed
    promotion_threshold: int = 0      # Mooncake's promotion on hit: reads before it; 0 = off
    promotion_per_heartbeat: int = 0  # keys promoted per heartbeat; 0 = every queued one

    def ram_blocks(self) -> int:
        if self.ram_capacity_blocks is not None:
            return int(self.ram_capacity_blocks)
        return int(self.ram_gb * GB // self.bytes_per_block)

    def disk_blocks(self) -> int | None:
        return None if self.disk_gb is None else int(self.disk_gb * GB // self.bytes_per_block)


@dataclass
class Window:
    """Predicted figures of one window (``window`` -1: the whole workload).

    gpu_hit_share = GPU-hit tokens / prompt tokens; store_hit_share = store-served tokens /
    prompt tokens; refused_share = refused blocks / offered blocks; gross_saving and
    gross_saving_disk as :func:`adev.analysis.figures.gross_saving` with busy time ``busy_s``
    (summed over endpoints, each the union of its calls' intervals); read_s = modelled store read
    time: RAM-served blocks at the RAM tier's rate, disk blocks staged through CPU memory at the
    disk tier's rate (a lone staged load's, as the emulator charges it with either ``staging``,
    the slower hop's rate when the disk tier is the faster); with ``disk_only`` (the direct path)
    disk blocks at the device's own rate (:func:`adev.emulator.state.device_read_rate`: above
    the tier's with ``staging = "serial"``). Without the disk device's queue: the simulator has no
    timeline of concurrent loads.
    """

    window: int
    t0: float
    t1: float
    calls: int = 0
    prompt_tokens: float = 0.0
    gpu_tokens: float = 0.0
    store_tokens: float = 0.0
    store_ram_tokens: float = 0.0
    store_disk_tokens: float = 0.0
    offered_blocks: float = 0.0
    refused_blocks: float = 0.0
    busy_s: float = math.nan
    read_s: float = 0.0
    gpu_hit_share: float = math.nan
    store_hit_share: float = math.nan
    refused_share: float = math.nan
    gross_saving: float = math.nan
    gross_saving_disk: float = math.nan
    missing: dict[str, str] = field(default_factory=dict)


@dataclass
class Result:
    params: Params
    windows: list[Window]
    total: Window
    per_call: dict[str, np.ndarray]
    counters: dict[str, int]


def simulate(w: Workload, p: Params) -> Result:
    """Replay ``w`` through the GPU pools and the store configured by ``p``."""
    bs = w.block_size
    CB = max(1, int(p.chunk_blocks))   # store objects of CB blocks, keyed by their last block's id
    n = w.calls
    extra = (w.prompt_tokens + w.output_tokens) // bs - w.prompt_tokens // bs  # output blocks
    extra = np.maximum(extra, 0)
    tail = ((w.prompt_tokens + w.output_tokens) % bs > 0).astype(np.int64)
    syn_off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(extra, out=syn_off[1:])
    n_ids = w.n_ids + int(syn_off[-1])
    pools = [GpuPool(p.gpu_pool_tokens // bs, n_ids) for _ in w.endpoints]
    store = None
    if p.ram_gb > 0 or (p.ram_capacity_blocks or 0) > 0:
        disk_cap = p.disk_blocks()
        store = StoreModel(StoreRules(p.ram_blocks() // CB, p.lease_s, p.high_watermark,
                                      p.eviction_ratio, p.tick_s, p.disk,
                                      None if disk_cap is None else disk_cap // CB,
                                      p.offload_delay_s,
                                      max(1, p.batch_keys // CB) if p.batch_keys else 0,
                                      p.disk_writes, p.promotion_threshold if p.disk else 0,
                                      p.promotion_per_heartbeat), n_ids)
    gpu_hit = np.zeros(n, dtype=np.int64)
    ext_hit = np.zeros(n, dtype=np.int64)
    disk_hit = np.zeros(n, dtype=np.int64)
    put = np.zeros(n, dtype=np.int64)
    refused = np.zeros(n, dtype=np.int64)

    # events: 0 free, 1 save, 2 admission, 3 preemption (recorded ones, spread over the decode)
    pre = w.preemptions if w.preemptions is not None else np.zeros(n, dtype=np.int64)
    pc = np.flatnonzero(pre > 0)
    pre_call = np.repeat(pc, pre[pc])
    nth = np.concatenate([np.arange(1, k + 1) for k in pre[pc]]) if len(pc) else np.zeros(0)
    pre_t = w.t_save[pre_call] + (w.t_end[pre_call] - w.t_save[pre_call]) * nth / (
        pre[pre_call] + 1)
    # output blocks: chunk j of C allocated at t_save + j/C of the decode (the engine allocates
    # a decoding request's blocks ahead of its tokens)
    C = max(1, int(p.decode_chunks))
    gc = np.repeat(np.flatnonzero(extra > 0), C)
    gj = np.tile(np.arange(C), int((extra > 0).sum()))
    nonempty = extra[gc] * (gj + 1) // C > extra[gc] * gj // C
    gc, gj = gc[nonempty], gj[nonempty]
    grow_t = w.t_save[gc] + (w.t_end[gc] - w.t_save[gc]) * gj / C
    times = np.concatenate([w.t_end, w.t_save, w.t_admit, pre_t, grow_t])
    kinds = np.concatenate([np.repeat(np.arange(3, dtype=np.int8), n),
                            np.full(len(pre_t), 3, dtype=np.int8),
                            np.full(len(grow_t), 4, dtype=np.int8)])
    calls = np.concatenate([np.tile(np.arange(n), 3), pre_call, gc])
    chunk = np.concatenate([np.zeros(3 * n + len(pre_t), dtype=np.int64), gj])
    order = np.lexsort((kinds, times))
    off, ids_all, ep, ptoks = w.off, w.ids, w.endpoint, w.prompt_tokens
    held: dict[int, np.ndarray] = {}
    waiting: list[list[int]] = [[] for _ in w.endpoints]   # preempted, until blocks are freed
    kinds_l, calls_l, chunk_l = kinds.tolist(), calls.tolist(), chunk.tolist()
    syn0 = (w.n_ids + syn_off[:-1]).tolist()    # first output-block id of each call
    ex = extra.tolist()
    grown: dict[int, int] = {}                 # call -> end of its output ids allocated so far
    for k in order.tolist():
        kind, i = kinds_l[k], calls_l[k]
        t = float(times[k])
        if store is not None:
            store.advance(t)
        ids = ids_all[off[i]:off[i + 1]]
        if kind == 2:    # admission
            pool = pools[ep[i]]
            cap = min(len(ids), max(0, int(ptoks[i]) - 1) // bs)
            h = pool.lookup(ids, cap)
            gpu_hit[i] = h
            if store is not None and p.lookup == "whole":
                ext_hit[i], disk_hit[i] = whole_prompt_lookup(store, ids, h, cap, CB, t)
            elif store is not None and cap > h:
                if CB == 1:
                    e, d = store.lookup(ids[h:cap], t)
                else:   # the complete chunks past the GPU hit; the first counts from block h
                    c0, c1 = h // CB, cap // CB
                    cj = np.arange(c0, c1)
                    wts = np.full(len(cj), CB, dtype=np.int64)
                    if len(cj):
                        wts[0] = (c0 + 1) * CB - h
                    e, d = store.lookup(ids[cj * CB + CB - 1], t, wts)
                ext_hit[i], disk_hit[i] = e, d
            pool.admit(ids, h, int(tail[i]))
            held[i] = ids
        elif kind == 1:  # prefill done: blocks cached, new ones saved
            if i in held:
                pools[ep[i]].register(ids[int(gpu_hit[i]):])
            if store is not None:
                h, e = int(gpu_hit[i]), int(ext_hit[i])
                if CB == 1:
                    keys = np.concatenate([ids[:h], ids[h + e:]]) if e else ids
                    put[i], refused[i] = store.save(keys, t)
                else:   # complete chunks not entirely served by the store, counted per block
                    js = np.arange(len(ids) // CB)
                    served = (js * CB >= h) & ((js + 1) * CB <= h + e)
                    js = js[~served]
                    n_put, n_ref = store.save(ids[js * CB + CB - 1], t)
                    put[i], refused[i] = n_put * CB, n_ref * CB
        elif kind == 4:  # decode: the next chunk of output blocks
            if i in held:
                j = chunk_l[k]
                a = syn0[i] + ex[i] * j // C
                b = syn0[i] + ex[i] * (j + 1) // C
                pools[ep[i]].grow(a, b)
                grown[i] = b
        elif kind == 3:  # preemption: blocks freed, the request waits for the next free
            hold = held.pop(i, None)
            if hold is not None:
                g = grown.pop(i, None)
                if g is not None:
                    hold = np.concatenate([hold, np.arange(syn0[i], g, dtype=np.int64)])
                pools[ep[i]].release(hold, int(tail[i]))
                waiting[ep[i]].append(i)
        else:            # free
            hold = held.pop(i, None)
            pool = pools[ep[i]]
            if hold is not None:
                g = grown.pop(i, None)
                if g is not None:
                    hold = np.concatenate([hold, np.arange(syn0[i], g, dtype=np.int64)])
                pool.release(hold, int(tail[i]))
            q = waiting[ep[i]]
            if i in q:
                q.remove(i)
            while q:           # preempted requests come back: a new lookup, the rest recomputed
                j = q.pop(0)
                jids = ids_all[off[j]:off[j + 1]]
                hj = pool.lookup(jids, len(jids))
                pool.admit(jids, hj, int(tail[j]))
                pool.register(jids[hj:])
                held[j] = jids
    if p.disk_only:   # the staging RAM may serve it; the direct path it stands for reads disk
        disk_hit = ext_hit.copy()
    per_call = {"gpu_hit_blocks": gpu_hit, "store_hit_blocks": ext_hit,
                "store_disk_blocks": disk_hit, "put_blocks": put, "refused_blocks": refused}
    counters = {"gpu_evicted_blocks": sum(q.evicted_blocks for q in pools),
                "gpu_overflow_blocks": sum(q.overflow_blocks for q in pools)}
    if store is not None:
        counters.update(store_evicted_blocks=store.evicted_blocks,
                        store_evicted_unread_blocks=store.evicted_unread_blocks,
                        store_offloaded_blocks=store.offloaded_blocks,
                        store_promoted_blocks=store.promoted_blocks,
                        eviction_cycles=store.eviction_cycles)
    return Result(p, [], _window(w, p, per_call, -1, -math.inf, math.inf), per_call, counters)


def _window(w: Workload, p: Params, pc: dict[str, np.ndarray], index: int, t0: float, t1: float,
            busy: tuple[np.ndarray, np.ndarray] | None = None) -> Window:
    bs = w.block_size
    sel = (w.t_admit >= t0) & (w.t_admit < t1)
    first = (w.t_save >= t0) & (w.t_save < t1)
    f = Window(index, t0, t1, calls=int(sel.sum()))
    f.prompt_tokens = float(w.prompt_tokens[first].sum())
    f.gpu_tokens = float(pc["gpu_hit_blocks"][sel].sum() * bs)
    ext = float(pc["store_hit_blocks"][sel].sum())
    disk = float(pc["store_disk_blocks"][sel].sum())
    f.store_tokens, f.store_disk_tokens = ext * bs, disk * bs
    f.store_ram_tokens = f.store_tokens - f.store_disk_tokens
    f.offered_blocks = float(pc["put_blocks"][sel].sum() + pc["refused_blocks"][sel].sum())
    f.refused_blocks = float(pc["refused_blocks"][sel].sum())
    disk_bps, ram_bps = p.disk_read_bytes_per_s, p.ram_read_bytes_per_s
    if not p.disk_only:   # staged: a lone staged load's rate, whichever way its hops are timed
        disk_rate = min(disk_bps, ram_bps)
    elif disk_bps < ram_bps:   # direct disk, no staging hop: the device's own rate
        disk_rate = device_read_rate(disk_bps, ram_bps, p.staging)
    else:                 # a disk tier no slower than the hop: serial staging has no device rate
        disk_rate = disk_bps
    f.read_s = ((ext - disk) * p.bytes_per_block / p.ram_read_bytes_per_s
                + disk * p.bytes_per_block / disk_rate)
    if f.prompt_tokens > 0:
        f.gpu_hit_share = hit_share(f.gpu_tokens, f.prompt_tokens)
        f.store_hit_share = hit_share(f.store_tokens, f.prompt_tokens)
    else:
        f.missing["hit_share"] = "no calls admitted in the window"
    if f.offered_blocks > 0:
        f.refused_share = refusal_share(f.refused_blocks, f.offered_blocks)
    else:
        f.missing["refused_share"] = "no store writes offered in the window"
    s, e = busy if busy is not None else (w.t_admit, w.t_end)
    b = 0.0
    lo = t0 if math.isfinite(t0) else float(np.min(s, initial=0.0))
    hi = t1 if math.isfinite(t1) else float(np.max(e, initial=0.0))
    for j in range(len(w.endpoints)):
        m = w.endpoint == j
        b += busy_time(s[m], e[m], lo, hi)
    f.busy_s = b
    if b > 0:
        f.gross_saving = gross_saving(f.store_tokens, p.prefill_tokens_per_s, b)
        f.gross_saving_disk = gross_saving(f.store_disk_tokens, p.prefill_tokens_per_s, b)
    else:
        f.missing["gross_saving"] = "no busy time in the window"
    return f


def figures(w: Workload, r: Result, windows: Sequence[tuple[int, float, float]],
            busy: tuple[np.ndarray, np.ndarray] | None = None) -> Result:
    """``r`` with per-window figures for ``windows`` ((index, t0, t1) triples); ``busy``: the
    (start, end) interval of every call for busy time (default: admission .. end)."""
    r.windows = [_window(w, r.params, r.per_call, i, t0, t1, busy) for i, t0, t1 in windows]
    r.total = _window(w, r.params, r.per_call, -1, -math.inf, math.inf, busy)
    return r
