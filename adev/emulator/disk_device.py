"""The disk tier as one device that every endpoint of a stack shares.

The store's disk tier is one device (a local RAID0 array, or one remote NVMe-oF target) below the
store of every endpoint, so concurrent reads and writes share its bandwidth: two prefill replicas
that load at once do not both get the tier's full read rate. The model is a first-come,
first-served fluid queue on the device's busy time:

    busy_s  = bytes / read_bytes_per_s      (the disk tier's profile)
    start   = max(arrival, free)            free: when the device finishes its queued reads
    end     = start + busy_s;  free = end

A read's wait, ``start - arrival``, is part of its modelled load time; a lone read waits nothing
and costs what it would cost without the device. Writes to the disk tier (Mooncake's offloads)
take none of the device's time here.

``free`` is kept in a small file in the stack's state directory (:data:`DEVICE_FILE`), read and
updated under an exclusive ``flock``, so the endpoint processes of one stack share it; times are
on the clock every process of the stack reads (the stack's held clock, or the host's
CLOCK_MONOTONIC), in wall seconds. Without a file (a lone engine, the unit tests) the device is
the engine's own. Reservations are taken when a request's tier split is known, in the order the
processes reach them: a read that reaches the device later on the wall but earlier in model time
queues behind the one already there (the total busy time, and so the device's rate, is exact).
"""
from __future__ import annotations

import fcntl
import os
import struct
from pathlib import Path

DEVICE_FILE = "disk_device"
"""The shared device's file in the stack's state directory."""

_FREE = struct.Struct("<d")


class DiskDevice:
    """A FIFO fluid queue on one device's busy time, shared through ``path`` (None: in memory)."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._free = 0.0
        self._fd: int | None = None
        if self.path is not None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def reserve(self, arrival: float, busy_s: float) -> float:
        """Queue ``busy_s`` seconds of device work that arrives at ``arrival`` (both on the
        stack's clock, wall seconds); returns when it ends: ``max(arrival, free) + busy_s``."""
        if busy_s <= 0:
            return arrival
        if self._fd is None:
            end = max(arrival, self._free) + busy_s
            self._free = end
            return end
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            raw = os.pread(self._fd, _FREE.size, 0)
            free = _FREE.unpack(raw)[0] if len(raw) == _FREE.size else 0.0
            end = max(arrival, free) + busy_s
            os.pwrite(self._fd, _FREE.pack(end), 0)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        return end


def reset_device(state_dir: str | Path) -> None:
    """A new stack's device: no work queued (a previous stack's reservations are dropped)."""
    (Path(state_dir) / DEVICE_FILE).unlink(missing_ok=True)
