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
