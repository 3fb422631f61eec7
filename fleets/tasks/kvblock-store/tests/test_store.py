import pytest

from kvblock.device import BLOCK_SIZE
from kvblock.layout import CorruptError, pack_slot
from kvblock.store import KVStore, StoreFull


def test_put_get_delete(dev):
    s = KVStore.format(dev)
    s.put(b"alpha", b"1")
    s.put(b"beta", b"22")
    assert s.get(b"alpha") == b"1" and s.get(b"beta") == b"22"
    assert b"alpha" in s and len(s) == 2
    s.delete(b"alpha")
    assert b"alpha" not in s
    with pytest.raises(KeyError):
        s.get(b"alpha")
    assert s.get(b"alpha", None) is None
    with pytest.raises(KeyError):
        s.delete(b"alpha")


def test_overwrite_reuses_space(dev):
    s = KVStore.format(dev, slot_count=16)
    s.put(b"k", b"old")
    s.put(b"k", b"new")
    assert s.get(b"k") == b"new"
    st = s.stats()
    assert (st.used, st.free) == (1, 15)


def test_persists_across_reopen(dev, reopen):
    s = KVStore.format(dev)
    for i in range(50):
        s.put(b"key%d" % i, b"value%d" % i)
    s.close()
    s2 = KVStore.open(reopen())
    assert len(s2) == 50
    assert s2.get(b"key17") == b"value17"
    assert s2.stats().generation == 1
    s2.put(b"key17", b"changed")
    s3 = KVStore.open(reopen())
    assert s3.keys()[-2:] == [b"key49", b"key17"]  # recovered in write (seq) order
    assert s3.get(b"key17") == b"changed"
    assert s3.stats().generation == 2


def test_recovery_prefers_highest_seq(dev, reopen):
    s = KVStore.format(dev)
    s.put(b"k", b"first")  # slot 0, seq 1
    # a crash after writing a newer copy but before freeing the old one:
    dev.write(BLOCK_SIZE + 5 * BLOCK_SIZE, pack_slot(b"k", b"second", 100, BLOCK_SIZE))
    s2 = KVStore.open(reopen())
    assert s2.get(b"k") == b"second"
    assert s2.stats().dropped_duplicates == 1
    assert s2.stats().used == 1


def test_corrupt_slot_skipped_on_open(dev, reopen):
    s = KVStore.format(dev)
    s.put(b"good", b"g")
    slot = s.put(b"bad", b"b" * 100)
    raw = bytearray(dev.read(BLOCK_SIZE + slot * BLOCK_SIZE, BLOCK_SIZE))
    raw[60] ^= 0xFF
    dev.write(BLOCK_SIZE + slot * BLOCK_SIZE, bytes(raw))
    s2 = KVStore.open(reopen())
    assert s2.get(b"good") == b"g"
    assert b"bad" not in s2
    assert s2.stats().corrupt_slots == 1


def test_full_reject_and_lru(dev):
    s = KVStore.format(dev, slot_count=3)
    for k in (b"a", b"b", b"c"):
        s.put(k, k)
    with pytest.raises(StoreFull):
        s.put(b"d", b"d")
    s2 = KVStore.format(dev, slot_count=3, evict="lru")
    for k in (b"a", b"b", b"c"):
        s2.put(k, k)
    s2.get(b"a")
    s2.put(b"d", b"d")
    assert b"b" not in s2 and b"a" in s2 and s2.stats().evictions == 1


def test_input_validation(dev):
    s = KVStore.format(dev)
    with pytest.raises(TypeError):
        s.put("text", b"v")
    with pytest.raises(TypeError):
        s.put(b"k", "text")
    with pytest.raises(ValueError):
        s.put(b"", b"v")
    with pytest.raises(ValueError):
        s.put(b"k", bytes(BLOCK_SIZE))
    assert len(s) == 0


def test_cache_statistics(dev, reopen):
    s = KVStore.format(dev)
    s.put(b"x", b"1")
    s.close()
    s2 = KVStore.open(reopen(), cache_entries=4)
    assert s2.get(b"x") == b"1"
    assert s2.get(b"x") == b"1"
    st = s2.stats()
    assert (st.gets, st.cache_misses, st.cache_hits) == (2, 1, 1)


def test_open_unformatted_device(dev):
    dev.write(0, bytes(BLOCK_SIZE))
    with pytest.raises(CorruptError):
        KVStore.open(dev)
