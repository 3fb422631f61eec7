"""Store objects of whole chunks (adev.emulator.chunks), with spans worked out by hand."""
from __future__ import annotations

from adev.emulator.chunks import lookup_span

H = list(range(100, 120))          # block hashes of a 20-block prompt: block b has hash 100 + b


def keys(hs):
    return [f"k{h}" for h in hs]


def test_lookup_span_covers_complete_chunks_past_the_gpu_hit():
    # GPU hit 6 blocks, lookup up to block 19 (exclusive), C = 4: chunks 1 (blocks 4-7),
    # 2 (8-11), 3 (12-15); chunk 4 (16-19) is not complete below 19
    s = lookup_span(H, 6, 19, 4, keys)
    assert s.keys == ["k107", "k111", "k115"] and (s.start, s.end) == (1, 16)
    assert s.blocks == 10                                   # blocks 6..15
    # hits: chunks 1 and 2 present -> blocks 6..11 per block, each its chunk's value
    assert s.per_block([1, 1]) == [1] * 6
    assert s.per_block([1, 0, 1]) == [1, 1, 0, 0, 0, 0, 1, 1, 1, 1]
    # objects needed for the first n hit blocks: blocks 6-7 are chunk 1, 8 opens chunk 2
    assert [s.chunks_for(n) for n in (0, 1, 2, 3, 6, 7, 10)] == [0, 1, 1, 2, 2, 3, 3]
    # blocks held by the first k objects, from block 6 on
    assert [s.blocks_of(k) for k in (0, 1, 2, 3, 4)] == [0, 2, 6, 10, 10]


def test_one_block_per_object_is_the_block_list():
    s = lookup_span(H, 3, 9, 1, keys)
    assert s.keys == keys(H[3:9]) and s.blocks == 6
    assert s.per_block([1, 1, 0]) == [1, 1, 0]
    assert s.chunks_for(4) == 4 and s.blocks_of(2) == 2


def test_no_complete_chunk_past_the_hit():
    s = lookup_span(H, 5, 7, 4, keys)                       # chunk 1 would end at block 8
    assert s.keys == [] and s.blocks == 0 and s.per_block([]) == []


def test_span_without_a_complete_chunk_asks_for_no_keys():
    asked = []

    def keys_logged(hs):
        asked.append(list(hs))
        return keys(hs)
    # blocks 5..6 with C = 4: chunk 1 (4-7) is incomplete below block 7; the span is empty and
    # sits at its first block (end = max(first, 1 x 4) = 5)
    s = lookup_span(H, 5, 7, 4, keys_logged)
    assert (s.first, s.end, s.start, s.chunk) == (5, 5, 1, 4) and asked == []
    assert s.chunks_for(0) == 0 and s.blocks_of(3) == 0
    s = lookup_span(H, 5, 8, 4, keys_logged)                # chunk 1 is complete at block 8
    assert asked == [[107]] and (s.end, s.blocks) == (8, 3)
