"""Hidden acceptance tests for prefix-cache (not shown to the sessions)."""
import pytest

from prefixcache.cache import CacheFull, PrefixCache
from prefixcache.hashing import ROOT_HASH, block_hashes, hash_block
from prefixcache.pool import BlockPool, FreeBlockQueue, NoFreeBlocks
from prefixcache.stats import StatsRecorder
from prefixcache.tokenizer import N_SPECIAL, Tokenizer


def test_tokenizer_edge_cases():
    t = Tokenizer(vocab_size=1000)
    assert t.encode("   \n\t ") == []
    assert len(t.encode("café naïve")) == 2
    ids = t.encode("x = [1, 2]")
    assert len(ids) == 7 and all(N_SPECIAL <= i < 1000 for i in ids)
    assert t.piece_id("x") == ids[0]
    assert t.decode(t.encode("café")) == "café"


def test_hash_argument_checks():
    with pytest.raises(TypeError):
        hash_block(ROOT_HASH, [True])
    with pytest.raises(ValueError):
        hash_block(ROOT_HASH, [2**32])
    with pytest.raises(ValueError):
        hash_block(2**64, [1])
    assert hash_block(ROOT_HASH, [2**32 - 1]) != hash_block(ROOT_HASH, [0])
    assert hash_block(ROOT_HASH, [1], "") != hash_block(ROOT_HASH, [1])


def test_block_hashes_equal_manual_chain():
    toks = [7] * 10 + [8] * 10
    h1 = hash_block(ROOT_HASH, toks[:5], "e")
    h2 = hash_block(h1, toks[5:10], "e")
    h3 = hash_block(h2, toks[10:15], "e")
    assert block_hashes(toks[:19], 5, extra="e") == [h1, h2, h3]
    assert h1 != hash_block(ROOT_HASH, toks[:5])


def test_free_queue_operations():
    p = BlockPool(5)
    q = FreeBlockQueue([p.blocks[0], p.blocks[1], p.blocks[2]])
    q.remove(p.blocks[1])
    assert q.ids() == [0, 2] and len(q) == 2
    with pytest.raises(ValueError):
        q.append(p.blocks[0])
    with pytest.raises(ValueError):
        q.remove(p.blocks[4])
    assert q.popleft() is p.blocks[0]
    q.popleft()
    with pytest.raises(NoFreeBlocks):
        q.popleft()


def test_pool_over_allocation_changes_nothing():
    p = BlockPool(3)
    p.allocate(1)
    with pytest.raises(NoFreeBlocks):
        p.allocate(3)
    assert p.num_free == 2 and p.free_queue.ids() == [1, 2]
    with pytest.raises(ValueError):
        BlockPool(0)


def test_stats_window_slides():
    s = StatsRecorder(window=2)
    s.record(10, 10)
    s.record(10, 0)
    s.record(30, 15)
    assert s.window_hit_rate == pytest.approx(15 / 40)
    assert s.hit_rate == pytest.approx(25 / 50)
    snap = s.snapshot()
    assert (snap.queries, snap.query_tokens, snap.hit_tokens) == (3, 50, 25)
    with pytest.raises(ValueError):
        s.record(-1, 0)


def test_render_lines():
    s = StatsRecorder()
    s.record_eviction(2)
    lines = s.render().splitlines()
    assert "prefixcache_evictions_total 2" in lines
    assert "prefixcache_hit_rate 0.0" in lines
    assert "# TYPE prefixcache_window_hit_rate gauge" in lines


def test_lookup_has_no_side_effects():
    c = PrefixCache(num_blocks=8, block_size=4)
    c.acquire("a", list(range(9)))
    c.release("a")
    free = c.pool.free_queue.ids()
    assert c.lookup(list(range(9))) == 8
    assert c.pool.free_queue.ids() == free and c.stats.queries == 1


def test_divergence_mid_prompt():
    c = PrefixCache(num_blocks=16, block_size=4)
    base = list(range(20))
    c.acquire("a", base)
    other = base[:9] + [777] + base[10:]
    assert c.lookup(other) == 8
    b = c.acquire("b", other)
    assert b.hit_tokens == 8 and b.new_blocks == 3


def test_reclaimable_hits_are_not_free_capacity():
    c = PrefixCache(num_blocks=5, block_size=2)
    c.acquire("a", [1, 2, 3, 4, 5])  # 3 blocks, 2 hashed
    c.release("a")
    with pytest.raises(CacheFull):
        c.acquire("b", [1, 2, 3, 4] + list(range(100, 107)))  # 2 hits + 4 new > 5 - 2
    assert c.pool.num_free == 5 and all(b.ref_cnt == 0 for b in c.pool.blocks)
    ok = c.acquire("c", [1, 2, 3, 4] + list(range(100, 105)))  # 2 hits + 3 new
    assert ok.hit_tokens == 4 and c.pool.num_free == 0


def test_evictions_reach_stats():
    c = PrefixCache(num_blocks=2, block_size=2)
    c.acquire("a", [1, 2, 3, 4])
    c.release("a")
    c.acquire("b", [9, 9, 9, 9])
    assert c.stats.evictions == 2 and c.pool.num_cached == 2
    assert c.lookup([1, 2, 3, 4, 5]) == 0


def test_append_tokens_full_is_atomic():
    c = PrefixCache(num_blocks=2, block_size=2)
    c.acquire("a", [1, 2, 3])
    with pytest.raises(CacheFull):
        c.append_tokens("a", [4, 5, 6])
    assert len(c.blocks_of("a")) == 2
    assert c.append_tokens("a", [4]) == []
    c.release("a")
    assert c.lookup([1, 2, 3, 4, 0]) == 4


def test_usage_and_shared_refcounts():
    c = PrefixCache(num_blocks=10, block_size=4)
    c.acquire("a", list(range(9)))
    c.acquire("b", list(range(9)))
    assert c.usage == pytest.approx(0.4)  # 2 shared + 1 + 1
    c.release("a")
    assert c.usage == pytest.approx(0.3)
    assert [c.pool.blocks[i].ref_cnt for i in c.blocks_of("b")[:2]] == [1, 1]


def test_bad_cache_arguments():
    with pytest.raises(ValueError):
        PrefixCache(num_blocks=4, block_size=0)
    with pytest.raises(ValueError):
        PrefixCache(num_blocks=0)
    c = PrefixCache(num_blocks=4, block_size=4)
    with pytest.raises(KeyError):
        c.append_tokens("missing", [1])


def test_tiny_vocab_keeps_special_ids_reserved():
    t = Tokenizer(vocab_size=20)
    ids = t.encode(" ".join(f"tok_{i}" for i in range(200)) + " . , ;")
    assert set(ids).isdisjoint({0, 1, 2}) and max(ids) < 20


def test_identical_prompt_still_computes_one_block():
    c = PrefixCache(num_blocks=10, block_size=4)
    c.acquire("a", list(range(12)))
    again = c.acquire("b", list(range(12)))
    assert again.hit_tokens == 8 and again.new_blocks == 1
    assert c.lookup(list(range(13))) == 12


def test_release_puts_partial_and_tail_first():
    c = PrefixCache(num_blocks=4, block_size=2)
    c.acquire("a", [1, 2, 3, 4, 5, 6, 7])  # 3 full blocks + 1 partial
    c.release("a")
    c.acquire("x", [50, 51, 52])  # reuses a's partial block, then a's third block
    assert c.stats.evictions == 1
    assert c.lookup([1, 2, 3, 4, 5, 6, 7]) == 4
