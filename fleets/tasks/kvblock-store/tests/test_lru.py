from kvblock.lru import LRUCache, LRUIndex


def test_index_order():
    idx = LRUIndex()
    idx.insert(b"a", 0)
    idx.insert(b"b", 1)
    idx.insert(b"c", 2)
    idx.touch(b"a")
    assert idx.keys() == [b"b", b"c", b"a"]
    assert idx.insert(b"b", 7) == 1
    assert idx.lru() == b"c"
    assert idx.pop_lru() == (b"c", 2)
    assert idx.get(b"b") == 7 and len(idx) == 2


def test_cache_bounded():
    c = LRUCache(2)
    c.put("x", 1)
    c.put("y", 2)
    assert c.get("x") == 1
    c.put("z", 3)
    assert "y" not in c and c.get("x") == 1 and c.get("z") == 3
    off = LRUCache(0)
    off.put("x", 1)
    assert len(off) == 0 and off.get("x", "none") == "none"
