"""In-memory allocation bitmap over the store's slots: lowest free slot first."""
from __future__ import annotations


class NoFreeSlot(Exception):
    """Every slot is in use."""


class SlotBitmap:
    """One bit per slot; bit set = slot in use."""

    def __init__(self, count: int) -> None:
        if count <= 0:
            raise ValueError(f"count must be positive, got {count}")
        self.count = count
        self._bits = bytearray((count + 7) // 8)
        self._used = 0
        self._hint = 0  # no free slot below this index

    def _check(self, index: int) -> None:
        if not 0 <= index < self.count:
            raise IndexError(f"slot {index} out of range 0..{self.count - 1}")

    def is_used(self, index: int) -> bool:
        self._check(index)
        return bool(self._bits[index >> 3] & (1 << (index & 7)))

    @property
    def used(self) -> int:
        return self._used

    @property
    def free(self) -> int:
        return self.count - self._used

    def mark(self, index: int) -> None:
        """Mark ``index`` in use; ValueError if it already is."""
        if self.is_used(index):
            raise ValueError(f"slot {index} is already in use")
        self._bits[index >> 3] |= 1 << (index & 7)
        self._used += 1

    def release(self, index: int) -> None:
        """Mark ``index`` free; ValueError if it already is."""
        if not self.is_used(index):
            raise ValueError(f"slot {index} is already free")
        self._bits[index >> 3] &= ~(1 << (index & 7)) & 0xFF
        self._used -= 1
        if index < self._hint:
            self._hint = index

    def allocate(self) -> int:
        """Mark the lowest free slot in use and return it; NoFreeSlot when full."""
        if self._used >= self.count:
            raise NoFreeSlot(f"all {self.count} slots are in use")
        i = self._hint
        while i < self.count:
            byte = self._bits[i >> 3]
            if byte == 0xFF and i & 7 == 0:
                i += 8
                continue
            if not byte & (1 << (i & 7)):
                self.mark(i)
                self._hint = i + 1
                return i
            i += 1
        raise NoFreeSlot(f"all {self.count} slots are in use")  # pragma: no cover

    def used_indices(self) -> list[int]:
        return [i for i in range(self.count) if self._bits[i >> 3] & (1 << (i & 7))]

    def to_bytes(self) -> bytes:
        return bytes(self._bits)

    @classmethod
    def from_bytes(cls, data: bytes, count: int) -> "SlotBitmap":
        """Inverse of to_bytes; ValueError if ``data`` has the wrong length or stray bits."""
        bm = cls(count)
        if len(data) != len(bm._bits):
            raise ValueError(f"expected {len(bm._bits)} bytes for {count} slots, got {len(data)}")
        if count % 8 and data[-1] >> (count % 8):
            raise ValueError("bits set beyond the last slot")
        bm._bits[:] = data
        bm._used = sum(bin(b).count("1") for b in data)
        bm._hint = 0
        return bm
