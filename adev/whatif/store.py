"""The store tiers below the endpoints: Mooncake's RAM tier (its own rules) and a disk tier.

RAM tier, as ``mooncake_master`` (``mooncake-store/src/master_service.cpp``) runs it:

- **capacity** in objects (blocks): a put is allocated while space is left; when the segments are
  full the put is **refused** (``NO_AVAILABLE_HANDLE``, -200) and the master flags that an
  eviction is needed;
- **leases**: every lookup of a present key (``batch_is_exist``, also the existence check a save
  makes before its puts) sets its lease timeout to ``max(timeout, now + TTL)``; a put sets it to
  the put time (``PutEnd`` grants a zero lease). An object whose lease has not expired cannot be
  evicted;
- **eviction**: an eviction thread wakes every 10 ms (real); when the used share exceeds the high
  watermark (default 0.90) or a put was refused, it evicts
  ``ceil(evictable objects x max(ratio, used - watermark + ratio))`` objects (ratio default
  0.05), choosing among lease-expired objects those with the oldest lease timeout (objects never
  looked up: their put time; others: last lookup + TTL). Leased objects count in the evictable
  base but are skipped, so a store full of leased objects evicts nothing and refuses puts.
  ``evicted_unread_blocks`` counts the evicted objects that no lookup had touched since their
  put (:func:`adev.analysis.figures.evicted_unread_share`).

Disk tier, ``disk_writes = "evict"`` (``offload_on_evict``): an object chosen for eviction with
no disk copy is queued for offload and stays in RAM (pinned, still readable, not evictable)
until the endpoint's offload heartbeat writes it (``offload_delay_s`` later). It then has a disk
copy and is evictable again by the same rule: an object leased meanwhile keeps its memory until
its lease ends; chosen again, its memory is freed at once. A key with a memory copy is served
from RAM, a key on disk only from disk; a key in either is never put again. Disk capacity in
objects (None: unbounded); when full, the oldest offloaded objects are dropped. With
``disk_writes = "put"`` (``enable_offload`` alone) every put object is queued for offload at its
put, pinned in RAM (readable, not evictable) until the heartbeat writes it; eviction then only
meets objects with a disk copy and frees their memory at once.

Promotion on hit (``promotion_threshold`` > 0: the master's ``--promotion_on_hit``): a served
read of a key held on disk only counts towards that key (Mooncake's count-min sketch, exact
here); at ``promotion_threshold`` reads, with RAM at or below the high watermark, the key is
queued, and the holding client's next heartbeat (``offload_delay_s`` later, at most
``promotion_per_heartbeat`` keys each, 0 = all) copies it back to RAM where there is room, as a
put (its lease timeout the copy's time; it keeps its disk copy, so eviction frees it at once).
Keys that find no room are dropped from the queue (Mooncake counts them as failed).

Per call, a save mirrors the emulator's and vLLM's connector: an existence check over the blocks
to write (leases on those present), then puts of the missing ones in batches of ``batch_keys``
(0: one batch), each put that finds no room counted as refused; a batch with a refused put ends
the save (later batches are never offered). The emulator saves per prefill step, one put of
every missing block of the step, and skips a refused request's later saves while the store is
under pressure (vLLM's connector; :meth:`adev.emulator.engine.Engine._save`): the model saves
once per call, in batches of a step's worth of blocks (``max_num_batched_tokens / block_size``,
:func:`adev.whatif.validate.stack_params`), all at the call's prefill end.
"""
from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

NEVER = -np.inf


@dataclass
class StoreRules:
    capacity_blocks: int
    lease_s: float
    high_watermark: float = 0.90
    eviction_ratio: float = 0.05
    tick_s: float = 0.1               # eviction thread period, model seconds
    disk: bool = False
    disk_capacity_blocks: int | None = None
    offload_delay_s: float = 10.0     # offload heartbeat, model seconds
    batch_keys: int = 0               # objects per put batch (0: one batch per save)
    disk_writes: str = "evict"        # "evict": offload when chosen; "put": offload every put
    promotion_threshold: int = 0      # reads of a disk-only key before promotion; 0 = off
    promotion_per_heartbeat: int = 0  # keys promoted per heartbeat; 0 = every queued one


