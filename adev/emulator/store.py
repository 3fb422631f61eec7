"""The external KV tier through the real Mooncake Store client.

What it does, per request, like vLLM's MooncakeStoreConnector:

- keys: ``<model>@tp_rank:0@<block hash, 16 hex>``, one per full 16-token block, or with
  ``chunk_blocks = C > 1`` ``<model>@tp_rank:0@c<C>@<hash of the chunk's last block>``, one per
  complete chunk of C blocks (:mod:`adev.emulator.chunks`: which objects a request reads and
  writes; this class sees objects, the engine counts blocks);
- lookup: one ``batch_is_exist`` over the request's keys beyond the local GPU hit (the master grants
  a lease on every hit); the caller counts the leading run of hits;
- load: ``batch_get_into`` of the hit blocks into a registered buffer (real bytes, real I/O), in
  batches of ``load_batch_keys`` blocks (1,024 by default: a call costs milliseconds of host time
  whatever its size, so smaller batches keep the run's held clock waiting longer); a later batch
  is preceded by a ``batch_is_exist`` that renews its leases once half the real lease has passed
  since the last grant (the lease is time-scaled, real I/O is not; with the lease unknown, before
  every later batch); a batch that still fails with LEASE_EXPIRED (a real read slower than the
  scaled lease; in model time it would not be) is renewed and re-read, at most ``LEASE_RETRIES``
  times in a row (a batch read in full resets the count); any other failed block and every block
  after it are recomputed;
- save (per prefill step, :meth:`adev.emulator.engine.Engine._start_save`): ``batch_is_exist``
  over the step's blocks to skip present keys, then one ``batch_put_from`` of all the missing
  ones, as vLLM's connector puts them (``batch_keys = 0``); each refused key (-200: RAM above the
  high watermark and nothing evictable, i.e. everything leased) is counted. With ``batch_keys >
  0`` the puts go in batches of that many blocks and a batch with a refused key ends the save
  (the later batches are counted as skipped, never offered);
- model-time leases (``leases``, :class:`adev.emulator.leases.ModelLeases`, where the stack splits
  a long lease): every grant (a lookup's or a save's hits) is noted with its model time, and the
  keys whose model lease has not ended are renewed on a thread of their own (:meth:`renew`).

Which tier served a hit: Mooncake's client does not say; :class:`adev.emulator.store_tiers.TierQuery`
asks the master (:meth:`MooncakeTier.tiers`, concurrently with the load).

Placement: puts carry ``ReplicateConfig.preferred_segment`` = this client's own segment (the
master falls back to any other segment when it is full; eviction stays global). On one CPU host a
read from a segment in another process goes over the TCP transport and costs ~4x the CPU of a
read from one's own segment (measured: 24 KiB objects, ~120 vs ~30 us per key, both processes
together); same-session reuse dominates, so most hits become local reads. Hit/miss behaviour,
capacity and leases are unchanged; ``prefer_local=False`` restores Mooncake's random placement.

Payloads are ``chunk_blocks * bytes_per_block / payload_scale`` real bytes per object. The client
is blocking; every call runs in executors per connection (two threads for lookups and loads, one
for saves, so background puts never delay a read path). Fault handling: any RPC failure (or a master that stops
accepting TCP connections, probed every second) marks the store down; while down, lookups and puts
return counted failures at once (the request recomputes); a background task re-creates the client
when a master accepts connections again. The old client is closed in a thread once its executors
have drained (``close()`` takes ~2 s and any call after it crashes the process, so nothing is
submitted to a closed client). Slow calls (over ``io_timeout_s``) are abandoned and counted.
"""
from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from adev.emulator.leases import ModelLeases
from adev.emulator.store_tiers import TierQuery

log = logging.getLogger("adev.emulator.store")

REFUSED = -200        # no space: everything in RAM is leased / above the high watermark
RPC_FAIL = -900       # master unreachable
LEASE_EXPIRED = -707  # a read that outlived its lease
LEASE_RETRIES = 2     # renew-and-reread after LEASE_EXPIRED, in a row (see load)
MIN_SEGMENT = 16 << 20  # Mooncake refuses a segment smaller than 16 MiB


@dataclass
class StoreSettings:
    master: str                       # "host:port" of the master's RPC
    model_name: str
    payload_bytes: int                # real bytes per block = bytes_per_block / payload_scale
    segment_bytes: int                # RAM this client contributes (>= 16 MiB)
    disk_dir: str | None = None       # offload directory (disk tier on) or None
    master_http: str | None = None    # "host:port" of the master's HTTP (metrics) server
    batch_keys: int = 0               # blocks per put batch (0: one batch per save, as vLLM)
    load_batch_keys: int = 1024       # blocks per load call (see the module doc)
    chunk_blocks: int = 1             # blocks per store object (adev.emulator.chunks)
    io_timeout_s: float = 10.0        # wall seconds before a hung store call is given up (counted)
    host: str = "127.0.0.1"
    prefer_local: bool = True         # puts prefer this client's own segment (see module doc)
    lease_s: float | None = None      # the master's lease in real seconds (None: unknown)


