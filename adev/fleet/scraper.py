"""The fleet's scrape loop: every endpoint's and the master's ``/metrics``, periodically and at
window boundaries, appended to the run as :class:`~adev.records.ScrapeRecord` (raw samples with
model-time stamps: ``t`` when the request was sent, ``t_answer`` when the answer arrived).
Parsing is :mod:`adev.client.scrape` (the one scraper). A failed scrape is a
record with ``ok=False`` and the error, never an exception.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx

from ..client.scrape import scrape
from ..clock import RunClock
from ..records import ScrapeRecord


class Scraper:
    def __init__(self, run_dir: Any, run_id: str, clock: RunClock, targets: dict[str, str],
                 interval_s: float = 5.0, timeout_wall_s: float = 5.0,
                 on_scrape: Callable[[ScrapeRecord], None] | None = None):
        self.run_dir = run_dir
        self.run_id = run_id
        self.clock = clock
        self.targets = dict(targets)  # name ("coder", "master") -> metrics URL
        self.interval_s = interval_s
        self.timeout = timeout_wall_s
        self.on_scrape = on_scrape
        self.latest: dict[str, dict[str, float]] = {}
        self.failures = 0
        self.count = 0
        self._client: httpx.AsyncClient | None = None

    def set_targets(self, targets: dict[str, str]) -> None:
        """New URLs (the stack was restarted between batch runs)."""
        self.targets = dict(targets)
        self.latest.clear()

    async def _client_get(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(limits=httpx.Limits(max_connections=16))
        return self._client

    async def _one(self, name: str, url: str, t: float | None = None) -> ScrapeRecord:
        client = await self._client_get()
        t = self.clock.now() if t is None else t
        try:
            samples = await scrape(client, url, timeout=self.timeout)
            rec = ScrapeRecord(run_id=self.run_id, target=name, url=url, t=t, ok=True,
                               samples=samples, t_answer=self.clock.now())
            self.latest[name] = samples
        except Exception as e:  # network, HTTP status, parse errors: recorded, never fatal
            self.failures += 1
            rec = ScrapeRecord(run_id=self.run_id, target=name, url=url, t=t, ok=False,
                               error=f"{type(e).__name__}: {e}"[:500])
        return rec

    async def scrape_all(self, t: float | None = None) -> list[ScrapeRecord]:
        """Scrape every target concurrently and append the records (in target order).

        Not serialised with the periodic loop: a boundary scrape never waits for a slow periodic
        one (a busy endpoint can take a while to answer /metrics)."""
        t = self.clock.now() if t is None else t  # one send stamp for every target
        recs = await asyncio.gather(*(self._one(n, u, t) for n, u in self.targets.items()))
        for r in recs:
            self.run_dir.append(r)
            self.count += 1
            if self.on_scrape:
                try:
                    self.on_scrape(r)
                except Exception:
                    pass
        return list(recs)

    async def boundary(self, fallback: float | None = None) -> float:
        """Take a window boundary's scrapes now; returns the boundary time: the moment they
        were sent (all targets carry it as ``t``; each answer's ``t_answer`` bounds how late
        its samples may be). On a loaded machine this can lag the nominal boundary."""
        t = self.clock.now()
        await self.scrape_all(t)
        return t

    async def loop(self) -> None:
        """Scrape every ``interval_s`` model seconds on a fixed grid until cancelled."""
        next_t = self.clock.now()
        while True:
            await self.scrape_all()
            next_t += self.interval_s
            now = self.clock.now()
            if next_t < now:  # fell behind (slow scrape): skip missed ticks, keep the grid
                next_t += ((now - next_t) // self.interval_s + 1) * self.interval_s
            await self.clock.sleep(next_t - now)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
