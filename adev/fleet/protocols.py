"""The two fleet protocols (docs/design.md §2), independent of how a session is run.

* **steady** (:meth:`Fleet.run_steady`): ``width`` slots start ``stagger_s`` apart; each slot runs
  a session, and on completion launches a new one with a new seed, until the fleet stops. The
  :class:`~adev.fleet.windows.RegimeDetector` opens the first window once the fleet is in regime;
  then K consecutive windows of ``length_s`` follow. At every boundary every target is scraped and
  the window is announced (``EventRecord window_open``) / closed (``WindowRecord``).
* **batch** (:meth:`Fleet.run_batch_once`): ``width`` sessions start together, one each; the
  whole run [first start, last end) is one window (``protocol="batch"``). The caller repeats it
  ``runs`` times with a fresh stack each time (see :mod:`adev.fleet.runner`).

A session is run by a *launcher*: ``await launcher(task, seed, session_id)``; the real one wraps
:func:`adev.session.loop.run_session`, tests pass a fake. Session ids are
``e<epoch>-s<slot>-g<generation>`` (steady) and ``e<epoch>-r<run>-s<slot>`` (batch): the epoch
grows with every ``--resume``, so ids (and the call ids derived from them) never collide.
Seeds are ``fleet.seed + n``. Steady: ``n = offset + generation x width + slot``, so a slot's
sequence of sessions (task and seed) does not depend on the order in which the other slots'
sessions end; batch: the n-th session launched. On resume ``offset`` continues after the
largest seed used.
"""
from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..analysis.faults import verdict
from ..clock import WAKE_TOLERANCE_S, RunClock, handing_over, handover, hold_at, hold_until
from ..records import EventKind, EventRecord, SessionRecord, WindowProtocol, WindowRecord
from .config import FleetConfig
from .scraper import Scraper
from .windows import RegimeDetector, plan_windows

Launcher = Callable[[str, int, str], Awaitable[Any]]


class FleetAborted(RuntimeError):
    """Too many consecutive session failures, or the warm-up limit with ``on_timeout='fail'``."""


@dataclass
class FleetResult:
    windows: list[WindowRecord] = field(default_factory=list)
    stopped: str | None = None   # why the fleet stopped early (signal), None when it completed
    sessions_started: int = 0
    sessions_ended: int = 0
    aborted: str | None = None


