"""The run directory's lock: one fleet process per run directory.

A fleet takes an exclusive ``flock`` on ``<run>/fleet.lock`` when it creates the run directory (or
when ``--resume`` opens it) and holds it for its whole life; the kernel drops it when the process
ends, however it ends. ``--resume`` of a run whose fleet is still alive is refused (exit 2)
instead of running a second fleet into the same records. The file holds the holder's pid (for the
message only; the lock, not the file, is what counts).
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ..config import ConfigError

LOCK_NAME = "fleet.lock"


class RunLock:
    """``RunLock(run_path).acquire()`` or raise :class:`ConfigError` naming the holder."""

    def __init__(self, run_path: Path):
        self.path = Path(run_path) / LOCK_NAME
        self.fd: int | None = None

    def acquire(self, what: str = "--resume") -> RunLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by children
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            finally:
                os.close(fd)
            raise ConfigError(f"{what}: {self.path.parent} is in use by a running fleet (pid "
                              f"{holder} holds {self.path}); stop it first, or wait for it to "
                              "end") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor drops the lock
            self.fd = None
