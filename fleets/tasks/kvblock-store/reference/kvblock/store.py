"""KVStore: a crash-tolerant key-value store of fixed-size slots on a block device."""
from __future__ import annotations

from dataclasses import dataclass

from .bitmap import NoFreeSlot, SlotBitmap
from .device import BLOCK_SIZE, BlockDevice
from .layout import (MAX_KEY_LEN, CorruptError, Superblock, max_value_len, pack_slot,
                     pack_superblock, unpack_slot, unpack_superblock)
from .lru import LRUCache, LRUIndex

EVICT_POLICIES = ("reject", "lru")
SCAN_CHUNK = 1 << 20  # bytes read per request while scanning
_MISSING = object()
_ZERO_BLOCK = bytes(BLOCK_SIZE)


class StoreFull(Exception):
    """No free slot and the eviction policy is 'reject'."""


@dataclass
class StoreStats:
    slot_count: int
    slot_size: int
    used: int
    free: int
    puts: int = 0
    gets: int = 0
    deletes: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    evictions: int = 0
    recovered: int = 0
    dropped_duplicates: int = 0
    corrupt_slots: int = 0
    generation: int = 0


def _check_key(key: object) -> bytes:
    if not isinstance(key, bytes):
        raise TypeError(f"key must be bytes, got {type(key).__name__}")
    if not 1 <= len(key) <= MAX_KEY_LEN:
        raise ValueError(f"key length {len(key)} is outside 1..{MAX_KEY_LEN}")
    return key


