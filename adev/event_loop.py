"""The event loop every adev process runs on: uvloop when installed, else asyncio's own.

One place decides it, so the fleet, the emulated endpoints and the benchmarks measure the same
loop. ``ADEV_EVENT_LOOP=asyncio`` forces asyncio's loop (to compare, or to rule uvloop out);
``ADEV_EVENT_LOOP=uvloop`` requires uvloop and fails clearly without it. The loop a run used is
written to its manifest (:func:`loop_name`). :func:`quiet_gc` keeps the garbage collector's long
pauses off a loop whose stamps are measurements.
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
            raise ConfigError(f"{ENV}=uvloop but uvloop is not installed (pip install uvloop)")
        return "asyncio", None
    return f"uvloop {uvloop.__version__}", uvloop.new_event_loop


def loop_name() -> str:
    """The loop :func:`run` uses in this process, e.g. ``"uvloop 0.21.0"`` or ``"asyncio"``."""
    return _factory()[0]


def describe() -> str:
    """``"Python 3.12.1, uvloop 0.23.0"``: what a benchmark's figures were measured on."""
    import platform
    return f"Python {platform.python_version()}, {loop_name()}"


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
