"""CPU the stack's processes use over a span (the embedded stack's cost on the host).

    cores = (user + system CPU seconds of the process, end - start) / wall seconds of the span

per process (master, each endpoint) and summed. Processes that exit during the span count up to
their last reading; a pid that cannot be read at the start is reported as missing, not as zero.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import psutil


@dataclass
class CpuUsage:
    wall_s: float
    cores: float                                     # all processes that could be read
    per_process: dict[str, float] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    host_cores: int = field(default_factory=lambda: os.cpu_count() or 1)


class CpuMeter:
    """``CpuMeter(pids)`` reads each process's CPU times now; ``read()`` returns the usage since."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.t0 = time.monotonic()
        self.procs: dict[str, tuple[psutil.Process, float]] = {}
        self.missing: dict[str, str] = {}
        for name, pid in pids.items():
            try:
                p = psutil.Process(pid)
                self.procs[name] = (p, _cpu(p))
            except psutil.Error as e:
                self.missing[name] = f"pid {pid} unreadable: {type(e).__name__}"
        self.last = {name: c for name, (_, c) in self.procs.items()}

    def sample(self) -> None:
        """Keep each process's latest reading (call before processes may exit)."""
        for name, (p, _) in self.procs.items():
            try:
                self.last[name] = _cpu(p)
            except psutil.Error:
                pass

    def read(self) -> CpuUsage:
        self.sample()
        wall = max(1e-9, time.monotonic() - self.t0)
        per = {name: round((self.last[name] - c0) / wall, 4) for name, (_, c0) in self.procs.items()}
        return CpuUsage(wall_s=round(wall, 3), cores=round(sum(per.values()), 4), per_process=per,
                        missing=dict(self.missing))


def _cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system
