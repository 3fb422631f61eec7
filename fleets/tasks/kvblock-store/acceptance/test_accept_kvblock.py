"""Hidden acceptance tests for kvblock-store (not shown to the sessions)."""
import struct

import pytest

from kvblock.bitmap import SlotBitmap
from kvblock.device import BLOCK_SIZE, AlignmentError, BlockDevice, DeviceError, device_size
from kvblock.layout import (SLOT_FORMAT, SLOT_MAGIC, SUPER_FORMAT, SUPER_MAGIC, CorruptError,
                            pack_slot, unpack_slot, unpack_superblock)
from kvblock.store import KVStore, StoreFull


def test_multi_block_request_and_partial_reads(dev):
    blocks = [bytes([i]) * BLOCK_SIZE for i in range(1, 4)]
    dev.write(2 * BLOCK_SIZE, b"".join(blocks))
    assert dev.read(3 * BLOCK_SIZE, BLOCK_SIZE) == blocks[1]
    assert dev.read(2 * BLOCK_SIZE, 3 * BLOCK_SIZE) == b"".join(blocks)
    with pytest.raises(AlignmentError):
        dev.read(0, BLOCK_SIZE + 512)
    with pytest.raises(AlignmentError):
        dev.write(0, bytes(BLOCK_SIZE + 512))
    assert dev.read(BLOCK_SIZE, 0) == b""


def test_default_window_rounds_down(tmp_path):
    p = tmp_path / "odd.img"
    with open(p, "wb") as fh:
        fh.truncate(10 * BLOCK_SIZE + 100)
    assert device_size(str(p)) == 10 * BLOCK_SIZE + 100
    with BlockDevice(str(p), offset=2 * BLOCK_SIZE) as d:
        assert d.size == 8 * BLOCK_SIZE
    with pytest.raises(DeviceError):
        BlockDevice(str(p), offset=0, length=11 * BLOCK_SIZE)


def test_readonly_device_refuses_writes(dev, reopen):
    KVStore.format(dev).put(b"k", b"v")
    ro = reopen(readonly=True)
    with pytest.raises(DeviceError):
        ro.write(0, bytes(BLOCK_SIZE))
    s = KVStore.open(ro)
    assert s.get(b"k") == b"v"


def test_slot_lengths_beyond_buffer_are_corrupt():
    head = struct.pack(SLOT_FORMAT, SLOT_MAGIC, 1, 0, 10, 5000, 1)
    raw = (head + b"\0\0\0\0").ljust(BLOCK_SIZE, b"\0")
    with pytest.raises(CorruptError):
        unpack_slot(raw)


def test_unsupported_superblock_version():
    import zlib
    head = struct.pack(SUPER_FORMAT, SUPER_MAGIC, 2, BLOCK_SIZE, 10, 0)
    raw = (head + struct.pack("<I", zlib.crc32(head))).ljust(BLOCK_SIZE, b"\0")
    with pytest.raises(CorruptError):
        unpack_superblock(raw)


def test_large_slots_persist(dev, reopen):
    s = KVStore.format(dev, slot_size=2 * BLOCK_SIZE, slot_count=64)
    big = bytes(range(256)) * 24  # 6144 bytes
    s.put(b"big", big)
    s.close()
    s2 = KVStore.open(reopen())
    assert s2.slot_size == 2 * BLOCK_SIZE and s2.slot_count == 64
    assert s2.get(b"big") == big


def test_many_keys_reopen_keeps_order(dev, reopen):
    s = KVStore.format(dev)
    keys = [b"k%04d" % i for i in range(400)]
    for k in keys:
        s.put(k, k[::-1] * 3)
    s.put(keys[0], b"updated")
    s2 = KVStore.open(reopen())
    assert len(s2) == 400
    assert s2.keys() == keys[1:] + keys[:1]
    assert s2.get(keys[0]) == b"updated"
    assert all(s2.get(k) == k[::-1] * 3 for k in keys[1:50])


