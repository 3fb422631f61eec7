"""Store leases that last their TTL in model time, on the real Mooncake master.

The master counts a lease in real time: every lookup or read grants one of its
``--default_kv_lease_ttl``, and a leased object cannot be evicted. The stack gives it the model
lease divided by the time scale, which is the model's lease only while model time runs at
``time_scale`` model seconds per wall second. On the held clock (``stack.model_clock = "held"``)
model time stands still while the host is behind (a store read slower than its profile, a late
wake-up), but the master's leases run on, so a lease would end early in model time, and by how
much would depend on the host: fewer refusals and more evictions on a slower host or at a larger
time scale.

:class:`ModelLeases` keeps each lease for its model TTL instead. The master gets a *split* lease,
``T = lease_ttl_s / time_scale / k`` real seconds (:func:`lease_split`), and this endpoint
renews the keys it was granted a lease on whose model lease has not ended yet, with
``batch_is_exist`` (which grants a new lease of T), every ``T / 2`` wall seconds. A key's last
renewal decides when its lease really ends, so each round renews a key only if the renewed lease
would end nearer its model lease's end than the lease it holds:

    model lease of key k: until_k = (model time of its last grant) + lease_ttl_s
    at a round (model time t, wall time w), with e_k the wall time its current master lease ends
    and r the model seconds per wall second lately (:data:`RATE_WEIGHT`):
        not renewed, it ends at about     t + r x (e_k - w)
        renewed, it ends at about         t + r x T
        renewed iff  until_k > t + r x (T + e_k - w) / 2

So a key's lease ends, on average, at its model lease's end, within about ``r x T / 4`` model
seconds of it (``lease_ttl_s / (4k)`` while model time runs freely), at every time scale. Renewing
while ``until_k > t`` would end each lease between ``r x T / 2`` and ``r x T`` model seconds late
instead, by an amount that depends on the time scale and on how much of the wall time the clock was
held (``r`` is lower where it was held longer). While the clock is held (``r`` near 0) every live
key is renewed, and its leases do not run out, as long as each round of renewals reaches the master
within one real lease of the round before: a round that ends more than one real lease after the
round before started (the endpoint's loop was kept from it, or the master answered slowly) counts
as a *lapse* (``adev_emulator_store_lease_lapses_total``), a window in which the master may have
ended leases that are still running in model time. The split is taken only where ``T`` stays at
least :data:`MIN_REAL_LEASE_S` (a real read must fit in one lease) with ``k >= MIN_SPLIT``: the 300
s lease of the source's lease point in 30 parts at any time scale up to 100, the default 5 s lease
in 5 parts at time scale 10 and in 25 at time scale 2; a lease under 0.5 real seconds (5 s at time
scales above 10) keeps the master's plain time-scaled lease. Renewals count on the endpoint
(``adev_emulator_store_lease_renewed_keys_total``) and never as lookups or hits.
"""
from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger("adev.emulator.leases")

MAX_SPLIT = 30
"""At most this many real leases per model lease (a lease then ends within about 1/120 of its
TTL of its model end: 2.5 model s of a 300 s lease)."""
MIN_SPLIT = 5
"""A split into fewer parts is not taken (a lease would end up to 5% of its TTL off its model
end)."""
MIN_REAL_LEASE_S = 0.1
"""The shortest real lease a split may give: a real read batch (milliseconds) must end within one
lease; a load that outlives it is renewed and re-read (:meth:`MooncakeTier.load`)."""
RENEW_BATCH = 4096
"""Keys per renewal call."""
RATE_WEIGHT = 0.25
"""Weight of the last round's model seconds per wall second in the running rate ``r`` (an
exponential average: the clock's holds come in bursts)."""


def lease_split(lease_ttl_s: float, time_scale: float, model_clock: str = "held") -> int:
    """``k``: how many real leases of the master make one model lease (1: no split, the master's
    lease is ``lease_ttl_s / time_scale``).

        k = min(MAX_SPLIT, floor(lease_ttl_s / time_scale / MIN_REAL_LEASE_S)), 1 if k < MIN_SPLIT

    and 1 on a free model clock (``stack.model_clock = "free"``: model time is wall time x
    time_scale, so the plain lease already lasts its TTL in model time).
    """
    if model_clock != "held":
        return 1
    real = lease_ttl_s / time_scale
    k = min(MAX_SPLIT, math.floor(real / MIN_REAL_LEASE_S + 1e-9))
    return k if k >= MIN_SPLIT else 1


