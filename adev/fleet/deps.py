"""What the fleet needs from the other stages (:class:`Deps`), so unit tests can pass small fakes;
:func:`real_deps` wires the real stages (:mod:`adev.fleet.wiring`)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import StackConfig


@dataclass
class Deps:
    """What the fleet needs from the other stages."""

    running_stack: Callable[[StackConfig], Any]          # async context manager -> StackInfo
    list_tasks: Callable[[], list[str]]
    # make_sessions(cfg, info, run_dir, clock, state, gate) -> async context manager yielding a
    # launcher ``await launcher(task, seed, session_id)``
    make_sessions: Callable[..., Any]
    open_gate: Callable[[str], Any] | None = None       # kind -> async context manager -> Gate
    summarise: Callable[[Path], str] | None = None       # run dir -> printable summary
    report: Callable[[Path], Path | None] | None = None  # run dir -> path of the full report
    # stack info -> {process: {"cpu_s": CPU seconds since start, ...}} (adev.stack.process_usage)
    stack_usage: Callable[[Any], dict[str, dict[str, float]]] | None = None


def real_deps() -> Deps:
    from . import wiring
    return Deps(running_stack=wiring.running_stack, list_tasks=wiring.list_tasks,
                make_sessions=wiring.make_sessions, open_gate=wiring.open_gate,
                summarise=wiring.summarise,
                report=wiring.report, stack_usage=wiring.stack_usage)
