"""The source study's figures beside adev's own (``source_figures.toml``).

Each source figure names an adev figure and the point it was measured at (width, protocol,
pause, configuration, disk tier, lease). :func:`beside` finds, for every source figure, the runs
of a report at that point and sets the source's value next to the mean of theirs, so a reader
sees the fidelity at a glance. The source's values are only ever printed, never used in a
computation of adev's own figures.
"""
from __future__ import annotations

import math
import tomllib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .aggregate import RunSummary
from .render import PCT_COLS, fmt, label

SOURCE_FILE = Path(__file__).with_name("source_figures.toml")
LONG_LEASE_S = 300.0
"""``lease = "short"`` in the data file matches runs whose lease is under this."""

POINT_KEYS = ("width", "protocol", "pause_s", "configuration", "disk_tier", "lease")


@dataclass(frozen=True)
class SourceFigure:
    """One figure the source measured: adev figure name, point, value or range, where."""

    figure: str
    point: dict[str, Any]
    where: str
    value: float | None = None
    lo: float | None = None
    hi: float | None = None

    @property
    def share(self) -> bool:
        """Whether the figure is a share of 0..1 (printed as a percentage); otherwise it is in
        the unit its label names (seconds for the reuse distances)."""
        return self.figure in PCT_COLS

    def text(self) -> str:
        if self.value is not None:
            return fmt(float(self.value), self.share)
        lo, hi = fmt(float(self.lo or 0.0), self.share), fmt(float(self.hi or 0.0), self.share)
        return f"{lo[:-1]}-{hi}" if self.share else f"{lo}-{hi}"

    def point_text(self) -> str:
        return point_text(self.point)

    def matches(self, s: RunSummary) -> bool:
        """Whether run ``s`` was made at this figure's point."""
        return point_matches(self.point, s)


def point_text(p: dict[str, Any]) -> str:
    """A point (width, protocol, pause, configuration, disk tier, lease; a replay's experiment)
    in words."""
    bits = [f"{p['width']} session{'s' if p['width'] != 1 else ''}"] if "width" in p else []
    if "experiment" in p:
        bits.append(f"{p['experiment']} gap")
    if "protocol" in p:
        bits.append(p["protocol"])
    if "pause_s" in p:
        bits.append(f"pause {p['pause_s']:g} s")
    if "configuration" in p:
        bits.append(p["configuration"])
    if "disk_tier" in p:
        bits.append(p["disk_tier"])
    if "lease" in p:
        bits.append("short lease" if p["lease"] == "short" else f"lease {p['lease']:g} s")
    return ", ".join(bits)


def point_matches(p: dict[str, Any], s: RunSummary) -> bool:
    """Whether run ``s`` was made at point ``p``."""
    if "width" in p and s.width != p["width"]:
        return False
    if "protocol" in p and s.protocol != p["protocol"]:
        return False
    if "pause_s" in p and (s.pause_s or 0.0) != float(p["pause_s"]):
        return False
    if "configuration" in p and s.configuration != p["configuration"]:
        return False
    if "disk_tier" in p and s.disk_tier != p["disk_tier"]:
        return False
    if "lease" in p:
        lease = s.lease_ttl_s
        if lease is None:
            return False
        if p["lease"] == "short":
            return lease < LONG_LEASE_S
        return lease == float(p["lease"])
    return True


def entries(path: Path, table: str, required: Sequence[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, entry)`` for each ``[[table]]`` entry of a TOML data file (``where``: the file
    and the entry's index, for error messages), each checked to have the ``required`` fields
    (ValueError naming the missing one otherwise)."""
    doc = tomllib.loads(path.read_text(encoding="utf-8"))
    for i, e in enumerate(doc.get(table, [])):
        where = f"{path.name}: {table}[{i}]"
        for k in required:
            if k not in e:
                raise ValueError(f"{where}: missing field {k!r}")
        yield where, e


def check_point(where: str, p: dict[str, Any], keys: Sequence[str]) -> None:
    """A point table may only use ``keys`` (ValueError naming ``where`` otherwise)."""
    bad = set(p) - set(keys)
    if bad:
        raise ValueError(f"{where}: unknown key(s) {sorted(bad)}; allowed: {tuple(keys)}")


def load(path: Path = SOURCE_FILE) -> list[SourceFigure]:
    """Read the data file; a malformed entry raises ValueError naming its index and field."""
    out = []
    for where, f in entries(path, "figure", ("figure", "point", "where")):
        check_point(f"{where}.point", f["point"], POINT_KEYS)
        if f.get("value") is None and (f.get("lo") is None or f.get("hi") is None):
            raise ValueError(f"{where}: needs 'value' or both 'lo' and 'hi'")
        out.append(SourceFigure(f["figure"], dict(f["point"]), f["where"], f.get("value"),
                                f.get("lo"), f.get("hi")))
    return out


def ours(s: RunSummary, figure: str) -> float:
    """adev's value of ``figure`` for run ``s``: the mean over valid windows, or the reuse
    ledger's share for ``reuse_*`` figures (NaN when missing)."""
    if figure.startswith("reuse_"):
        v = (s.reuse or {}).get(figure[len("reuse_"):])
        return math.nan if v is None else float(v)
    return s.mean(figure)


def mean_over(runs: Sequence[RunSummary], figure: str) -> float | None:
    """The mean of ``figure`` (:func:`ours`) over ``runs``, leaving out those that did not
    measure it; None when none did."""
    vals = [v for v in (ours(s, figure) for s in runs) if not math.isnan(v)]
    return sum(vals) / len(vals) if vals else None


@dataclass
class Beside:
    """One row of the comparison: the source's figure and ours at the same point."""

    source: SourceFigure
    ours: float | None        # mean over the matching runs; None when no run matches
    runs: int
    why_missing: str | None

    @property
    def within(self) -> bool | None:
        """Whether ours lies in the source's range, or near its value: within 1.5 points for a
        share, within 10% of it for a figure with a unit."""
        if self.ours is None:
            return None
        v = self.source.value
        if v is not None:
            return abs(self.ours - v) <= (0.015 if self.source.share else 0.10 * abs(v))
        return (self.source.lo or 0) <= self.ours <= (self.source.hi or 0)


def beside(summaries: Sequence[RunSummary],
           figures: Sequence[SourceFigure] | None = None) -> list[Beside]:
    """For each source figure, the mean of ours over the runs at its point."""
    rows = []
    for f in figures if figures is not None else load():
        runs = [s for s in summaries if f.matches(s)]
        mean = mean_over(runs, f.figure)
        why = None
        if not runs:
            why = "no run at this point"
        elif mean is None:
            why = "not measured in the runs at this point"
        rows.append(Beside(f, mean, len(runs), why))
    return rows


def beside_markdown(rows: Sequence[Beside], only_matched: bool = True) -> str:
    """A markdown table: point, figure, the source's value, ours, where in the source."""

    shown = [r for r in rows if r.runs or not only_matched]
    if not shown:
        return ("_No run of this report was made at a point the source measured (widths 1, 2, "
                "6, 12, 18; see `adev nightly`)._\n")
    lines = ["| Point | Figure | Source | adev | Where in the source |", "|---|---|---:|---:|---|"]
    for r in shown:
        o = r.why_missing if r.ours is None else fmt(r.ours, r.source.share)
        lines.append(f"| {r.source.point_text()} | {label(r.source.figure)} | {r.source.text()} "
                     f"| {o} | {r.source.where} |")
    return "\n".join(lines) + "\n"
