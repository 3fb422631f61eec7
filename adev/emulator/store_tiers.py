"""Which tier holds each store key: the Mooncake master's HTTP admin endpoint.

Mooncake's client does not say which tier served a hit. The master's ``/batch_query_keys`` lists
each key's memory replicas and disk replicas *without* bumping the master's hit counters
(``get_replica_desc`` does bump them, so it would double-count ``mem_cache_hit_bytes_total``); the
engine queries it for the hit keys concurrently with the load: a key with a memory replica was
served from RAM (Mooncake reads memory replicas first), one with only a disk replica from disk. To
keep the master's work small it queries every 16th key and then every key between two samples
that differ (exact unless a tier changes twice within 16 consecutive keys). It needs the master's
HTTP (metrics) address; without it every hit is attributed to RAM and counted as unknown.
"""
from __future__ import annotations

import itertools
import json
import logging
from typing import TYPE_CHECKING
from urllib.parse import quote

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger("adev.emulator.store")


class TierQuery:
    """Tier attribution through the master at ``master_http`` ("host:port"; None: unknown)."""

    def __init__(self, master_http: str | None) -> None:
        self.master_http = master_http
        self._http: aiohttp.ClientSession | None = None
        self.unknown = 0             # keys whose tier could not be queried (taken as RAM)

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()

    async def tiers(self, keys: list[str]) -> list[str]:
        """The tier holding each key now, "ram" or "disk"; "ram" for every key without the
        master's HTTP address or when the query fails (counted in ``unknown``)."""
        got: list[str | None] = [None] * len(keys)
        if self.master_http and keys:
            try:
                got = await self.sampled(keys)
            except Exception as e:  # noqa: BLE001
                log.warning("tier query failed: %s", e)
        self.unknown += sum(1 for t in got if t is None)
        return [t or "ram" for t in got]

    async def query(self, keys: list[str]) -> dict[str, str | None]:
        """Tier of each key from the master's ``/batch_query_keys`` (no hit counters bumped)."""
        import aiohttp
        http = self._http
        if http is None:
            http = self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))
        out: dict[str, str | None] = {}
        for i in range(0, len(keys), 200):
            batch = keys[i:i + 200]
            url = f"http://{self.master_http}/batch_query_keys?keys=" + ",".join(quote(k, safe="@:") for k in batch)
            async with http.get(url) as resp:
                data = json.loads(await resp.text()).get("data") or {}
            for k in batch:
                d = data.get(k) or {}
                if d.get("values"):
                    out[k] = "ram"
                elif d.get("local_disk_values") or d.get("disk_values"):
                    out[k] = "disk"
                else:
                    out[k] = None
        return out

    async def sampled(self, keys: list[str], stride: int = 16) -> list[str | None]:
        """Tier per key, querying every ``stride``-th key (and the last) and then every key of a
        stride whose two ends differ. Exact whenever tier membership changes at most once within
        any ``stride`` consecutive blocks (evictions take whole LRU runs); 1/stride of the master
        work otherwise spent on a full query."""
        n = len(keys)
        if n <= 2 * stride:
            q = await self.query(keys)
            return [q[k] for k in keys]
        idx = sorted(set(range(0, n, stride)) | {n - 1})
        q = await self.query([keys[i] for i in idx])
        out: list[str | None] = [None] * n
        refine: list[int] = []
        for a, b in itertools.pairwise(idx):
            ta, tb = q[keys[a]], q[keys[b]]
            if ta == tb:
                for i in range(a, b + 1):
                    out[i] = ta
            else:
                out[a], out[b] = ta, tb
                refine.extend(range(a + 1, b))
        if refine:
            q2 = await self.query([keys[i] for i in refine])
            for i in refine:
                out[i] = q2[keys[i]]
        return out
