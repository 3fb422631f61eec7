"""Aligned positional I/O on a raw block device (or a regular file standing in for one)."""
from __future__ import annotations

import os

BLOCK_SIZE = 4096


class DeviceError(Exception):
    """An I/O request the device cannot serve (range, closed device, short transfer)."""


class AlignmentError(DeviceError, ValueError):
    """An offset or length that is not a multiple of BLOCK_SIZE."""


def device_size(path: str) -> int:
    """Size in bytes of a block device or regular file at ``path``."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.lseek(fd, 0, os.SEEK_END)
    finally:
        os.close(fd)


class BlockDevice:
    """A window ``[offset, offset + length)`` of a device, addressed from 0.

    All reads and writes must start and end on BLOCK_SIZE boundaries.
    """

    def __init__(self, path: str, offset: int = 0, length: int | None = None,
                 readonly: bool = False) -> None:
        if offset < 0 or offset % BLOCK_SIZE:
            raise AlignmentError(f"offset {offset} is not a non-negative multiple of {BLOCK_SIZE}")
        total = device_size(path)
        if offset > total:
            raise DeviceError(f"offset {offset} is beyond the device size {total}")
        avail = (total - offset) // BLOCK_SIZE * BLOCK_SIZE
        if length is None:
            length = avail
        if length <= 0 or length % BLOCK_SIZE:
            raise AlignmentError(f"length {length} is not a positive multiple of {BLOCK_SIZE}")
        if length > avail:
            raise DeviceError(f"window of {length} bytes at {offset} exceeds the device "
                              f"({total} bytes)")
        self.path = path
        self.offset = offset
        self.size = length
        self.readonly = readonly
        self._fd: int | None = os.open(path, os.O_RDONLY if readonly else os.O_RDWR)

    @property
    def closed(self) -> bool:
        return self._fd is None

    @property
    def blocks(self) -> int:
        return self.size // BLOCK_SIZE

    def _check(self, pos: int, length: int) -> int:
        if self._fd is None:
            raise DeviceError("device is closed")
        if pos < 0 or pos % BLOCK_SIZE or length % BLOCK_SIZE:
            raise AlignmentError(f"request at {pos} of {length} bytes is not aligned to "
                                 f"{BLOCK_SIZE}")
        if pos + length > self.size:
            raise DeviceError(f"request at {pos} of {length} bytes is beyond the window "
                              f"({self.size} bytes)")
        return self._fd

    def read(self, pos: int, length: int) -> bytes:
        """Read ``length`` bytes at window offset ``pos``."""
        fd = self._check(pos, length)
        out = bytearray()
        while len(out) < length:
            chunk = os.pread(fd, length - len(out), self.offset + pos + len(out))
            if not chunk:
                raise DeviceError(f"short read at {pos}: got {len(out)} of {length} bytes")
            out += chunk
        return bytes(out)

    def write(self, pos: int, data: bytes) -> None:
        """Write ``data`` (a multiple of BLOCK_SIZE bytes) at window offset ``pos``."""
        data = memoryview(bytes(data))
        fd = self._check(pos, len(data))
        if self.readonly:
            raise DeviceError("device is opened read-only")
        done = 0
        while done < len(data):
            n = os.pwrite(fd, data[done:], self.offset + pos + done)
            if n <= 0:
                raise DeviceError(f"short write at {pos}: wrote {done} of {len(data)} bytes")
            done += n

    def flush(self) -> None:
        """Make completed writes durable (fsync)."""
        if self._fd is None:
            raise DeviceError("device is closed")
        if not self.readonly:
            os.fsync(self._fd)

    def close(self) -> None:
        """Close the device; closing twice is allowed."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def __enter__(self) -> "BlockDevice":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
