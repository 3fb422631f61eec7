"""The replay report: the source's shapes judged against these runs
(:mod:`adev.replay.shapes`) and its levels beside theirs (:mod:`adev.replay.source`), then one
row per configuration and seed, markdown + HTML through
:mod:`adev.analysis.report` (``Doc``, ``Figure``, ``md_table``), with the TTFT distribution per
configuration and throughput relative to recompute.

``throughput_vs_recompute`` = throughput_rps / throughput_rps of the ``recompute`` run of the
same experiment and seed (None when that run is not in the set);
``throughput_full_vs_recompute`` the same of ``throughput_full_rps`` (the throughput before the
drain, :func:`adev.replay.summary.drain_start`).

``crossover_tokens`` (:func:`crossover`): the shortest prompt length from which a configuration's
median user TTFT is below recompute's (same experiment and seed) in every ``BIN_TOKENS``-token
bin with calls in both runs; None when it never is, or without a recompute run.

A set of runs of more than one experiment (``adev replay --experiment short,long``, or folders
of each given to ``adev report``) is labelled ``<experiment>-<label>`` throughout, and its TTFT
distribution is drawn per experiment.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..analysis.plots import Figure, _cdf, _plt, _png
from ..analysis.render import Doc, md_table
from ..analysis.render import write as _write
from ..analysis.shapes import shapes_markdown
from ..records import RunDir
from .shapes import judge_replay
from .source import beside, beside_markdown
from .summary import PER_CALL, READS_AT_PACE, TTFT_PARTS, split_label
from .traces import GROUPS

HEADLINE = ["label", "throughput_rps", "throughput_vs_recompute", "ttft_p50_s", "ttft_p90_s",
            "ttft_p99_s", "ttft_later_p99_s", "crossover_tokens", "stickiness", "prompt_load",
            "calls_in_flight_mean", "drain_share", "throughput_full_rps",
            "throughput_full_vs_recompute"]
"""The configurations table: throughput, user TTFT, routing, load, the drain."""
STORE = ["label", "stored_bytes", "store_load_bytes", "physical_read_bytes",
         "physical_read_share", "promoted_bytes", "evictions",
         "evicted_bytes", "disk_read_rate_Bps", "disk_read_avg_Bps", "disk_wait_mean_s",
         "load_wait_mean_s", "refused_share", "unsaved_bytes"]
"""What the store took in, store loads against disk reads (promotions to RAM included), RAM
eviction, the disk tier's read rate (while loading and averaged over the run), the loads' wait
for the shared disk device and for a load thread, refused writes."""
TTFT_PART_COLS = ["label", "ttft_mean_s"] + [f"ttft_{k}_mean_s" for k in TTFT_PARTS]
"""Where the user TTFT goes (:func:`adev.replay.summary.ttft_parts`)."""
PER_CALL_COLS = ["label"] + [f"{k}_per_call" for k in PER_CALL]
"""The same volumes per OK call, which runs of different lengths (a slice and the whole trace)
can be read beside."""
FIDELITY = ["label", "ok_calls", "errors", "exact_output_share", "itl_p50_s",
            "dispatch_delay_p99_s", "time_scale", "store_read_over_profile_p50", "read_overrun_s",
            "ttft_over_model_p50", "ttft_over_model_p99", "user_ttft_over_model_p50",
            "user_ttft_over_model_p99"]
"""The run's own checks: calls, output lengths, dispatch and the host's time against the model."""


def _point(s: dict[str, Any]) -> tuple[Any, str]:
    """(experiment, seed) of a run's summary: the runs a recompute run is the baseline of."""
    seed = s.get("seed")
    if seed is None:
        seed = split_label(str(s.get("label") or s.get("run")))[1]
    return s.get("experiment"), str(seed)


