"""Sweeps: every combination of the swept parameters, one simulation each, a table and a plot.

Axes (command-line spelling, unit): ``ram`` (GB of RAM tier at model scale, 0 = no store),
``lease`` (s), ``disk`` (on/off), ``gpu_pool`` (tokens per endpoint), ``disk_gb`` (GB, ``inf`` =
unbounded), ``disk_read`` (GB/s), ``lookup`` (which blocks a store lookup covers:
:data:`adev.whatif.simulator.LOOKUPS`), ``promotion`` (Mooncake's promotion on hit: ``off`` or
the reads of a disk-only key before it is copied back to RAM), ``disk_writes`` (when a block
reaches the disk tier: ``evict`` or ``put``), ``offload_heartbeat`` (s: the disk tier's offload
heartbeat, which writes the objects waiting for the disk tier; until then they stay in RAM).
The table has one row per point
and window plus a whole-run row (``window`` = -1); the plot is a heat map of one figure of the
whole run over the first two axes with several values (one panel per combination of any further
ones), or a line over the only such axis.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..analysis.figures import evicted_unread_share
from ..config import DISK_WRITES, ConfigError
from .simulator import LOOKUPS, Params, Result, figures, simulate
from .validate import with_overrides
from .workload import Workload


@dataclass(frozen=True)
class Axis:
    name: str            # command-line name
    field: str           # Params field
    unit: str
    parse: Callable[[str], Any]
    allowed: str


def _pos_float(s: str) -> float:
    v = float(s)
    if not math.isfinite(v) or v < 0:
        raise ValueError(s)
    return v


def _positive(s: str) -> float:
    v = _pos_float(s)
    if v == 0:
        raise ValueError(s)
    return v


def _gb_or_inf(s: str) -> float | None:
    return None if s.strip().lower() in ("inf", "none", "unbounded") else _pos_float(s)


def _on_off(s: str) -> bool:
    v = s.strip().lower()
    if v not in ("on", "off"):
        raise ValueError(s)
    return v == "on"


def _lookup(s: str) -> str:
    v = s.strip().lower()
    if v not in LOOKUPS:
        raise ValueError(s)
    return v


def _promotion(s: str) -> int:
    """``off`` (0) or the reads of a disk-only key before it is promoted (an integer >= 1)."""
    v = s.strip().lower()
    if v == "off":
        return 0
    n = int(v)
    if n < 1:
        raise ValueError(s)
    return n


def _disk_writes(s: str) -> str:
    v = s.strip().lower()
    if v not in DISK_WRITES:
        raise ValueError(s)
    return v


def _tokens(s: str) -> int:
    v = s.strip().lower()
    mult = 1000 if v.endswith("k") else 1
    return int(_pos_float(v[:-1] if mult > 1 else v) * mult)


AXES = {a.name: a for a in (
    Axis("ram", "ram_gb", "GB", _pos_float, "non-negative numbers (GB at model scale)"),
    Axis("lease", "lease_s", "s", _pos_float, "non-negative numbers (seconds)"),
    Axis("disk", "disk", "", _on_off, "on, off"),
    Axis("gpu_pool", "gpu_pool_tokens", "tokens", _tokens, "token counts, e.g. 166512 or 80k"),
    Axis("disk_gb", "disk_gb", "GB", _gb_or_inf, "non-negative numbers (GB) or inf"),
    Axis("disk_read", "disk_read_bytes_per_s", "GB/s", lambda s: _pos_float(s) * 1e9,
         "non-negative numbers (GB/s)"),
    Axis("lookup", "lookup", "", _lookup, ", ".join(LOOKUPS)),
    Axis("disk_writes", "disk_writes", "", _disk_writes, ", ".join(DISK_WRITES)),
    Axis("promotion", "promotion_threshold", "reads", _promotion,
         "off or an integer >= 1 (reads of a disk-only key before Mooncake promotes it to RAM)"),
    Axis("offload_heartbeat", "offload_delay_s", "s", _positive,
         "positive numbers (model seconds between offload heartbeats)"),
)}


def parse_axis(name: str, text: str) -> list[Any]:
    """``"8,16,32"`` -> values; a bad value is a ConfigError naming the option and the values
    allowed."""
    ax = AXES[name]
    out = []
    for part in text.split(","):
        try:
            out.append(ax.parse(part))
        except ValueError:
            raise ConfigError(f"--{name.replace('_', '-')}: {part.strip()!r} is not allowed; "
                              f"allowed values: {ax.allowed}, comma-separated") from None
    return out


def grid(base: Params, axes: dict[str, list[Any]]) -> list[tuple[dict[str, Any], Params]]:
    names = list(axes)
    pts = []
    for combo in itertools.product(*(axes[n] for n in names)):
        point = dict(zip(names, combo, strict=True))
        kw = {AXES[n].field: v for n, v in point.items()}
        pts.append((point, with_overrides(base, **kw)))
    return pts


def run_sweep(w: Workload, base: Params, axes: dict[str, list[Any]],
              windows: Sequence[tuple[int, float, float]] = (),
              busy: tuple[np.ndarray, np.ndarray] | None = None) -> pd.DataFrame:
    """One row per (point, window) and per point's whole run (window -1)."""
    rows = []
    for point, p in grid(base, axes):
        r: Result = figures(w, simulate(w, p), windows, busy)
        for f in [*r.windows, r.total]:
            d = {f"{k}": _show(k, v) for k, v in point.items()}
            d.update({k: v for k, v in vars(f).items() if k != "missing"})
            d.update({k: v for k, v in r.counters.items()})
            if r.counters.get("store_evicted_blocks"):   # a run-level figure, as the counters
                d["evicted_unread_share"] = evicted_unread_share(
                    r.counters["store_evicted_unread_blocks"], r.counters["store_evicted_blocks"])
            rows.append(d)
    return pd.DataFrame(rows)