@dataclass
class SaveResult:
    offered: int = 0
    put: int = 0
    refused: int = 0
    skipped: int = 0
    present: int = 0
    error: bool = False


@dataclass
class LoadResult:
    loaded: int = 0                   # leading blocks loaded
    lease_retries: int = 0            # batches re-read after LEASE_EXPIRED (time-scaling artifact)
    error: bool = False


class _Conn:
    """One client generation: a read executor (lookups, loads: latency-critical), a write
    executor (saves, in the background), so puts never queue in front of reads, and a lease
    executor (model-time lease renewals)."""

    def __init__(self, gen: int) -> None:
        self.gen = gen
        self.exec = ThreadPoolExecutor(2, thread_name_prefix=f"mooncake-r{gen}")
        self.put_exec = ThreadPoolExecutor(1, thread_name_prefix=f"mooncake-w{gen}")
        self.lease_exec = ThreadPoolExecutor(1, thread_name_prefix=f"mooncake-l{gen}")
        self.client: Any = None      # mooncake.store.MooncakeDistributedStore, once set up
        self.put_config: Any = None  # mooncake.store.ReplicateConfig
        self.closed = False
        self.src: ctypes.Array[ctypes.c_char] | None = None  # registered put source buffer
        self.dst: ctypes.Array[ctypes.c_char] | None = None  # registered get destination buffer


def block_key(model: str, h: int) -> str:
    return f"{model}@tp_rank:0@{h:016x}"