class ModelLeases:
    """The model-time leases of one endpoint's store client (see the module doc).

    ``model_now``: model seconds now (the engine's clock); ``renew``: ``batch_is_exist`` of a
    list of keys without recording a grant (1/0 per key, None on failure); ``real_lease_s``: the
    master's lease in real seconds."""

    def __init__(self, lease_ttl_s: float, real_lease_s: float,
                 model_now: Callable[[], float],
                 renew: Callable[[list[str]], Awaitable[list[int] | None]]) -> None:
        self.lease_ttl_s = lease_ttl_s
        self.period_s = real_lease_s / 2
        self.model_now = model_now
        self._renew = renew
        self.real_lease_s = real_lease_s
        self.until: dict[str, float] = {}   # key -> model time its model lease ends
        self.ends: dict[str, float] = {}    # key -> wall time its master lease ends
        self.rate: float | None = None      # model seconds per wall second lately
        self._mark: tuple[float, float] | None = None   # (wall, model) at the last round
        self.renewed = 0                     # keys renewed so far
        self.lapses = 0                      # rounds that ended over one real lease after the last began
        self.on_renewed: Callable[[int], None] = lambda n: None
        self.on_lapse: Callable[[], None] = lambda: None
        self.wall: Callable[[], float] = time.monotonic
        self._task: asyncio.Task | None = None

    def granted(self, keys: list[str], hits: list[int]) -> None:
        """The master just granted a lease on each key of ``keys`` with a nonzero ``hits``."""
        until = self.model_now() + self.lease_ttl_s
        end = self.wall() + self.real_lease_s
        u, e = self.until, self.ends
        for k, h in zip(keys, hits, strict=True):
            if h:
                u[k] = until
                e[k] = end

    def live(self) -> list[str]:
        """Keys whose model lease has not ended (the ended ones are forgotten)."""
        now = self.model_now()
        self.until = {k: t for k, t in self.until.items() if t > now}
        if len(self.ends) > len(self.until):
            self.ends = {k: self.ends[k] for k in self.until if k in self.ends}
        return list(self.until)

    def _observe_rate(self, wall: float, model: float) -> None:
        """Fold the model seconds per wall second since the last round into :attr:`rate`."""
        if self._mark is not None and wall > self._mark[0]:
            r = max(0.0, (model - self._mark[1]) / (wall - self._mark[0]))
            self.rate = r if self.rate is None else self.rate + RATE_WEIGHT * (r - self.rate)
        self._mark = (wall, model)

    def due(self) -> list[str]:
        """The live keys this round renews (module doc); all of them while no rate is known."""
        keys = self.live()
        if self.rate is None:
            return keys
        now, w, r, lease = self.model_now(), self.wall(), self.rate, self.real_lease_s
        u, e = self.until, self.ends
        return [k for k in keys if u[k] > now + r * (lease + max(0.0, e[k] - w)) / 2]

    async def renew_once(self) -> int:
        """Renew the live keys that are due (:meth:`due`); keys the store no longer holds are
        forgotten. Returns how many keys were renewed."""
        self._observe_rate(self.wall(), self.model_now())
        keys = self.due()
        n = 0
        for i in range(0, len(keys), RENEW_BATCH):
            batch = keys[i:i + RENEW_BATCH]
            r = await self._renew(batch)
            if r is None:
                continue    # counted as a store error; the next round tries again
            end = self.wall() + self.real_lease_s
            for k, e in zip(batch, r, strict=True):
                if e:
                    n += 1
                    self.ends[k] = end
                else:
                    self.until.pop(k, None)
                    self.ends.pop(k, None)
        self.renewed += n
        if n:
            self.on_renewed(n)
        return n

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="store-leases")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def _round_done(self, last: float) -> None:
        """A round of renewals has just ended: a lapse if over one real lease (``2 x period_s``)
        after the round before started at wall time ``last`` (its leases were granted after
        that, this round's before now, so within one real lease means none can have ended)."""
        if self.wall() - last > 2 * self.period_s:
            self.lapses += 1
            self.on_lapse()

    async def _loop(self) -> None:
        last = self.wall()
        while True:
            await asyncio.sleep(self.period_s)
            start = self.wall()
            try:
                await self.renew_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # never let the renewals die
                log.exception("store lease renewal")
            self._round_done(last)
            last = start
