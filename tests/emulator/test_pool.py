import pytest

from adev.emulator.pool import NONE_HASH, PrefixPool, block_hashes, max_hit_blocks


def test_block_hashes_chain_and_only_full_blocks():
    toks = list(range(40))
    hs = block_hashes(toks, 16)
    assert len(hs) == 2
    # a hash names the whole prefix: same block content after a different prefix -> different hash
    other = block_hashes([99] * 16 + toks[16:32], 16)
    assert other[1] != hs[1]
    # continuing from a parent equals hashing the whole sequence
    assert block_hashes(toks[:32], 16, hs[0], start=16) == hs[1:]
    assert block_hashes(toks, 16) == hs  # deterministic
    assert block_hashes(toks[:15], 16) == []
    assert NONE_HASH != 0


def test_hits_capped_at_len_minus_one():
    assert max_hit_blocks(32) == 1     # 31 tokens -> 1 whole block
    assert max_hit_blocks(33) == 2
    assert max_hit_blocks(1) == 0
    pool = PrefixPool(100)
    toks = list(range(32))
    hs = block_hashes(toks)
    assert pool.allocate(2)
    held = pool.register(hs)
    assert held == hs
    assert pool.lookup(hs, 32) == 1    # the last token is always computed
    assert pool.lookup(hs, 33) == 2


def test_lru_eviction_refcounts_and_reverse_free_order():
    pool = PrefixPool(4)
    a = block_hashes(list(range(32)))          # 2 blocks
    pool.allocate(2)
    pool.register(a)
    assert pool.used_blocks == 2 and pool.available == 2
    pool.release(a, 0)
    assert pool.used_blocks == 0 and pool.available == 4 and pool.cached_blocks == 2
    # a new request takes the 2 empty blocks first: a stays cached
    b = block_hashes(list(range(100, 132)))
    pool.allocate(2)
    pool.register(b)
    assert pool.lookup(a, 33) == 2
    # one more block: evicts a's *tail* block first (freed in reverse order)
    pool.allocate(1)
    assert pool.evicted_blocks == 1
    assert pool.contains(a[0]) and not pool.contains(a[1])
    assert pool.lookup(a, 33) == 1
    # referenced blocks are never evicted
    assert not pool.allocate(2)
    pool.touch(a[:1])
    assert pool.available == 0
    assert not pool.allocate(1)


def test_usage_counts_only_held_blocks():
    pool = PrefixPool(10)
    hs = block_hashes(list(range(64)))
    pool.allocate(4)
    pool.register(hs)
    assert abs(pool.usage() - 0.4) < 1e-9
    pool.release(hs, 0)
    assert pool.usage() == 0.0 and pool.cached_blocks == 4


def test_recompute_mode_caches_nothing():
    pool = PrefixPool(10, enable_caching=False)
    hs = block_hashes(list(range(64)))
    pool.allocate(4)
    assert pool.register(hs) == []
    assert pool.lookup(hs, 64) == 0
    pool.release([], 4)
    assert pool.available == 10


# ---------------------------------------------------------------- hand-worked edge cases

_M = (1 << 64) - 1


def test_capacity_must_be_positive_and_one_block_is_enough():
    with pytest.raises(ValueError, match=r"^capacity_blocks must be > 0$"):
        PrefixPool(0)
    with pytest.raises(ValueError, match=r"^capacity_blocks must be > 0$"):
        PrefixPool(-3)
    pool = PrefixPool(1)
    assert pool.capacity == 1 and pool.enable_caching is True
    assert pool.available == 1 and pool.anon == 0 and pool.evicted_blocks == 0
    assert pool.allocate(1) and pool.available == 0 and pool.usage() == 1.0


