import pytest

from kvblock.device import BLOCK_SIZE
from kvblock.layout import (SLOT_HEADER_SIZE, CorruptError, Superblock, max_value_len, pack_slot,
                            pack_superblock, unpack_slot, unpack_superblock)


def test_superblock_roundtrip():
    sb = Superblock(slot_size=8192, slot_count=77, generation=5)
    raw = pack_superblock(sb)
    assert len(raw) == BLOCK_SIZE
    assert unpack_superblock(raw) == sb


def test_superblock_damage_detected():
    raw = bytearray(pack_superblock(Superblock(slot_size=4096, slot_count=10)))
    raw[20] ^= 0xFF
    with pytest.raises(CorruptError):
        unpack_superblock(bytes(raw))
    with pytest.raises(CorruptError):
        unpack_superblock(bytes(BLOCK_SIZE))


def test_slot_roundtrip_and_free_slot():
    raw = pack_slot(b"key", b"value", 42, 4096)
    assert len(raw) == 4096
    rec = unpack_slot(raw)
    assert (rec.key, rec.value, rec.seq) == (b"key", b"value", 42)
    assert unpack_slot(bytes(4096)) is None


def test_slot_crc_detects_flipped_value_byte():
    raw = bytearray(pack_slot(b"k", b"hello world", 1, 4096))
    raw[SLOT_HEADER_SIZE + 1 + 3] ^= 0x01
    with pytest.raises(CorruptError):
        unpack_slot(bytes(raw))


def test_value_size_limit():
    limit = max_value_len(4096, 3)
    assert limit == 4096 - SLOT_HEADER_SIZE - 3
    assert unpack_slot(pack_slot(b"abc", b"v" * limit, 1, 4096)).value == b"v" * limit
    with pytest.raises(ValueError):
        pack_slot(b"abc", b"v" * (limit + 1), 1, 4096)