class _Log:
    """Append-only id log with lazy deletion (an entry is live while ``stamp[id]`` is its
    position)."""

    def __init__(self, stamp: np.ndarray) -> None:
        self.stamp = stamp
        self.buf = np.empty(1024, dtype=np.int64)
        self.n = 0
        self.head = 0

    def append(self, ids: np.ndarray) -> None:
        k = len(ids)
        if self.n + k > len(self.buf):
            live = self.buf[self.head:self.n]
            live = live[self.stamp[live] == np.arange(self.head, self.n)]
            buf = np.empty(max(1024, 2 * (len(live) + k)), dtype=np.int64)
            buf[:len(live)] = live
            self.stamp[live] = np.arange(len(live))
            self.buf, self.head, self.n = buf, 0, len(live)
        self.buf[self.n:self.n + k] = ids
        self.stamp[ids] = np.arange(self.n, self.n + k)
        self.n += k

    def peek(self, k: int, ok, ordered: bool = True) -> np.ndarray:
        """Up to ``k`` live ids from the head that pass ``ok``; an ordered log stops at the first
        live id failing it, an unordered one skips it (nothing is removed; leading dead entries
        are skipped for good)."""
        out: list[np.ndarray] = []
        pos_hi = self.head
        while k > 0 and pos_hi < self.n:
            hi = min(self.n, pos_hi + 2 * k + 64)
            chunk = self.buf[pos_hi:hi]
            pos = (self.stamp[chunk] == np.arange(pos_hi, hi)).nonzero()[0]
            if not out and pos_hi == self.head:
                self.head += int(pos[0]) if len(pos) else hi - pos_hi
            stop = False
            if len(pos):
                good = ok(chunk[pos])
                if not good.all():
                    if ordered:
                        pos = pos[:int(good.argmin())]
                        stop = True
                    else:
                        pos = pos[good]
            ids = chunk[pos[:k]]
            out.append(ids)
            k -= len(ids)
            if stop:
                break
            pos_hi = hi
        return np.concatenate(out) if out else np.empty(0, dtype=np.int64)