def labelled(summaries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The summaries, each ``label`` led by its experiment where they are of more than one
    (unless it already is: ``adev replay --experiment short,long`` labels its runs so)."""
    exps = {s.get("experiment") for s in summaries}
    out = []
    for s in summaries:
        lab, exp = str(s.get("label") or s.get("run")), s.get("experiment")
        if len(exps) > 1 and exp and not lab.startswith(f"{exp}-"):
            lab = f"{exp}-{lab}"
        out.append({**s, "label": lab})
    return out


def table(summaries: Sequence[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(summaries)
    if not len(df):
        return df
    for key, ratio in (("throughput_rps", "throughput_vs_recompute"),
                       ("throughput_full_rps", "throughput_full_vs_recompute")):
        base = {_point(s): s.get(key) for s in summaries
                if s.get("configuration") == "recompute"}
        df[ratio] = [(s[key] / base[_point(s)])
                     if base.get(_point(s)) and s.get(key) is not None else None
                     for s in summaries]
    return df


BIN_TOKENS = 8192


def _ttft_by_bin(path: Path) -> dict[int, float]:
    rows = [r for r in RunDir(path).read("replay") if r.get("ttft_s") is not None]
    bins: dict[int, list[float]] = {}
    for r in rows:
        bins.setdefault((r["prompt_tokens"] - 1) // BIN_TOKENS, []).append(r["ttft_s"])
    return {b: float(np.median(v)) for b, v in bins.items()}


def crossover(run: Path, recompute: Path) -> int | None:
    """Lower edge (tokens) of the first bin from which ``run`` beats ``recompute`` in every bin
    both have (median user TTFT per :data:`BIN_TOKENS` bin of prompt length)."""
    a, b = _ttft_by_bin(run), _ttft_by_bin(recompute)
    common = sorted(set(a) & set(b))
    start = None
    for k in reversed(common):
        if a[k] < b[k]:
            start = k
        else:
            break
    return None if start is None else start * BIN_TOKENS


def _ttft_fig(runs: Sequence[Path], sums: Sequence[dict[str, Any]], key: str = "ttft",
              title: str = "User TTFT distribution") -> Figure:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    drawn = 0
    configs = list(dict.fromkeys(s.get("configuration") for s in sums))
    seeds = list(dict.fromkeys(_point(s)[1] for s in sums))
    for p, s in zip(runs, sums, strict=True):
        tt = [r["ttft_s"] for r in RunDir(p).read("replay") if r.get("ttft_s") is not None]
        if not tt:
            continue
        x, y = _cdf(np.array(tt))
        # one colour per configuration, one line style per seed
        color = f"C{configs.index(s.get('configuration')) % 10}"
        ax.plot(x, y, label=s["label"], color=color,
                linestyle=("-", "--", ":", "-.")[seeds.index(_point(s)[1]) % 4])
        for q in (50, 90, 99):
            ax.plot([np.percentile(tt, q)], [q / 100], "o", color=color, ms=4)
        drawn += 1
    if not drawn:
        plt.close(fig)
        return Figure(key, title, reason="no call completed")
    ax.set_xscale("log")
    ax.set_xlabel("user TTFT from dispatch (model s)")
    ax.set_ylabel("share of calls")
    ax.legend(fontsize=7)
    return Figure(key, title, png=_png(fig), caption="Markers: p50, p90, p99.")


def _ttft_figs(runs: Sequence[Path], sums: Sequence[dict[str, Any]]) -> list[Figure]:
    """One TTFT distribution, or one per experiment where the runs are of several."""
    exps = list(dict.fromkeys(s.get("experiment") for s in sums))
    if len(exps) < 2:
        return [_ttft_fig(runs, sums)]
    return [_ttft_fig([p for p, s in zip(runs, sums, strict=True) if s.get("experiment") == e],
                      [s for s in sums if s.get("experiment") == e], key=f"ttft-{e}",
                      title=f"User TTFT distribution, {e} reuse gap") for e in exps]


def _throughput_fig(df: pd.DataFrame) -> Figure:
    v = df.dropna(subset=["throughput_vs_recompute"]) if "throughput_vs_recompute" in df else df
    if not len(v):
        return Figure("throughput", "Throughput relative to recompute",
                      reason="no recompute run of the same seed in this set")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.bar(v["label"], v["throughput_vs_recompute"])
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_ylabel("throughput / recompute")
    ax.tick_params(axis="x", rotation=45, labelsize=7)
    return Figure("throughput", "Throughput relative to recompute", png=_png(fig))


def _bars_fig(key: str, title: str, labels: list[str], series: dict[str, list[float | None]],
              ylabel: str, reason: str) -> Figure:
    if not labels or not any(v is not None for vals in series.values() for v in vals):
        return Figure(key, title, reason=reason)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 3.5))
    w = 0.8 / max(1, len(series))
    x = np.arange(len(labels))
    for i, (name, vals) in enumerate(series.items()):
        ax.bar(x + i * w, [np.nan if v is None else v for v in vals], w, label=name)
    ax.set_xticks(x + w * (len(series) - 1) / 2, labels, rotation=45, fontsize=7)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7)
    return Figure(key, title, png=_png(fig))


def _pace_note(sums: Sequence[dict[str, Any]]) -> str:
    """The runs whose real store reads did not keep pace with the tier profile (median above
    :data:`adev.replay.summary.READS_AT_PACE`), or that every run's did."""
    judged = [s for s in sums if s.get("reads_at_pace") is not None]
    if not judged:
        return ""
    late = [s for s in judged if not s["reads_at_pace"]]
    if not late:
        return (f"\nThe real store reads kept pace with the tier profile in every run with store "
                f"reads (median at most {READS_AT_PACE:g} x the profile).\n")
    lines = [f"- {s.get('label')}: {s['store_read_over_profile_p50']:.2f} x at time scale "
             f"{s.get('time_scale')}" for s in late]
    return (f"\n**Reads behind the profile** (median above {READS_AT_PACE:g} x): the held clock "
            "kept that time out of the figures, but these runs' reads were slower than the "
            "profile (a lower `--time-scale` brings them nearer it, at more wall time; "
            "`pace.json` holds the pilots that chose the scale):\n\n" + "\n".join(lines) + "\n")


def build(runs: Sequence[Path], title: str) -> tuple[Doc, pd.DataFrame]:
    sums = labelled([json.loads((Path(p) / "summary.json").read_text()) for p in runs])
    df = table(sums)
    if len(df):
        rec = {_point(s): Path(p) for p, s in zip(runs, sums, strict=True)
               if s.get("configuration") == "recompute"}
        df["crossover_tokens"] = [
            crossover(Path(p), rec[_point(s)]) if _point(s) in rec
            and s.get("configuration") != "recompute" else None
            for p, s in zip(runs, sums, strict=True)]
    doc = Doc(title)
    doc.blocks.append("## Shapes of the source\n\n" + shapes_markdown(judge_replay(sums)))
    doc.blocks.append("## The source's levels beside these runs\n\n" + beside_markdown(beside(sums)))
    doc.blocks.append("## Configurations\n\n" + md_table(df, HEADLINE))
    doc.blocks.append("## Where the user TTFT goes (mean model s per call)\n\n"
                      + md_table(df, TTFT_PART_COLS))
    doc.blocks.append("## Store loads, disk reads and RAM eviction\n\n" + md_table(df, STORE))
    doc.blocks.append("## The same volumes per call\n\n" + md_table(df, PER_CALL_COLS))
    doc.blocks.append("## Checks of the run: calls, output lengths, host time against the model"
                      "\n\n" + md_table(df, FIDELITY) + _pace_note(sums))
    groups = pd.DataFrame([{"label": s.get("label"), **(s.get("ttft_by_group_p50_s") or {})}
                           for s in sums])
    doc.blocks.append("## Median user TTFT by prompt length (model s)\n\n"
                      + md_table(groups, ["label"] + [g for _, _, g in GROUPS]))
    traffic = pd.DataFrame([{"label": s.get("label"), **(s.get("traffic_shares") or {})}
                            for s in sums])
    doc.blocks.append("## Prefill x decode traffic (share of calls)\n\n" + md_table(traffic))
    doc.blocks.append(_throughput_fig(df))
    doc.blocks.extend(_ttft_figs([Path(p) for p in runs], sums))
    labels = [str(s.get("label")) for s in sums]
    doc.blocks.append(_bars_fig(
        "ttft_groups", "Median user TTFT by prompt length", labels,
        {g: [(s.get("ttft_by_group_p50_s") or {}).get(g) for s in sums] for _, _, g in GROUPS},
        "model s", "no call completed"))
    doc.blocks.append(_bars_fig(
        "store_io", "Store loads against physical (disk-tier) reads", labels,
        {k: [(s.get(k) or 0) / 2**40 if s.get(k) is not None else None for s in sums]
         for k in ("store_load_bytes", "physical_read_bytes", "evicted_bytes")},
        "TiB (model scale)", "no store counters in these runs"))
    miss = [f"- {s.get('label')}: {k}: {v}" for s in sums
            for k, v in (s.get("missing") or {}).items()]
    if miss:
        doc.blocks.append("## Not measured\n\n" + "\n".join(miss) + "\n")
    return doc, df


def write(runs: Sequence[Path], out: Path, title: str) -> Path:
    doc, _ = build(runs, title)
    return _write(doc, out)
