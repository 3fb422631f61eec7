"""Store leases in model time, kept alive on the real Mooncake master.

The master counts a lease in real milliseconds. With a free model clock (model time = time scale x
wall time) a lease of ``lease_ttl_s / time_scale`` real seconds is the model's lease exactly. With
a held clock (:mod:`adev.clock`) model time stands still while a real store read is behind its
profile, but the master's clock does not: a long lease (the source's 300 s point) would then run
out early in model time, by however long this host held the clock, so leased objects would become
evictable, and refused writes fewer, the slower the host.

So for a long lease the master runs with a short real lease, the *grain* (``LEASE_GRAIN_S``), and
every endpoint keeps its own lookups' leases in model time: this table records, per store key,
the model time its lease ends (``t + lease_ttl_s`` at each lookup hit, the latest wins), and the
store client renews every key whose model lease is still running with ``batch_is_exist`` (which
grants a fresh lease) every ``grain / RENEWALS_PER_GRAIN`` real seconds. A key's lease thus ends
when model time passes its end, late by at most one grain of real time (``grain x time_scale``
model seconds when the clock runs freely; nothing while it stands still). The master's lease
stays the one that decides eviction and refusal.

    lease end(key) = max over lookup hits h of key: t_model(h) + lease_ttl_s
    key renewed at real time r  <=>  lease end(key) > model time at r
"""
from __future__ import annotations

from collections.abc import Iterable

LEASE_GRAIN_S = 1.0
"""The master's real lease when endpoints keep leases in model time (real seconds)."""
RENEWALS_PER_GRAIN = 4
"""Renewals per grain: a renewal may be late by up to 3/4 of a grain before a lease lapses."""


class ModelLeases:
    """Per store key, the model time its lease ends."""

    def __init__(self, ttl_s: float) -> None:
        if ttl_s <= 0:
            raise ValueError(f"lease ttl: expected seconds > 0, got {ttl_s!r}")
        self.ttl_s = ttl_s
        self._end: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self._end)

    def granted(self, keys: Iterable[str], t: float) -> None:
        """The master granted leases on ``keys`` (lookup hits) at model time ``t``."""
        end = t + self.ttl_s
        d = self._end
        for k in keys:
            if d.get(k, -1.0) < end:
                d[k] = end

    def live(self, t: float) -> list[str]:
        """Keys whose lease runs past model time ``t``; the others are dropped."""
        d = self._end
        gone = [k for k, e in d.items() if e <= t]
        for k in gone:
            del d[k]
        return list(d)

    def forget(self, keys: Iterable[str]) -> None:
        """Keys the store no longer holds (a renewal found them gone)."""
        for k in keys:
            self._end.pop(k, None)


def kept_in_model_time(lease_ttl_s: float, time_scale: float, held_clock: bool) -> bool:
    """Whether endpoints keep leases in model time: with a held clock, for a lease longer than
    one grain of real time (a shorter one runs out within a grain either way)."""
    return held_clock and lease_ttl_s / time_scale > LEASE_GRAIN_S


def master_lease_s(lease_ttl_s: float, time_scale: float, held_clock: bool) -> float:
    """The master's real lease: the grain when endpoints keep leases in model time, else
    ``lease_ttl_s / time_scale``."""
    if kept_in_model_time(lease_ttl_s, time_scale, held_clock):
        return LEASE_GRAIN_S
    return lease_ttl_s / time_scale
