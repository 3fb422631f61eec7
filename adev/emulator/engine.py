"""The engine's asyncio driver: paces the scheduler (:mod:`adev.emulator.scheduler`) in wall time.

Model time vs wall time: the scheduler works in *model seconds*; the wall time of model instant m
is ``t0 + m / time_scale``. Every modelled duration is therefore divided by the time scale on the
wall, and everything the engine reports is in model seconds.

The driver asks the scheduler for a plan (one step, or a macro step of k decode steps: see the
scheduler), waits until the wall time of the plan's end and commits it. Streaming: the tokens of
a macro step's decode steps are handed to their streams at each step's own end
(``EngineConfig.stream_interval`` tokens per event; 1 by default, as vLLM), so a client sees the
model's inter-token latency; with ``stream_interval = 0`` a macro step's tokens leave together at
its end (one wake-up per plan instead of one per step).

An arrival, abort or finished store read that falls inside a plan truncates it at the step in
progress (or re-plans it, if the event precedes the plan's start), whether it reaches the driver
while it waits or was already pending when the plan was made. When an event arrives late (this
host behind the model), the model still cuts the plan where the event falls; tokens the driver
already streamed past that point are not sent again, so those streams pause until the model has
caught up with them.

Store I/O (the real Mooncake lookup, tier query and load of :mod:`adev.emulator.store`) runs in
background tasks; its results go to the scheduler, which charges the modelled read time.

Model time waits while the store is behind. On an embedded stack the engine's clock is the stack's
held clock (:class:`adev.clock.HeldClock`), shared with the other endpoints and the fleet's client.
While a real read path is in flight the engine holds that clock at the read's modelled end: at
first the end of the modelled lookup, then, once the tiers of the hits are known, the modelled
ready time (lookup + load, :meth:`Scheduler.read_path_s`). A read slower than its profile stops
model time for every process of the run until it ends, so the request joins at its modelled ready
time and no modelled request, client stamp or busy time sees the host's slowness; the run only
takes longer on the wall. The endpoint also holds the clock while it prepares an arriving request
(:meth:`Engine.preparing`: reading, parsing, tokenizing, the policy's reply), takes a request's
arrival from its client's send stamp (:meth:`Engine.arrival`: the request's trip to the handler
is no model time), and holds it at the running plan's next boundary (a step that streams tokens,
or the plan's end) until the loop has handled it, so the loop's own wake-up lag is not model time
either. How far the real reads
were from the profile stays reported per request (``read_host_s``: real wall seconds x S). Without
a held clock (``stack.model_clock = "free"``, or a plain ``clock``) a late read joins late, the lag
is visible to the client and counted in ``adev_emulator_read_path_overrun_seconds``.
"""
from __future__ import annotations

import asyncio
import bisect
import contextlib
import functools
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Iterator

from adev.clock import WAKE_TOLERANCE_S, HeldClock, Holds, arrival_from_header
from adev.emulator.chunks import lookup_span
from adev.emulator.disk_device import DiskDevice
from adev.emulator.metrics import Metrics
from adev.emulator.pool import PrefixPool
from adev.emulator.scheduler import Scheduler
from adev.emulator.state import DECODE, DONE, TIE_S, EngineConfig, Plan, Request, StepOutput, TierCost

__all__ = ["Engine", "EngineConfig", "Request", "TierCost", "Plan", "StepOutput", "Scheduler"]

log = logging.getLogger("adev.emulator.engine")

_PLAN = "plan"
"""The key of the engine's hold at its running plan's next boundary (a step that streams
tokens, or the plan's end), and at the loop's own time while it works out the next plan: on a
held clock, model time does not pass a boundary, or the loop's time, before the engine's loop
has handled it, so the loop's wake-up lag on a busy host is not model time."""

