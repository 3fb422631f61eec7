"""The source's replay levels beside a replay matrix's own (``source_figures.toml``).

Each source figure names a replay summary key (:mod:`adev.replay.summary`), or
``ttft_by_group_p50_s`` with a prompt-length ``group``, and the point ``{experiment,
configuration}`` it was measured at. :func:`beside` sets the source's value next to the mean of
that figure over the runs at the point (the seeds; :func:`adev.replay.shapes.mean_over`). The
source's values are only ever printed, never used in a computation, and nothing is judged: a
replay of another trace serves other prompts and sessions.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..analysis.source import check_point, entries, point_text
from .shapes import POINT_KEYS, mean_over, point_matches
from .summary import PER_CALL
from .traces import GROUPS

SOURCE_FILE = Path(__file__).with_name("source_figures.toml")
GROUPED = "ttft_by_group_p50_s"
PER_CALL_UNIT = "GB per call"
UNITS = {"throughput_rps": "requests/s", "disk_read_avg_Bps": "GiB/s",
         **{f"{k}_per_call": PER_CALL_UNIT for k in PER_CALL}}
"""Unit of a figure as printed; every other figure is in model seconds."""
NAMES = {"ttft_p50_s": "user TTFT p50", "ttft_p90_s": "user TTFT p90", "ttft_p99_s": "user TTFT p99",
         "throughput_rps": "throughput", "disk_read_avg_Bps": "disk reads per run second",
         "stored_bytes_per_call": "KV stored", "store_load_bytes_per_call": "store loads",
         "physical_read_bytes_per_call": "disk reads", "evicted_bytes_per_call": "RAM evicted",
         GROUPED: "median user TTFT"}


@dataclass(frozen=True)
class SourceLevel:
    """One level the source measured: figure, prompt-length group, point, value, where."""

    figure: str
    point: dict[str, Any]
    value: float
    where: str
    group: str | None = None

    def name(self) -> str:
        n = NAMES.get(self.figure, self.figure)
        return f"{n}, prompts {self.group}" if self.group else n


def load(path: Path = SOURCE_FILE) -> list[SourceLevel]:
    """Read the data file; a malformed entry raises ValueError naming its index and field."""
    out = []
    groups = [g for _, _, g in GROUPS]
    for where, f in entries(path, "figure", ("figure", "point", "value", "where")):
        check_point(f"{where}.point", f["point"], POINT_KEYS)
        if (f["figure"] == GROUPED) != ("group" in f) or f.get("group", groups[0]) not in groups:
            raise ValueError(f"{where}.group: {f.get('group')!r}; {GROUPED} needs one of {groups}, "
                             "and no other figure takes one")
        out.append(SourceLevel(f["figure"], dict(f["point"]), float(f["value"]), f["where"],
                               f.get("group")))
    return out


@dataclass
class Beside:
    """One row: the source's level and the mean of ours over the runs at its point."""

    source: SourceLevel
    ours: float | None
    runs: int


def beside(summaries: Sequence[dict[str, Any]],
           levels: Sequence[SourceLevel] | None = None) -> list[Beside]:
    """For each source level at an experiment these runs made, the mean of ours at its point."""
    exps = {s.get("experiment") for s in summaries} - {None}
    rows = []
    for lv in (levels if levels is not None else load()):
        if exps and lv.point.get("experiment") not in exps:
            continue
        at = [s for s in summaries if point_matches(lv.point, s)]
        ours = (mean_over([s.get(GROUPED) or {} for s in at], lv.group) if lv.group
                else mean_over(at, lv.figure))
        rows.append(Beside(lv, ours, len(at)))
    return rows


def fmt(figure: str, v: float | None) -> str:
    if v is None:
        return "not measured"
    if figure == "disk_read_avg_Bps":
        return f"{v / 2**30:.2f}"
    if UNITS.get(figure) == PER_CALL_UNIT:
        return f"{v / 1e9:.3f}"
    return f"{v:.3f}" if figure == "throughput_rps" else f"{v:.2f}"


def beside_markdown(rows: Sequence[Beside]) -> str:
    """The comparison as a markdown table, with a line on how to read it."""
    if not rows:
        return "No level of the source was measured at the experiments of these runs.\n"
    lines = ["Levels, not shapes: the source replayed 256 agent sessions (7,903 calls); a trace "
             "or slice with other prompts and sessions is expected to differ. adev's value is the "
             "mean over the runs (seeds) at the point.", "",
             "| Point | Figure | Unit | Source | adev | Runs | Where in the source |",
             "|---|---|---|---:|---:|---:|---|"]
    for r in rows:
        f = r.source.figure
        lines.append(f"| {point_text(r.source.point)} | {r.source.name()} | "
                     f"{UNITS.get(f, 'model s')} | {fmt(f, r.source.value)} | {fmt(f, r.ours)} | "
                     f"{r.runs} | {r.source.where} |")
    return "\n".join(lines) + "\n"
