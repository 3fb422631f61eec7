"""The run clock: model seconds since the run started.

Every stamp in a record is in *model seconds*: ``(time.monotonic() - t0) * time_scale``. On the
embedded stack the emulator divides every modelled duration by ``time_scale``, so multiplying wall
time by it gives model time; against real endpoints ``time_scale`` is 1. ``time.monotonic`` is
CLOCK_MONOTONIC, shared by every process on the host, so stamps from the emulator and the client
can be compared directly (``mono()``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field


def mono() -> float:
    """Host-wide monotonic seconds (comparable across processes on one host)."""
    return time.monotonic()


@dataclass
class RunClock:
    time_scale: float = 1.0
    t0: float = field(default_factory=time.monotonic)

    def now(self) -> float:
        """Model seconds since the run started."""
        return (time.monotonic() - self.t0) * self.time_scale

    def to_model(self, mono_t: float) -> float:
        """A host monotonic stamp -> model seconds since the run started."""
        return (mono_t - self.t0) * self.time_scale

    def model_to_wall(self, seconds: float) -> float:
        """A model duration -> the wall seconds it takes on this stack."""
        return seconds / self.time_scale

    async def sleep(self, model_seconds: float) -> None:
        import asyncio
        await asyncio.sleep(max(0.0, model_seconds) / self.time_scale)
