"""Store objects of whole chunks of blocks: which objects a request reads and writes.

The emulator's store keeps one Mooncake object per *chunk* of ``C = stack.store.chunk_blocks``
full blocks, as LMCache keeps one per 256-token chunk (``C = 1``: one object per 16-token block,
as vLLM's Mooncake store connector). Chunk ``j`` of a prompt covers blocks ``[j*C, (j+1)*C)``;
it is keyed by the hash of its last block (a block's hash names the whole prefix up to it, so the
key names the chunk and everything before it) and it exists only once complete: the blocks past
the prompt's last complete chunk are never stored and never looked up.

Everything the store reports stays counted per block: a chunk hit is ``C`` hit blocks, a chunk put
``C`` put blocks. Fewer, larger objects cost the host less per block (the real client's cost is
mostly per key: ``bench/bench_store_io.py --chunk-blocks``), so real reads keep pace with the tier
profiles at a higher time scale; the cost in fidelity is that a hit ends on a chunk boundary
(at most ``C - 1`` blocks of a prefix the store could have served are recomputed).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Span:
    """The store objects of a request's blocks ``[first, end)`` (absolute block indices).

    ``keys[i]`` is chunk ``start + i``; ``end`` is the end of the last complete chunk (so blocks
    ``[end, ...)`` past it are not covered); ``chunk`` is ``C``."""
    keys: list[str]
    first: int
    end: int
    start: int
    chunk: int

    @property
    def blocks(self) -> int:
        """Blocks the span's objects cover from ``first`` on: ``max(0, end - first)``."""
        return max(0, self.end - self.first)

    def chunks_for(self, n: int) -> int:
        """Objects holding blocks ``[first, first + n)``: ``ceil((first + n) / C) - start``
        (0 for ``n = 0``)."""
        if n <= 0:
            return 0
        return -(-(self.first + n) // self.chunk) - self.start

    def blocks_of(self, k: int) -> int:
        """Blocks from ``first`` on held by the span's first ``k`` objects:
        ``clip((start + k) * C, first, end) - first``."""
        return max(0, min(self.end, (self.start + k) * self.chunk) - self.first)

    def per_block(self, per_chunk: Sequence[T]) -> list[T]:
        """One value per block of ``[first, first + blocks_of(len(per_chunk)))``, each its
        chunk's."""
        c, s, f = self.chunk, self.start, self.first
        return [per_chunk[b // c - s] for b in range(f, f + self.blocks_of(len(per_chunk)))]


def lookup_span(hashes: Sequence[int], first: int, end: int, chunk: int,
                keys: Callable[[list[int]], list[str]]) -> Span:
    """The objects to look up for blocks ``[first, end)`` of a prompt with block hashes ``hashes``:
    every complete chunk that ends past ``first``; ``keys`` maps chunk-end hashes to store keys."""
    start = first // chunk
    stop = end // chunk
    ends = [hashes[(j + 1) * chunk - 1] for j in range(start, stop)]
    return Span(keys=keys(ends) if ends else [], first=first, end=max(first, stop * chunk),
                start=start, chunk=chunk)
