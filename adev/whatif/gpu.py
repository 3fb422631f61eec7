"""The GPU prefix pool of one endpoint, as vLLM v1 keeps it, vectorised over a call's blocks.

Same rules as the emulator's pool (:mod:`adev.emulator.pool`):

- capacity in blocks; a block is empty, held by requests (reference count > 0), or cached and free
  (reference count 0, still a hit until evicted);
- a lookup hits the longest run of leading cached blocks, capped at whole blocks of
  ``prompt length - 1`` (the caller passes the cap);
- admission references the hit blocks and allocates the rest of the request's blocks, evicting
  the least recently freed cached blocks when no empty block is left; once their KV is computed
  (:meth:`GpuPool.register`, at the end of the prefill) the new blocks become cached under their
  ids (a block another request cached meanwhile is shared and the new one given back), so a
  request admitted during another's prefill does not hit what that one is still computing;
- a finished request frees its blocks in reverse order, so its tail is evicted first.

The simulator replays recorded admission times, at
which the engine found room; a request that does not fit the model's pool at that instant
(typically admitted as another request finished, whose recorded end comes a few milliseconds
later) is admitted anyway, counted in ``overflow_blocks``, and the excess is taken back from the
next blocks freed (evicted at once, as the engine evicted them to admit it).

The LRU free queue is an append-only log of block ids with lazy deletion: a block's entry is
live while ``fseq[block]`` holds that entry's position. Freeing appends, referencing a free block
only clears ``fseq``, and eviction scans the log from its head in numpy chunks, so each call's
run of blocks is handled with a few array operations and no per-block Python.
"""
from __future__ import annotations

import numpy as np


class GpuPool:
    def __init__(self, capacity_blocks: int, n_ids: int) -> None:
        if capacity_blocks < 0:
            raise ValueError("capacity_blocks must be >= 0")
        self.capacity = int(capacity_blocks)
        self.ref = np.full(n_ids, -1, dtype=np.int32)    # -1: not cached; else reference count
        self.fseq = np.full(n_ids, -1, dtype=np.int64)   # position of the live free-log entry
        self._log = np.empty(1024, dtype=np.int64)
        self._n = 0          # log length
        self._head = 0       # first entry that may be live
        self.n_cached = 0
        self.n_free = 0      # cached with ref 0
        self.anon = 0        # held blocks without an id (partial tails)
        self.evicted_blocks = 0
        self.overflow_blocks = 0
        self.debt = 0        # blocks admitted beyond capacity, reclaimed from the next frees

    # ------------------------------------------------------------------ views
    @property
    def used(self) -> int:
        """Blocks held by requests."""
        return self.anon + self.n_cached - self.n_free

    def cached(self, ids: np.ndarray) -> np.ndarray:
        return self.ref[ids] >= 0

    def lookup(self, ids: np.ndarray, cap: int) -> int:
        """Leading blocks of ``ids[:cap]`` cached."""
        if cap <= 0 or self.capacity == 0:
            return 0
        c = self.ref[ids[:cap]]
        h = int(c.argmin())
        return cap if c[h] >= 0 else h

    # ------------------------------------------------------------------ admission / release
    def admit(self, ids: np.ndarray, hit: int, anon: int = 0) -> None:
        """Reference the hit prefix ``ids[:hit]`` and allocate blocks for the rest of ``ids`` and
        ``anon`` id-less blocks (cached under their ids by :meth:`register`)."""
        if self.capacity == 0:
            return
        if hit:
            h = ids[:hit]
            fs = self.fseq[h]
            was_free = fs >= 0
            nf = int(was_free.sum())
            if nf:
                self.fseq[h[was_free]] = -1
                self.n_free -= nf
            self.ref[h] += 1
        n_alloc = len(ids) - hit + anon
        self._make_room(n_alloc)
        self.anon += n_alloc

    def register(self, ids: np.ndarray) -> None:
        """The request's KV for ``ids`` is computed: its anonymous blocks become cached under
        these ids; an id another request cached meanwhile is shared and the block given back."""
        if self.capacity == 0 or not len(ids):
            return
        self.anon -= len(ids)
        r = self.ref[ids]
        have = r >= 0
        if have.any():
            shared = ids[have]
            fs = self.fseq[shared]
            was_free = fs >= 0
            nf = int(was_free.sum())
            if nf:
                self.fseq[shared[was_free]] = -1
                self.n_free -= nf
            self.ref[shared] = r[have] + 1
            fresh = ids[~have]
        else:
            fresh = ids
        self.ref[fresh] = 1
        self.n_cached += len(fresh)

    def grow(self, lo: int, hi: int) -> None:
        """Allocate and cache the never-seen ids ``lo .. hi-1`` (a decoding request's new output
        blocks) for a request: a slice, no lookup or sharing."""
        n = hi - lo
        if self.capacity == 0 or n <= 0:
            return
        self._make_room(n)
        self.ref[lo:hi] = 1
        self.n_cached += n

    def _make_room(self, n_alloc: int) -> None:
        empty = self.capacity - self.anon - self.n_cached
        if n_alloc > empty:
            self._evict(min(n_alloc - empty, self.n_free))
            empty = self.capacity - self.anon - self.n_cached
            if n_alloc > empty:
                over = n_alloc - max(0, empty)
                self.overflow_blocks += over
                self.debt += over

    def release(self, ids: np.ndarray, anon: int = 0) -> None:
        """Free a request's blocks: ids whose count drops to 0 join the LRU tail, last first."""
        if self.capacity == 0:
            return
        self.anon -= anon
        if not len(ids):
            return
        rev = ids[::-1]
        r = self.ref[rev] - 1
        self.ref[rev] = r
        freed = rev[r == 0]
        k = len(freed)
        if not k:
            return
        if self._n + k > len(self._log):
            self._compact(k)
        self._log[self._n:self._n + k] = freed
        self.fseq[freed] = np.arange(self._n, self._n + k)
        self._n += k
        self.n_free += k
        if self.debt:
            d = min(self.debt, self.n_free)
            self._evict(d)
            self.debt -= d

    # ------------------------------------------------------------------ internals
    def _evict(self, k: int) -> None:
        """Evict the ``k`` least recently freed cached blocks."""
        while k > 0 and self._head < self._n:
            hi = min(self._n, self._head + 2 * k + 16)
            chunk = self._log[self._head:hi]
            pos = (self.fseq[chunk] == np.arange(self._head, hi)).nonzero()[0]
            if len(pos) > k:
                pos = pos[:k]
                stop = self._head + int(pos[-1]) + 1
            else:
                stop = hi
            victims = chunk[pos]
            self.ref[victims] = -1
            self.fseq[victims] = -1
            n = len(victims)
            self.n_cached -= n
            self.n_free -= n
            self.evicted_blocks += n
            k -= n
            self._head = stop

    def _compact(self, extra: int) -> None:
        live = self._log[self._head:self._n]
        live = live[self.fseq[live] == np.arange(self._head, self._n)]
        size = max(1024, 2 * (len(live) + extra))
        log = np.empty(size, dtype=np.int64)
        log[:len(live)] = live
        self.fseq[live] = np.arange(len(live))
        self._log, self._head, self._n = log, 0, len(live)