def test_block_hashes_by_hand_with_default_parent_and_a_start_offset():
    toks = list(range(50))                       # 3 whole blocks of 16 + 2 tokens
    h0 = hash((0x5EED_0000_0000_0001, tuple(range(0, 16)))) & _M
    h1 = hash((h0, tuple(range(16, 32)))) & _M
    h2 = hash((h1, tuple(range(32, 48)))) & _M
    assert NONE_HASH == 0x5EED_0000_0000_0001
    assert block_hashes(toks) == [h0, h1, h2]    # default block size 16, default parent
    assert all(0 <= h < 1 << 64 for h in (h0, h1, h2))
    # from token 16 (a block boundary) with the first block's hash as parent: the last two
    # whole blocks; the 2 trailing tokens are not a block
    assert block_hashes(toks, 16, h0, start=16) == [h1, h2]
    assert block_hashes(toks, 16, h1, start=32) == [h2]
    assert block_hashes(toks, 16, h2, start=48) == []
    # block size 8 from token 40: tokens 40..47 form one block, 48..49 do not
    assert block_hashes(toks, 8, 7, start=40) == [hash((7, tuple(range(40, 48)))) & _M]


def test_block_hashes_mask_negative_python_hashes_to_64_bits():
    # some block's raw Python hash is negative; the mask keeps every hash in [0, 2**64)
    raw = []
    h = NONE_HASH
    for i in range(64):
        r = hash((h, tuple(range(16 * i, 16 * i + 16))))
        raw.append(r)
        h = r & _M
    assert any(r < 0 for r in raw)
    hs = block_hashes(list(range(64 * 16)))
    assert hs == [r & _M for r in raw]
    assert all(0 <= x < 1 << 64 for x in hs)


def test_max_hit_blocks_edges():
    assert max_hit_blocks(0) == 0                # not -1 // 16 = -1
    assert max_hit_blocks(16) == 0               # 15 tokens: no whole block
    assert max_hit_blocks(17) == 1
    assert max_hit_blocks(49) == 3               # default block size 16
    assert max_hit_blocks(9, 8) == 1 and max_hit_blocks(8, 8) == 0
    # one-token blocks: a 1-token prompt still computes its only token
    assert max_hit_blocks(1, 1) == 0 and max_hit_blocks(0, 1) == 0 and max_hit_blocks(3, 1) == 2


def _pool_with(cap, hashes_free=(), hashes_held=()):
    """A pool whose ``hashes_free`` are cached and unreferenced and ``hashes_held`` cached and
    referenced once."""
    pool = PrefixPool(cap)
    free, held = list(hashes_free), list(hashes_held)
    assert pool.allocate(len(free) + len(held))
    assert pool.register(free + held) == free + held
    pool.release(free, 0)
    return pool


def test_lookup_stops_at_first_miss_and_at_the_hash_count():
    pool = _pool_with(10, hashes_held=[11, 12, 13])
    assert pool.lookup([11, 12, 13], 1000) == 3      # cap = number of hashes, not the prompt
    assert pool.lookup([11, 99, 13], 1000) == 1      # a miss ends the run
    assert pool.lookup([99, 11], 1000) == 0
    assert pool.lookup([11, 12, 13], 33) == 2        # (33 - 1) // 16
    assert pool.lookup([11, 12, 13], 40, 8) == 3     # 39 // 8 = 4, capped at 3 hashes


def test_free_hits_counts_only_unreferenced_cached_blocks():
    pool = _pool_with(10, hashes_free=[1, 2, 3], hashes_held=[4, 5])
    assert pool.free_hits([1, 2, 3, 4, 5, 6]) == 3   # 4, 5 referenced, 6 not cached
    assert pool.free_hits([2]) == 1
    assert pool.free_hits([4, 6]) == 0
    assert pool.free_hits([]) == 0


def test_touch_counts_references_and_release_frees_at_zero():
    pool = _pool_with(4, hashes_free=[1, 2])
    assert pool.used_blocks == 0 and pool.available == 4
    pool.touch([1])                 # free -> referenced once
    assert pool.used_blocks == 1 and pool.available == 3 and pool.free_hits([1, 2]) == 1
    pool.touch([1])                 # referenced -> twice (not taken out of the free queue again)
    assert pool.used_blocks == 1 and pool.free_hits([1]) == 0
    pool.release([1], 0)            # 2 -> 1: still held
    assert pool.used_blocks == 1 and pool.free_hits([1]) == 0
    pool.release([1], 0)            # 1 -> 0: free again, cached
    assert pool.used_blocks == 0 and pool.free_hits([1]) == 1 and pool.contains(1)
    # 2 was never touched: evicted first (it went to the free queue before 1 came back)
    assert pool.allocate(3)         # 2 empty + 1 eviction
    assert pool.evicted_blocks == 1 and not pool.contains(2) and pool.contains(1)


