"""Timing model of one GPU engine (vLLM v1-like continuous batching) on an asyncio loop.

Model time vs wall time: the engine keeps its own clock in *model seconds*; the wall time of model
instant m is ``t0 + m / time_scale``. Every modelled duration is therefore divided by the time scale
on the wall, and everything the engine reports is in model seconds.

Per step (vLLM's scheduler): running requests in decode each get one token; the rest of the
``max_num_batched_tokens`` budget goes to prefill chunks of admitted requests in admission order.

    step time = prefill tokens / prefill_tokens_per_s
              + [decode present] (decode_step_base_s + decode_step_per_seq_s * n_decode
                                  + decode_step_per_ktoken_s * context tokens of the decodes / 1000)

A request's first token comes out of its first decode step after its prefill, so on an idle engine

    TTFT = read path (lookup + load) + uncached tokens / prefill rate + decode step(1, prompt).

Admission (FCFS, at step boundaries): local prefix lookup in the pool, then blocks for the whole
prompt (hits reuse cached blocks, the rest are allocated, evicting LRU cached blocks); if they do not
fit the request waits (queueing shows in TTFT). With a store, an admitted request first runs its
read path (real ``batch_is_exist`` + real batch get + modelled time from the tier profiles) without
holding up the batch (vLLM's async KV load), then prefills what is left. Decode needs a new block
every ``block_size`` tokens; when none is free the most recently admitted running request is
preempted (its blocks freed, recomputed later from the prefix cache), counted in
``vllm:num_preemptions_total``.

CPU: the engine does not tick per token. While only decodes run (no prefill, no first token due),
it plans a *macro step* of k identical-composition decode steps up to the next event (earliest
finish, block exhaustion, or a wall horizon), sleeps until its end and emits the k tokens per
request at once. An arrival or a finished store read that falls inside a plan truncates it at the
step in progress (or re-plans it, if the event precedes the plan's start: nothing of a plan is
emitted before its end, so it may be re-planned). Store I/O therefore does not delay the model
clock as long as it finishes before the step the request would join has ended; when it finishes
later the request joins late and the lag is visible to the client (``bench_emulator.py`` measures
it) and counted in ``adev_emulator_read_path_overrun_seconds``.
"""
from __future__ import annotations

import asyncio
import bisect
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from adev.emulator.metrics import Metrics, observe_n
from adev.emulator.pool import NONE_HASH, PrefixPool, block_hashes, max_hit_blocks

log = logging.getLogger("adev.emulator.engine")

WAITING, LOADING, PREFILL, DECODE, DONE = "waiting", "loading", "prefill", "decode", "done"

SPIN_WALL_S = 0.0015
"""The last stretch before a plan that emits first tokens ends is waited for by yielding to the
loop (``asyncio.sleep(0)``) instead of a timer: asyncio's epoll timers round up to whole
milliseconds. Costs at most this much CPU per such plan (one per request)."""


async def _spin_until(deadline: float) -> None:
    while time.monotonic() < deadline:
        await asyncio.sleep(0)


@dataclass
class TierCost:
    """Modelled read cost of one tier: ``lookup_latency_s + blocks * bytes_per_block / read_bps``."""
    name: str
    lookup_latency_s: float
    read_bytes_per_s: float

    def load_s(self, blocks: int, bytes_per_block: int) -> float:
        return 0.0 if blocks <= 0 else self.lookup_latency_s + blocks * bytes_per_block / self.read_bytes_per_s


@dataclass
class EngineConfig:
    block_size: int
    capacity_blocks: int
    prefill_tokens_per_s: float
    decode_step_base_s: float
    decode_step_per_seq_s: float
    decode_step_per_ktoken_s: float
    max_num_seqs: int
    max_num_batched_tokens: int
    time_scale: float
    bytes_per_block: int
    prefix_caching: bool = True
    ram_tier: TierCost | None = None
    disk_tier: TierCost | None = None
    disk_only: bool = False          # every store hit is charged (and reported) at the disk tier
    # longest macro step, wall seconds. A stream's tokens leave in bunches at most this far apart
    # (vLLM sends one event per step). Measured (bench_client.py, paced, 18 sessions): 20 ms
    # instead of 0.3 s cost the stack 0.48 -> 0.64 cores and the client 17 -> 22 ms CPU per
    # call, and left the client's first-byte delay unchanged.
    horizon_wall_s: float = 0.3
    # prefill-to-decode KV link (adev.emulator.disagg): a request marked remote_prefill waits
    # lookup_latency_s + (prompt - local hit) tokens * bytes per token / read_bytes_per_s for
    # its prompt's KV instead of reading the store and prefilling; None = such requests prefill.
    kv_link: TierCost | None = None


