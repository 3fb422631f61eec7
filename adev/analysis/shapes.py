"""The source study's shapes held against adev's runs (``[[shape]]`` in ``source_figures.toml``).

A source figure (:mod:`adev.analysis.source`) is one value at one point. A *shape* is what the
source says about how a figure moves between points: the saving rises with width, HBM hits fall,
a 300 s lease roughly halves the saving, local and remote disk tiers are close. A reader judges
the embedded stack's fidelity by its shapes first, since its absolute figures come from a model.

With ``f(P)`` the mean of ``figure`` over the runs at point ``P`` (the runs' means, each over its
valid windows; :func:`adev.analysis.source.ours`), a shape of kind

- ``rises`` holds when ``f(P1) < f(P2) < ...`` (every step up);
- ``falls`` holds when ``f(P1) > f(P2) > ...`` (every step down);
- ``ratio`` holds when ``lo <= f(P1) / f(P2) <= hi``;
- ``range`` holds when ``lo <= f(P1) <= hi`` (either bound may be absent);
- ``not_above`` holds when ``f(P2) <= f(P1) + tol`` (``tol`` in the figure's units, default 0);
- ``overlap`` holds when the 95% t-intervals of ``P1`` and ``P2`` overlap (the source's "within
  the measured spread"): a point's interval is its run's t-interval over valid windows (batch:
  over runs), or the t-interval of the runs' means when several runs are at the point.

A shape that cannot be judged (a point without a run, a figure not measured, an interval of one
window) says why instead of holding or failing. The source's words and place are printed beside
each shape; the source's values are never used in a computation of adev's own figures.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .aggregate import RunSummary, t_interval
from .render import PCT_COLS, fmt, label
from .source import (
    POINT_KEYS,
    SOURCE_FILE,
    check_point,
    entries,
    mean_over,
    ours,
    point_matches,
    point_text,
)

KINDS = ("rises", "falls", "ratio", "range", "not_above", "overlap")
N_POINTS = {"rises": None, "falls": None, "ratio": 2, "range": 1, "not_above": 2, "overlap": 2}
"""Points each kind takes (None: two or more)."""

Match = Callable[[dict[str, Any], Any], bool]
"""Whether a run (a summary) was made at a point."""
Value = Callable[[Sequence[Any], str], "float | None"]
"""A figure's value over the runs at a point (None: not measured)."""


@dataclass(frozen=True)
class Shape:
    """One relation the source states between points."""

    kind: str
    figure: str
    points: tuple[dict[str, Any], ...]
    says: str                   # the source's words (with its figures)
    where: str
    lo: float | None = None
    hi: float | None = None
    tol: float = 0.0

    def point_text(self, i: int) -> str:
        return point_text(self.points[i])

    @property
    def share(self) -> bool:
        """Whether the figure is a share of 0..1 (printed as a percentage)."""
        return self.figure in PCT_COLS

    def matching(self, summaries: Sequence[Any], i: int, match: Match = point_matches
                 ) -> list[Any]:
        return [s for s in summaries if match(self.points[i], s)]


@dataclass
class Judged:
    """A shape against the runs: adev's value at each point, and whether the shape holds."""

    shape: Shape
    values: list[float | None]          # f(P) per point; None: not measured there
    holds: bool | None
    why: str | None                     # why it could not be judged
    measure: float | None = None        # the ratio (``ratio``), else None

    def ours_text(self) -> str:
        pct = self.shape.share
        vals = " → ".join(fmt(v, pct) if v is not None else "—" for v in self.values)
        if self.shape.kind == "ratio" and self.measure is not None:
            return f"{vals} (ratio {self.measure:.2f})"
        return vals


def load(path: Path = SOURCE_FILE, point_keys: Sequence[str] = POINT_KEYS,
         kinds: Sequence[str] = KINDS) -> list[Shape]:
    """The data file's ``[[shape]]`` entries (points keyed by ``point_keys``, of the ``kinds``
    given); a malformed one raises ValueError naming its index and field."""
    out = []
    for where, s in entries(path, "shape", ("kind", "figure", "points", "says", "where")):
        kind = s["kind"]
        if kind not in kinds:
            raise ValueError(f"{where}.kind: {kind!r}; allowed: {', '.join(kinds)}")
        pts = s["points"]
        if not isinstance(pts, list) or not all(isinstance(p, dict) for p in pts):
            raise ValueError(f"{where}.points: expected a list of point tables")
        n = N_POINTS[kind]
        if (n is None and len(pts) < 2) or (n is not None and len(pts) != n):
            raise ValueError(f"{where}.points: kind {kind!r} takes "
                             f"{'two or more' if n is None else n} point(s), got {len(pts)}")
        for j, p in enumerate(pts):
            check_point(f"{where}.points[{j}]", p, point_keys)
        if kind in ("ratio", "range") and s.get("lo") is None and s.get("hi") is None:
            raise ValueError(f"{where}: kind {kind!r} needs 'lo' or 'hi'")
        out.append(Shape(kind, s["figure"], tuple(dict(p) for p in pts), s["says"], s["where"],
                         s.get("lo"), s.get("hi"), float(s.get("tol", 0.0))))
    return out