_EVENTS = "events"
"""The key of the engine's hold at its earliest pending event (an arrival, an abort, a store
read's ready time) until its loop has taken it into a plan: a request that arrived while the
engine was idle waits for the loop's wake-up at its arrival, not later."""

_SAVE = "save"
"""The key (with the request's id) of the engine's hold at a save's start until its put ends."""

_OUT, _END = "out", "end"
"""The keys (with the request's id) of the engine's holds at a request's first tokens and at its
end, until its handler has written them (:meth:`Engine.written`)."""

SPIN_WALL_S = 0.0015
"""The last stretch before a plan that emits first tokens ends is waited for by yielding to the
loop (``asyncio.sleep(0)``) instead of a timer: asyncio's epoll timers round up to whole
milliseconds. Costs at most this much CPU per such plan (one per request)."""

SETTLE_S = 1e-6
"""Model seconds past a plan boundary the held clock must be free to reach before the engine
decides at the boundary (:meth:`Engine._settle`): far below any modelled duration, above the
float resolution of the clock's wall seconds."""


class Engine:
    """One emulated GPU engine: a :class:`Scheduler` paced on the running loop.

    ``clock``: the wall clock (``time.monotonic``; the tests pass their loop's virtual time), or
    a :class:`HeldClock`, which the engine holds while a store read is behind its model (``slot``:
    this engine's hold slot in it)."""

    def __init__(self, cfg: EngineConfig, metrics: Metrics, store=None,
                 clock: Callable[[], float] = time.monotonic, slot: int = 0,
                 device: DiskDevice | None = None) -> None:
        if cfg.stream_interval < 0:
            raise ValueError(f"stream_interval: expected an integer >= 0 (tokens per stream event, "
                             f"0 = one event per macro step), got {cfg.stream_interval!r}")
        self.cfg = cfg
        self.m = metrics
        self.store = store
        self.clock = clock
        self.held = clock if isinstance(clock, HeldClock) else None
        self.real: Callable[[], float] = self.held.source if self.held else clock
        self.slot = slot
        # the disk tier's device, shared with the stack's other endpoints (None: the engine's own)
        self.device = device if device is not None else DiskDevice()
        self._holds = Holds(self.held, slot) if self.held is not None else None
        self._turns = Turns()
        # model time each load thread is next free (cfg.load_threads of them; none: no limit)
        self._threads: list[float] = [0.0] * max(0, cfg.load_threads)
        self.spin_wall_s = SPIN_WALL_S
        self.sched = Scheduler(cfg, metrics, has_store=store is not None)
        self.sched.on_load = self._start_read
        self.sched.on_save = self._start_save
        self.sched.on_event = self._event
        self.sched.on_tokens = self._send
        self.sched.on_finish = self._finished
        self.t0 = clock()
        self._wake = asyncio.Event()
        self._events: list[float] = []
        self._t_free = 0.0
        self._task: asyncio.Task | None = None
        self._bg: set[asyncio.Task] = set()
        # the store's write path (:meth:`_save`): one save at a time; the requests skipped while
        # the store is under pressure (vLLM's connector)
        self._save_lock = asyncio.Lock()
        self._pressure_skip: set[str] = set()
        self.dead: BaseException | None = None
        self.on_finish: Callable[[Request], None] | None = None

    # the scheduler's state, as before the split
    @property
    def pool(self) -> PrefixPool:
        return self.sched.pool

    @property
    def waiting(self) -> deque[Request]:
        return self.sched.waiting

    @property
    def active(self) -> list[Request]:
        return self.sched.active

    # ------------------------------------------------------------------ clock
    def now(self) -> float:
        return (self.clock() - self.t0) * self.cfg.time_scale

    def wall(self, m: float) -> float:
        return self.t0 + m / self.cfg.time_scale

    # ------------------------------------------------------------------ public
    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        """Cancel the engine's loop and its store I/O tasks (the server's shutdown)."""
        tasks = [t for t in (self._task, *self._bg) if t is not None and not t.done()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def arrival(self, sent: str | None) -> float:
        """A request's arrival stamp: now, or on a held clock the client's send stamp ``sent``
        (:func:`adev.clock.arrival_from_header`: its trip to the handler takes no model time)."""
        now = self.clock()
        return now if self.held is None else arrival_from_header(sent, now)

    def submit(self, r: Request, arrival_mono: float | None = None) -> Request:
        """Queue a request. ``arrival_mono`` (default now) is when it reached the server: the
        model clock counts from there, so the endpoint's own CPU work (parsing, tokenizing) is
        hidden like any other real work, as long as it ends before the model says it must."""
        r.arrival_mono = self.clock() if arrival_mono is None else arrival_mono
        r.t_arrival = (r.arrival_mono - self.t0) * self.cfg.time_scale
        self.sched.add(r)
        self._event(r.t_arrival)
        return r

    def abort(self, r: Request) -> None:
        if r.state == DONE or r.aborted:
            return
        self.sched.abort(r, self.now())
        self._event(self.now())

    def decode_step_s(self, n: int, ctx_tokens: int) -> float:
        return self.sched.decode_step_s(n, ctx_tokens)

    def counts(self) -> tuple[int, int]:
        """(running, waiting) as vLLM reports them (loading requests wait for remote KV)."""
        return self.sched.counts()

    # ------------------------------------------------------------------ streams
    def _send(self, r: Request, t: float) -> None:
        """Hand ``r``'s tokens generated but not yet streamed to its stream (a plan's commit)."""
        n = r.n_gen - r.n_sent
        every = self.cfg.stream_interval
        if n > 0 and (every <= 1 or n >= every or r.n_gen >= r.n_out or r.n_sent == 0):
            if r.n_sent == 0:
                self._writer_hold(r, _OUT, t)
            r.n_sent = r.n_gen
            r.queue.put_nowait((n, t))

    def written(self, r: Request, *, end: bool = True) -> None:
        """``r``'s handler has written its first tokens (``end``: and its whole answer), or gave
        up: release the holds the engine took when it handed them over (requests with
        ``writer_holds``). On a held clock an answer's first and last bytes leave the endpoint
        at the model times of its first and last tokens: the handler's wake-up and its
        serialising of the answer take no model time, as the profile has no term for them."""
        self._hold((_OUT, id(r)), None)
        if end:
            self._hold((_END, id(r)), None)

    def received(self, slot: int | None) -> None:
        """The endpoint has the request whose client lent it ``slot``: release the client's
        hold from its send (the endpoint's own holds take over)."""
        if slot is not None and self.held is not None:
            self.held.set_hold(slot, math.inf)

    def gave_up(self, r: Request) -> None:
        """``r``'s handler ends without answering (the client went away): release every hold
        taken for its answer, the client's request slot included."""
        self.written(r)
        self.received(r.hold_slot)

    def _writer_hold(self, r: Request, key: str, t: float | None) -> None:
        """Hold the clock at model time ``t`` for ``r``'s answer (``key``: its first tokens or its
        end): in the client's request slot when it lent one (the client releases it when it has
        read them), else in the engine's own slot until the handler has written them."""
        if r.aborted or not (r.writer_holds or r.hold_slot is not None):
            return
        t = self.now() if t is None else t
        if r.hold_slot is not None and self.held is not None:
            self.held.set_hold(r.hold_slot, self.wall(t))
            r.slot_hold = key
        else:
            self._hold((key, id(r)), t)

    def unread(self, r: Request) -> None:
        """``r``'s handler took its first tokens but sends its client nothing that it reads as
        them (no visible delta yet, or a whole answer at the end): release the request slot's
        hold at them, or the client would hold model time while the engine needs it to run on."""
        if r.slot_hold == _OUT and r.hold_slot is not None and self.held is not None:
            self.held.set_hold(r.hold_slot, math.inf)
            r.slot_hold = None

    def _finished(self, r: Request) -> None:
        n = r.n_gen - r.n_sent
        if n > 0:  # tokens held back by stream_interval
            if r.n_sent == 0:
                self._writer_hold(r, _OUT, r.t_last_token)
            r.n_sent = r.n_gen
            r.queue.put_nowait((n, r.t_last_token))
        self._writer_hold(r, _END, r.t_last_token)
        r.queue.put_nowait((0, None))
        self._pressure_skip.discard(r.rid)
        if self.on_finish:
            self.on_finish(r)

    def _next_delivery(self, plan: Plan) -> int | None:
        """Steps of ``plan`` after which some request has ``stream_interval`` tokens to stream
        (None: nothing before the plan's last step, whose tokens leave at the commit)."""
        every = self.cfg.stream_interval
        if every <= 0 or len(plan.ends) < 2:
            return None
        j = plan.delivered + 1 if every == 1 else max(
            plan.delivered + 1, min(r.n_sent + every - r.n_gen for r in plan.decode))
        return j if j < len(plan.ends) else None

    def _deliver(self, plan: Plan, steps: int) -> None:
        """Stream the tokens of the plan's first ``steps`` steps (each ended in the model)."""
        steps = min(steps, len(plan.ends) - 1)
        if steps <= plan.delivered:
            return
        plan.delivered = steps
        every = self.cfg.stream_interval
        for r in plan.decode:
            if r.state != DECODE or r.aborted:
                continue
            upto = min(r.n_gen + steps, r.n_out)
            n = upto - r.n_sent
            if n > 0 and (n >= every or upto >= r.n_out):
                if r.n_sent == 0:
                    self._writer_hold(r, _OUT, plan.ends[upto - r.n_gen - 1])
                r.n_sent = upto
                r.queue.put_nowait((n, plan.ends[upto - r.n_gen - 1]))

    # ------------------------------------------------------------------ loop
    def _event(self, t: float) -> None:
        self._events.append(t)
        self._hold(_EVENTS, min(self._events))
        self._wake.set()

    def _event_before(self, t: float) -> bool:
        return any(e < t for e in self._events)

    def _drop_events(self, upto: float) -> None:
        """Events at or before ``upto`` (within :data:`TIE_S`) are handled by the plan boundary
        at ``upto``."""
        if self._events:
            self._events = [e for e in self._events if e > upto + TIE_S]
            self._hold(_EVENTS, min(self._events, default=None))

    async def _run(self) -> None:
        try:
            await self._loop()
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # the engine is dead: /health says 503
            log.exception("engine died")
            self.dead = e
            raise
        finally:
            self._hold(_PLAN, None)

    async def _loop(self) -> None:
        s = self.sched
        t = 0.0
        while True:
            # a held clock does not pass the loop's own time while the loop works towards its
            # next plan: the events it drops below are handled from here, and a process the
            # host deschedules in between must not let model time run on unheld
            self._hold(_PLAN, t)
            self._drop_events(t)
            early = await self._settle(t)
            if early is not None:  # an event before t came while the loop settled at t
                t = max(self._t_free, early)
                continue
            s.admit(t)
            plan = s.plan(t)
            if plan is None:
                if self._events:
                    t = max(t, min(self._events))
                    continue
                ready = s.next_ready(t)
                if ready is not None:
                    t = ready
                    continue
                self._hold(_PLAN, None)  # idle: no boundary to hold the clock at
                self._wake.clear()
                await self._wake.wait()
                if self._events:
                    t = max(self._t_free, min(self._events))
                continue
            plan = await self._pace(plan)
            s.commit(plan)
            self._t_free = plan.end
            t = plan.end

    async def _settle(self, t: float) -> float | None:
        """On a held clock, wait before deciding anything at model time ``t`` (admissions, the
        next plan) until the clock could pass ``t`` by :data:`SETTLE_S`: every request stamped at
        ``t`` has then reached the engine, and every read whose modelled end is ``t`` has
        reported it (each holds the clock there until then), so the decisions at ``t`` see all
        of them whatever order the host delivered them in. Otherwise the first of several
        requests stamped at one model instant (parallel implementers, or the next calls of
        sessions whose answers ended at one step) would be admitted before the others arrive,
        and the admission order, so the prefill order and which request waits for blocks,
        would follow the host's wall order. Events at ``t`` that arrive meanwhile are this
        boundary's (:meth:`_drop_events`; the caller has dropped those before it, and one that
        arrives holds the clock at ``t`` until the next turn of the wait drops it). An event of
        this engine's own that falls after ``t`` by less than :data:`SETTLE_S` holds its slot
        below ``t + SETTLE_S``: the wait is then for the clock to be free to that event, the
        loop's next boundary (waiting past it would wait for this engine's own hold, for ever).
        The loop may settle at a ``t`` the clock has not reached (a request's ready time after
        its store read ended ahead of the model): an event before ``t`` that comes meanwhile (a
        later request's read, ready sooner) is not this boundary's; the settle returns its time,
        at which the loop decides first (None: settled at ``t``). Handling it at ``t`` would
        admit that request late by however much sooner than the other read the host finished
        it."""
        if self.held is None:
            return None
        self._hold(_PLAN, t + SETTLE_S)
        start = self.real()
        while True:
            early = min((e for e in self._events if e < t - TIE_S), default=None)
            if early is not None:
                return early
            self._drop_events(t)
            if self.held.free_to(self.wall(min(t + SETTLE_S, min(self._events, default=math.inf)))):
                break
            self.clock()  # a reader of a clock that stands still releases dead processes' holds
            if self.real() - start < self.spin_wall_s:
                await asyncio.sleep(0)
                continue
            self._wake.clear()  # an event or the end of this engine's own save wakes it early
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), 0.0005)
        self._hold(_PLAN, t)  # back at the loop's own time while it admits and plans
        return None

    async def _pace(self, plan: Plan) -> Plan:
        """Wait until the wall time of the plan's end, streaming its steps on the way and
        truncating or re-planning it for events that fall inside it (also events already
        pending when it was planned: a store read that ended during the previous plan with a
        ready time inside this one)."""
        s = self.sched
        while True:
            pending = [e for e in self._events if e < plan.end]
            if pending:
                te = min(pending)
                if te <= plan.start + TIE_S:   # at (or before) its start: planned afresh
                    start = te if te > self._t_free + TIE_S else self._t_free
                    s.admit(start)
                    new = s.plan(start)
                    if new is not None:
                        plan = new
                else:
                    plan.truncate(te)
                self._drop_events(plan.end)
            now = self.clock()
            end_wall = self.wall(plan.end)
            delay = end_wall - now
            if delay <= 0:
                return plan
            # a plan that ends with first tokens is waited for precisely: the loop's timers
            # wake up to a millisecond late (epoll), which at S=10 is 10 model ms of TTFT
            margin = self.spin_wall_s if any(r.n_gen == 0 for r in plan.decode) else 0.0
            nxt = None if delay <= margin else self._next_delivery(plan)
            # a held clock does not pass the plan's next boundary before this loop has seen it
            self._hold(_PLAN, plan.end if nxt is None else plan.ends[nxt - 1])
            if delay <= margin:
                # an event inside the plan (its hold stops the clock there) ends the spin early
                if await _spin_until(end_wall, self.clock, self.real, 2 * margin,
                                     functools.partial(self._event_before, plan.end)):
                    continue
                return plan
            wait = delay - margin if nxt is None else min(delay - margin, self.wall(plan.ends[nxt - 1]) - now)
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), wait)
            except TimeoutError:
                # a held clock may have moved less than the wall: look again (a wall clock has
                # reached the deadline up to the loop's timer resolution)
                held_back = self.held is not None and self.clock() < now + wait - 1e-9
                if nxt is None or self.wall(plan.ends[nxt - 1]) - now >= delay - margin:
                    if margin or held_back:
                        continue
                    return plan
                if held_back:
                    continue
                self._deliver(plan, max(nxt, bisect.bisect_right(plan.ends, self.now())))

    # ------------------------------------------------------------------ store I/O
    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    def _start_read(self, r: Request, t_admit: float, hit: int) -> None:
        """Start ``r``'s read path, holding the clock at its lookup's modelled end from the
        admission on: the task first runs at a later turn of the loop, and model time that passes
        the lookup's end before it does would pass unheld through the real lookup."""
        self._hold(id(r), t_admit + self.sched.read_path_s(0, 0)[0])
        self._spawn(self._read_path(r, t_admit, hit, self._turns.ticket()))

    @property
    def _pressure(self) -> bool:
        """Whether the store is under pressure: a refused request waits for a put to succeed."""
        return bool(self._pressure_skip)

    def _start_save(self, r: Request, n_blocks: int) -> None:
        """Put what a prefill step completed: the complete chunks (objects of ``chunk_blocks``
        blocks, :mod:`adev.emulator.chunks`) from the request's last successful save
        (``r.saved_blocks``) up to its first ``n_blocks`` prompt blocks, as vLLM's Mooncake store
        connector saves each step from the worker's last successful save on (a failed or skipped
        range is offered again by the next step). The existence check leaves out what the store
        holds (the blocks it served too). The put costs no model time, so its objects are in the
        store from the step's end on: on a held clock model time does not pass that end before
        the real put has ended, so which later lookups, on any endpoint of the stack, find them
        does not depend on how fast this host puts."""
        c = self.store.chunk_blocks
        first, stop = r.saved_blocks // c, n_blocks // c
        if stop <= first:
            return
        keys = self.store.keys([r.hashes[(j + 1) * c - 1] for j in range(first, stop)])
        key = (_SAVE, id(r), stop)
        self._hold(key, self.now())
        self._spawn(self._save(r, keys, c, key, stop * c))

    def _hold(self, key: object, until: float | None) -> None:
        """Hold the shared clock at model time ``until`` for ``key`` (a read, a save, the loop's
        plan or events; None: release). The engine publishes the earliest of its holds in its
        slot."""
        if self._holds is not None:
            self._holds.set(key, None if until is None else self.wall(until))

    @contextlib.contextmanager
    def preparing(self, key: object) -> Iterator[None]:
        """Hold the shared clock where it is while the block runs (``key``: the request): the
        endpoint's own work on an arriving request (reading and parsing it, tokenizing, the
        policy's reply) takes no model time, as the profile has no term for it. No-op without a
        held clock."""
        self._hold(id(key), self.now())
        try:
            yield
        finally:
            self._hold(id(key), None)

    async def _read_path(self, r: Request, t_admit: float, hit: int, turn: int) -> None:
        """Store lookup + load of one request (first admission only): the real I/O here, the
        model's accounting in the scheduler. With a held clock, model time does not pass the
        read's modelled end before the real read has ended (see the module's doc); the hold at
        the lookup's end is taken at admission (:meth:`_start_read`). ``turn``: the read's place
        at the disk device (:class:`Turns`): its disk part is queued there after those of the
        reads admitted before it, whichever tier query answers first; with ``load_threads`` every
        load takes a load thread in that order (:meth:`_queue_load`)."""
        s, c = self.sched, self.cfg
        key = id(r)
        try:
            span = lookup_span(r.hashes, hit, s.lookup_end(r), self.store.chunk_blocks,
                               self.store.keys)
            granted_at = self.clock()
            started = self.real()
            ex = await self.store.exists(span.keys) if span.keys else []
            n_ext = s.lookup_done(r, span.blocks, None if ex is None else span.per_block(ex))
            tiers: list[str] = []
            disk_wait = thread_wait = 0.0
            got = span.keys[:span.chunks_for(n_ext)]
            load = asyncio.create_task(self.store.load(got, granted_at)) if n_ext else None
            if n_ext:  # which tier holds each hit (queried while the load runs)
                self._hold(key, t_admit + min(sum(s.read_path_s(n_ext, 0)), sum(s.read_path_s(0, n_ext))))
                tiers = (["disk"] * n_ext if c.disk_only
                         else span.per_block(await self.store.tiers(got))[:n_ext])
                disk = tiers.count("disk")
                lookup_m, load_m = s.read_path_s(n_ext - disk, disk)
                if disk or c.load_threads:
                    await self._turns.wait(turn)
                thread, thread_wait = self._queue_load(t_admit + lookup_m)
                if disk:
                    disk_wait = self._queue_disk_read(t_admit + lookup_m + thread_wait + load_m, disk)
                self._load_end(thread, t_admit + lookup_m + thread_wait + load_m + disk_wait)
                self._turns.done(turn)
                self._hold(key, t_admit + lookup_m + load_m + thread_wait + disk_wait)
            s.hits_found(r, hit, tiers)
            loaded, error = 0, False
            if load is not None:
                res = await load
                if res.lease_retries:
                    self.m.store_lease_retries.inc(res.lease_retries)
                loaded, error = min(n_ext, span.blocks_of(res.loaded)), res.error
            r.read_host_s = (self.real() - started) * c.time_scale
            ready = s.load_done(r, t_admit, hit, tiers, loaded, error, self.now(), disk_wait,
                                thread_wait)
            if ready is not None:
                self._event(ready)
        finally:
            self._turns.done(turn)
            self._hold(key, None)

    def _queue_load(self, arrival: float) -> tuple[int, float]:
        """Take one of the engine's load threads (``cfg.load_threads``) for a load that could
        start at model time ``arrival`` (the end of its lookup); returns (the thread, its wait in
        model seconds). Loads take threads in admission order (:class:`Turns`), the earliest
        free one:

            start = max(arrival, the earliest time a thread is free);  wait = start - arrival

        and keep it until :meth:`_load_end` (the load's modelled end, its disk wait included),
        as vLLM's Mooncake store connector hands each request's load to one of its
        ``VLLM_MOONCAKE_LOAD_RECV_THREADS`` receiving threads (1 by default), which loads it whole
        before taking the next. 0 threads: no limit, no wait (thread -1)."""
        if not self._threads:
            return -1, 0.0
        k = min(range(len(self._threads)), key=self._threads.__getitem__)
        return k, max(0.0, self._threads[k] - arrival)

    def _load_end(self, thread: int, end: float) -> None:
        """Thread ``thread`` (from :meth:`_queue_load`) is free again at model time ``end``."""
        if thread >= 0:
            self._threads[thread] = end

    def _queue_disk_read(self, t_loaded: float, disk: int) -> float:
        """Queue the transfer of ``disk`` blocks of a load whose modelled end, without waiting
        for the disk device, is model time ``t_loaded`` on the shared device; returns its wait in
        model seconds.

            busy, transfer = Scheduler.disk_transfer_s(disk)
            arrival        = t_loaded - transfer           (the disk transfer is the load's last part)
            wait           = device end - busy - arrival   (DiskDevice.reserve, FIFO on busy time)
        """
        busy, transfer = self.sched.disk_transfer_s(disk)
        start = self.wall(t_loaded - transfer)
        end = self.device.reserve(start, busy / self.cfg.time_scale)
        wait = (end - start) * self.cfg.time_scale - busy
        if wait <= WAKE_TOLERANCE_S:   # a rounding error of the wall-time round trip: no wait
            return 0.0
        self.m.disk_wait.inc(wait)
        return wait

    async def _save(self, r: Request, keys: list[str], chunk: int = 1,
                    hold: object = None, upto: int | None = None) -> None:
        """Put ``keys`` (objects of ``chunk`` blocks each, up to block ``upto`` of ``r``'s prompt);
        counted per block. ``hold``: the key of the clock hold :meth:`_start_save` took, released
        when the put has ended.

        One save at a time, in the order the steps asked for them (vLLM's one sending thread per
        worker), with its handling of a full store (``cfg.pressure_skip``, vLLM's pressure rule):
        a put refused for want of space (-200, RAM full of leased objects) marks the store under
        pressure and the request skipped, and while the store is under pressure a skipped
        request's later saves are not offered (counted as skipped); the next put that stores
        every block it offers clears the pressure for every request. Without the rule (the
        connector as first merged) every save is offered. A save that stores everything it
        offered, or finds nothing missing, moves ``r.saved_blocks`` to ``upto``; otherwise the
        next step offers the range again."""
        try:
            async with self._save_lock:
                if r.rid in self._pressure_skip:   # empty unless cfg.pressure_skip
                    self.m.store_put_skipped_blocks.inc(len(keys) * chunk)
                    return
                res = await self.store.save(keys)
                if res.refused:
                    if self.cfg.pressure_skip:
                        self._pressure_skip.add(r.rid)
                elif not res.error:
                    if upto is not None:
                        r.saved_blocks = max(r.saved_blocks, upto)
                    if res.put:
                        self._pressure_skip.clear()
        finally:
            if hold is not None:
                self._hold(hold, None)
                self._wake.set()
        put, refused, skipped = res.put * chunk, res.refused * chunk, res.skipped * chunk
        r.put_blocks += put
        r.put_refused_blocks += refused
        if res.error:
            r.store_errors += 1
        self.m.store_put_blocks.inc(put)
        if refused:
            self.m.store_put_refused_blocks.inc(refused)
            self.m.store_put_refused_bytes.inc(refused * self.cfg.bytes_per_block)
        if skipped:
            self.m.store_put_skipped_blocks.inc(skipped)


