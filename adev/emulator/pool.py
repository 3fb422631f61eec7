"""The GPU prefix pool: whole blocks, chained block hashes, refcounts, LRU over unreferenced blocks.

Model of vLLM v1's KV cache manager at block granularity:

- capacity = ``gpu_pool_tokens // block_size`` blocks;
- a block is either *anonymous* (held by a request, no hash yet: being filled), *cached and
  referenced* (hash known, ref > 0), or *cached and free* (hash known, ref == 0, in the LRU free
  queue, reusable as a hit until evicted), or empty;
- allocation takes empty blocks first, then evicts the least recently freed cached block;
- a request's blocks are freed in reverse order (tail blocks are evicted first), as vLLM does;
- ``kv_cache_usage`` = blocks held by requests / capacity (cached free blocks count as free).

Block hashes: ``block_hashes(tokens)`` chains ``hash((parent, tuple(block_tokens)))`` from
``NONE_HASH``; Python's hash of a tuple of ints is deterministic across processes (only str/bytes
hashing is salted), so every endpoint and run computes the same hashes, as vLLM instances sharing a
``PYTHONHASHSEED`` do. Hits: the longest run of leading blocks present, capped at
``(prompt_len - 1) // block_size`` blocks (the last prompt token is always computed).
"""
from __future__ import annotations

from collections import OrderedDict

NONE_HASH = 0x5EED_0000_0000_0001
_MASK = (1 << 64) - 1


def block_hashes(tokens: list[int], block_size: int = 16, parent: int = NONE_HASH,
                 start: int = 0) -> list[int]:
    """Chained hashes of the full blocks of ``tokens`` (from token index ``start``, a block
    boundary, with ``parent`` the hash of the block before it)."""
    out: list[int] = []
    append = out.append
    h = parent
    n = len(tokens) - (len(tokens) - start) % block_size
    # zip over one iterator yields the blocks as tuples without a slice per block (1.5x faster
    # on a 60K-token prompt, bench/bench_endpoint_cpu.py; every request hashes its whole prompt
    # on the endpoint's loop)
    it = iter(tokens) if start == 0 and n == len(tokens) else iter(tokens[start:n])
    for block in zip(*[it] * block_size):
        h = hash((h, block)) & _MASK
        append(h)
    return out


def max_hit_blocks(prompt_len: int, block_size: int = 16) -> int:
    """Most blocks a prompt can hit: whole blocks of ``prompt_len - 1``."""
    return max(0, prompt_len - 1) // block_size


class PrefixPool:
    """Block accounting of one engine's GPU KV cache (no real memory)."""

    def __init__(self, capacity_blocks: int, enable_caching: bool = True) -> None:
        if capacity_blocks <= 0:
            raise ValueError("capacity_blocks must be > 0")
        self.capacity = capacity_blocks
        self.enable_caching = enable_caching
        self._ref: dict[int, int] = {}          # cached hash -> refcount
        self._free: OrderedDict[int, None] = OrderedDict()  # cached, ref 0; front = evict first
        self.anon = 0                            # anonymous blocks held by requests
        self.evicted_blocks = 0                  # cumulative LRU evictions

    # ------------------------------------------------------------------ views
    @property
    def cached_blocks(self) -> int:
        return len(self._ref)

    @property
    def used_blocks(self) -> int:
        """Blocks held by requests (anonymous + referenced cached)."""
        return self.anon + len(self._ref) - len(self._free)

    @property
    def available(self) -> int:
        """Blocks an allocation can get: empty + cached-free (evictable)."""
        return self.capacity - self.used_blocks

    def usage(self) -> float:
        return self.used_blocks / self.capacity

    def contains(self, h: int) -> bool:
        return h in self._ref

    # ------------------------------------------------------------------ lookup / allocation
    def lookup(self, hashes: list[int], prompt_len: int, block_size: int = 16) -> int:
        """Number of leading blocks of ``hashes`` cached, capped at whole blocks of len-1."""
        if not self.enable_caching:
            return 0
        cap = min(len(hashes), max_hit_blocks(prompt_len, block_size))
        n = 0
        ref = self._ref
        while n < cap and hashes[n] in ref:
            n += 1
        return n

    def free_hits(self, hashes: list[int]) -> int:
        """How many of these (cached) blocks are currently unreferenced (touching them uses
        up available capacity)."""
        return sum(1 for h in hashes if h in self._free)

    def touch(self, hashes: list[int]) -> None:
        """Reference cached blocks (hits) for a request."""
        for h in hashes:
            r = self._ref[h]
            if r == 0:
                del self._free[h]
            self._ref[h] = r + 1

    def can_allocate(self, n: int) -> bool:
        return n <= self.available

    def allocate(self, n: int) -> bool:
        """Take ``n`` anonymous blocks (evicting LRU cached-free blocks as needed)."""
        if n > self.available:
            return False
        empty = self.capacity - self.anon - len(self._ref)
        need_evict = n - empty
        while need_evict > 0:
            h, _ = self._free.popitem(last=False)
            del self._ref[h]
            self.evicted_blocks += 1
            need_evict -= 1
        self.anon += n
        return True

    def register(self, hashes: list[int]) -> list[int]:
        """Turn anonymous blocks of a request into cached blocks with these hashes (after their
        KV is computed). A hash already cached (computed concurrently by another request) is
        shared and the anonymous block is given back. Returns the hashes the request now holds."""
        held = []
        for h in hashes:
            if self.anon <= 0:
                break
            self.anon -= 1
            if not self.enable_caching:
                self.anon += 1  # stays anonymous
                continue
            r = self._ref.get(h)
            if r is None:
                self._ref[h] = 1
            else:
                if r == 0:
                    del self._free[h]
                self._ref[h] = r + 1
            held.append(h)
        return held

    def reset(self) -> bool:
        """Drop every cached block, as vLLM's ``reset_prefix_cache``: refused (False) while any
        request holds blocks."""
        if self.used_blocks:
            return False
        self._ref.clear()
        self._free.clear()
        return True

    def release(self, hashes: list[int], anon: int) -> None:
        """Free a request's blocks: cached ones go to the LRU tail in reverse order."""
        for h in reversed(hashes):
            r = self._ref.get(h)
            if r is None:
                continue
            r -= 1
            self._ref[h] = r
            if r == 0:
                self._free[h] = None
        self.anon -= anon
        if self.anon < 0:
            self.anon = 0