def _show(name: str, v: Any) -> Any:
    if name == "disk":
        return "on" if v else "off"
    if name == "disk_read":
        return v / 1e9
    if name == "disk_gb" and v is None:
        return math.inf
    if name == "promotion":
        return "off" if v == 0 else str(v)
    return v


def summary(df: pd.DataFrame, axes: Sequence[str]) -> pd.DataFrame:
    cols = [*axes, "calls", "gpu_hit_share", "store_hit_share", "refused_share", "gross_saving",
            "gross_saving_disk", "evicted_unread_share"]
    return df[df["window"] == -1][[c for c in cols if c in df.columns]].reset_index(drop=True)


def plot(df: pd.DataFrame, axes: Sequence[str], path: Path, metric: str = "store_hit_share",
         title: str = "") -> Path:
    """Heat map (or line) of ``metric`` of the whole run over the swept axes."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    tot = df[df["window"] == -1]
    multi = [a for a in axes if tot[a].nunique() > 1]
    label = metric.replace("_", " ")
    if len(multi) <= 1:
        x = multi[0] if multi else axes[0]
        rest = [a for a in axes if a != x]
        fig, ax = plt.subplots(figsize=(6, 4))
        for key, g in (tot.groupby(rest) if rest else [((), tot)]):
            g = g.sort_values(x)
            ax.plot(g[x], g[metric], marker="o",
                    label=", ".join(f"{a}={v}" for a, v in zip(rest, np.atleast_1d(key), strict=True)) or None)
        ax.set_xlabel(f"{x} ({AXES[x].unit})" if AXES[x].unit else x)
        ax.set_ylabel(label)
        xs = pd.to_numeric(tot[x], errors="coerce")
        pos = xs[(xs > 0) & np.isfinite(xs)]
        if len(pos) and pos.max() / pos.min() >= 16:   # sizes over decades: a log axis
            ax.set_xscale("symlog", base=2, linthresh=float(pos.min()))
            ax.set_xticks(sorted(set(xs[np.isfinite(xs)])))
            ax.set_xticklabels([f"{v:g}" for v in sorted(set(xs[np.isfinite(xs)]))],
                               rotation=45, fontsize=7)
        if rest:
            ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    else:
        xa, ya = multi[0], multi[1]
        rest = [a for a in axes if a not in (xa, ya)]
        groups = list(tot.groupby(rest)) if rest else [((), tot)]
        fig, axs = plt.subplots(1, len(groups), figsize=(max(6.5, 5 * len(groups)), 4.4),
                                squeeze=False)
        for ax, (key, g) in zip(axs[0], groups, strict=True):
            pv = g.pivot_table(index=ya, columns=xa, values=metric, aggfunc="mean")
            im = ax.imshow(pv.to_numpy(dtype=float), origin="lower", aspect="auto",
                           cmap="viridis")
            ax.set_xticks(range(len(pv.columns)), [f"{v:g}" if isinstance(v, float) else v
                                                   for v in pv.columns])
            ax.set_yticks(range(len(pv.index)), [f"{v:g}" if isinstance(v, float) else v
                                                 for v in pv.index])
            ax.set_xlabel(f"{xa} ({AXES[xa].unit})" if AXES[xa].unit else xa)
            ax.set_ylabel(f"{ya} ({AXES[ya].unit})" if AXES[ya].unit else ya)
            vals = pv.to_numpy(dtype=float)
            mid = np.nanmin(vals) + 0.5 * (np.nanmax(vals) - np.nanmin(vals)) if vals.size else 0
            for (i, j), v in np.ndenumerate(vals):
                ax.text(j, i, f"{v:.3f}", ha="center", va="center", fontsize=7,
                        color="k" if v > mid else "w")
            if rest:
                ax.set_title(", ".join(f"{a}={v}" for a, v in zip(rest, np.atleast_1d(key), strict=True)),
                             fontsize=8)
            fig.colorbar(im, ax=ax, label=label)
    if title:
        fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp" + path.suffix)
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)
    return path