def test_allocate_and_can_allocate_at_exactly_the_available_count():
    pool = _pool_with(6, hashes_free=[1, 2, 3], hashes_held=[4])
    # 2 empty + 3 cached free = 5 available; 1 referenced
    assert pool.available == 5
    assert pool.can_allocate(5) and not pool.can_allocate(6)
    assert pool.can_allocate(0)
    assert not pool.allocate(6) and pool.anon == 0 and pool.evicted_blocks == 0
    assert pool.allocate(5)         # the 2 empty blocks, then 3 LRU evictions
    assert pool.anon == 5 and pool.evicted_blocks == 3 and pool.available == 0
    assert pool.cached_blocks == 1 and pool.contains(4)
    assert not any(pool.contains(h) for h in (1, 2, 3))
    assert not pool.can_allocate(1) and pool.can_allocate(0)


def test_allocate_evicts_in_lru_order_one_at_a_time():
    pool = _pool_with(4, hashes_free=[1, 2, 3])     # released in reverse: 3, 2, 1
    assert pool.allocate(1) and pool.evicted_blocks == 0   # the one empty block
    assert pool.allocate(1) and pool.evicted_blocks == 1 and not pool.contains(3)
    assert pool.allocate(2) and pool.evicted_blocks == 3
    assert pool.cached_blocks == 0 and pool.anon == 4 and pool.usage() == 1.0


def test_register_stops_when_no_anonymous_block_is_left():
    pool = PrefixPool(10)
    assert pool.allocate(2)
    assert pool.register([1, 2, 3]) == [1, 2]       # only 2 blocks were allocated
    assert pool.anon == 0 and pool.cached_blocks == 2 and pool.used_blocks == 2
    assert pool.register([4]) == [] and not pool.contains(4) and pool.anon == 0


def test_register_with_caching_off_keeps_blocks_anonymous():
    pool = PrefixPool(10, enable_caching=False)
    assert pool.allocate(3)
    assert pool.register([1, 2]) == []
    assert pool.anon == 3 and pool.cached_blocks == 0 and pool.used_blocks == 3
    assert pool.available == 7
    pool.release([], 3)
    assert pool.anon == 0 and pool.available == 10


def test_register_shares_a_hash_already_cached():
    pool = _pool_with(10, hashes_free=[1], hashes_held=[2])
    assert pool.used_blocks == 1
    assert pool.allocate(2) and pool.anon == 2
    # both hashes were computed concurrently elsewhere: the request shares them, its anonymous
    # blocks are given back
    assert pool.register([1, 2]) == [1, 2]
    assert pool.anon == 0 and pool.cached_blocks == 2 and pool.used_blocks == 2
    assert pool.free_hits([1, 2]) == 0
    pool.release([1, 2], 0)          # 1: 1 -> 0 (free), 2: 2 -> 1 (still held)
    assert pool.used_blocks == 1 and pool.free_hits([1, 2]) == 1
    pool.release([2], 0)
    assert pool.used_blocks == 0 and pool.free_hits([1, 2]) == 2


def test_release_ignores_unknown_hashes_and_clamps_the_anonymous_count():
    pool = _pool_with(10, hashes_held=[1])
    assert pool.allocate(2)
    pool.release([77, 1, 88], 1)
    assert pool.anon == 1 and pool.cached_blocks == 1 and pool.used_blocks == 1
    assert pool.free_hits([1]) == 1 and not pool.contains(77)
    pool.release([], 5)              # more than held: clamped at 0
    assert pool.anon == 0 and pool.used_blocks == 0 and pool.available == 10
    pool.release([], 0)
    assert pool.anon == 0


def test_reset_refused_while_blocks_are_held():
    pool = _pool_with(10, hashes_free=[1], hashes_held=[2])
    assert pool.reset() is False and pool.cached_blocks == 2
    pool.release([2], 0)
    assert pool.reset() is True
    assert pool.cached_blocks == 0 and pool.free_hits([1, 2]) == 0 and pool.available == 10
