"""The event loop every adev process runs on: uvloop when installed, else asyncio's own.

One place decides it, so the fleet, the emulated endpoints and the benchmarks measure the same
loop. ``ADEV_EVENT_LOOP=asyncio`` forces asyncio's loop (to compare, or to rule uvloop out);
``ADEV_EVENT_LOOP=uvloop`` requires uvloop and fails clearly without it. The loop a run used is
written to its manifest (:func:`loop_name`). :func:`quiet_gc` keeps the garbage collector's long
pauses off a loop whose stamps are measurements; :func:`set_realtime` keeps the operating
system's CPU queue off them (``fleet.client_realtime``), and :func:`scheduling` says how the
loop's thread is scheduled (also in the manifest).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

from adev.config import ConfigError

T = TypeVar("T")
ENV = "ADEV_EVENT_LOOP"
CHOICES = ("auto", "uvloop", "asyncio")


def _factory() -> tuple[str, Callable[[], asyncio.AbstractEventLoop] | None]:
    want = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if want not in CHOICES:
        raise ConfigError(f"{ENV}: {want!r} is not an event loop; allowed: {', '.join(CHOICES)}")
    if want == "asyncio":
        return "asyncio", None
    try:
        import uvloop
    except ImportError:
        if want == "uvloop":
            raise ConfigError(f"{ENV}=uvloop but uvloop is not installed (pip install uvloop)") from None
        return "asyncio", None
    return f"uvloop {uvloop.__version__}", uvloop.new_event_loop


def loop_name() -> str:
    """The loop :func:`run` uses in this process, e.g. ``"uvloop 0.21.0"`` or ``"asyncio"``."""
    return _factory()[0]


def describe() -> str:
    """``"Python 3.12.1, uvloop 0.23.0"``: what a benchmark's figures were measured on (plus
    the loop thread's scheduling when it is not the default, e.g. ``", SCHED_FIFO 1"``)."""
    import platform
    sched = scheduling()
    return (f"Python {platform.python_version()}, {loop_name()}"
            + ("" if sched.startswith("SCHED_OTHER") else f", {sched}"))


REALTIME_PRIORITY = 1
"""SCHED_FIFO priority of a realtime client loop: the lowest, above every normal task and below
the kernel's own realtime threads."""

_POLICIES = {getattr(os, n): n for n in ("SCHED_OTHER", "SCHED_BATCH", "SCHED_IDLE", "SCHED_FIFO",
                                          "SCHED_RR") if hasattr(os, n)}


def scheduling() -> str:
    """How this thread is scheduled: ``"SCHED_OTHER nice 0"``, ``"SCHED_FIFO 1"``, or
    ``"unknown"`` where the system cannot say."""
    try:
        pol = os.sched_getscheduler(0) & ~getattr(os, "SCHED_RESET_ON_FORK", 0)
        name = _POLICIES.get(pol, f"policy {pol}")
        if name in ("SCHED_FIFO", "SCHED_RR"):
            return f"{name} {os.sched_getparam(0).sched_priority}"
        return f"{name} nice {os.getpriority(os.PRIO_PROCESS, 0)}"
    except (AttributeError, OSError):
        return "unknown"


def set_realtime(where: str) -> str:
    """Schedule this thread (the one that runs the event loop) under SCHED_FIFO at
    :data:`REALTIME_PRIORITY`, so that when a response's bytes arrive it runs at once instead of
    waiting for a CPU behind the stack's processes. Threads and processes it starts later (the
    ledger process, executors, a stack, the gate) are scheduled normally (SCHED_RESET_ON_FORK).

    Why: on a shared host the kernel often wakes the loop on a CPU that is busy with an endpoint
    or the master and lets it wait there for milliseconds; those milliseconds land in its
    first-byte stamps (measured on this project's 2-core hosts with ``bench/bench_client.py``).
    Raising the loop's nice value, or its own autogroup's, did not remove them; SCHED_FIFO did.
    The loop's CPU time then takes precedence over the stack's: at most one core (a fleet's
    client uses about a tenth of one at width 12), less the share the kernel keeps for normal
    tasks (``kernel.sched_rt_runtime_us``, 5% by default).

    Needs root, CAP_SYS_NICE or an RLIMIT_RTPRIO of at least 1 (and, under a cgroup v1
    hierarchy with realtime group scheduling, a realtime budget for this cgroup). Without them a
    :class:`ConfigError` names ``where``. Returns :func:`scheduling` after the change."""
    fifo = getattr(os, "SCHED_FIFO", None)
    if fifo is None or not hasattr(os, "sched_setscheduler"):
        raise ConfigError(f"{where}: realtime scheduling (SCHED_FIFO) is not supported on this "
                          "system; allowed values: false")
    try:
        os.sched_setscheduler(0, fifo | getattr(os, "SCHED_RESET_ON_FORK", 0),
                              os.sched_param(REALTIME_PRIORITY))
    except PermissionError:
        raise ConfigError(f"{where}: true needs root, CAP_SYS_NICE or an RLIMIT_RTPRIO of at least "
                          f"{REALTIME_PRIORITY} (SCHED_FIFO was refused); allowed values: false, or "
                          "run with that privilege") from None
    return scheduling()


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the chosen loop."""
    try:
        _, factory = _factory()
    except ConfigError:
        main.close()
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


GC_THRESHOLDS = (20_000, 50, 100)
"""Young-generation threshold 20,000 allocations (CPython's default 700). Measured at width 64
(``bench_fleet.py --window-length 1200``, a loaded 2-core host): 53 collections longer than 2 ms
in 89 s with the defaults (young ones up to 27 ms), 31 with these settings and the freeze."""


@contextlib.contextmanager
def quiet_gc() -> Iterator[None]:
    """Keep the garbage collector off an event loop whose stamps are measurements (the
    fleet's sessions, an emulated endpoint) as far as is safe: everything alive once the
    process is set up (imports, configs, tasks, pools) is frozen out of every later collection
    (``gc.freeze``), and young collections run less often (:data:`GC_THRESHOLDS`). Reference
    cycles made later are still collected; on exit both are undone.

    Without it a full collection walks every object of the set-up: 87 ms of held GIL at the
    first call of ``bench/bench_client.py`` (measured with a ``gc.callbacks`` timer)."""
    old = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()
