"""PrefixCache: requests share the cached blocks of their longest common prefix."""
from __future__ import annotations

from dataclasses import dataclass, field

from .hashing import ROOT_HASH, block_hashes
from .pool import Block, BlockPool
from .stats import StatsRecorder


class CacheFull(Exception):
    """Not enough free blocks for the request; nothing was changed."""


@dataclass(frozen=True)
class Allocation:
    request_id: str
    block_ids: list[int]
    hit_tokens: int
    new_blocks: int


@dataclass
class _Request:
    tokens: list[int]
    extra: str | None
    blocks: list[Block] = field(default_factory=list)
    hashes: list[int] = field(default_factory=list)


class PrefixCache:
    """A vLLM-style automatic prefix cache over ``num_blocks`` blocks of ``block_size`` tokens."""

    def __init__(self, num_blocks: int, block_size: int = 16, stats_window: int = 1000) -> None:
        if not isinstance(block_size, int) or block_size <= 0:
            raise ValueError(f"block_size must be a positive integer, got {block_size!r}")
        self.block_size = block_size
        self.pool = BlockPool(num_blocks)
        self.stats = StatsRecorder(stats_window)
        self._requests: dict[str, _Request] = {}

    def _blocks_needed(self, n_tokens: int) -> int:
        return -(-n_tokens // self.block_size)

    def _hit_blocks(self, hashes: list[int], n_tokens: int) -> list[Block]:
        hits = []
        for h in hashes:
            b = self.pool.get_cached(h)
            if b is None:
                break
            hits.append(b)
        # at least one token must be computed: a fully cached prompt recomputes its last block
        limit = max(0, (n_tokens - 1) // self.block_size)
        return hits[:limit]

    def lookup(self, tokens: list[int], extra: str | None = None) -> int:
        """Tokens of ``tokens`` a new request would find cached now (no side effects)."""
        hashes = block_hashes(tokens, self.block_size, extra)
        return len(self._hit_blocks(hashes, len(tokens))) * self.block_size

    def acquire(self, request_id: str, tokens: list[int], extra: str | None = None) -> Allocation:
        """Reference the cached prefix of ``tokens`` and allocate blocks for the rest."""
        if request_id in self._requests:
            raise ValueError(f"request {request_id!r} already holds blocks")
        if not tokens:
            raise ValueError("a request needs at least one token")
        hashes = block_hashes(tokens, self.block_size, extra)
        hits = self._hit_blocks(hashes, len(tokens))
        n_new = self._blocks_needed(len(tokens)) - len(hits)
        reclaimable = sum(1 for b in hits if b.ref_cnt == 0)
        if n_new > self.pool.num_free - reclaimable:
            raise CacheFull(f"request {request_id!r} needs {n_new} new blocks, "
                            f"{self.pool.num_free - reclaimable} free")
        self.pool.touch(hits)
        before = self.pool.evictions
        new = self.pool.allocate(n_new)
        self.stats.record_eviction(self.pool.evictions - before)
        req = _Request(tokens=list(tokens), extra=extra, blocks=hits + new)
        self._requests[request_id] = req
        self._cache_full_blocks(req, hashes)
        hit_tokens = len(hits) * self.block_size
        self.stats.record(len(tokens), hit_tokens)
        return Allocation(request_id=request_id, block_ids=[b.block_id for b in req.blocks],
                          hit_tokens=hit_tokens, new_blocks=n_new)

    def _cache_full_blocks(self, req: _Request, hashes: list[int]) -> None:
        """Register the hashes of blocks that are full but not yet hashed."""
        for i in range(len(req.hashes), len(hashes)):
            block = req.blocks[i]
            if block.block_hash is None:
                self.pool.cache_block(block, hashes[i])
            req.hashes.append(hashes[i])

    def append_tokens(self, request_id: str, tokens: list[int]) -> list[int]:
        """Grow a request (decode); returns the ids of newly allocated blocks. Blocks that
        become full are cached. CacheFull (nothing changed) if blocks run out."""
        req = self._requests[request_id]
        total = len(req.tokens) + len(tokens)
        n_new = self._blocks_needed(total) - len(req.blocks)
        if n_new > self.pool.num_free:
            raise CacheFull(f"request {request_id!r} needs {n_new} new blocks, "
                            f"{self.pool.num_free} free")
        parent = req.hashes[-1] if req.hashes else ROOT_HASH
        start = len(req.hashes) * self.block_size
        all_tokens = req.tokens + list(tokens)
        more = block_hashes(all_tokens[start:], self.block_size, req.extra, parent=parent)
        before = self.pool.evictions
        new = self.pool.allocate(n_new)
        self.stats.record_eviction(self.pool.evictions - before)
        req.tokens = all_tokens
        req.blocks.extend(new)
        self._cache_full_blocks(req, req.hashes + more)
        return [b.block_id for b in new]

    def release(self, request_id: str) -> None:
        """Drop the request's references, last block first, so a prefix outlives its tail."""
        req = self._requests.pop(request_id)
        self.pool.free(list(reversed(req.blocks)))

    def blocks_of(self, request_id: str) -> list[int]:
        return [b.block_id for b in self._requests[request_id].blocks]

    def requests(self) -> list[str]:
        return list(self._requests)

    @property
    def usage(self) -> float:
        """Fraction of blocks referenced by at least one request."""
        return 1.0 - self.pool.num_free / self.pool.num_blocks

    def reset(self) -> bool:
        """Forget all cached prefixes; False (and nothing done) while requests hold blocks."""
        return self.pool.reset_cache()

