"""Test doubles for the engine's driver: an event loop on virtual time and an in-memory store.

:class:`VirtualLoop` is an asyncio loop whose clock jumps to the next timer instead of sleeping,
so a driver test runs a minute of model time in milliseconds and gets the same answer every
time. :class:`FakeStore` has :class:`adev.emulator.store.MooncakeTier`'s interface with fixed
I/O delays (virtual seconds) and a dict for RAM and disk; the real store is tested in
``test_store_integration.py``.
"""
from __future__ import annotations

import asyncio
import selectors

from adev.emulator.store import LoadResult, SaveResult

VIRTUAL_LIMIT_S = 3600.0
"""A test's virtual time limit (the driver tests run at most minutes of model time)."""


class _Selector:
    def __init__(self, loop: VirtualLoop, inner: selectors.BaseSelector) -> None:
        self._loop = loop
        self._inner = inner

    def select(self, timeout: float | None = None):
        if timeout is None:
            raise RuntimeError("virtual loop: nothing scheduled, the test would wait forever")
        if timeout > 0:
            self._loop.vt += timeout
            if self._loop.vt > self._loop.start + VIRTUAL_LIMIT_S:
                # e.g. a driver waiting in a loop for a held clock that never moves again
                raise RuntimeError(f"virtual loop: past {VIRTUAL_LIMIT_S} virtual seconds, the "
                                   f"test would run forever")
        return self._inner.select(0)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class VirtualLoop(asyncio.SelectorEventLoop):
    """``time()`` is a virtual clock that a wait for a timer advances to the timer."""

    def __init__(self) -> None:
        self.vt = self.start = 1000.0
        super().__init__(_Selector(self, selectors.DefaultSelector()))  # type: ignore[arg-type]

    def time(self) -> float:
        return self.vt


def run_virtual(main):
    """Run ``main()`` (a coroutine function taking the loop's clock) on a fresh virtual loop."""
    loop = VirtualLoop()
    try:
        return loop.run_until_complete(main(loop.time))
    finally:  # the engine's loop and background tasks are cancelled, as at server shutdown
        rest = asyncio.all_tasks(loop)
        for task in rest:
            task.cancel()
        if rest:
            loop.run_until_complete(asyncio.gather(*rest, return_exceptions=True))
        loop.close()


class FakeStore:
    """In-memory stand-in for MooncakeTier. ``tier[key]`` is "ram" or "disk" (absent: a miss);
    every call takes ``io_s`` virtual seconds (a save ``save_s``, default ``io_s``);
    ``fail_load_after`` blocks load, then the load fails (None: every block loads)."""

    def __init__(self, io_s: float = 0.0, chunk_blocks: int = 1,
                 save_s: float | None = None) -> None:
        self.io_s = io_s
        self.save_s = io_s if save_s is None else save_s
        self.chunk_blocks = chunk_blocks
        self.tier: dict[str, str] = {}
        self.fail_load_after: int | None = None
        self.saved: list[str] = []

    def keys(self, hashes: list[int]) -> list[str]:
        return [f"m@tp_rank:0@{h:016x}" for h in hashes]

    async def exists(self, keys: list[str], op: str = "lookup") -> list[int] | None:
        await asyncio.sleep(self.io_s)
        return [1 if k in self.tier else 0 for k in keys]

    async def tiers(self, keys: list[str]) -> list[str]:
        await asyncio.sleep(self.io_s)
        return [self.tier.get(k, "ram") for k in keys]

    async def load(self, keys: list[str], granted_at: float | None = None) -> LoadResult:
        await asyncio.sleep(self.io_s)
        n = len(keys) if self.fail_load_after is None else min(len(keys), self.fail_load_after)
        return LoadResult(loaded=n, error=n < len(keys))

    async def save(self, keys: list[str]) -> SaveResult:
        await asyncio.sleep(self.save_s)
        new = [k for k in keys if k not in self.tier]
        for k in new:
            self.tier[k] = "ram"
        self.saved.extend(new)
        return SaveResult(offered=len(new), put=len(new), present=len(keys) - len(new))
