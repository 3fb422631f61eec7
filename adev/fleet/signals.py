"""SIGINT/SIGTERM during a fleet run: the first stops the fleet cleanly, a second cancels it."""
from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from typing import Any

from .protocols import Fleet


class StopSignals:
    """SIGINT/SIGTERM -> a clean stop of the current fleet; a second signal cancels outright."""

    def __init__(self, main_task: asyncio.Task):
        self.main = main_task
        self.fleet: Fleet | None = None
        self.received: str | None = None
        self.loop = asyncio.get_running_loop()

    def _handle(self, name: str) -> None:
        if self.received is None:
            self.received = name
            print(f"\nadev: {name}: stopping the fleet (again to abort)", file=sys.stderr)
            if self.fleet is not None:
                self.fleet.stop(name)
        else:
            self.main.cancel()

    def __enter__(self) -> StopSignals:
        for s in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                self.loop.add_signal_handler(s, self._handle, s.name)
        return self

    def __exit__(self, *exc: Any) -> None:
        for s in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                self.loop.remove_signal_handler(s)
