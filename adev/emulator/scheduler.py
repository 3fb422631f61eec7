"""The engine's scheduler: a vLLM v1-like continuous batch over model time, with no clock and no I/O.

Everything here is a function of the model time ``t`` the caller passes in; the asyncio driver
(:mod:`adev.emulator.engine`) decides when wall time has reached it and does the store's real I/O.

Per step (vLLM's scheduler): running requests in decode each get one token; the rest of the
``max_num_batched_tokens`` budget goes to prefill chunks of admitted requests in admission order.

    step time = sum over prefill chunks of prefill_time.chunk_s(chunk tokens, tokens computed before)
              + [decode present] (decode_step_base_s + decode_step_per_seq_s * n_decode
                                  + decode_step_per_ktoken_s * context tokens of the decodes / 1000)

A request's first token comes out of its first decode step after its prefill, so on an idle engine

    TTFT = read path (lookup + load) + prefill_time.chunk_s(uncached tokens, cached tokens)
           + decode step(1, prompt)

(``prefill_time``: :class:`adev.config.PrefillTime`, a flat rate or one whose tokens cost more the
more earlier tokens they attend to.)

Admission (FCFS, at step boundaries, :meth:`Scheduler.admit`), only while the step has token
budget left after the admitted requests' decode tokens and ready prefill chunks (vLLM v1 takes
its waiting queue only then): local prefix lookup in the pool,
then blocks for the whole prompt (hits reuse cached blocks, the rest are allocated, evicting LRU
cached blocks); if they do not fit the request waits. With a store, a request admitted for the
first time enters ``loading``: the driver runs its read path and reports it through
:meth:`Scheduler.lookup_done`, :meth:`Scheduler.hits_found` and :meth:`Scheduler.load_done`,
which charge the modelled read time (:class:`TierCost`) and make the request ready to prefill what
the GPU cache and the store did not serve. Decode needs a new block every ``block_size`` tokens;
when none is free the most recently admitted running request is preempted (its blocks freed,
recomputed later from the prefix cache).

A :class:`Plan` is one step, or ``k`` identical-composition decode steps when only decodes run and
no first token is due (a *macro step*, bounded by the earliest finish, block exhaustion and
``horizon_wall_s`` of wall time); :meth:`Scheduler.commit` applies it. :meth:`Scheduler.step`
does admit + plan + commit at one instant and returns a :class:`StepOutput` (what ran, how long
it took, what it emitted, finished and preempted), as the unit tests use it.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable

from adev.emulator.metrics import Metrics, observe_n
from adev.emulator.pool import NONE_HASH, PrefixPool, block_hashes, max_hit_blocks
from adev.emulator.state import DECODE, DONE, LOADING, PREFILL, TIE_S, WAITING, EngineConfig, Plan, Request, StepOutput


class Scheduler:
    """Admission, chunked prefill, preemption, the GPU prefix pool, store-hit accounting.

    Hooks the driver sets (all optional): ``on_load(r, t_admit, hit_blocks)`` a request needs its
    store read; ``on_save(r, n_blocks)`` a step's prefill has completed ``r``'s first ``n_blocks``
    full prompt blocks (:meth:`_on_prefill_step`); ``on_tokens(r, t)``
    ``r.n_gen`` grew, last token at model time ``t``; ``on_finish(r)`` ``r`` is done;
    ``on_event(t)`` something becomes ready at model time ``t`` (a disaggregated transfer)."""

    def __init__(self, cfg: EngineConfig, metrics: Metrics, has_store: bool = False) -> None:
        self.cfg = cfg
        self.m = metrics
        self.has_store = has_store
        self.pool = PrefixPool(cfg.capacity_blocks, cfg.prefix_caching)
        self.waiting: deque[Request] = deque()
        self.active: list[Request] = []   # admitted: loading, prefill, decode (admission order)
        self.on_load: Callable[[Request, float, int], None] | None = None
        self.on_save: Callable[[Request, int], None] | None = None
        self.on_event: Callable[[float], None] | None = None
        self.on_tokens: Callable[[Request, float], None] | None = None
        self.on_finish: Callable[[Request], None] | None = None
        self._rec: StepOutput | None = None
        # (prompt tokens, hit tokens) of the first-time request at the head of the queue that
        # the last admit looked up and could not admit for want of blocks (None: none)
        self._blocked: tuple[int, int] | None = None

    # ------------------------------------------------------------------ requests
    def add(self, r: Request) -> None:
        """Queue ``r`` (its ``t_arrival`` set by the caller) in the order of arrival in model
        time, not of its handler's wake-up: behind every request that arrived before it, and
        among requests that arrived at the same time (within :data:`TIE_S`: parallel turns of
        one session send together) by their prompts, so the order is the same in every run.
        Preempted requests, queued at the front, stay ahead."""
        if self.cfg.prefix_caching and not r.hashes:
            r.hashes = block_hashes(r.prompt, self.cfg.block_size)
        w = self.waiting
        i = len(w)
        while i > 0 and not w[i - 1].admitted_once and _arrives_before(r, w[i - 1]):
            i -= 1
        w.insert(i, r)

    def abort(self, r: Request, t: float) -> None:
        """Abort at model time ``t``; a request in its store read finishes when the read returns."""
        if r.state == DONE or r.aborted:
            return
        r.aborted = True
        if r.state == WAITING:
            try:
                self.waiting.remove(r)
            except ValueError:
                pass
            self._finish(r, "abort", t)
        elif r.state in (PREFILL, DECODE):
            self._finish(r, "abort", t)

    def decode_step_s(self, n: int, ctx_tokens: int) -> float:
        c = self.cfg
        return c.decode_step_base_s + c.decode_step_per_seq_s * n + c.decode_step_per_ktoken_s * ctx_tokens / 1000.0

    def counts(self) -> tuple[int, int]:
        """(running, waiting) as vLLM reports them (loading requests wait for remote KV)."""
        running = sum(1 for r in self.active if r.state in (PREFILL, DECODE))
        return running, len(self.waiting) + len(self.active) - running

    def next_ready(self, t: float) -> float | None:
        """Earliest ready time after ``t`` of a request whose store read ended ahead of the model."""
        future = [r.ready_time for r in self.active if r.state == PREFILL and r.ready_time > t]
        return min(future) if future else None

    def step(self, t: float) -> StepOutput:
        """Admit, plan and commit one plan at model time ``t`` (``idle`` when nothing could run:
        no request admitted and ready, e.g. all of them in their store reads)."""
        rec = self._rec = StepOutput(t, [t], {}, [])
        try:
            self.admit(t)
            plan = self.plan(t)
            if plan is None:
                return rec
            rec.start, rec.ends = plan.start, list(plan.ends)
            rec.prefill = {r.rid: n for r, n in plan.prefill}
            rec.decode = [r.rid for r in plan.decode]
            self.commit(plan)
            return rec
        finally:
            self._rec = None

    # ------------------------------------------------------------------ admission
    def budget_left(self, t: float) -> int:
        """Tokens of the step at ``t`` that the admitted requests leave to waiting ones. vLLM v1
        schedules its running requests first (one token per decode, then the prefill chunks in
        admission order) and takes waiting requests only while budget is left:

            budget left = max(0, max_num_batched_tokens - decodes
                                 - prompt tokens still to prefill of the requests ready at t)

        A request in its store read (``loading``, or one whose read ended ahead of the model)
        takes none: vLLM's connector loads it while it waits for its KV."""
        return self._step_chunks(t)[1]

    def _step_chunks(self, t: float) -> tuple[list[tuple[Request, int]], int]:
        """The prefill chunks of the step at ``t`` for the requests admitted so far, and the
        budget they leave (:meth:`_chunks` over the decodes and the requests ready to prefill)."""
        n_decode = sum(1 for r in self.active if r.state == DECODE)
        ready = [r for r in self.active if r.state == PREFILL and r.ready_time <= t]
        return _chunks(ready, self.cfg.max_num_batched_tokens - n_decode)

    def _cache_chunk(self, r: Request, take: int) -> None:
        """Cache the full prompt blocks that ``r``'s first prefill will have computed with a chunk
        of ``take`` tokens scheduled now. vLLM caches a request's blocks when it schedules them
        (``KVCacheManager.allocate_slots`` -> ``cache_blocks``), so a request it admits later in
        the same step, or in a later one, hits blocks whose prefill is still running. A prefill
        after a preemption caches its blocks when it ends (:meth:`_register`)."""
        if not self.cfg.prefix_caching or r.n_gen or take <= 0:
            return
        upto = min(r.n_computed + take, len(r.prompt)) // self.cfg.block_size
        have = len(r.held)
        if upto > have:
            got = self.pool.register(r.hashes[have:upto])
            r.held.extend(got)
            r.n_anon -= len(got)

    def admit(self, t: float) -> None:
        """Admit waiting requests, in order, while their blocks are free after the running
        decodes' next step: vLLM gives running requests their next slots before it schedules
        waiting ones (the decodes' blocks are taken at the plan's commit).

        With ``admit_within_budget`` (the default) only while the step has token budget left
        (:meth:`budget_left`), as vLLM v1's scheduler takes its waiting queue: a request behind
        a long prefill waits unadmitted until that prefill's last chunk leaves budget, so its
        GPU prefix lookup, its store read and its blocks come then, and its wait is queue time
        (``vllm:request_queue_time_seconds``), not prefill time. A request admitted ready to
        prefill takes its chunk of what is left."""
        c = self.cfg
        bs = c.block_size
        reserve = self._blocks_needed([r for r in self.active if r.state == DECODE], 1) \
            if self.waiting else 0
        self._blocked = None
        budget = 1   # without admit_within_budget: never spent, so only blocks limit admission
        if c.admit_within_budget:
            chunks, budget = self._step_chunks(t)
            for r, take in chunks:
                self._cache_chunk(r, take)
        while self.waiting and len(self.active) < c.max_num_seqs and budget > 0:
            r = self.waiting[0]
            if r.aborted:
                self.waiting.popleft()
                continue
            seq_len = len(r.prompt) + r.n_gen
            hashes = r.hashes if r.n_gen == 0 else block_hashes(r.seq(), bs) if c.prefix_caching else []
            hit = self.pool.lookup(hashes, seq_len, bs)
            need = -(-seq_len // bs) - hit
            if self.pool.available - self.pool.free_hits(hashes[:hit]) - reserve < need:
                if not self.active:  # cannot ever fit (grown past the pool): end it
                    self.waiting.popleft()
                    self._finish(r, "length", t)
                    continue
                if not r.admitted_once and c.prefix_caching:
                    self._blocked = (seq_len, hit * bs)
                break
            self.waiting.popleft()
            self.pool.touch(hashes[:hit])
            self.pool.allocate(need)
            r.held = list(hashes[:hit])
            r.n_anon = need
            r.n_computed = hit * bs
            self.active.append(r)
            if self._rec is not None:
                self._rec.admitted.append(r.rid)
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
            elif first and self.has_store:
                r.state = LOADING
                if self._rec is not None:
                    self._rec.loading.append(r.rid)
                if self.on_load is not None:
                    self.on_load(r, t, hit)
            else:
                r.state = PREFILL
                r.ready_time = t
                if first:
                    r.t_ready = t
            if c.admit_within_budget and r.state == PREFILL and r.ready_time <= t:
                take = min(_remaining(r), budget)
                self._cache_chunk(r, take)
                budget -= take

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
        if self.on_event is not None:
            self.on_event(r.ready_time)

    # ------------------------------------------------------------------ the store's read path
    def lookup_end(self, r: Request) -> int:
        """One past the last block the store may serve: whole blocks of prompt - 1 (the blocks
        past the GPU hit up to it are looked up)."""
        return max_hit_blocks(len(r.prompt), self.cfg.block_size)

    def lookup_done(self, r: Request, n_keys: int, exists: list[int] | None) -> int:
        """Count one lookup of ``n_keys`` keys (``exists``: 1/0 per key, None if it failed);
        returns the leading run of hits."""
        r.store_keys_looked_up = n_keys
        self.m.store_lookups.inc()
        self.m.store_keys_looked_up.inc(n_keys)
        n_ext = 0
        if exists is None:
            r.store_errors += 1
        else:
            while n_ext < len(exists) and exists[n_ext]:
                n_ext += 1
        r.store_hit_blocks = n_ext
        return n_ext

    def hits_found(self, r: Request, hit: int, tiers: list[str]) -> None:
        """Count the lookup's hits (one tier per hit block, "ram" or "disk") at one instant, so a
        scrape never sees the hits without their split (failed loads are counted after)."""
        bs = self.cfg.block_size
        n_ext = len(tiers)
        self.m.external_prefix_cache_queries.inc(len(r.prompt) - hit * bs)
        self.m.external_prefix_cache_hits.inc(n_ext * bs)
        n_disk = tiers.count("disk")
        if n_ext - n_disk:
            self.m.hit_tier("ram").inc(n_ext - n_disk)
        if n_disk:
            self.m.hit_tier("disk").inc(n_disk)

    def read_path_s(self, ram: int, disk: int) -> tuple[float, float]:
        """The modelled read path of ``ram`` blocks from the RAM tier and ``disk`` from the disk
        tier: (lookup_s, load_s) as :meth:`load_done` charges them.

        With a RAM store in front of the disk tier, a disk block is staged: the store client
        reads it from disk into CPU memory, and from there it travels to the GPU as a RAM hit
        does (the RAM tier's transfer time, without a second lookup). By default the two hops
        overlap (each object travels on while the next is read), so the staged disk part takes
        the slower hop's time; with ``staging_serial`` the hop follows the disk read:

            disk part = disk lookup_latency_s + max(disk transfer_s, RAM tier transfer_s)
                        (serial: disk transfer_s + RAM tier transfer_s)

        Direct disk (``disk_only``, the GPU-direct path) reads it from disk into the GPU with no
        staging hop: disk lookup_latency_s + disk transfer_s."""
        c = self.cfg
        lookup = c.ram_tier.lookup_latency_s if c.ram_tier else 0.0
        if c.disk_only and c.disk_tier:
            lookup = c.disk_tier.lookup_latency_s
        load = 0.0
        if ram and c.ram_tier:
            load += c.ram_tier.load_s(ram, c.bytes_per_block)
        if disk and c.disk_tier:
            load += c.disk_tier.lookup_latency_s + self.disk_transfer_s(disk)[1]
        return lookup, load

    def disk_transfer_s(self, disk: int) -> tuple[float, float]:
        """(the disk device's busy time for ``disk`` blocks, the time their transfer takes): the
        disk tier's ``transfer_s``, and the slower of it and the staging hop through the RAM
        tier (:meth:`read_path_s`; no hop for direct disk), or their sum with ``staging_serial``.
        With ``staging_shared`` a staged transfer keeps the device through its hop as well (the
        disk tier owner's one staging buffer holds the batch until the reader has pulled it):

            busy = disk transfer_s + RAM tier transfer_s = transfer   (staged, shared buffer)"""
        c = self.cfg
        if c.disk_tier is None:
            return 0.0, 0.0
        busy = c.disk_tier.transfer_s(disk, c.bytes_per_block)
        hop = c.ram_tier.transfer_s(disk, c.bytes_per_block) if c.ram_tier and not c.disk_only else 0.0
        transfer = (busy + hop) if c.staging_serial else max(busy, hop)
        return (transfer if c.staging_shared else busy), transfer

    def load_done(self, r: Request, t_admit: float, hit: int, tiers: list[str], loaded: int,
                  error: bool, now: float, disk_wait: float = 0.0,
                  thread_wait: float = 0.0) -> float | None:
        """The load ended: the first ``loaded`` hit blocks arrived (``error``: the rest failed and
        is recomputed). Charges the modelled read path and returns the time the request is ready
        to prefill (None if it was aborted meanwhile: then it is finished). ``now``: the model
        time the real read path ended (lateness is counted in ``read_path_overrun``).
        ``disk_wait``: model seconds its disk read waited for the shared disk device behind other
        endpoints' and requests' reads (:mod:`adev.emulator.disk_device`); ``thread_wait``: model
        seconds the load waited for one of the engine's load threads (``load_threads``).

            lookup_s = the RAM tier's lookup latency (the disk tier's when disk_only)
            load_s   = RAM tier load_s(RAM blocks) + the disk part (:meth:`read_path_s`)
                       + disk_wait + thread_wait
            ready    = t_admit + lookup_s + load_s
        """
        c = self.cfg
        if error:
            r.store_errors += 1
            for tier in ("ram", "disk"):
                lost = tiers[loaded:].count(tier)
                if lost:
                    self.m.load_failed(tier).inc(lost)
        disk = tiers[:loaded].count("disk")
        ram = loaded - disk
        lookup_m, load_m = self.read_path_s(ram, disk)
        r.disk_wait_s = disk_wait if disk else 0.0   # none of its disk blocks arrived: no read
        r.load_wait_s = thread_wait
        load_m += r.disk_wait_s + thread_wait
        r.ram_blocks, r.disk_blocks = ram, disk
        r.lookup_s, r.load_s = lookup_m, load_m
        ready = t_admit + lookup_m + load_m
        self.m.read_path.observe(lookup_m + load_m)
        if now > ready:
            self.m.read_path_overrun.inc(now - ready)
        if r.aborted:
            self._finish(r, "abort", max(now, ready))
            return None
        r.t_ready = r.ready_time = ready
        r.n_computed = (hit + ram + disk) * c.block_size
        r.state = PREFILL
        return ready

    # ------------------------------------------------------------------ planning
    def _new_blocks(self, r: Request, k: int) -> int:
        """Blocks ``r`` still needs for ``k`` more decode steps (0 when it has them)."""
        return max(0, -(-(len(r.prompt) + r.n_gen + k) // self.cfg.block_size)
                   - (len(r.held) + r.n_anon))

    def _blocks_needed(self, decode: list[Request], k: int) -> int:
        return sum(self._new_blocks(r, k) for r in decode)

    def _preempt(self, r: Request) -> None:
        self.active.remove(r)
        self.pool.release(r.held, r.n_anon)
        r.held, r.n_anon = [], 0
        r.n_computed = 0
        r.state = WAITING
        r.preemptions += 1
        self.m.num_preemptions.inc()
        self.waiting.appendleft(r)
        if self._rec is not None:
            self._rec.preempted.append(r.rid)

    def plan(self, t: float) -> Plan | None:
        """The next plan starting at ``t`` (None: nothing ready). Checks that the decode blocks it
        needs are free (:meth:`commit` takes them), preempting (or ending a lone request) when
        not even one step's are."""
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
                            self._preempt(victim)
                        continue
                    k = lo
            chunks = _chunks(prefill, c.max_num_batched_tokens - len(decode))[0] if single else []
            ends = []
            tt = t
            if single or not decode:
                pt = c.prefill_time
                dur = sum(pt.chunk_s(n, r.n_computed) for r, n in chunks)
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
            return Plan(t, ends, chunks, decode)

    # ------------------------------------------------------------------ commit
    def commit(self, plan: Plan) -> None:
        """Apply a plan at its end: the decode blocks of the steps it ran, prefill progress, one
        token per decode step, finishes.

        Decode blocks are taken here, for the steps the plan ran, not when it was planned: a plan
        cut short by an event (:meth:`Plan.truncate`) must not keep blocks for steps it never
        ran, as vLLM takes a request's slots step by step. The plan checked that they are free;
        nothing takes blocks between a plan and its commit.

        A first-time request that the admission before the plan looked up and could not admit
        for want of blocks waits through each of the plan's steps, and vLLM looks it up again at
        each: per step its prompt and hit tokens are counted as retry lookups
        (``adev_emulator_prefix_cache_retry_*``). vLLM before 0.26 added them to its prefix cache
        counters (vLLM#43736), and so does the emulator when it answers as such a release
        (``count_waiting_lookups``, :mod:`adev.vllm_release`)."""
        k = len(plan.ends)
        if self._blocked is not None:
            seq_len, hit_tokens = self._blocked
            self.m.prefix_cache_retry_queries.inc(k * seq_len)
            self.m.prefix_cache_retry_hits.inc(k * hit_tokens)
            if self.cfg.count_waiting_lookups:
                self.m.prefix_cache_queries.inc(k * seq_len)
                self.m.prefix_cache_hits.inc(k * hit_tokens)
        for r in plan.decode:
            if r.state != DECODE or r.aborted:
                continue
            n = self._new_blocks(r, k)
            if n > 0:
                if not self.pool.allocate(n):
                    raise RuntimeError(f"no free blocks for the plan of {r.rid} at commit")
                r.n_anon += n
        end = plan.end
        for r, take in plan.prefill:
            if r.state != PREFILL:
                continue
            r.n_computed += take
            if r.t_prefill_done is None:
                self._on_prefill_step(r)
            if r.n_computed >= len(r.prompt) + r.n_gen:
                r.state = DECODE
                if r.t_prefill_done is None:
                    r.t_prefill_done = end
                self._register(r)
        # decode tokens: every request in the plan's decode set gets min(k, remaining) tokens
        prev = plan.start
        durations = []
        for e in plan.ends:
            durations.append(e - prev)
            prev = e
        rec = self._rec
        for r in plan.decode:
            if r.state != DECODE or r.aborted:
                continue
            n = min(k, r.n_out - r.n_gen)
            if n <= 0:
                continue
            first = r.n_gen == 0
            r.n_gen += n
            self.m.generation_tokens.inc(n)
            if rec is not None:
                rec.tokens[r.rid] = n
            # inter-token latencies: one per token after the first
            if not first:
                for d in durations[:n]:
                    observe_n(self.m.itl, d, 1)
            else:
                for d in durations[1:n]:
                    observe_n(self.m.itl, d, 1)
                r.t_first = plan.ends[0]
                self._on_first_token(r, plan.ends[0])
            tl = plan.ends[n - 1]
            r.t_last_token = tl
            if self.on_tokens is not None:
                self.on_tokens(r, tl)
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

    def _on_prefill_step(self, r: Request) -> None:
        """A step of ``r``'s first prefill has ended: offer its prompt's full blocks up to there to
        the store, as vLLM's Mooncake store connector does per scheduler step (its
        ``RequestTracker``: a save once the computed tokens reach a block boundary past the last
        save; the worker then checks and puts the blocks from its own last successful save on,
        :meth:`adev.emulator.engine.Engine._start_save`). Not after a preemption, and not for a
        prompt prefilled on a prefill replica (that replica saved it)."""
        if not self.has_store or r.preemptions or r.remote_prefill:
            return
        n = min(r.n_computed, len(r.prompt)) // self.cfg.block_size
        if n > r.save_sched_blocks:
            r.save_sched_blocks = n
            if self.on_save is not None:
                self.on_save(r, n)

    def _on_first_token(self, r: Request, t_first: float) -> None:
        m = self.m
        split = r.tokens_split(self.cfg.block_size)
        p = len(r.prompt)
        m.prompt_tokens.inc(p)
        m.by_source("local_compute").inc(split["computed"])
        m.by_source("local_cache_hit").inc(split["gpu"])
        m.by_source("external_kv_transfer").inc(split["store_ram"] + split["store_disk"]
                                                + split["kv_transfer"])
        m.prompt_tokens_cached.inc(p - split["computed"])
        m.ttft.observe(t_first - r.t_arrival)
        if r.t_admit is not None:
            m.queue_time.observe(r.t_admit - r.t_arrival)
            m.prefill_time.observe(t_first - r.t_admit)
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
        if self._rec is not None:
            self._rec.finished.append(r.rid)
        if self.on_finish is not None:
            self.on_finish(r)


def _arrives_before(a: Request, b: Request) -> bool:
    """Whether ``a`` goes before ``b`` in the waiting queue: it arrived earlier, or at the same
    time (within :data:`TIE_S`) with a prompt that sorts first (length, then its last tokens)."""
    if abs(a.t_arrival - b.t_arrival) > TIE_S:
        return a.t_arrival < b.t_arrival
    return (len(a.prompt), a.prompt[-16:]) < (len(b.prompt), b.prompt[-16:])


def _remaining(r: Request) -> int:
    """Tokens ``r`` still has to prefill (its prompt, and its generated tokens after a preemption)."""
    return len(r.prompt) + r.n_gen - r.n_computed


def _chunks(ready: list[Request], budget: int) -> tuple[list[tuple[Request, int]], int]:
    """vLLM's chunked prefill: ``budget`` tokens given out to ``ready`` in order, each request
    taking what it still has to prefill up to what is left; returns the chunks and what is left
    (at least 0)."""
    out: list[tuple[Request, int]] = []
    for r in ready:
        if budget <= 0:
            break
        take = min(_remaining(r), budget)
        if take > 0:
            out.append((r, take))
            budget -= take
    return out, max(0, budget)
