"""Run a fleet end to end: run directory, stack, gate, sessions, scrapes, windows, live view,
signals, resume, summary.

``run_fleet(cfg)`` creates ``results/runs/<id>/`` (manifest, ``fleet.json`` with what
``--resume`` needs), brings the stack up (:func:`adev.stack.running_stack`; it is
stopped on exit only if this process started it), and runs the protocol of
:mod:`adev.fleet.protocols`. Batch runs restart the embedded stack between runs so each run
starts from a fresh stack state (if the stack was already up and reused, it cannot be restarted:
an event ``stack_reused`` says so). SIGINT/SIGTERM stop the fleet cleanly: sessions are
cancelled, the open window is closed as invalid, the stack is torn down if adev started it, and
the summary is printed. ``resume_fleet(run)`` continues an interrupted run (see
:func:`adev.fleet.windows.resume_plan`).

Everything outside the fleet stage (stack, sessions, gate, analysis) is reached through
:class:`~adev.fleet.deps.Deps` so unit tests can pass small fakes. The parts: :mod:`.deps`,
:mod:`.signals` (the stop signals), :mod:`.stack_meter` (the stack's CPU and held clock),
:mod:`.resume` (continuing an interrupted run) and :mod:`.summary` (the outcome and its text).
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import event_loop
from ..analysis.faults import FaultTracker, tracker_from_records
from ..clock import RunClock, stack_run_clock
from ..config import ROOT, ConfigError, StackConfig
from ..manifest import build_manifest
from ..records import RECORD_TYPES, EventKind, EventRecord, create_run_path
from .config import FleetConfig
from .deps import Deps, real_deps
from .live import FleetState, LiveDisplay, ObservedRunDir
from .lock import RunLock
from .protocols import Fleet, FleetAborted
from .resume import (
    FLEET_STATE,
    close_interrupted,
    find_fleet_run,
    read_fleet_state,
    repair_torn_tails,
    resumed_clock,
)
from .scraper import Scraper
from .signals import StopSignals
from .stack_meter import metered_stack
from .summary import RunOutcome, fleet_summary
from .windows import RegimeDetector, last_stamp, resume_plan


def _asdict_or_none(obj: Any) -> Any:
    return dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) and not isinstance(obj, type) else None


def _targets(info: Any) -> dict[str, str]:
    t = dict(info.metrics_urls)
    if info.master_metrics_url:
        t["master"] = info.master_metrics_url
    return t


class FleetRun:
    """One fleet run (new or resumed) in one process."""

    def __init__(self, cfg: FleetConfig, stack_cfg: StackConfig, deps: Deps, *,
                 run_path: Path | None = None, resume: bool = False, out=None,
                 live: str | None = None, lock: RunLock | None = None):
        self.cfg = cfg
        self.stack_cfg = stack_cfg
        self.deps = deps
        self.resume = resume
        self.out = out or sys.stdout
        self.live_mode = live or cfg.live
        if run_path is None:
            base = Path(cfg.results_dir)
            run_path = create_run_path(base if base.is_absolute() else ROOT / base, "fleet")
        self.path = run_path
        self.lock = lock or RunLock(run_path).acquire("--resume" if resume else "fleet")
        self.state = FleetState(cfg.width, [e.name for e in stack_cfg.endpoints],
                                stack_cfg.time_scale)
        self.faults = FaultTracker(on_event=self._fault_event)
        self.run_dir = ObservedRunDir(run_path, observers=[self.state.on_record,
                                                           self._feed_faults])
        self.run_id = self.run_dir.run_id
        self.clock: RunClock | None = None
        self.gate: Any = None
        self._records_started = False
        self.signals: StopSignals | None = None
        self.fleet: Fleet | None = None
        self.result_windows: list[dict[str, Any]] = []
        self.stopped: str | None = None
        self.aborted: str | None = None

    # -- bookkeeping --------------------------------------------------------------------
    def _feed_faults(self, record: Any) -> None:
        self.faults.feed(record.kind, record)

    def _fault_event(self, name: str, t: float, detail: dict[str, Any]) -> None:
        """A fault began, ended or occurred (adev.analysis.faults): an event on the timeline."""
        self.run_dir.append(EventRecord(run_id=self.run_id, t=t, event="fault",
                                        detail={"fault": name, **detail}))

    def _event(self, name: EventKind, **detail: Any) -> None:
        t = self.clock.now() if self.clock else 0.0
        self.run_dir.append(EventRecord(run_id=self.run_id, t=t, event=name, detail=detail))

    def _write_state(self, clock: RunClock) -> None:
        self.run_dir.write_json(FLEET_STATE, {
            "run_id": self.run_id,
            "fleet": dataclasses.asdict(dataclasses.replace(self.cfg, stack=self.stack_cfg)),
            "clock": {"t0_mono": clock.t0, "time_scale": clock.time_scale},
        })

    def _tasks(self) -> list[str]:
        avail = self.deps.list_tasks()
        if not self.cfg.tasks:
            if not avail:
                raise ConfigError("fleet.tasks: no built-in tasks found under fleets/tasks/")
            return sorted(avail)
        unknown = [t for t in self.cfg.tasks if t not in avail]
        if unknown:
            raise ConfigError(f"fleet.tasks: unknown task(s) {unknown}; available: "
                              f"{', '.join(sorted(avail)) or 'none'}")
        return list(self.cfg.tasks)

    def _check_roles(self) -> None:
        names = {e.name for e in self.stack_cfg.endpoints}
        for logical, ep in self.cfg.endpoints.items():
            if ep not in names:
                raise ConfigError(f"fleet.endpoints.{logical}: endpoint {ep!r} is not in the "
                                  f"stack; endpoints: {', '.join(sorted(names))}")

    # -- main ---------------------------------------------------------------------------
    async def run(self) -> RunOutcome:
        t_wall = time.monotonic()
        try:
            tasks = self._tasks()
            self._check_roles()
        except ConfigError:
            self.lock.release()
            if not self.resume and not any(p.name != self.lock.path.name
                                           for p in self.path.iterdir()):
                self.lock.path.unlink(missing_ok=True)
                self.path.rmdir()  # leave no empty run directory behind a config error
            raise
        main = asyncio.current_task()
        assert main is not None  # run() is a coroutine: it runs in a task
        self.signals = StopSignals(main)
        try:
            with self.signals:
                async with self._gate() as gate:
                    self.gate = gate
                    if self.cfg.protocol == "steady":
                        await self._steady(tasks)
                    else:
                        await self._batch(tasks)
        except FleetAborted as e:
            self.aborted = str(e)
        except asyncio.CancelledError:
            self.stopped = self.stopped or "cancelled (second signal)"
        finally:
            if self.clock is not None:
                with contextlib.suppress(Exception):
                    self._event("fleet_end", stopped=self.stopped, aborted=self.aborted)
            self.run_dir.close()
        try:
            summary = self._summary()
            report_path = None
            if self.deps.report is not None and self.cfg.report and self.clock is not None:
                try:
                    report_path = self.deps.report(self.path)
                except Exception as e:
                    summary += f"\nreport: not written ({type(e).__name__}: {e})"
        finally:
            self.lock.release()
        return RunOutcome(self.path, self.result_windows, self.stopped, self.aborted, summary,
                          report_path, time.monotonic() - t_wall)

    def _gate(self):
        if self.deps.open_gate is None:
            return contextlib.nullcontext(None)
        return self.deps.open_gate(self.cfg.gate)

    def _make_clock(self, info: Any) -> RunClock:
        """The run's clock on the stack ``info``: made on the first stack; on a batch fleet's
        later stacks, each with a held clock of its own, the same clock goes on from where it
        was (:func:`adev.clock.stack_run_clock`)."""
        self.clock = stack_run_clock(info, self.clock)
        return self.clock

    def _detector(self, info: Any) -> RegimeDetector:
        prof = getattr(info, "profile", None)
        return RegimeDetector(self.cfg.width, self.cfg.warmup,
                              getattr(prof, "gpu_pool_tokens", None))

    def _start_records(self, info: Any, clock: RunClock) -> None:
        if self.resume or self._records_started:
            if self._records_started:
                self._write_state(clock)  # batch: the restarted stack's processes
            return
        self._records_started = True
        self.run_dir.write_json("manifest.json", build_manifest(
            self.run_id, config={"fleet": self.cfg, "stack": self.stack_cfg},
            seeds={"fleet": self.cfg.seed}, time_scale=clock.time_scale,
            extra={"kind": "fleet", "protocol": self.cfg.protocol, "width": self.cfg.width,
                   "pause_s": self.cfg.pause_s,
                   "profile": _asdict_or_none(getattr(info, "profile", None)),
                   "stack_started_here": bool(getattr(info, "started_here", False))}))
        self._write_state(clock)

    async def _with_stack(self, body: Callable[[Any], Any]) -> Any:
        async with self.deps.running_stack(self.stack_cfg) as info:
            if self.clock is not None and abs(info.time_scale - self.clock.time_scale) > 1e-9:
                raise ConfigError(f"stack.time_scale: the stack runs at {info.time_scale}, this "
                                  f"run's clock at {self.clock.time_scale}")
            # (a stack that a crashed run started is reused by its --resume, which registers as
            # its user and, being the last user out, stops it: adev.stack.running_stack)
            with metered_stack(info, self.deps.stack_usage, self._event,
                               lambda: self.clock is not None):
                result = await body(info)
            t_exit = time.monotonic()
            started = bool(getattr(info, "started_here", False))
        if self.clock is not None:
            self._event("stack_released", stopped=started,
                        took_wall_s=round(time.monotonic() - t_exit, 3))
        return result

    async def _session_env(self, info: Any, tasks: list[str], *, epoch: int,
                           seed_offset: int, body: Callable[[Fleet], Any]) -> Any:
        clock = self._make_clock(info)
        self._start_records(info, clock)
        scraper = Scraper(self.run_dir, self.run_id, clock, _targets(info),
                          interval_s=self.cfg.scrape_interval_s)
        self.state.prefill_tokens_per_s = getattr(getattr(info, "profile", None),
                                                  "prefill_tokens_per_s", None)
        display = LiveDisplay(self.state, clock, self.live_mode, stream=self.out)
        try:
            async with self.deps.make_sessions(self.cfg, info, self.run_dir, clock,
                                               self.state, self.gate) as launcher:
                fleet = Fleet(self.cfg, self.run_dir, self.run_id, clock, launcher, scraper,
                              tasks, epoch=epoch, first_seed_offset=seed_offset,
                              state=self.state, detector=self._detector(info),
                              faults=self.faults)
                self.fleet = fleet
                if self.signals is not None:
                    self.signals.fleet = fleet
                    if self.signals.received:
                        fleet.stop(self.signals.received)
                display.start()
                try:
                    return await body(fleet)
                finally:
                    self.stopped = self.stopped or fleet.stop_reason
                    await display.stop()
        finally:
            await scraper.aclose()

    # -- protocols ----------------------------------------------------------------------
    async def _steady(self, tasks: list[str]) -> None:
        epoch, offset, first, count = 0, 0, 1, self.cfg.windows.count
        if self.resume:
            epoch, offset, first, count = self._resume_bookkeeping()
            if count == 0:
                self._event("resume_nothing_left", note="every window is measured already")
                return

        async def body(info: Any) -> None:
            async def go(fleet: Fleet) -> None:
                res = await fleet.run_steady(first_index=first, count=count)
                self.result_windows += [dataclasses.asdict(w) for w in res.windows]
            await self._session_env(info, tasks, epoch=epoch, seed_offset=offset, body=go)

        await self._with_stack(body)

    async def _batch(self, tasks: list[str]) -> None:
        epoch, offset, first, count = 0, 0, 1, self.cfg.runs
        if self.resume:
            epoch, offset, first, count = self._resume_bookkeeping()
            if count == 0:
                self._event("resume_nothing_left", note="every run is measured already")
                return
        done_runs = first - 1
        for k in range(count):
            if self.signals is not None and self.signals.received:
                break
            run_number = done_runs + k + 1

            async def body(info: Any, run_number=run_number, k=k) -> None:
                if not getattr(info, "started_here", False) and count > 1 and self.clock:
                    self._event(
                        "stack_reused", run=run_number,
                        note="the stack was already up and is not restarted between runs: "
                             "runs do not start from a fresh stack state")

                async def go(fleet: Fleet) -> None:
                    fleet.seed_offset = offset + k * self.cfg.width
                    w = await fleet.run_batch_once(first + k, run_number)
                    if w is not None:
                        self.result_windows.append(dataclasses.asdict(w))
                await self._session_env(info, tasks, epoch=epoch, seed_offset=offset, body=go)

            await self._with_stack(body)

    # -- resume -------------------------------------------------------------------------
    def _resume_bookkeeping(self) -> tuple[int, int, int, int]:
        """Close what the interrupted process left open; returns (epoch, seed offset, next
        window index, windows still to measure)."""
        fixed = repair_torn_tails(self.path)
        rd = self.run_dir
        recs = {k: rd.read(k) for k in RECORD_TYPES}
        t_last = last_stamp(recs)
        self.faults = tracker_from_records(recs)  # a target that answered before is still known
        self.faults.on_event = self._fault_event
        count = self.cfg.windows.count if self.cfg.protocol == "steady" else self.cfg.runs
        plan = resume_plan(recs["windows"], recs["events"], recs["sessions"], count, t_last)
        clock = self.clock = resumed_clock(self.path, self.stack_cfg, t_last)
        self.result_windows += close_interrupted(self.run_dir, self.run_id, plan, t_last)
        self._event("resume", epoch=plan.epoch, interrupted=[w["index"] for w in plan.interrupted],
                    valid_done=plan.valid_done, remaining=plan.remaining,
                    next_index=plan.next_index, t_last=t_last, torn_fixed=fixed,
                    orphan_sessions=[s["session_id"] for s in plan.orphan_sessions])
        self._write_state(clock)
        offset = 0 if plan.max_seed is None else plan.max_seed - self.cfg.seed + 1
        return plan.epoch, offset, plan.next_index, plan.remaining

    # -- the end ------------------------------------------------------------------------
    def _summary(self) -> str:
        return fleet_summary(self.run_dir, stopped=self.stopped, aborted=self.aborted,
                             summarise=self.deps.summarise, clock_started=self.clock is not None)


# --------------------------------------------------------------------------------------------


def pin_client(cfg: FleetConfig, stack_cfg: Any) -> None:
    """Run this process (the sessions' event loop and the threads and processes it starts) on
    ``fleet.client_cpus``; a stack this fleet starts still gets ``stack.cpus`` (or every core).
    With ``fleet.client_realtime`` the loop's thread is scheduled SCHED_FIFO
    (:func:`adev.event_loop.set_realtime`; what it starts is not)."""
    if cfg.client_realtime:
        event_loop.set_realtime("fleet.client_realtime")
    if not cfg.client_cpus:
        return
    shared = sorted(set(cfg.client_cpus) & set(getattr(stack_cfg, "cpus", None) or []))
    if shared:
        raise ConfigError(f"fleet.client_cpus: {cfg.client_cpus} shares cores {shared} with "
                          f"stack.cpus {stack_cfg.cpus}; allowed values: cores apart from the "
                          "stack's (or [] for any core)")
    os.sched_setaffinity(0, set(cfg.client_cpus))


def run_fleet(cfg: FleetConfig, *, base: Path | None = None, deps: Deps | None = None,
              out=None, live: str | None = None, run_path: Path | None = None) -> RunOutcome:
    """Run one fleet in a new run directory (``run_path``, default results_dir/<new id>)."""
    deps = deps or real_deps()
    stack_cfg = cfg.stack_config(base)
    pin_client(cfg, stack_cfg)
    if run_path is not None:
        run_path.mkdir(parents=True, exist_ok=False)
    run = FleetRun(cfg, stack_cfg, deps, out=out, live=live, run_path=run_path)
    return event_loop.run(run.run())


def resume_fleet(run: str | Path, *, deps: Deps | None = None, out=None,
                 live: str | None = None) -> RunOutcome:
    """Continue the interrupted run ``run`` (a run id under results/runs or a path). Refused
    (ConfigError, exit 2) while the run's own fleet is alive (:mod:`adev.fleet.lock`) or when its
    ``fleet.json`` cannot be read back."""
    p = find_fleet_run(run)
    lock = RunLock(p).acquire("--resume")
    try:
        cfg = read_fleet_state(p / FLEET_STATE)
        deps = deps or real_deps()
        stack_cfg = cfg.stack_config()
        pin_client(cfg, stack_cfg)
        fr = FleetRun(cfg, stack_cfg, deps, run_path=p, resume=True, out=out, live=live,
                      lock=lock)
    except BaseException:
        lock.release()
        raise
    return event_loop.run(fr.run())
