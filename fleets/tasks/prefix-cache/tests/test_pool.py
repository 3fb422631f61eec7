import pytest

from prefixcache.pool import BlockPool, NoFreeBlocks


def test_allocation_and_free_order():
    p = BlockPool(4)
    a = p.allocate(3)
    assert [b.block_id for b in a] == [0, 1, 2] and p.num_free == 1
    p.free([a[2], a[0]])
    assert p.free_queue.ids() == [3, 2, 0]
    with pytest.raises(NoFreeBlocks):
        p.allocate(4)


def test_reusing_a_cached_block_evicts_it():
    p = BlockPool(2)
    a, b = p.allocate(2)
    assert p.cache_block(a, 111)
    p.free([a, b])
    assert p.get_cached(111) is a
    got = p.allocate(1)[0]
    assert got is a and got.block_hash is None and got.ref_cnt == 1
    assert p.get_cached(111) is None and p.evictions == 1


def test_touch_takes_free_block_out_of_queue():
    p = BlockPool(3)
    (a,) = p.allocate(1)
    p.cache_block(a, 7)
    p.free([a])
    p.touch([a])
    assert a.ref_cnt == 1 and a not in p.free_queue and p.num_free == 2
    p.free([a])
    with pytest.raises(ValueError):
        p.free([a])


def test_duplicate_hash_and_reset():
    p = BlockPool(3)
    a, b = p.allocate(2)
    assert p.cache_block(a, 5) is True
    assert p.cache_block(b, 5) is False and b.block_hash is None
    assert p.reset_cache() is False
    p.free([a, b])
    assert p.reset_cache() is True and p.num_cached == 0
