"""What the stack cost while a fleet used it: its processes' CPU (an event ``stack_cpu``: cores =
CPU seconds / wall seconds, per process) and, with the held model clock, the wall time in which
model time stood still (an event ``model_clock_held``)."""
from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..analysis.figures import held_share
from ..clock import open_held_clock, stack_held_dir

Usage = dict[str, dict[str, float]]


def read_stack_usage(reader: Callable[[Any], Usage] | None, info: Any) -> Usage | None:
    """The stack processes' CPU readings, or None (no reader, or the stack is not ours to read:
    an external stack, a reader error -- the figure is then absent, never zero)."""
    if reader is None:
        return None
    try:
        return reader(info) or None
    except Exception:  # noqa: BLE001
        return None


@contextlib.contextmanager
def metered_stack(info: Any, reader: Callable[[Any], Usage] | None, event: Callable[..., None],
                  clock_started: Callable[[], bool]) -> Iterator[None]:
    """Around a stretch with the stack ``info`` up: on leaving, ``event("model_clock_held", ...)``
    when the stack holds its model clock, and ``event("stack_cpu", ...)`` when ``reader`` reads
    the stack's processes and the run's clock has started."""
    u0, w0 = read_stack_usage(reader, info), time.monotonic()
    held = open_held_clock(stack_held_dir(info))
    h0 = held.held_s() if held is not None else None
    try:
        yield
    finally:
        if held is not None and h0 is not None:  # wall seconds model time stood still (slow reads)
            wall = max(1e-9, time.monotonic() - w0)
            h = held.held_s() - h0
            event("model_clock_held", held_wall_s=round(h, 3), wall_s=round(wall, 3),
                  held_share=round(held_share(h, wall), 4))
            held.close()
        u1 = read_stack_usage(reader, info) if u0 else None
        if clock_started() and u0 and u1:
            # cores = delta CPU seconds / wall seconds, per process alive at both readings
            wall = max(1e-9, time.monotonic() - w0)
            per = {k: round((u1[k]["cpu_s"] - u0[k]["cpu_s"]) / wall, 4)
                   for k in u0 if k in u1}
            event("stack_cpu", wall_s=round(wall, 3), cores=round(sum(per.values()), 4),
                  per_process=per, gone=sorted(set(u0) - set(u1)),
                  host_cores=os.cpu_count() or 1)