class Fleet:
    def __init__(self, cfg: FleetConfig, run_dir: Any, run_id: str, clock: RunClock,
                 launcher: Launcher, scraper: Scraper, tasks: list[str], *, epoch: int = 0,
                 first_seed_offset: int = 0, state: Any = None,
                 detector: RegimeDetector | None = None, faults: Any = None):
        if not tasks:
            raise ValueError("a fleet needs at least one task")
        self.cfg = cfg
        self.run_dir = run_dir
        self.run_id = run_id
        self.clock = clock
        self.launcher = launcher
        self.scraper = scraper
        self.tasks = list(tasks)
        self.epoch = epoch
        self.seed_offset = first_seed_offset  # n of the first session (the runner sets it per batch run)
        self.state = state
        self.detector = detector or RegimeDetector(cfg.width, cfg.warmup)
        self.faults = faults  # adev.analysis.faults.FaultTracker fed every record, or None
        self.stop_event = asyncio.Event()
        self.stop_reason: str | None = None
        self.active: dict[str, int] = {}  # session_id -> slot
        self.consecutive_failures = 0
        self.result = FleetResult()
        self._abort: str | None = None

    # -- helpers ------------------------------------------------------------------------
    def _window(self, index: int, t0: float, t1: float, protocol: WindowProtocol, valid: bool = True,
                reason: str | None = None) -> WindowRecord:
        """The record of a window closed now, with the faults seen in it (rule in
        :mod:`adev.analysis.faults`: an invalidating fault makes it invalid)."""
        names: list[str] = []
        if self.faults is not None:
            ok, why, names = verdict(self.faults.touching(t0, t1), self.faults.calls_sent(t0, t1))
            if valid and not ok:
                valid, reason = False, why
        return WindowRecord(run_id=self.run_id, index=index, t0=t0, t1=t1, valid=valid,
                            reason=reason, protocol=protocol, faults=names)

    def event(self, name: EventKind, **detail: Any) -> None:
        self.run_dir.append(EventRecord(run_id=self.run_id, t=self.clock.now(), event=name,
                                        detail=detail))

    def stop(self, reason: str) -> None:
        """Ask the fleet to stop (signal handler, or an abort)."""
        if not self.stop_event.is_set():
            self.stop_reason = reason
            self.stop_event.set()

    async def _sleep_until(self, t: float) -> bool:
        """Sleep until model time ``t``; False if the fleet was stopped meanwhile. Looks at the
        clock again after each wait: a held model clock runs slower than the wall. On the
        stack's held clock model time does not pass ``t`` until this wait is over
        (:func:`adev.clock.sleep_until`): a session slot starts, and a window's boundary is
        taken, at ``t`` however late the host wakes this process."""
        with hold_until(self.clock, t):
            while not self.stop_event.is_set():
                left = t - self.clock.now()
                if left <= WAKE_TOLERANCE_S:
                    break
                try:
                    await asyncio.wait_for(self.stop_event.wait(),
                                           timeout=max(self.clock.model_to_wall(left), 0.0005))
                except TimeoutError:
                    pass
        return not self.stop_event.is_set()

    def next_session(self, n: int) -> tuple[str, int]:
        """(task, seed) of the session of index ``n`` of this run."""
        seed = self.cfg.seed + n
        if self.cfg.task_assignment == "round-robin":
            task = self.tasks[n % len(self.tasks)]
        else:
            task = self.tasks[random.Random(seed).randrange(len(self.tasks))]
        return task, seed

    async def _run_one(self, slot: int, session_id: str, task: str, seed: int) -> None:
        self.active[session_id] = slot
        self.result.sessions_started += 1
        if self.state is not None:
            self.state.session_launched(session_id, slot, task, seed, self.clock.now())
        try:
            await self._launch(task, seed, session_id)
            self.consecutive_failures = 0
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a session must not take the fleet down; record it
            self.consecutive_failures += 1
            self.event("session_error", session_id=session_id, task=task, seed=seed,
                       error=f"{type(e).__name__}: {e}"[:1000])
            if self.consecutive_failures >= self.cfg.max_session_failures:
                self._abort = (f"{self.consecutive_failures} consecutive sessions failed; last: "
                               f"{type(e).__name__}: {e}")
                self.stop(self._abort)
            await asyncio.sleep(0.05)  # no hot loop when sessions fail instantly
        finally:
            self.active.pop(session_id, None)
            self.result.sessions_ended += 1
            if self.state is not None:
                self.state.session_finished(session_id, self.clock.now())

    async def _launch(self, task: str, seed: int, session_id: str) -> None:
        """Run one session to its end. In a slot's :func:`adev.clock.handing_over` block the
        session's first step (up to its first wait) runs before anything else: a session that
        holds the clock there takes the slot's hold over (:func:`adev.session.loop.run_session`),
        and whatever is still parked after it is released, so a launcher that takes nothing
        over cannot stop the clock."""
        h = handover()
        if h is None:
            await self.launcher(task, seed, session_id)
            return
        session = asyncio.ensure_future(self.launcher(task, seed, session_id))
        try:
            await asyncio.sleep(0)
            h.take()
            await session
        except asyncio.CancelledError:
            if not session.done():
                session.cancel()
                await asyncio.wait([session])
            raise

    # -- steady state -------------------------------------------------------------------
    async def _slot(self, slot: int, t_start: float) -> None:
        """Session after session in one slot, the first at ``t_start``. On the stack's held clock
        the slot holds model time at ``t_start`` from its first step until its first session
        holds it there itself, and each session leaves its end's hold to the next one
        (:class:`adev.clock.HandOver`): a session starts at the model time its slot reached,
        however long the host takes to launch it."""
        with handing_over() as h:
            h.leave(hold_at(self.clock, t_start))
            if not await self._sleep_until(t_start):
                return
            gen = 0
            while not self.stop_event.is_set():
                task, seed = self.next_session(self.seed_offset + gen * self.cfg.width + slot)
                sid = f"e{self.epoch}-s{slot:03d}-g{gen:03d}"
                gen += 1
                await self._run_one(slot, sid, task, seed)

    def _served(self) -> dict[str, bool]:
        if self.state is not None and hasattr(self.state, "served"):
            return self.state.served()
        return {}

    async def _wait_regime(self) -> bool:
        """Poll the detector after every periodic scrape; True when the first window may open."""
        poll = self.cfg.scrape_interval_s
        last_reason = None
        while True:
            t = self.clock.now()
            endpoints = {k: v for k, v in self.scraper.latest.items() if k != "master"}
            d = self.detector.observe(t, len(self.active), endpoints, self._served() or None,
                                      completed=self.result.sessions_ended)
            if self.state is not None:
                self.state.phase = f"warm-up: {d.reason}"
            if d.open:
                if d.timeout:
                    if self.cfg.warmup.on_timeout == "fail":
                        self._abort = f"fleet not in regime after {self.cfg.warmup.max_s:g} s"
                        self.event("regime_timeout", action="fail", **d.as_dict())
                        self.stop(self._abort)
                        return False
                    self.event("regime_timeout", action="open", **d.as_dict())
                self.event("regime", **d.as_dict())
                return True
            if d.reason != last_reason:
                last_reason = d.reason
            if not await self._sleep_until(t + poll):
                return False

    async def run_steady(self, first_index: int = 1, count: int | None = None) -> FleetResult:
        """Run a steady-state fleet and cut ``count`` windows (default ``windows.count``)."""
        cfg = self.cfg
        count = cfg.windows.count if count is None else count
        # the first slot starts at t_start itself: model time waits until its task has run (the
        # hold comes first, where the clock is, so the fleet's own start-up below takes no model
        # time either, and t_start is the time it holds)
        release = hold_at(self.clock, -math.inf)
        t_start = self.clock.now()
        try:
            self.detector.start(t_start if self.epoch else 0.0)  # afresh after a resume
            self.event("fleet_start" if self.epoch == 0 else "fleet_restart", epoch=self.epoch,
                       protocol="steady", width=cfg.width, windows=count, first_index=first_index)
            scrape_task = asyncio.create_task(self.scraper.loop(), name="scraper")
        except BaseException:
            release()
            raise
        slots = [asyncio.create_task(self._slot(i, t_start + i * cfg.stagger_s), name=f"slot{i}")
                 for i in range(cfg.width)]
        open_window: tuple[int, float] | None = None
        try:
            await asyncio.sleep(0)  # the slots' first steps run before this one resumes
            release()
            if count > 0 and await self._wait_regime():
                # a boundary lies where its scrapes were sent (on a loaded machine the wake-up can
                # lag the nominal time); the schedule itself stays on the nominal grid
                t0 = t_open = await self.scraper.boundary()
                for idx, _, t1_nominal in plan_windows(t_open, count, cfg.windows.length_s,
                                                       first_index):
                    self.event("window_open", index=idx, t0=t0, protocol="steady")
                    open_window = (idx, t0)
                    if self.state is not None:
                        self.state.window_opened(idx, t0, t1_nominal)
                    if not await self._sleep_until(t1_nominal):
                        break
                    t1 = await self.scraper.boundary()  # closes this window, opens the next
                    w = self._window(idx, t0, t1, "steady")
                    self.run_dir.append(w)
                    self.result.windows.append(w)
                    open_window = None
                    t0 = t1
                    if self.state is not None:
                        self.state.window_closed(idx)
                if open_window is None and self.result.windows:
                    await self._drain(self.result.windows[-1].t1)
        finally:
            release()
            if open_window is not None:  # stopped inside a window: it cannot be measured
                idx, t0 = open_window
                why = self.stop_reason or "cancelled"
                w = self._window(idx, t0, self.clock.now(), "steady", valid=False,
                                 reason=f"stopped inside the window: {why}")
                self.run_dir.append(w)
                self.result.windows.append(w)
            self.stop_event.set()
            n_active = len(self.active)
            t_c = self.clock.now()
            await self._cancel(slots)
            self.event("sessions_stopped", cancelled=n_active,
                       took_s=round(self.clock.now() - t_c, 3))
            scrape_task.cancel()
            await asyncio.gather(scrape_task, return_exceptions=True)
            try:
                await asyncio.shield(self.scraper.scrape_all())
            except BaseException:
                pass
        self.result.stopped = self.stop_reason
        self.result.aborted = self._abort
        if self._abort:
            raise FleetAborted(self._abort)
        return self.result

    async def _drain(self, t_end: float) -> None:
        """After the last window: let the calls that were in flight at its end finish (so the
        window's calls complete normally), at most ``drain_s``; sessions then get cancelled."""
        if self.state is None or not hasattr(self.state, "calls_open_since_before"):
            return
        deadline = self.clock.now() + self.cfg.drain_s
        self.state.phase = "draining the last window's calls"
        while self.state.calls_open_since_before(t_end) and self.clock.now() < deadline:
            if self.stop_event.is_set():
                return
            await asyncio.sleep(0.05)
        left = self.state.calls_open_since_before(t_end)
        self.event("drained", calls_left=left, drain_s=self.cfg.drain_s)

    # -- batch --------------------------------------------------------------------------
    async def run_batch_once(self, index: int, run_number: int) -> WindowRecord | None:
        """One batch run: ``width`` sessions together; the run is window ``index``."""
        cfg = self.cfg
        self.event("fleet_start" if self.epoch == 0 and run_number == 1 else "batch_run_start",
                   epoch=self.epoch, protocol="batch", width=cfg.width, run=run_number,
                   index=index)
        t0 = await self.scraper.boundary()  # the run's opening boundary
        scrape_task = asyncio.create_task(self._periodic_after(self.cfg.scrape_interval_s),
                                          name="scraper")
        self.event("window_open", index=index, t0=t0, protocol="batch")
        if self.state is not None:
            self.state.window_opened(index, t0, None)
        sessions = []
        for slot in range(cfg.width):
            task, seed = self.next_session(self.seed_offset + slot)
            sid = f"e{self.epoch}-r{run_number:02d}-s{slot:03d}"
            sessions.append(asyncio.create_task(self._run_one(slot, sid, task, seed)))
        stopper = asyncio.create_task(self.stop_event.wait())
        w: WindowRecord | None = None
        try:
            all_sessions = asyncio.gather(*sessions)
            all_sessions.add_done_callback(lambda f: f.cancelled() or f.exception())
            waiters: list[asyncio.Future[Any]] = [stopper, all_sessions]
            done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            finished = not self.stop_event.is_set()
            t1 = self.clock.now()
            scrape_task.cancel()
            await asyncio.gather(scrape_task, return_exceptions=True)
            await self.scraper.scrape_all()
            w = self._window(index, t0, t1, "batch", valid=finished,
                             reason=None if finished else
                             f"stopped inside the run: {self.stop_reason or 'cancelled'}")
            self.run_dir.append(w)
            self.result.windows.append(w)
            if self.state is not None:
                self.state.window_closed(index)
        finally:
            stopper.cancel()
            await self._cancel(sessions)
            if not scrape_task.done():
                scrape_task.cancel()
                await asyncio.gather(scrape_task, return_exceptions=True)
        self.result.stopped = self.stop_reason
        if self._abort:
            raise FleetAborted(self._abort)
        return w

    async def _periodic_after(self, delay_s: float) -> None:
        await self.clock.sleep(delay_s)
        await self.scraper.loop()

    # -- teardown -----------------------------------------------------------------------
    async def _cancel(self, tasks: list[asyncio.Task]) -> None:
        for t in tasks:
            if not t.done():
                t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.close_orphans("fleet stopped: session cancelled")

    def close_orphans(self, reason: str) -> None:
        """End record for every session that started (per the records) but never ended."""
        if self.state is None or not hasattr(self.state, "open_sessions"):
            return
        for sid, info in list(self.state.open_sessions().items()):
            self.run_dir.append(SessionRecord(run_id=self.run_id, session_id=sid,
                                              task=info.get("task", ""), t=self.clock.now(),
                                              status="cancelled", seed=info.get("seed", 0),
                                              rounds=info.get("round", 0), reason=reason))
