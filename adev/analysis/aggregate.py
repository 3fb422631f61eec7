"""Aggregates: across windows (mean, spread, CV; quiet windows), across batch runs (mean and 95%
t-interval), and the tables of width sweeps and operating points (pandas).

Input is :func:`adev.analysis.windows.window_table` (one row per window x endpoint, plus ``ALL``).
Only valid windows are aggregated; invalid ones are listed with their reason.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from .run import Run
from .windows import ALL, window_table

KEY_FIGURES = ("gross_saving", "gross_saving_disk", "net_saving", "net_saving_full",
               "gpu_hit_share", "store_hit_share", "store_hit_rate", "refused_share",
               "disk_share_of_saving", "busy_share", "store_gib_served", "preemptions",
               "ttft_send_p50", "ttft_send_p99", "dispatch_p50", "ttft_model_err_p50",
               "ttft_model_err_p99", "store_read_over_p50", "store_read_over_p99",
               "store_late_share", "read_overrun_s")

BURST_FACTOR = 3.0
BURST_MIN = 3


def burst_windows(table: pd.DataFrame, factor: float = BURST_FACTOR,
                  min_count: int = BURST_MIN) -> pd.Series:
    """Preemption-burst flag per window index (ALL rows, valid windows).

    A window has a **preemption burst** when its preemptions (vLLM ``num_preemptions`` counter
    delta; the emulator's per-request count when the counter is missing) exceed
    ``max(min_count, factor x median preemptions over the run's valid windows)``. Quiet windows
    are the others.
    """
    a = table[(table["endpoint"] == ALL) & table["valid"]]
    if not len(a):
        return pd.Series(dtype=bool)
    pre = a["preemptions"].where(a["preemptions"].notna(), a["preemptions_server"])
    med = float(np.nanmedian(pre)) if pre.notna().any() else 0.0
    thr = max(float(min_count), factor * med)
    return pd.Series((pre.fillna(0) > thr).to_numpy(), index=a["window"].to_numpy())


def _nanmean(vals: Iterable[float]) -> float:
    x = np.asarray([v for v in vals if v is not None], dtype=float)
    x = x[~np.isnan(x)]
    return float(x.mean()) if len(x) else math.nan


def t_interval(values: Sequence[float], conf: float = 0.95) -> dict[str, float]:
    """Mean and two-sided ``conf`` Student-t interval: mean ± t_{(1+conf)/2, n-1} · s / sqrt(n)
    (s = sample standard deviation). NaN bounds for fewer than 2 values."""
    x = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    n = len(x)
    if n == 0:
        return {"n": 0, "mean": math.nan, "lo": math.nan, "hi": math.nan, "sd": math.nan}
    m = float(x.mean())
    if n < 2:
        return {"n": 1, "mean": m, "lo": math.nan, "hi": math.nan, "sd": math.nan}
    from scipy import stats
    sd = float(x.std(ddof=1))
    h = float(stats.t.ppf((1 + conf) / 2, n - 1)) * sd / math.sqrt(n)
    return {"n": n, "mean": m, "lo": m - h, "hi": m + h, "sd": sd}


def spread(values: Sequence[float]) -> dict[str, float]:
    """Across windows: n, mean, sd (spread, ddof=1), min, max and CV = sd / mean."""
    x = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if not len(x):
        return {"n": 0, "mean": math.nan, "sd": math.nan, "min": math.nan, "max": math.nan,
                "cv": math.nan}
    sd = float(x.std(ddof=1)) if len(x) > 1 else math.nan
    m = float(x.mean())
    return {"n": len(x), "mean": m, "sd": sd, "min": float(x.min()), "max": float(x.max()),
            "cv": sd / m if m and not math.isnan(sd) else math.nan}


def window_stats(table: pd.DataFrame, figures: Iterable[str] = KEY_FIGURES,
                 endpoint: str = ALL, quiet_only: bool = False) -> pd.DataFrame:
    """Spread of each figure across the valid windows (optionally only quiet ones)."""
    rows = table[(table["endpoint"] == endpoint) & table["valid"]]
    if quiet_only and len(rows):
        burst = burst_windows(table)
        rows = rows[~rows["window"].map(burst).fillna(False).astype(bool)]
    out = {f: spread(rows[f].tolist()) if f in rows else spread([]) for f in figures}
    return pd.DataFrame(out).T


@dataclass
class RunSummary:
    """One run reduced to its headline figures (ALL rows over valid windows)."""

    run_id: str
    label: str
    path: str
    width: int | None
    protocol: str | None
    configuration: str | None
    lease_ttl_s: float | None
    pause_s: float | None
    windows: int
    invalid_windows: int
    burst_windows: int
    stats: dict[str, dict[str, float]]          # figure -> spread over valid windows
    quiet: dict[str, dict[str, float]]          # figure -> spread over quiet windows
    interval: dict[str, dict[str, float]]       # figure -> t-interval (batch: across runs)
    reuse: dict[str, Any] | None
    missing: dict[str, str]
    disk_tier: str | None = None
    xcheck: dict[str, float] | None = None     # measured-span counters vs emulator (ALL row)

    def mean(self, fig: str, quiet: bool = False) -> float:
        return (self.quiet if quiet else self.stats).get(fig, {}).get("mean", math.nan)

    def flat(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items()
             if k not in ("stats", "quiet", "interval", "reuse", "missing")}
        for f, s in self.stats.items():
            d[f] = s["mean"]
            d[f + "_cv"] = s["cv"]
        for f, s in self.quiet.items():
            d[f + "_quiet"] = s["mean"]
        for f, s in self.interval.items():
            d[f + "_lo"], d[f + "_hi"] = s["lo"], s["hi"]
        for k, v in (self.xcheck or {}).items():
            d["run_" + k] = v
        for k, v in (self.reuse or {}).items():
            if isinstance(v, (int, float)) or v is None:
                d["reuse_" + k] = v
        return d


REUSE_KEYS = ("owner_share_same_session", "owner_share_cross_session", "share_same_session",
              "share_cross_session", "aged_share")
"""Reuse shares carried into sweep tables and nightly figures: both views of
:func:`adev.analysis.ledger.classify` (``owner_*``: ownership; the others: last toucher)."""


def summarise(run: Run, table: pd.DataFrame | None = None, with_reuse: bool = True) -> RunSummary:
    table = window_table(run) if table is None else table
    a = table[table["endpoint"] == ALL] if len(table) else table
    valid = a[a["valid"]] if len(a) else a
    burst = burst_windows(table) if len(table) else pd.Series(dtype=bool)
    stats = {f: spread(valid[f].tolist()) if len(valid) else spread([]) for f in KEY_FIGURES}
    quiet_rows = valid[~valid["window"].map(burst).fillna(False).astype(bool)] if len(valid) else valid
    quiet = {f: spread(quiet_rows[f].tolist()) if len(quiet_rows) else spread([])
             for f in KEY_FIGURES}
    interval = {f: t_interval(valid[f].tolist()) if len(valid) else t_interval([])
                for f in KEY_FIGURES}
    missing = dict(run.missing)
    if len(valid):
        for m in valid["missing"]:
            for k, v in (m or {}).items():
                missing.setdefault(k, v)
    else:
        missing["windows"] = "no valid window in the run"
    reuse = None
    if with_reuse:
        led = run.ledger
        if led is not None:
            from .ledger import reuse_profile
            reuse = asdict(reuse_profile(led, run.lease_ttl_s))
        else:
            missing["reuse"] = run.missing.get("ledger", "no ledger")
    from .windows import cross_check
    xc = cross_check(run)
    xrow = xc[xc["endpoint"] == ALL] if len(xc) else xc
    xcheck = ({k: float(xrow[k].iloc[0]) for k in ("xcheck_gpu_rel", "xcheck_store_rel",
                                                    "xcheck_disk_rel", "store_load_failed_tokens")}
              if len(xrow) else None)
    return RunSummary(run.run_id, run.label, str(run.path), run.width, run.protocol,
                      run.configuration, run.lease_ttl_s, run.pause_s, int(len(a)),
                      int((~a["valid"]).sum()) if len(a) else 0, int(burst.sum()),
                      stats, quiet, interval, reuse, missing, run.disk_tier, xcheck)


def across_runs(summaries: Sequence[RunSummary], figures: Iterable[str] = KEY_FIGURES) -> dict:
    """Independent runs (batch protocol, or repeated steady runs): each run's mean is one sample;
    mean and 95% t-interval across them."""
    return {f: t_interval([s.mean(f) for s in summaries]) for f in figures}


def op_key(s: RunSummary) -> tuple:
    """The operating point of a run apart from its width: (configuration, disk tier (only when the
    configuration has one), lease TTL, pause)."""
    disk = s.disk_tier if s.configuration and "disk" in s.configuration else None
    return (s.configuration, disk, s.lease_ttl_s, s.pause_s)


def op_label(key: tuple) -> str:
    conf, disk, lease, pause = key
    def f(v: float | None) -> str:
        return "?" if v is None else f"{v:g}"
    return (f"{conf or '?'}" + (f" ({disk})" if disk else "")
            + f", lease {f(lease)} s, pause {f(pause)} s")


def sweep_table(summaries: Sequence[RunSummary]) -> pd.DataFrame:
    """Width sweep: one row per (operating point, width); runs at the same width and operating
    point are pooled as independent samples. Means, the 95% t-interval of gross saving (across
    runs when there are several, else across the run's windows), hit shares, refusals, reuse."""
    rows = []
    groups: dict[Any, list[RunSummary]] = {}
    for s in summaries:
        groups.setdefault((op_key(s), s.width), []).append(s)

    def order(kv):
        (op, w), _ = kv
        return (tuple("" if v is None else str(v) for v in op), w is None, w or 0)

    for (op, w), ss in sorted(groups.items(), key=order):
        if len(ss) > 1:
            iv = across_runs(ss, ("gross_saving",))["gross_saving"]
            basis = f"{len(ss)} runs"
        else:
            iv = ss[0].interval["gross_saving"]
            basis = f"{iv['n']} windows"
        row = {"operating_point": op_label(op), "width": w, "runs": len(ss),
               "interval_basis": basis,
               "gross_saving": _nanmean(s.mean("gross_saving") for s in ss),
               "gross_saving_lo": iv["lo"], "gross_saving_hi": iv["hi"],
               "gross_saving_quiet": _nanmean(s.mean("gross_saving", True) for s in ss)}
        for f in ("net_saving", "net_saving_full", "gross_saving_disk", "disk_share_of_saving",
                  "gpu_hit_share", "store_hit_share", "store_hit_rate", "refused_share",
                  "ttft_send_p50", "ttft_send_p99"):
            row[f] = _nanmean(s.mean(f) for s in ss)
        for k in REUSE_KEYS:
            got = [(s.reuse or {}).get(k) for s in ss]
            vals = [v for v in got if v is not None]
            row["reuse_" + k] = float(np.mean(vals)) if vals else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def operating_points(summaries: Sequence[RunSummary], width: int | None = 12) -> pd.DataFrame:
    """Operating points at one width (default 12 sessions): one row per (configuration, lease
    TTL, pause) with its headline figures."""
    sel = [s for s in summaries if width is None or s.width == width]
    rows = []
    for s in sel:
        rows.append({"operating_point": op_label(op_key(s)), "label": s.label, "run_id": s.run_id, "width": s.width,
                     "configuration": s.configuration, "disk_tier": s.disk_tier,
                     "lease_ttl_s": s.lease_ttl_s,
                     "pause_s": s.pause_s, "protocol": s.protocol,
                     "gross_saving": s.mean("gross_saving"),
                     "gross_saving_quiet": s.mean("gross_saving", True),
                     "net_saving": s.mean("net_saving"),
                     "gross_saving_disk": s.mean("gross_saving_disk"),
                     "disk_share_of_saving": s.mean("disk_share_of_saving"),
                     "gpu_hit_share": s.mean("gpu_hit_share"),
                     "store_hit_share": s.mean("store_hit_share"),
                     "store_hit_rate": s.mean("store_hit_rate"),
                     "refused_share": s.mean("refused_share"),
                     "burst_windows": s.burst_windows, "windows": s.windows})
    df = pd.DataFrame(rows)
    if len(df):
        df = df.sort_values(["configuration", "disk_tier", "lease_ttl_s", "pause_s"],
                            na_position="last")
    return df.reset_index(drop=True)
