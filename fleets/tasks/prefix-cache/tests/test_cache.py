import pytest

from prefixcache.cache import CacheFull, PrefixCache


def toks(n, start=0):
    return list(range(start, start + n))


def test_shared_prefix_hits():
    c = PrefixCache(num_blocks=16, block_size=4)
    a = c.acquire("a", toks(10))
    assert a.hit_tokens == 0 and a.new_blocks == 3
    b = c.acquire("b", toks(8) + [99, 98, 97])
    assert b.hit_tokens == 8 and b.new_blocks == 1
    assert b.block_ids[:2] == a.block_ids[:2]
    assert c.stats.hit_tokens == 8 and c.stats.query_tokens == 21


def test_fully_cached_prompt_recomputes_last_block():
    c = PrefixCache(num_blocks=8, block_size=4)
    c.acquire("a", toks(8))
    c.release("a")
    assert c.lookup(toks(8)) == 4
    assert c.acquire("b", toks(8)).hit_tokens == 4
    assert c.lookup(toks(9)) == 8


def test_released_blocks_stay_cached():
    c = PrefixCache(num_blocks=8, block_size=4)
    ids = c.acquire("a", toks(12)).block_ids
    c.release("a")
    assert c.usage == 0.0
    again = c.acquire("b", toks(13))
    assert again.hit_tokens == 12 and again.block_ids[:3] == ids


def test_tail_blocks_evicted_before_head():
    c = PrefixCache(num_blocks=4, block_size=4)
    c.acquire("a", toks(16))
    c.release("a")
    c.acquire("x", toks(4, start=500))  # takes one block: must be a's last block
    c.release("x")
    assert c.lookup(toks(17)) == 12
    assert c.stats.evictions == 1


def test_cache_full_changes_nothing():
    c = PrefixCache(num_blocks=3, block_size=4)
    c.acquire("a", toks(8))
    with pytest.raises(CacheFull):
        c.acquire("b", toks(8, start=100))
    assert c.requests() == ["a"] and c.pool.num_free == 1
    assert c.stats.queries == 1


def test_cached_free_blocks_are_not_double_counted():
    c = PrefixCache(num_blocks=4, block_size=4)
    c.acquire("a", toks(9))
    c.release("a")  # 4 free, 2 of them cached (a's full blocks)
    with pytest.raises(CacheFull):
        c.acquire("b", toks(8) + toks(9, start=50))  # 2 hits + 3 new > 4 - 2
    assert c.pool.num_free == 4 and c.requests() == []


def test_append_tokens_caches_filled_blocks():
    c = PrefixCache(num_blocks=8, block_size=4)
    c.acquire("a", toks(6))
    assert c.append_tokens("a", toks(2, start=6)) == []
    new = c.append_tokens("a", toks(3, start=8))
    assert len(new) == 1 and len(c.blocks_of("a")) == 3
    c.release("a")
    assert c.lookup(toks(12)) == 8


def test_extra_isolates_prefixes():
    c = PrefixCache(num_blocks=8, block_size=4)
    c.acquire("a", toks(9), extra="adapter-1")
    assert c.lookup(toks(9)) == 0
    assert c.lookup(toks(9), extra="adapter-1") == 8


def test_request_bookkeeping_errors():
    c = PrefixCache(num_blocks=8, block_size=4)
    c.acquire("a", toks(3))
    with pytest.raises(ValueError):
        c.acquire("a", toks(3))
    with pytest.raises(ValueError):
        c.acquire("b", [])
    with pytest.raises(KeyError):
        c.release("nope")
    assert c.reset() is False
    c.release("a")
    assert c.reset() is True and c.lookup(toks(5)) == 0
