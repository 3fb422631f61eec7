"""On-device format: the superblock and the slot records, each protected by CRC32."""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from .device import BLOCK_SIZE

SUPER_MAGIC = b"KVBLOCK1"
SLOT_MAGIC = b"SLOT"
VERSION = 1
SUPER_FORMAT = "<8sIIIQ"  # magic, version, slot_size, slot_count, generation; then crc32 (<I)
SLOT_FORMAT = "<4sBBHIQ"  # magic, flags, reserved, key_len, value_len, seq; then crc32 (<I)
SUPER_SIZE = struct.calcsize(SUPER_FORMAT) + 4
SLOT_HEADER_SIZE = struct.calcsize(SLOT_FORMAT) + 4
FLAG_LIVE = 1
MAX_KEY_LEN = 255


class CorruptError(Exception):
    """On-device bytes that fail a magic, range or CRC check."""


@dataclass(frozen=True)
class Superblock:
    slot_size: int
    slot_count: int
    generation: int = 0
    version: int = VERSION


@dataclass(frozen=True)
class SlotRecord:
    key: bytes
    value: bytes
    seq: int


def max_value_len(slot_size: int, key_len: int) -> int:
    """The largest value a slot of ``slot_size`` bytes holds next to a key of ``key_len``."""
    return slot_size - SLOT_HEADER_SIZE - key_len


def pack_superblock(sb: Superblock) -> bytes:
    """The superblock as exactly BLOCK_SIZE bytes (zero padded)."""
    head = struct.pack(SUPER_FORMAT, SUPER_MAGIC, sb.version, sb.slot_size, sb.slot_count,
                       sb.generation)
    raw = head + struct.pack("<I", zlib.crc32(head))
    return raw.ljust(BLOCK_SIZE, b"\0")


def unpack_superblock(buf: bytes) -> Superblock:
    """Parse a superblock; CorruptError on a bad magic, version, CRC or geometry."""
    if len(buf) < SUPER_SIZE:
        raise CorruptError("superblock is truncated")
    head = bytes(buf[:SUPER_SIZE - 4])
    magic, version, slot_size, slot_count, generation = struct.unpack(SUPER_FORMAT, head)
    if magic != SUPER_MAGIC:
        raise CorruptError(f"bad superblock magic {magic!r}")
    (crc,) = struct.unpack("<I", buf[SUPER_SIZE - 4:SUPER_SIZE])
    if crc != zlib.crc32(head):
        raise CorruptError("superblock CRC mismatch")
    if version != VERSION:
        raise CorruptError(f"unsupported superblock version {version}")
    if slot_size <= 0 or slot_size % BLOCK_SIZE or slot_count <= 0:
        raise CorruptError(f"bad geometry: slot_size={slot_size} slot_count={slot_count}")
    return Superblock(slot_size=slot_size, slot_count=slot_count, generation=generation,
                      version=version)


def pack_slot(key: bytes, value: bytes, seq: int, slot_size: int) -> bytes:
    """A live slot record padded to ``slot_size`` bytes; ValueError if it does not fit."""
    if not 1 <= len(key) <= MAX_KEY_LEN:
        raise ValueError(f"key length {len(key)} is outside 1..{MAX_KEY_LEN}")
    if len(value) > max_value_len(slot_size, len(key)):
        raise ValueError(f"value of {len(value)} bytes too large for a {slot_size}-byte slot")
    head = struct.pack(SLOT_FORMAT, SLOT_MAGIC, FLAG_LIVE, 0, len(key), len(value), seq)
    crc = zlib.crc32(value, zlib.crc32(key, zlib.crc32(head)))
    return (head + struct.pack("<I", crc) + key + value).ljust(slot_size, b"\0")


def slot_length(header: bytes) -> int | None:
    """Total bytes (header + key + value) of the record starting with ``header``, or None if
    the header does not start a live record (a free slot)."""
    magic, flags, _r, key_len, value_len, _seq = struct.unpack(
        SLOT_FORMAT, bytes(header[:SLOT_HEADER_SIZE - 4]))
    if magic != SLOT_MAGIC or not flags & FLAG_LIVE:
        return None
    return SLOT_HEADER_SIZE + key_len + value_len


def unpack_slot(buf: bytes) -> SlotRecord | None:
    """Parse a slot; None for a free slot, CorruptError for a damaged live one."""
    if len(buf) < SLOT_HEADER_SIZE:
        raise CorruptError("slot is truncated")
    head = bytes(buf[:SLOT_HEADER_SIZE - 4])
    magic, flags, _r, key_len, value_len, seq = struct.unpack(SLOT_FORMAT, head)
    if magic != SLOT_MAGIC or not flags & FLAG_LIVE:
        return None
    end = SLOT_HEADER_SIZE + key_len + value_len
    if key_len == 0 or end > len(buf):
        raise CorruptError(f"slot lengths out of range: key {key_len}, value {value_len}")
    (crc,) = struct.unpack("<I", buf[SLOT_HEADER_SIZE - 4:SLOT_HEADER_SIZE])
    key = bytes(buf[SLOT_HEADER_SIZE:SLOT_HEADER_SIZE + key_len])
    value = bytes(buf[SLOT_HEADER_SIZE + key_len:end])
    if crc != zlib.crc32(value, zlib.crc32(key, zlib.crc32(head))):
        raise CorruptError(f"slot CRC mismatch (key {key!r})")
    return SlotRecord(key=key, value=value, seq=seq)