def _interval(runs: list[RunSummary], figure: str) -> tuple[float, float] | None:
    if len(runs) == 1:
        iv = runs[0].interval.get(figure) or {}
        lo, hi = iv.get("lo", math.nan), iv.get("hi", math.nan)
    else:
        t = t_interval([ours(s, figure) for s in runs])
        lo, hi = t["lo"], t["hi"]
    return None if math.isnan(lo) or math.isnan(hi) else (lo, hi)


def judge(shape: Shape, summaries: Sequence[Any], match: Match = point_matches,
          value: Value = mean_over) -> Judged:
    """``shape`` against the runs in ``summaries`` (see the module's doc for each kind); by
    default the fleet study's runs (:class:`RunSummary`), else ``match`` and ``value`` say which
    runs are at a point and what the figure is over them."""
    runs = [shape.matching(summaries, i, match) for i in range(len(shape.points))]
    values = [value(r, shape.figure) if r else None for r in runs]
    for i, r in enumerate(runs):
        if not r:
            return Judged(shape, values, None, f"no run at {shape.point_text(i)}")
        if values[i] is None:
            return Judged(shape, values, None, f"not measured at {shape.point_text(i)}")
    v: list[float] = [x for x in values if x is not None]
    k = shape.kind
    if k == "rises":
        return Judged(shape, values, all(a < b for a, b in itertools.pairwise(v)), None)
    if k == "falls":
        return Judged(shape, values, all(a > b for a, b in itertools.pairwise(v)), None)
    if k == "not_above":
        return Judged(shape, values, v[1] <= v[0] + shape.tol, None)
    if k == "overlap":
        ivs = [_interval(r, shape.figure) for r in runs]
        if ivs[0] is None or ivs[1] is None:
            i = 0 if ivs[0] is None else 1
            return Judged(shape, values, None,
                          f"no interval at {shape.point_text(i)} (fewer than 2 windows)")
        (a0, a1), (b0, b1) = ivs  # type: ignore[misc]
        return Judged(shape, values, a0 <= b1 and b0 <= a1, None)
    x = v[0]
    measure = None
    if k == "ratio":
        if v[1] == 0:
            return Judged(shape, values, None, f"zero at {shape.point_text(1)}")
        x = measure = v[0] / v[1]
    ok = (shape.lo is None or x >= shape.lo) and (shape.hi is None or x <= shape.hi)
    return Judged(shape, values, ok, None, measure)


def judge_all(summaries: Sequence[Any], shapes: Sequence[Shape] | None = None,
              match: Match = point_matches, value: Value = mean_over) -> list[Judged]:
    return [judge(s, summaries, match, value)
            for s in (shapes if shapes is not None else load())]


def _bounds(s: Shape) -> str:
    pct = s.kind == "range" and s.share
    if s.lo is not None and s.hi is not None:
        return f"{fmt(s.lo, pct)} to {fmt(s.hi, pct)}"
    if s.lo is not None:
        return f"at least {fmt(s.lo, pct)}"
    return f"at most {fmt(s.hi, pct)}"


def criterion(s: Shape) -> str:
    """What adev's runs must show for the shape to hold, in words."""
    pts = " → ".join(s.point_text(i) for i in range(len(s.points)))
    if s.kind in ("rises", "falls"):
        return f"{s.kind} over {pts}"
    if s.kind == "ratio":
        return f"{s.point_text(0)} / {s.point_text(1)}: {_bounds(s)}"
    if s.kind == "range":
        return f"{pts}: {_bounds(s)}"
    if s.kind == "not_above":
        extra = f" + {fmt(s.tol, True)}" if s.tol else ""
        return f"{s.point_text(1)} at most {s.point_text(0)}{extra}"
    return f"{pts}: 95% intervals overlap"


def shapes_markdown(rows: Sequence[Judged], only_judged: bool = False) -> str:
    """A markdown table: figure, the source's words, the test, adev's values, verdict, where
    (``only_judged``: leave out the shapes these runs cannot judge, counting them)."""
    judged = [r for r in rows if r.holds is not None]
    held = sum(1 for r in judged if r.holds)
    head = (f"{held} of {len(judged)} judged shape(s) hold; "
            f"{len(rows) - len(judged)} could not be judged from these runs.")
    shown = judged if only_judged else list(rows)
    if not shown:
        return head + "\n"
    lines = [head, "", "| Figure | The source | Test | adev | Holds | Where in the source |",
             "|---|---|---|---|---|---|"]
    for r in shown:
        verdict = "yes" if r.holds else ("**no**" if r.holds is False else f"— ({r.why})")
        lines.append(f"| {label(r.shape.figure)} | {r.shape.says} | {criterion(r.shape)} "
                     f"| {r.ours_text()} | {verdict} | {r.shape.where} |")
    return "\n".join(lines) + "\n"