class KVStore:
    """Use :meth:`format` (new store) or :meth:`open` (existing store, with recovery)."""

    def __init__(self, device: BlockDevice, sb: Superblock, cache_entries: int = 64,
                 evict: str = "reject") -> None:
        if evict not in EVICT_POLICIES:
            raise ValueError(f"evict must be one of {EVICT_POLICIES}, got {evict!r}")
        if cache_entries < 0:
            raise ValueError(f"cache_entries must be >= 0, got {cache_entries}")
        self.device = device
        self.superblock = sb
        self.slot_size = sb.slot_size
        self.slot_count = sb.slot_count
        self.evict = evict
        self._bitmap = SlotBitmap(sb.slot_count)
        self._index = LRUIndex()
        self._cache = LRUCache(cache_entries)
        self._seq = 1
        self._closed = False
        self._stats = StoreStats(slot_count=sb.slot_count, slot_size=sb.slot_size, used=0,
                                 free=sb.slot_count, generation=sb.generation)

    # ---- creation and recovery ---------------------------------------------------------
    @classmethod
    def format(cls, device: BlockDevice, slot_size: int = BLOCK_SIZE,
               slot_count: int | None = None, cache_entries: int = 64,
               evict: str = "reject") -> "KVStore":
        """Write an empty store over the whole device window and return it open."""
        if slot_size < BLOCK_SIZE or slot_size % BLOCK_SIZE:
            raise ValueError(f"slot_size {slot_size} must be a positive multiple of {BLOCK_SIZE}")
        most = (device.size - BLOCK_SIZE) // slot_size
        if slot_count is None:
            slot_count = most
        if not 1 <= slot_count <= most:
            raise ValueError(f"slot_count {slot_count} outside 1..{most} for this device")
        if evict not in EVICT_POLICIES:
            raise ValueError(f"evict must be one of {EVICT_POLICIES}, got {evict!r}")
        if slot_size == BLOCK_SIZE:
            step = SCAN_CHUNK // BLOCK_SIZE
            for first in range(0, slot_count, step):
                n = min(step, slot_count - first)
                device.write(BLOCK_SIZE + first * BLOCK_SIZE, bytes(n * BLOCK_SIZE))
        else:
            for i in range(slot_count):
                device.write(BLOCK_SIZE + i * slot_size, _ZERO_BLOCK)
        sb = Superblock(slot_size=slot_size, slot_count=slot_count, generation=0)
        device.write(0, pack_superblock(sb))
        device.flush()
        return cls(device, sb, cache_entries=cache_entries, evict=evict)

    @classmethod
    def open(cls, device: BlockDevice, cache_entries: int = 64, evict: str = "reject",
             repair: bool = True) -> "KVStore":
        """Open an existing store: check the superblock, rescan every slot, rebuild the index.

        Of several live slots with the same key the highest ``seq`` wins; the others and
        slots failing their CRC are freed (and zeroed on the device when ``repair``).
        """
        sb = unpack_superblock(device.read(0, BLOCK_SIZE))
        if BLOCK_SIZE + sb.slot_count * sb.slot_size > device.size:
            raise CorruptError(f"superblock describes {sb.slot_count} slots of {sb.slot_size} "
                               f"bytes; the device holds {device.size} bytes")
        if not device.readonly:
            sb = Superblock(slot_size=sb.slot_size, slot_count=sb.slot_count,
                            generation=sb.generation + 1, version=sb.version)
            device.write(0, pack_superblock(sb))
        store = cls(device, sb, cache_entries=cache_entries, evict=evict)
        store._recover(repair and not device.readonly)
        return store

    def _recover(self, repair: bool) -> None:
        best: dict[bytes, tuple[int, int]] = {}  # key -> (seq, slot)
        stale: list[int] = []
        per = max(1, SCAN_CHUNK // self.slot_size)
        for first in range(0, self.slot_count, per):
            n = min(per, self.slot_count - first)
            buf = self.device.read(self._pos(first), n * self.slot_size)
            for j in range(n):
                slot = first + j
                try:
                    rec = unpack_slot(buf[j * self.slot_size:(j + 1) * self.slot_size])
                except CorruptError:
                    self._stats.corrupt_slots += 1
                    stale.append(slot)
                    continue
                if rec is None:
                    continue
                prev = best.get(rec.key)
                if prev is None or rec.seq > prev[0]:
                    if prev is not None:
                        stale.append(prev[1])
                        self._stats.dropped_duplicates += 1
                    best[rec.key] = (rec.seq, slot)
                else:
                    stale.append(slot)
                    self._stats.dropped_duplicates += 1
        if repair:
            for slot in stale:
                self.device.write(self._pos(slot), _ZERO_BLOCK)
        for key, (seq, slot) in sorted(best.items(), key=lambda kv: kv[1][0]):
            self._bitmap.mark(slot)
            self._index.insert(key, slot)
        self._seq = max((s for s, _ in best.values()), default=0) + 1
        self._stats.recovered = len(best)
        if repair and stale:
            self.device.flush()

    # ---- operations --------------------------------------------------------------------
    def _pos(self, slot: int) -> int:
        return BLOCK_SIZE + slot * self.slot_size

    def _live(self) -> None:
        if self._closed:
            raise ValueError("store is closed")

    def _free_slot(self, slot: int) -> None:
        self.device.write(self._pos(slot), _ZERO_BLOCK)
        self._bitmap.release(slot)

    def _evict_one(self) -> None:
        key, slot = self._index.pop_lru()
        self._cache.discard(key)
        self._free_slot(slot)
        self._stats.evictions += 1

    def put(self, key: bytes, value: bytes) -> int:
        """Store ``value`` under ``key``; returns the slot used. The new record is written
        before the old one (if any) is freed."""
        self._live()
        _check_key(key)
        if not isinstance(value, bytes | bytearray | memoryview):
            raise TypeError(f"value must be bytes-like, got {type(value).__name__}")
        value = bytes(value)
        if len(value) > max_value_len(self.slot_size, len(key)):
            raise ValueError(f"value of {len(value)} bytes too large for a {self.slot_size}-byte "
                             "slot")
        try:
            slot = self._bitmap.allocate()
        except NoFreeSlot:
            if self.evict == "reject" or not len(self._index):
                raise StoreFull(f"all {self.slot_count} slots are in use") from None
            self._evict_one()
            slot = self._bitmap.allocate()
        try:
            self.device.write(self._pos(slot), pack_slot(key, value, self._seq, self.slot_size))
        except BaseException:
            self._bitmap.release(slot)
            raise
        self._seq += 1
        old = self._index.insert(key, slot)
        if old is not None:
            self._free_slot(old)
        self._cache.put(key, value)
        self._stats.puts += 1
        return slot

    def get(self, key: bytes, default=_MISSING) -> bytes:
        """The value of ``key`` (now most recently used); ``default`` or KeyError if absent."""
        self._live()
        _check_key(key)
        self._stats.gets += 1
        slot = self._index.get(key)
        if slot is None:
            if default is _MISSING:
                raise KeyError(key)
            return default
        self._index.touch(key)
        value = self._cache.get(key, _MISSING)
        if value is not _MISSING:
            self._stats.cache_hits += 1
            return value
        self._stats.cache_misses += 1
        rec = unpack_slot(self.device.read(self._pos(slot), self.slot_size))
        if rec is None or rec.key != key:
            raise CorruptError(f"slot {slot} no longer holds key {key!r}")
        self._cache.put(key, rec.value)
        return rec.value

    def delete(self, key: bytes) -> None:
        """Remove ``key``; KeyError if absent."""
        self._live()
        _check_key(key)
        slot = self._index.remove(key)
        self._cache.discard(key)
        self._free_slot(slot)
        self._stats.deletes += 1

    def slot_of(self, key: bytes) -> int | None:
        return self._index.get(key)

    def keys(self) -> list[bytes]:
        """Keys from least to most recently used."""
        return self._index.keys()

    def __contains__(self, key: object) -> bool:
        return key in self._index

    def __len__(self) -> int:
        return len(self._index)

    def stats(self) -> StoreStats:
        s = self._stats
        return StoreStats(**{**s.__dict__, "used": self._bitmap.used, "free": self._bitmap.free})

    def flush(self) -> None:
        self._live()
        self.device.flush()

    def close(self) -> None:
        """Flush and close the store (not the device); closing twice is allowed."""
        if not self._closed:
            self.device.flush()
            self._closed = True

    def __enter__(self) -> "KVStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