def test_repair_zeroes_stale_duplicate(dev, reopen):
    s = KVStore.format(dev)
    s.put(b"k", b"old")
    s.put(b"k", b"new")  # now in slot 1, slot 0 freed
    # stale older copy in a higher slot than the live one
    dev.write(BLOCK_SIZE + 9 * BLOCK_SIZE, pack_slot(b"k", b"stale", 1, BLOCK_SIZE))
    s2 = KVStore.open(reopen(), repair=False)
    assert s2.get(b"k") == b"new" and s2.stats().dropped_duplicates == 1
    s3 = KVStore.open(reopen())
    assert s3.stats().dropped_duplicates == 1
    s4 = KVStore.open(reopen())
    assert s4.stats().dropped_duplicates == 0 and s4.get(b"k") == b"new"


def test_update_in_full_store(dev):
    s = KVStore.format(dev, slot_count=2)
    s.put(b"a", b"1")
    s.put(b"b", b"2")
    with pytest.raises(StoreFull):
        s.put(b"a", b"3")
    assert s.get(b"a") == b"1" and s.stats().used == 2
    s2 = KVStore.format(dev, slot_count=2, evict="lru")
    s2.put(b"a", b"1")
    s2.put(b"b", b"2")
    s2.get(b"a")
    s2.put(b"a", b"3")  # evicts b (least recently used), then writes the new copy
    assert s2.get(b"a") == b"3" and b"b" not in s2 and s2.stats().evictions == 1


def test_delete_survives_reopen(dev, reopen):
    s = KVStore.format(dev)
    s.put(b"gone", b"x")
    s.put(b"kept", b"y")
    s.delete(b"gone")
    s2 = KVStore.open(reopen())
    assert b"gone" not in s2 and s2.get(b"kept") == b"y"
    assert s2.stats().recovered == 1


def test_corruption_detected_on_read(dev):
    s = KVStore.format(dev, cache_entries=0)
    slot = s.put(b"k", b"payload" * 10)
    raw = bytearray(dev.read(BLOCK_SIZE + slot * BLOCK_SIZE, BLOCK_SIZE))
    raw[40] ^= 0x55
    dev.write(BLOCK_SIZE + slot * BLOCK_SIZE, bytes(raw))
    with pytest.raises(CorruptError):
        s.get(b"k")


def test_format_arguments_checked(dev):
    with pytest.raises(ValueError):
        KVStore.format(dev, slot_size=3000)
    with pytest.raises(ValueError):
        KVStore.format(dev, slot_count=dev.size // BLOCK_SIZE)
    with pytest.raises(ValueError):
        KVStore.format(dev, evict="fifo")


def test_closed_store(dev):
    s = KVStore.format(dev)
    s.put(b"k", b"v")
    s.close()
    s.close()
    with pytest.raises(ValueError):
        s.get(b"k")
    with pytest.raises(ValueError):
        s.put(b"k", b"w")


def test_sequence_continues_after_reopen(dev, reopen):
    s = KVStore.format(dev)
    for i in range(5):
        s.put(b"k", b"v%d" % i)
    s2 = KVStore.open(reopen())
    s2.put(b"other", b"o")
    # simulate a crash mid-update: newer copy written, older not yet freed
    slot_old = s2.slot_of(b"k")
    new = s2.put(b"k", b"latest")
    dev.write(BLOCK_SIZE + slot_old * BLOCK_SIZE,
              pack_slot(b"k", b"v4", 5, BLOCK_SIZE))
    s3 = KVStore.open(reopen())
    assert s3.get(b"k") == b"latest" and s3.slot_of(b"k") == new


def test_bitmap_from_bytes_rejects_bad_input():
    with pytest.raises(ValueError):
        SlotBitmap.from_bytes(b"\x00", 13)
    with pytest.raises(ValueError):
        SlotBitmap.from_bytes(b"\x00\xff", 13)
    with pytest.raises(ValueError):
        SlotBitmap(0)
