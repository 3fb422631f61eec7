"""The source's replay shapes (``source_shapes.toml``) judged against a replay matrix.

The judging is :mod:`adev.analysis.shapes`'; what differs is the runs. A replay run is its
summary (:func:`adev.replay.summary.summarise`, a dict), at the point
``{experiment, configuration}`` it was made at. A figure's value at a point is the mean of the
summaries' values over the runs there (the seeds), leaving out runs where it is None; a shape
whose points have no run, or no value, says so instead of holding or failing.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..analysis.shapes import KINDS, Judged, Shape, judge_all, load

SHAPES_FILE = Path(__file__).with_name("source_shapes.toml")
POINT_KEYS = ("experiment", "configuration")
REPLAY_KINDS = tuple(k for k in KINDS if k != "overlap")
"""``overlap`` needs per-window intervals, which a replay run does not have."""


def load_shapes(path: Path = SHAPES_FILE) -> list[Shape]:
    return load(path, POINT_KEYS, REPLAY_KINDS)


def point_matches(p: dict[str, Any], s: dict[str, Any]) -> bool:
    """Whether the replay run with summary ``s`` was made at point ``p``."""
    return all(s.get(k) == p[k] for k in POINT_KEYS if k in p)


def mean_over(runs: Sequence[dict[str, Any]], figure: str) -> float | None:
    """The mean of ``figure`` over ``runs`` that measured it; None when none did."""
    vals = [float(r[figure]) for r in runs if r.get(figure) is not None]
    return sum(vals) / len(vals) if vals else None


def judge_replay(summaries: Sequence[dict[str, Any]],
                 shapes: Sequence[Shape] | None = None) -> list[Judged]:
    """The shapes of the experiments these runs made (all of them when no run says which)."""
    exps = {s.get("experiment") for s in summaries} - {None}
    todo = [sh for sh in (shapes if shapes is not None else load_shapes())
            if not exps or any(p.get("experiment") in exps for p in sh.points)]
    return judge_all(summaries, todo, point_matches, mean_over)