@dataclass
class Request:
    rid: str
    prompt: list[int]
    out_ids: list[int]
    finish_reason: str
    hashes: list[int] = field(default_factory=list)
    remote_prefill: bool = False       # the prompt's KV comes from a prefill replica (disagg)
    state: str = WAITING
    t_arrival: float = 0.0
    arrival_mono: float = 0.0
    # progress
    n_computed: int = 0
    n_gen: int = 0
    held: list[int] = field(default_factory=list)
    n_anon: int = 0
    ready_time: float = 0.0
    admitted_once: bool = False
    aborted: bool = False
    # accounting (first admission)
    gpu_hit_tokens: int = 0
    ram_blocks: int = 0
    disk_blocks: int = 0
    store_keys_looked_up: int = 0
    store_hit_blocks: int = 0
    put_blocks: int = 0
    put_refused_blocks: int = 0
    store_errors: int = 0
    preemptions: int = 0
    lookup_s: float = 0.0
    load_s: float = 0.0
    kv_transfer_tokens: int = 0        # prompt tokens whose KV came over the prefill-decode link
    transfer_s: float = 0.0            # modelled time of that transfer
    read_host_s: float | None = None   # the real read path on this host, wall x time scale
    t_admit: float | None = None
    t_ready: float | None = None
    t_prefill_done: float | None = None
    t_first: float | None = None
    t_last_token: float | None = None
    t_end: float | None = None
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)

    @property
    def n_out(self) -> int:
        return len(self.out_ids)

    def seq(self) -> list[int]:
        return self.prompt + self.out_ids[:self.n_gen] if self.n_gen else self.prompt

    def tokens_split(self, bs: int) -> dict[str, int]:
        p = len(self.prompt)
        ram, disk = self.ram_blocks * bs, self.disk_blocks * bs
        kv = self.kv_transfer_tokens
        return {"gpu": self.gpu_hit_tokens, "store_ram": ram, "store_disk": disk, "kv_transfer": kv,
                "computed": p - self.gpu_hit_tokens - ram - disk - kv}


@dataclass
class _Plan:
    start: float
    ends: list[float]                    # end time of each step
    prefill: list[tuple[Request, int]]   # (request, tokens) for a single mixed step
    decode: list[Request]

    @property
    def end(self) -> float:
        return self.ends[-1]

    def truncate(self, te: float) -> None:
        j = bisect.bisect_left(self.ends, te)
        if j < len(self.ends) - 1:
            del self.ends[j + 1:]