class MooncakeTier:
    def __init__(self, settings: StoreSettings) -> None:
        if settings.chunk_blocks < 1:
            raise ValueError(f"chunk_blocks: expected an integer >= 1, got {settings.chunk_blocks!r}")
        self.s = settings
        self.chunk_blocks = settings.chunk_blocks
        self.obj_bytes = settings.payload_bytes * settings.chunk_blocks   # real bytes per object
        # objects per put batch (0: all of a save's)
        self.batch = max(1, settings.batch_keys // settings.chunk_blocks) if settings.batch_keys else 0
        self.load_batch = max(1, settings.load_batch_keys // settings.chunk_blocks)  # per load call
        c = settings.chunk_blocks
        self._key_prefix = f"{settings.model_name}@tp_rank:0@" + (f"c{c}@" if c > 1 else "")
        self._conn: _Conn | None = None
        self._gen = 0
        self._task: asyncio.Task | None = None
        self.tier_query = TierQuery(settings.master_http)
        self.on_error = lambda op: None   # metrics hook: op in lookup|load|put|connect
        self.connects = 0
        self._retired: list[_Conn] = []
        self._key_cache: dict[int, str] = {}
        self.leases: ModelLeases | None = None  # model-time leases (adev.emulator.leases)

    # ------------------------------------------------------------------ lifecycle
    @property
    def up(self) -> bool:
        c = self._conn
        return c is not None and not c.closed

    async def start(self, wait_s: float = 10.0) -> None:
        """Connect (waiting up to ``wait_s`` for a master) and keep the connection alive."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and not self.up:
            await self._try_connect()
            if not self.up:
                await asyncio.sleep(0.2)
        self._task = asyncio.create_task(self._keepalive())

    async def close(self) -> None:
        if self._task:
            self._task.cancel()
        await self.tier_query.close()
        c = self._conn
        self._conn = None
        if c is not None and not c.closed:
            c.closed = True
            await asyncio.get_running_loop().run_in_executor(None, _close_after_drain, c)

    def _master_accepts(self) -> bool:
        host, port = self.s.master.rsplit(":", 1)
        try:
            with socket.create_connection((host, int(port)), timeout=0.5):
                return True
        except OSError:
            return False

    async def _keepalive(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                await asyncio.sleep(1.0 if self.up else 0.5)
                alive = await loop.run_in_executor(None, self._master_accepts)
                if self.up and not alive:
                    self._mark_down("connect")
                elif not self.up and alive:
                    await self._try_connect()
            except asyncio.CancelledError:
                raise
            except Exception:  # never let the keepalive die
                log.exception("store keepalive")

    async def _try_connect(self) -> None:
        self._gen += 1
        conn = _Conn(self._gen)
        loop = asyncio.get_running_loop()
        rc: int | str
        try:
            rc = await asyncio.wait_for(loop.run_in_executor(conn.exec, self._setup, conn), 30.0)
        except Exception as e:  # noqa: BLE001
            rc = f"{type(e).__name__}: {e}"
        if rc == 0:
            self._conn = conn
            self.connects += 1
            log.info("store connected (generation %d)", conn.gen)
        else:
            log.warning("store connect failed: %s", rc)
            self.on_error("connect")
            conn.closed = True
            conn.exec.shutdown(wait=False)
            conn.put_exec.shutdown(wait=False)
            conn.lease_exec.shutdown(wait=False)

    def _setup(self, conn: _Conn) -> int:
        from mooncake.store import MooncakeDistributedStore
        os.environ.setdefault("MC_TCP_BIND_ADDRESS", self.s.host)
        offload = False
        path = ""
        if self.s.disk_dir:
            d = Path(self.s.disk_dir).resolve() / f"gen-{conn.gen}"
            d.mkdir(parents=True, exist_ok=True)
            path = str(d)
            os.environ["MOONCAKE_OFFLOAD_FILE_STORAGE_PATH"] = path
            os.environ["MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR"] = "file_per_key_storage_backend"
            os.environ.setdefault("MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS", "1")
            os.environ.setdefault("MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES", str(128 << 20))
            offload = True
        client = MooncakeDistributedStore()
        seg = max(MIN_SEGMENT, int(self.s.segment_bytes))
        local = max(MIN_SEGMENT, 2 * self.load_batch * self.obj_bytes)
        rc = client.setup(self.s.host, "P2PHANDSHAKE", seg, local, "tcp", "", self.s.master,
                          None, offload, path)
        if rc != 0:
            return rc
        p = self.obj_bytes
        src = conn.src = ctypes.create_string_buffer(os.urandom(p), p)
        dst = conn.dst = ctypes.create_string_buffer(p * self.load_batch)
        r1 = client.register_buffer(ctypes.addressof(src), p)
        r2 = client.register_buffer(ctypes.addressof(dst), p * self.load_batch)
        conn.client = client
        from mooncake.store import ReplicateConfig
        put_config = conn.put_config = ReplicateConfig()
        if self.s.prefer_local:
            put_config.preferred_segment = client.get_hostname()
        return r1 or r2

    def _mark_down(self, op: str) -> None:
        c = self._conn
        if c is None:
            return
        self._conn = None
        log.warning("store marked down after a failed %s", op)
        if not c.closed:
            c.closed = True
            self._retired.append(c)  # keeps its registered buffers alive for calls still running
            threading.Thread(target=_close_after_drain, args=(c,), daemon=True,
                             name=f"mooncake-close-{c.gen}").start()

    async def _call(self, op: str, fn, *args):
        """Run ``fn(conn, *args)`` on the current connection; None on failure (counted). A call that
        outlives ``io_timeout_s`` is abandoned (its thread finishes it) and counted; the store is
        marked down only by RPC failures or the keepalive probe, not by slowness."""
        c = self._conn
        if c is None or c.closed:
            self.on_error(op)
            return None
        loop = asyncio.get_running_loop()
        ex = c.put_exec if op == "put" else c.lease_exec if op == "lease" else c.exec
        try:
            return await asyncio.wait_for(loop.run_in_executor(ex, fn, c, *args), self.s.io_timeout_s)
        except TimeoutError:
            log.warning("store %s timed out after %.1f s", op, self.s.io_timeout_s)
            self.on_error(op)
            return None
        except Exception as e:  # noqa: BLE001 (RuntimeError from the binding, executor shut down)
            log.warning("store %s failed: %r", op, e)
            self.on_error(op)
            if self._conn is c:
                self._mark_down(op)
            return None

    # ------------------------------------------------------------------ operations
    def keys(self, hashes: list[int]) -> list[str]:
        """Store keys of block hashes (with ``chunk_blocks > 1``: of the chunks these blocks end;
        memoised: a session's prefix is keyed again every turn)."""
        cache = self._key_cache
        out = list(map(cache.get, hashes))
        if None in out:
            pre = self._key_prefix
            for j, k in enumerate(out):
                if k is None:
                    h = hashes[j]
                    k = out[j] = cache[h] = f"{pre}{h:016x}"
            if len(cache) > 2_000_000:
                cache.clear()
        return cast(list[str], out)  # every None was just filled in

    async def exists(self, keys: list[str], op: str = "lookup") -> list[int] | None:
        """``batch_is_exist`` (grants leases on hits): 1/0 per key, or None on failure (counted
        under ``op``: "lookup" on the read path, "put" for a save's skip check)."""
        if not keys:
            return []
        r = await self._is_exist(keys, op)
        if r is not None and self.leases is not None:
            self.leases.granted(keys, r)
        return r

    async def renew(self, keys: list[str]) -> list[int] | None:
        """``batch_is_exist`` that renews the leases of ``keys`` (:class:`ModelLeases`); on its
        own thread, so renewals never queue behind a read path's loads nor a save's puts. None,
        and no error counted, while the store is down (the read path counts that outage)."""
        if not self.up:
            return None
        return await self._is_exist(keys, "lease")

    async def _is_exist(self, keys: list[str], op: str) -> list[int] | None:
        r = await self._call(op, lambda c, k: c.client.batch_is_exist(k), keys)
        if r is None:
            return None
        if any(x < 0 for x in r):
            self.on_error(op)
            if min(r) == RPC_FAIL:
                self._mark_down(op)
            return None
        return list(r)

    async def load(self, keys: list[str], granted_at: float | None = None) -> LoadResult:
        """Read the hit blocks for real; attribute each to RAM or disk (see module doc).
        ``granted_at``: ``time.monotonic()`` just before the lookup that leased ``keys``."""
        res = LoadResult()
        if not keys:
            return res
        p = self.obj_bytes
        ok = 0
        retries = LEASE_RETRIES
        renew = False
        while ok < len(keys):
            batch = keys[ok:ok + self.load_batch]
            if renew or (ok and self._lease_stale(granted_at)):
                # Re-grant the lease. In model time the whole load takes load_s (milliseconds,
                # far below any lease); here the lease is divided by the time scale but real I/O
                # is not, so a long load would outlive the lease the lookup granted and fail
                # with LEASE_EXPIRED -- an artifact of time scaling.
                granted_at = time.monotonic()
                ex = await self.exists(batch, op="load")
                if ex is None:
                    res.error = True
                    break
                live = next((j for j, e in enumerate(ex) if not e), len(batch))
                if live < len(batch):   # evicted since the lookup: the rest is recomputed
                    res.error = True
                    self.on_error("load")
                    if not live:
                        break
                    batch = batch[:live]

            def get(c, b=batch):
                base = ctypes.addressof(c.dst)
                return c.client.batch_get_into(b, [base + j * p for j in range(len(b))], [p] * len(b))

            r = await self._call("load", get)
            if r is None:
                res.error = True
                break
            run = 0
            for x in r:
                if x < p:
                    break
                run += 1
            ok += run
            renew = run < len(batch) and r[run] == LEASE_EXPIRED and retries > 0
            if renew:   # the real read outlived the time-scaled lease: renew and read the rest
                retries -= 1
                res.lease_retries += 1
                continue
            if run < len(batch):
                res.error = True
                self.on_error("load")
                break
            if res.error:
                break
            retries = LEASE_RETRIES
        res.loaded = ok
        return res

    async def tiers(self, keys: list[str]) -> list[str]:
        """The tier holding each key now, "ram" or "disk" (:class:`TierQuery`)."""
        return await self.tier_query.tiers(keys)

    @property
    def unknown_tiers(self) -> int:
        """Hit objects whose tier could not be queried (taken as RAM)."""
        return self.tier_query.unknown

    def _lease_stale(self, granted_at: float | None) -> bool:
        """Whether half the real lease has passed since ``granted_at`` (always, if unknown)."""
        if granted_at is None or not self.s.lease_s:
            return True
        return time.monotonic() - granted_at > self.s.lease_s / 2

    async def save(self, keys: list[str]) -> SaveResult:
        """Put the blocks of ``keys`` not yet in the store (the caller leaves out blocks it just
        loaded from the store)."""
        res = SaveResult()
        cand = keys
        if not cand:
            return res
        ex = await self.exists(cand, op="put")
        if ex is None:
            res.error = True
            return res
        missing = [k for k, e in zip(cand, ex, strict=True) if not e]
        res.present = len(cand) - len(missing)
        if not missing:
            return res
        p = self.obj_bytes
        step = self.batch or len(missing)
        for i in range(0, len(missing), step):
            batch = missing[i:i + step]

            def put(c, b=batch):
                ptr = ctypes.addressof(c.src)
                return c.client.batch_put_from(b, [ptr] * len(b), [p] * len(b), c.put_config)

            r = await self._call("put", put)
            res.offered += len(batch)
            if r is None:
                res.error = True
                res.skipped += len(missing) - i - len(batch)
                break
            bad = [x for x in r if x < 0]
            res.put += len(batch) - len(bad)
            if bad:
                failed = sum(1 for x in bad if x == RPC_FAIL)
                if failed:
                    res.error = True
                    self.on_error("put")
                    self._mark_down("put")
                res.refused += len(bad) - failed
                res.skipped += len(missing) - i - len(batch)
                break  # as vLLM: stop saving this request, no retry
        return res


def _close_after_drain(c: _Conn) -> None:
    """Close a client once every call submitted to it has returned (a call after ``close()``
    crashes the process; nothing new is submitted once ``c.closed`` is set)."""
    try:
        c.exec.shutdown(wait=True)
        c.put_exec.shutdown(wait=True)
        c.lease_exec.shutdown(wait=True)
        if c.client is not None:
            c.client.close()
    except Exception:  # noqa: BLE001
        pass
