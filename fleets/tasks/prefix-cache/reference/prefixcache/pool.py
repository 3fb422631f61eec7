"""The block pool: fixed blocks with reference counts, a hash -> block map of cached blocks,
and a free queue in eviction order (least recently freed first)."""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


class NoFreeBlocks(Exception):
    """Fewer free blocks than requested."""


@dataclass
class Block:
    block_id: int
    ref_cnt: int = 0
    block_hash: int | None = None


class FreeBlockQueue:
    """Free blocks, least recently freed first; O(1) append, pop and removal from the middle."""

    def __init__(self, blocks: list[Block] | None = None) -> None:
        self._q: OrderedDict[int, Block] = OrderedDict()
        for b in blocks or []:
            self.append(b)

    def __len__(self) -> int:
        return len(self._q)

    def __contains__(self, block: Block) -> bool:
        return block.block_id in self._q

    def append(self, block: Block) -> None:
        if block.block_id in self._q:
            raise ValueError(f"block {block.block_id} is already free")
        self._q[block.block_id] = block

    def popleft(self) -> Block:
        if not self._q:
            raise NoFreeBlocks("the free queue is empty")
        return self._q.popitem(last=False)[1]

    def remove(self, block: Block) -> None:
        if self._q.pop(block.block_id, None) is None:
            raise ValueError(f"block {block.block_id} is not free")

    def ids(self) -> list[int]:
        """Block ids in eviction order."""
        return list(self._q)


class BlockPool:
    """``num_blocks`` blocks, all free at first in id order."""

    def __init__(self, num_blocks: int) -> None:
        if not isinstance(num_blocks, int) or num_blocks <= 0:
            raise ValueError(f"num_blocks must be a positive integer, got {num_blocks!r}")
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_queue = FreeBlockQueue(self.blocks)
        self.cached: dict[int, Block] = {}
        self.evictions = 0

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free(self) -> int:
        return len(self.free_queue)

    @property
    def num_cached(self) -> int:
        return len(self.cached)

    def get_cached(self, block_hash: int) -> Block | None:
        return self.cached.get(block_hash)

    def touch(self, blocks: list[Block]) -> None:
        """Take a reference on each (cached) block, pulling free ones out of the free queue."""
        for b in blocks:
            if b.ref_cnt == 0:
                self.free_queue.remove(b)
            b.ref_cnt += 1

    def allocate(self, n: int) -> list[Block]:
        """``n`` blocks from the head of the free queue, each with ref_cnt 1 and no hash; a
        block that was cached is evicted (dropped from the map, counted)."""
        if n < 0:
            raise ValueError(f"cannot allocate {n} blocks")
        if n > self.num_free:
            raise NoFreeBlocks(f"need {n} blocks, {self.num_free} free")
        out = []
        for _ in range(n):
            b = self.free_queue.popleft()
            if b.block_hash is not None:
                if self.cached.get(b.block_hash) is b:
                    del self.cached[b.block_hash]
                b.block_hash = None
                self.evictions += 1
            b.ref_cnt = 1
            out.append(b)
        return out

    def cache_block(self, block: Block, block_hash: int) -> bool:
        """Give ``block`` its hash and register it, unless another block holds that hash
        (then the block stays unregistered and False is returned)."""
        if block.block_hash is not None:
            raise ValueError(f"block {block.block_id} is already cached")
        if block_hash in self.cached:
            return False
        block.block_hash = block_hash
        self.cached[block_hash] = block
        return True

    def free(self, blocks: list[Block]) -> None:
        """Drop one reference from each block, in the order given; blocks reaching 0 join the
        tail of the free queue (cached ones stay in the map until evicted)."""
        for b in blocks:
            if b.ref_cnt <= 0:
                raise ValueError(f"block {b.block_id} is not in use")
        for b in blocks:
            b.ref_cnt -= 1
            if b.ref_cnt == 0:
                self.free_queue.append(b)

    def reset_cache(self) -> bool:
        """Forget every cached hash; refused (False) while any block is in use."""
        if self.num_free != self.num_blocks:
            return False
        for b in self.blocks:
            b.block_hash = None
        self.cached.clear()
        return True