class Engine:
    def __init__(self, cfg: EngineConfig, metrics: Metrics, store=None) -> None:
        self.cfg = cfg
        self.m = metrics
        self.store = store
        self.pool = PrefixPool(cfg.capacity_blocks, cfg.prefix_caching)
        self.t0 = time.monotonic()
        self.waiting: deque[Request] = deque()
        self.active: list[Request] = []   # admitted: loading, prefill, decode (admission order)
        self._wake = asyncio.Event()
        self._events: list[float] = []
        self._t_free = 0.0
        self._task: asyncio.Task | None = None
        self._bg: set[asyncio.Task] = set()
        self.dead: BaseException | None = None
        self.on_finish: Callable[[Request], None] | None = None

    # ------------------------------------------------------------------ clock
    def now(self) -> float:
        return (time.monotonic() - self.t0) * self.cfg.time_scale

    def wall(self, m: float) -> float:
        return self.t0 + m / self.cfg.time_scale

    # ------------------------------------------------------------------ public
    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    def submit(self, r: Request, arrival_mono: float | None = None) -> Request:
        """Queue a request. ``arrival_mono`` (default now) is when it reached the server: the
        model clock counts from there, so the endpoint's own CPU work (parsing, tokenizing) is
        hidden like any other real work, as long as it ends before the model says it must."""
        r.arrival_mono = time.monotonic() if arrival_mono is None else arrival_mono
        r.t_arrival = (r.arrival_mono - self.t0) * self.cfg.time_scale
        bs = self.cfg.block_size
        if self.cfg.prefix_caching and not r.hashes:
            r.hashes = block_hashes(r.prompt, bs)
        self.waiting.append(r)
        self._event(r.t_arrival)
        return r

    def abort(self, r: Request) -> None:
        if r.state == DONE or r.aborted:
            return
        r.aborted = True
        if r.state == WAITING:
            try:
                self.waiting.remove(r)
            except ValueError:
                pass
            self._finish(r, "abort", self.now())
        elif r.state in (PREFILL, DECODE):
            self._finish(r, "abort", self.now())
        # LOADING: finished when its read path returns
        self._event(self.now())

    def decode_step_s(self, n: int, ctx_tokens: int) -> float:
        c = self.cfg
        return c.decode_step_base_s + c.decode_step_per_seq_s * n + c.decode_step_per_ktoken_s * ctx_tokens / 1000.0

    def counts(self) -> tuple[int, int]:
        """(running, waiting) as vLLM reports them (loading requests wait for remote KV)."""
        running = sum(1 for r in self.active if r.state in (PREFILL, DECODE))
        return running, len(self.waiting) + len(self.active) - running

    # ------------------------------------------------------------------ loop
    def _event(self, t: float) -> None:
        self._events.append(t)
        self._wake.set()

    def _drop_events(self, upto: float) -> None:
        """Events at or before ``upto`` are handled by the plan boundary at ``upto``."""
        if self._events:
            self._events = [e for e in self._events if e > upto]

    async def _run(self) -> None:
        try:
            await self._loop()
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # the engine is dead: /health says 503
            log.exception("engine died")
            self.dead = e
            raise

    async def _loop(self) -> None:
        t = 0.0
        while True:
            self._drop_events(t)
            self._admit(t)
            plan = self._plan(t)
            if plan is None:
                if self._events:
                    t = max(t, min(self._events))
                    continue
                future = [r.ready_time for r in self.active if r.state == PREFILL and r.ready_time > t]
                if future:
                    t = min(future)
                    continue
                self._wake.clear()
                await self._wake.wait()
                if self._events:
                    t = max(self._t_free, min(self._events))
                continue
            while True:
                delay = self.wall(plan.end) - time.monotonic()
                if delay <= 0:
                    break
                # a plan that ends with first tokens is waited for precisely: the loop's timers
                # wake up to a millisecond late (epoll), which at S=10 is 10 model ms of TTFT
                margin = SPIN_WALL_S if any(r.n_gen == 0 for r in plan.decode) else 0.0
                if delay <= margin:
                    await _spin_until(self.wall(plan.end))
                    break
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), delay - margin)
                except asyncio.TimeoutError:
                    if margin:
                        continue
                    break
                pending = [e for e in self._events if e < plan.end]
                if not pending:
                    continue
                te = min(pending)
                if te <= plan.start:
                    start = max(self._t_free, te)
                    self._admit(start)
                    new = self._plan(start)
                    if new is not None:
                        plan = new
                else:
                    plan.truncate(te)
                self._drop_events(plan.end)
            self._commit(plan)
            self._t_free = plan.end
            t = plan.end

    # ------------------------------------------------------------------ admission
    def _admit(self, t: float) -> None:
        c = self.cfg
        bs = c.block_size
        while self.waiting and len(self.active) < c.max_num_seqs:
            r = self.waiting[0]
            if r.aborted:
                self.waiting.popleft()
                continue
            seq_len = len(r.prompt) + r.n_gen
            hashes = r.hashes if r.n_gen == 0 else block_hashes(r.seq(), bs) if c.prefix_caching else []
            hit = self.pool.lookup(hashes, seq_len, bs)
            need = -(-seq_len // bs) - hit
            if self.pool.available - self.pool.free_hits(hashes[:hit]) < need:
                if not self.active:  # cannot ever fit (grown past the pool): end it
                    self.waiting.popleft()
                    self._finish(r, "length", t)
                    continue
                break
            self.waiting.popleft()
            self.pool.touch(hashes[:hit])
            self.pool.allocate(need)
            r.held = list(hashes[:hit])
            r.n_anon = need
            r.n_computed = hit * bs
            self.active.append(r)
            first = not r.admitted_once
            if first:
                r.admitted_once = True
                t = max(t, r.t_arrival)
                r.t_admit = t
                r.gpu_hit_tokens = hit * bs
                if c.prefix_caching:
                    self.m.prefix_cache_queries.inc(seq_len)
                    self.m.prefix_cache_hits.inc(hit * bs)
            if first and r.remote_prefill and c.kv_link is not None:
                self._remote_prefill(r, t, hit)
            elif first and self.store is not None:
                r.state = LOADING
                task = asyncio.create_task(self._read_path(r, t, hit))
                self._bg.add(task)
                task.add_done_callback(self._bg.discard)
            else:
                r.state = PREFILL
                r.ready_time = t
                if first:
                    r.t_ready = t

    def _remote_prefill(self, r: Request, t: float, hit: int) -> None:
        """A prompt prefilled elsewhere: its KV beyond the local hit arrives over the link; the
        last prompt token is computed here (as vLLM does) once it has."""
        c = self.cfg
        bs = c.block_size
        n = len(r.prompt) - hit * bs
        r.transfer_s = c.kv_link.load_s(n, c.bytes_per_block // bs) if c.kv_link else 0.0
        r.kv_transfer_tokens = max(0, n - 1)
        self.m.external_prefix_cache_queries.inc(n)
        self.m.external_prefix_cache_hits.inc(r.kv_transfer_tokens)
        r.n_computed = hit * bs + r.kv_transfer_tokens
        r.state = PREFILL
        r.t_ready = r.ready_time = t + r.transfer_s
        self._event(r.ready_time)

    async def _read_path(self, r: Request, t_admit: float, hit: int) -> None:
        """Store lookup + load of one request (first admission only)."""
        c = self.cfg
        bs = c.block_size
        p = len(r.prompt)
        keys = self.store.keys(r.hashes[hit:max_hit_blocks(p, bs)])
        r.store_keys_looked_up = len(keys)
        n_ext = 0
        granted_at = started = time.monotonic()
        ex = await self.store.exists(keys) if keys else []
        self.m.store_lookups.inc()
        self.m.store_keys_looked_up.inc(len(keys))
        if ex is None:
            r.store_errors += 1
        else:
            while n_ext < len(ex) and ex[n_ext]:
                n_ext += 1
        lookup_m = c.ram_tier.lookup_latency_s if c.ram_tier else 0.0
        if c.disk_only and c.disk_tier:
            lookup_m = c.disk_tier.lookup_latency_s
        r.store_hit_blocks = n_ext
        ram = disk = 0
        tiers: list[str] = []
        load = asyncio.create_task(self.store.load(keys[:n_ext], granted_at)) if n_ext else None
        if n_ext:  # which tier holds each hit (queried while the load runs)
            tiers = ["disk"] * n_ext if c.disk_only else await self.store.tiers(keys[:n_ext])
        # The lookup's hits and their tier split are counted at one instant, so a scrape never
        # sees the hits without their split (loads outlive scrapes; failures are counted after)
        self.m.external_prefix_cache_queries.inc(p - hit * bs)
        self.m.external_prefix_cache_hits.inc(n_ext * bs)
        n_disk = tiers.count("disk")
        if n_ext - n_disk:
            self.m.hit_tier("ram").inc(n_ext - n_disk)
        if n_disk:
            self.m.hit_tier("disk").inc(n_disk)
        if load is not None:
            res = await load
            if res.lease_retries:
                self.m.store_lease_retries.inc(res.lease_retries)
            if res.error:
                r.store_errors += 1
                for t in ("ram", "disk"):
                    lost = tiers[res.loaded:].count(t)
                    if lost:
                        self.m.load_failed(t).inc(lost)
            disk = tiers[:res.loaded].count("disk")
            ram = res.loaded - disk
        load_m = 0.0
        if ram and c.ram_tier:
            load_m += c.ram_tier.load_s(ram, c.bytes_per_block)
        if disk and c.disk_tier:
            load_m += c.disk_tier.load_s(disk, c.bytes_per_block)
        r.ram_blocks, r.disk_blocks = ram, disk
        r.lookup_s, r.load_s = lookup_m, load_m
        r.read_host_s = (time.monotonic() - started) * c.time_scale
        ready = t_admit + lookup_m + load_m
        now = self.now()
        self.m.read_path.observe(lookup_m + load_m)
        if now > ready:
            self.m.read_path_overrun.inc(now - ready)
        if r.aborted:
            self._finish(r, "abort", max(now, ready))
            return
        got = ram + disk
        r.t_ready = r.ready_time = ready
        r.n_computed = (hit + got) * bs
        r.state = PREFILL
        self._event(ready)

    # ------------------------------------------------------------------ planning
    def _blocks_needed(self, decode: list[Request], k: int) -> int:
        bs = self.cfg.block_size
        need = 0
        for r in decode:
            n = -(-(len(r.prompt) + r.n_gen + k) // bs) - (len(r.held) + r.n_anon)
            if n > 0:
                need += n
        return need

    def _preempt(self, r: Request, t: float) -> None:
        self.active.remove(r)
        self.pool.release(r.held, r.n_anon)
        r.held, r.n_anon = [], 0
        r.n_computed = 0
        r.state = WAITING
        r.preemptions += 1
        self.m.num_preemptions.inc()
        self.waiting.appendleft(r)

    def _plan(self, t: float) -> _Plan | None:
        c = self.cfg
        while True:
            decode = [r for r in self.active if r.state == DECODE]
            prefill = [r for r in self.active if r.state == PREFILL and r.ready_time <= t]
            if not decode and not prefill:
                return None
            single = bool(prefill) or any(r.n_gen == 0 for r in decode)
            if single:
                k = 1 if decode else 0
            else:
                k = min(r.n_out - r.n_gen for r in decode)
                ctx = sum(len(r.prompt) + r.n_gen for r in decode)
                step = self.decode_step_s(len(decode), ctx)
                k = max(1, min(k, int(c.horizon_wall_s * c.time_scale / max(step, 1e-9))))
            if k and decode:
                avail = self.pool.available
                if self._blocks_needed(decode, k) > avail:
                    lo, hi = 0, k  # largest k' with need <= avail
                    while lo < hi:
                        mid = (lo + hi + 1) // 2
                        if self._blocks_needed(decode, mid) <= avail:
                            lo = mid
                        else:
                            hi = mid - 1
                    if lo == 0:
                        victims = [r for r in self.active if r.state in (PREFILL, DECODE)]
                        victim = victims[-1]
                        if len(victims) == 1:  # alone and out of blocks: cannot continue
                            self._finish(victim, "length", t)
                        else:
                            self._preempt(victim, t)
                        continue
                    k = lo
                for r in decode:
                    n = -(-(len(r.prompt) + r.n_gen + k) // c.block_size) - (len(r.held) + r.n_anon)
                    if n > 0:
                        self.pool.allocate(n)
                        r.n_anon += n
            chunks: list[tuple[Request, int]] = []
            if single:
                budget = c.max_num_batched_tokens - len(decode)
                for r in prefill:
                    if budget <= 0:
                        break
                    take = min(len(r.prompt) + r.n_gen - r.n_computed, budget)
                    if take > 0:
                        chunks.append((r, take))
                        budget -= take
            ptoks = sum(n for _, n in chunks)
            ends = []
            tt = t
            if single or not decode:
                dur = ptoks / c.prefill_tokens_per_s
                if decode:
                    ctx = sum(len(r.prompt) + r.n_gen for r in decode)
                    dur += self.decode_step_s(len(decode), ctx)
                ends.append(t + dur)
            else:
                n = len(decode)
                ctx = sum(len(r.prompt) + r.n_gen for r in decode)
                for j in range(k):
                    tt += self.decode_step_s(n, ctx + j * n)
                    ends.append(tt)
            return _Plan(t, ends, chunks, decode)

    # ------------------------------------------------------------------ commit
    def _commit(self, plan: _Plan) -> None:
        k = len(plan.ends)
        end = plan.end
        for r, take in plan.prefill:
            if r.state != PREFILL:
                continue
            r.n_computed += take
            if r.n_computed >= len(r.prompt) + r.n_gen:
                r.state = DECODE
                if r.t_prefill_done is None:
                    r.t_prefill_done = end
                    self._on_prefilled(r)
                self._register(r)
        # decode tokens: every request in the plan's decode set gets min(k, remaining) tokens
        prev = plan.start
        durations = []
        for e in plan.ends:
            durations.append(e - prev)
            prev = e
        for r in plan.decode:
            if r.state != DECODE or r.aborted:
                continue
            n = min(k, r.n_out - r.n_gen)
            if n <= 0:
                continue
            first = r.n_gen == 0
            r.n_gen += n
            self.m.generation_tokens.inc(n)
            # inter-token latencies: one per token after the first
            if not first:
                for d in durations[:n]:
                    observe_n(self.m.itl, d, 1)
            else:
                for d in durations[1:n]:
                    observe_n(self.m.itl, d, 1)
                r.t_first = plan.ends[0]
                self._on_first_token(r)
            tl = plan.ends[n - 1]
            r.t_last_token = tl
            r.queue.put_nowait((n, tl))
            if r.n_gen >= r.n_out:
                self._finish(r, r.finish_reason, tl)
        self.m.kv_cache_usage_perc.set(self.pool.usage())

    def _register(self, r: Request) -> None:
        """Cache the request's full blocks (prompt, and generated ones) in the pool."""
        if not self.cfg.prefix_caching:
            return
        bs = self.cfg.block_size
        full = (len(r.prompt) + r.n_gen) // bs
        have = len(r.held)
        if full <= have:
            return
        if r.n_gen == 0:
            hs = r.hashes[have:full]
        else:
            parent = r.held[-1] if have else NONE_HASH
            hs = block_hashes(r.seq()[:full * bs], bs, parent, start=have * bs)
        got = self.pool.register(hs)
        r.held.extend(got)
        r.n_anon -= len(got)

    def _on_prefilled(self, r: Request) -> None:
        if self.store is None or r.preemptions or r.remote_prefill:  # the prefill replica saved
            return
        c = self.cfg
        bs = c.block_size
        n_full = len(r.prompt) // bs
        hit = r.gpu_hit_tokens // bs
        got = r.ram_blocks + r.disk_blocks
        hs = r.hashes[:hit] + r.hashes[hit + got:n_full]
        if not hs:
            return
        task = asyncio.create_task(self._save(r, self.store.keys(hs)))
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    async def _save(self, r: Request, keys: list[str]) -> None:
        res = await self.store.save(keys)
        r.put_blocks += res.put
        r.put_refused_blocks += res.refused
        if res.error:
            r.store_errors += 1
        self.m.store_put_blocks.inc(res.put)
        if res.refused:
            self.m.store_put_refused_blocks.inc(res.refused)
            self.m.store_put_refused_bytes.inc(res.refused * self.cfg.bytes_per_block)
        if res.skipped:
            self.m.store_put_skipped_blocks.inc(res.skipped)

    def _on_first_token(self, r: Request) -> None:
        m = self.m
        split = r.tokens_split(self.cfg.block_size)
        p = len(r.prompt)
        m.prompt_tokens.inc(p)
        m.by_source("local_compute").inc(split["computed"])
        m.by_source("local_cache_hit").inc(split["gpu"])
        m.by_source("external_kv_transfer").inc(split["store_ram"] + split["store_disk"]
                                                + split["kv_transfer"])
        m.prompt_tokens_cached.inc(p - split["computed"])
        m.ttft.observe(r.t_first - r.t_arrival)
        if r.t_admit is not None:
            m.queue_time.observe(r.t_admit - r.t_arrival)
            m.prefill_time.observe(r.t_first - r.t_admit)
        m.kv_computed.observe(split["computed"])

    def _finish(self, r: Request, reason: str, t: float) -> None:
        if r.state == DONE:
            return
        if r in self.active:
            self.active.remove(r)
            if reason != "abort":
                self._register(r)
            self.pool.release(r.held, r.n_anon)
            r.held, r.n_anon = [], 0
        r.state = DONE
        r.finish_reason = reason
        r.t_end = t
        m = self.m
        m.success(reason).inc()
        m.e2e.observe(t - r.t_arrival)
        if r.t_first is not None:
            m.decode_time.observe(t - r.t_first)
        r.queue.put_nowait((0, None))
        if self.on_finish:
            self.on_finish(r)