class Turns:
    """Turns in admission order: :meth:`ticket` hands out 0, 1, 2 ...; :meth:`wait` returns once
    every earlier ticket is :meth:`done`. The engine's reads queue their disk parts at the disk
    device in the order they were admitted, so the model does not depend on which of their real
    tier queries answers first."""

    def __init__(self) -> None:
        self._next = 0                   # the next ticket handed out
        self._turn = 0                   # the lowest ticket not done
        self._done: set[int] = set()
        self._waiting: dict[int, asyncio.Future] = {}

    def ticket(self) -> int:
        self._next += 1
        return self._next - 1

    async def wait(self, n: int) -> None:
        if self._turn < n:
            fut = self._waiting[n] = asyncio.get_running_loop().create_future()
            try:
                await fut
            finally:
                self._waiting.pop(n, None)

    def done(self, n: int) -> None:
        """Ticket ``n`` has had its turn (or needs none); idempotent."""
        if n < self._turn:
            return
        self._done.add(n)
        while self._turn in self._done:
            self._done.discard(self._turn)
            self._turn += 1
        fut = self._waiting.get(self._turn)
        if fut is not None and not fut.done():
            fut.set_result(None)


async def _spin_until(deadline: float, clock: Callable[[], float] = time.monotonic,
                      real: Callable[[], float] = time.monotonic, spin_s: float = 0.003,
                      stop: Callable[[], bool] | None = None) -> bool:
    """Yield to the loop until ``clock`` reaches ``deadline`` or ``stop()`` is true (then returns
    True); after ``spin_s`` wall seconds (a held clock) poll every half millisecond instead."""
    start = real()
    while clock() < deadline:
        if stop is not None and stop():
            return True
        await asyncio.sleep(0 if real() - start < spin_s else 0.0005)
    return False