class StoreModel:
    """RAM (+ disk) tier state over dense block ids."""

    def __init__(self, rules: StoreRules, n_ids: int) -> None:
        self.r = rules
        self.in_ram = np.zeros(n_ids, dtype=bool)
        self.on_disk = np.zeros(n_ids, dtype=bool)
        self.pinned = np.zeros(n_ids, dtype=bool)         # queued for offload
        self.lease_to = np.full(n_ids, NEVER)
        self.looked_up = np.zeros(n_ids, dtype=bool)      # touched by a lookup since its put
        # eviction order (lease timeout): never looked up, by put time; looked up, by last lookup
        self._unread = _Log(np.full(n_ids, -1, dtype=np.int64))
        self._read = _Log(np.full(n_ids, -1, dtype=np.int64))
        # back in the order after an offload (their timeouts are not in log order)
        self._back = _Log(np.full(n_ids, -1, dtype=np.int64))
        self._disk = _Log(np.full(n_ids, -1, dtype=np.int64))    # on disk, by offload time
        self._pending: deque[tuple[float, np.ndarray]] = deque()
        self._reads = np.zeros(n_ids if rules.promotion_threshold else 0, dtype=np.int32)
        self._queued = np.zeros(n_ids if rules.promotion_threshold else 0, dtype=bool)
        self._seq = 0
        self._promote: list[tuple[float, int, np.ndarray]] = []    # heap: (due, seq, ids)
        self.n_ram = 0
        self.n_pinned = 0
        self.n_disk = 0
        self.need_eviction = False
        self._last_tick = -math.inf
        # counters
        self.put_blocks = 0
        self.refused_blocks = 0
        self.evicted_blocks = 0
        self.evicted_unread_blocks = 0
        self.offloaded_blocks = 0
        self.eviction_cycles = 0
        self.promoted_blocks = 0

    # ------------------------------------------------------------------ time
    def advance(self, now: float) -> None:
        """Complete offloads due by ``now`` and run the eviction thread's latest wake-up."""
        while self._pending and self._pending[0][0] <= now:
            _, ids = self._pending.popleft()
            self._offloaded(ids)
        while self._promote and self._promote[0][0] <= now:
            t, _, ids = heapq.heappop(self._promote)
            self._promoted(ids, t)
        if now - self._last_tick >= self.r.tick_s:
            self._last_tick = now
            cap = self.r.capacity_blocks
            used = self.n_ram / cap if cap else 0.0
            if used > self.r.high_watermark or self.need_eviction:
                self._batch_evict(now, used)

    def _batch_evict(self, now: float, used: float) -> None:
        r = self.r
        self.eviction_cycles += 1
        base = self.n_ram - self.n_pinned
        if base <= 0:
            self.need_eviction = False
            return
        target = max(r.eviction_ratio, used - r.high_watermark + r.eviction_ratio)
        k = math.ceil(base * target)
        lease = self.lease_to

        def expired(ids: np.ndarray) -> np.ndarray:
            return lease[ids] <= now
        logs = (self._back, self._unread, self._read)
        victims = np.concatenate([q.peek(k, expired, ordered=q is not self._back) for q in logs])
        if len(victims) > k:   # the k oldest lease timeouts of the three orders
            victims = victims[np.argsort(lease[victims], kind="stable")[:k]]
        if not len(victims):
            return
        for q in logs:
            q.stamp[victims] = -1
        self.need_eviction = False
        if r.disk:   # a copy on disk already: memory freed now; else queued for offload
            done = self.on_disk[victims]
            self._free(victims[done])
            queue = victims[~done]
            if len(queue):
                self.pinned[queue] = True
                self.n_pinned += len(queue)
                self._pending.append((now + r.offload_delay_s, queue))
        else:
            self._free(victims)

    def _free(self, ids: np.ndarray) -> None:
        self.in_ram[ids] = False
        self.n_ram -= len(ids)
        self.evicted_blocks += len(ids)
        self.evicted_unread_blocks += int(len(ids) - self.looked_up[ids].sum())

    def _offloaded(self, ids: np.ndarray) -> None:
        """Offload written: the object is on disk too, and evictable from RAM again (by its lease
        timeout) -- an object leased meanwhile keeps its memory until the lease ends."""
        ids = ids[self.in_ram[ids] & self.pinned[ids]]
        self.pinned[ids] = False
        self.n_pinned -= len(ids)
        cap = self.r.disk_capacity_blocks
        new = ids[~self.on_disk[ids]]
        if cap is not None and self.n_disk + len(new) > cap:
            drop = self._disk.peek(self.n_disk + len(new) - cap, lambda x: np.ones(len(x), bool))
            self._disk.stamp[drop] = -1
            self.on_disk[drop] = False
            self.n_disk -= len(drop)
            if self.n_disk + len(new) > cap:   # more than the whole disk: keep the newest
                new = new[len(new) - max(0, cap - self.n_disk):]
        self.on_disk[new] = True
        self.n_disk += len(new)
        self.offloaded_blocks += len(new)
        self._disk.append(new)
        self._back.append(ids)

    def read(self, ids: np.ndarray, now: float) -> None:
        """Served reads of keys held on disk only (promotion on hit; nothing when off)."""
        r = self.r
        if not r.promotion_threshold or not len(ids):
            return
        ids = ids[self.on_disk[ids] & ~self.in_ram[ids]]
        self._reads[ids] += 1
        cap = r.capacity_blocks
        if cap and self.n_ram / cap > r.high_watermark:
            return
        due = ids[(self._reads[ids] >= r.promotion_threshold) & ~self._queued[ids]]
        if len(due):
            self._queued[due] = True
            self._queue_promotion(now + r.offload_delay_s, due)

    def _queue_promotion(self, due: float, ids: np.ndarray) -> None:
        self._seq += 1
        heapq.heappush(self._promote, (due, self._seq, ids))

    def _promoted(self, ids: np.ndarray, t: float) -> None:
        """A heartbeat's promotions: still on disk only, copied to RAM where there is room."""
        r = self.r
        if r.promotion_per_heartbeat and len(ids) > r.promotion_per_heartbeat:
            self._queue_promotion(t + r.offload_delay_s, ids[r.promotion_per_heartbeat:])
            ids = ids[:r.promotion_per_heartbeat]
        self._queued[ids] = False
        self._reads[ids] = 0
        ids = ids[self.on_disk[ids] & ~self.in_ram[ids]]
        ids = ids[:max(0, r.capacity_blocks - self.n_ram)]
        if not len(ids):
            return
        self.in_ram[ids] = True
        self.lease_to[ids] = t
        self.looked_up[ids] = False
        self._read.stamp[ids] = -1
        self._back.stamp[ids] = -1
        self._unread.append(ids)
        self.n_ram += len(ids)
        self.promoted_blocks += len(ids)

    # ------------------------------------------------------------------ operations
    def _grant(self, ids: np.ndarray, now: float) -> None:
        """Leases on present keys; RAM keys move to the tail of the last-lookup order."""
        if not len(ids):
            return
        # max(timeout, now + TTL) is now + TTL: events come in time order, TTL is constant
        self.lease_to[ids] = now + self.r.lease_s
        self.looked_up[ids] = True
        ram = ids[self.in_ram[ids] & ~self.pinned[ids]]
        if len(ram):
            self._unread.stamp[ram] = -1
            self._back.stamp[ram] = -1
            self._read.append(ram)

    def leading(self, ids: np.ndarray, now: float) -> tuple[int, np.ndarray]:
        """``batch_is_exist`` over ``ids`` (leases on every present one): the length of the
        leading run of present keys, and whether each of them has a memory copy."""
        if not len(ids):
            return 0, np.zeros(0, dtype=bool)
        ram = self.in_ram[ids]
        present = ram | self.on_disk[ids]
        self._grant(ids[present], now)
        n = len(ids) if present.all() else int(present.argmin())
        return n, ram[:n]

    def lookup(self, ids: np.ndarray, now: float,
               weights: np.ndarray | None = None) -> tuple[int, int]:
        """``batch_is_exist`` over ``ids``: (leading hits, of which on disk only); with
        ``weights`` (blocks per object), both summed over the hits' weights."""
        n, ram = self.leading(ids, now)
        self.read(ids[:n][~ram], now)
        if weights is not None:
            w = weights[:n]
            return int(w.sum()), int(w[~ram].sum())
        return n, int(n - ram.sum())

    def save(self, ids: np.ndarray, now: float) -> tuple[int, int]:
        """Existence check, then puts of the missing blocks: (put, refused)."""
        if not len(ids):
            return 0, 0
        present = self.in_ram[ids] | self.on_disk[ids]
        self._grant(ids[present], now)
        missing = ids[~present]
        if not len(missing):
            return 0, 0
        room = max(0, self.r.capacity_blocks - self.n_ram)
        put = missing[:room]
        refused = 0
        if len(missing) > room:
            b = self.r.batch_keys or len(missing)
            refused = min(len(missing), (room // b + 1) * b) - room
            self.need_eviction = True
        if len(put):   # PutEnd: GrantReadLease(0), the lease timeout is the put time
            self.in_ram[put] = True
            self.lease_to[put] = now
            self.looked_up[put] = False
            self._read.stamp[put] = -1
            self.n_ram += len(put)
            if self.r.disk and self.r.disk_writes == "put":   # pinned until written to disk
                self.pinned[put] = True
                self.n_pinned += len(put)
                self._pending.append((now + self.r.offload_delay_s, put))
            else:
                self._unread.append(put)
        self.put_blocks += len(put)
        self.refused_blocks += refused
        return len(put), refused
