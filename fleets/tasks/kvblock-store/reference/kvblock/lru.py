"""Recency order: the key -> slot index and a bounded value cache."""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Hashable


class LRUIndex:
    """Maps key -> slot and remembers use order (least recently used first)."""

    def __init__(self) -> None:
        self._map: OrderedDict[bytes, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._map)

    def __contains__(self, key: object) -> bool:
        return key in self._map

    def get(self, key: bytes) -> int | None:
        """The slot of ``key`` or None; does not change the order."""
        return self._map.get(key)

    def touch(self, key: bytes) -> None:
        """Make ``key`` the most recently used; KeyError if absent."""
        self._map.move_to_end(key)

    def insert(self, key: bytes, slot: int) -> int | None:
        """Map ``key`` to ``slot`` as most recently used; returns the slot it replaced."""
        old = self._map.pop(key, None)
        self._map[key] = slot
        return old

    def remove(self, key: bytes) -> int:
        """Forget ``key``; returns its slot; KeyError if absent."""
        return self._map.pop(key)

    def lru(self) -> bytes | None:
        """The least recently used key, or None when empty."""
        return next(iter(self._map), None)

    def pop_lru(self) -> tuple[bytes, int]:
        """Remove and return (key, slot) of the least recently used key; KeyError if empty."""
        if not self._map:
            raise KeyError("index is empty")
        return self._map.popitem(last=False)

    def keys(self) -> list[bytes]:
        """Keys from least to most recently used."""
        return list(self._map)


class LRUCache:
    """At most ``capacity`` entries; inserting beyond it drops the least recently used.

    ``capacity`` 0 disables the cache (nothing is kept).
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self.capacity = capacity
        self._data: OrderedDict[Hashable, Any] = OrderedDict()

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The cached value (now most recently used) or ``default``."""
        if key not in self._data:
            return default
        self._data.move_to_end(key)
        return self._data[key]

    def put(self, key: Hashable, value: Any) -> None:
        if self.capacity == 0:
            return
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self.capacity:
            self._data.popitem(last=False)

    def discard(self, key: Hashable) -> None:
        self._data.pop(key, None)

    def clear(self) -> None:
        self._data.clear()
