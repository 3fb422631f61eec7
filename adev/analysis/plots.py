"""The report's plots (matplotlib, Agg): saving and hit shares against width, the operating
points, TTFT CDFs and the reuse-distance profile. Each returns a :class:`Figure` whose ``png`` is
None and ``reason`` says why when its inputs are missing.
"""
from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .aggregate import RunSummary, operating_points, sweep_table
from .figures import ttft_from_schedule, ttft_from_send
from .loaded import Loaded

OP_WIDTH = 12
"""The width of the operating-point comparison (the source's 12-session points)."""


@dataclass
class Figure:
    """A rendered figure (``png``) or the reason it is missing. ``series`` holds exactly what was
    drawn: line or bar label -> (x, y) arrays, in the plot's units (percent where the axis is)."""

    key: str
    title: str
    png: bytes | None = None
    reason: str | None = None
    caption: str = ""
    series: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    def draw(self, plot, name: str, x: Any, y: Any, **kw: Any) -> None:
        """``plot(x, y, **kw)`` (an Axes method), recording the data under ``name``."""
        self.series[name] = (np.asarray(x, dtype=float), np.asarray(y, dtype=float))
        plot(x, y, **kw)


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    _plt().close(fig)
    return buf.getvalue()


def _cdf(v: np.ndarray, points: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """Empirical CDF of ``v`` at <= ``points`` quantiles (exact for small samples)."""
    v = np.sort(np.asarray(v, dtype=float))
    n = len(v)
    if n <= points:
        return v, np.arange(1, n + 1) / n
    idx = np.unique(np.linspace(0, n - 1, points).astype(int))
    return v[idx], (idx + 1) / n


def _widths(summ: Sequence[RunSummary], fig: str) -> list[int]:
    return sorted({s.width for s in summ if s.width is not None and not math.isnan(s.mean(fig))})


def fig_saving_vs_width(summ: Sequence[RunSummary], labels: Sequence[str] | None = None,
                        groups: Sequence[Sequence[RunSummary]] | None = None) -> Figure:
    f = Figure("saving_vs_width", "Busy time saved vs width")
    groups = groups or [summ]
    labels = labels or [""]
    ws = sorted({w for g in groups for w in _widths(g, "gross_saving")})
    if len(ws) < 2 and len(groups) == 1:
        no_w = [s.label for s in summ if s.width is None]
        f.reason = (f"needs runs at >= 2 widths with a gross saving (have widths {ws or 'none'}"
                    + (f"; runs without a width: {', '.join(no_w)}" if no_w else "") + ")")
        return f
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    series = []
    for g, lab in zip(groups, labels, strict=True):
        t = sweep_table(g)
        t = t[t["width"].notna() & t["gross_saving"].notna()]
        ops = list(dict.fromkeys(t["operating_point"])) if len(t) else []
        for op in ops:
            name = ", ".join(x for x in (lab, op if len(ops) > 1 or len(groups) == 1 else "") if x)
            series.append((t[t["operating_point"] == op], name))
    ymax = 0.0
    for i, (t, lab) in enumerate(series):
        col = f"C{i % 10}"
        yerr = np.vstack([t["gross_saving"] - t["gross_saving_lo"],
                          t["gross_saving_hi"] - t["gross_saving"]]) * 100
        f.draw(ax.errorbar, f"{lab or 'gross'}: gross", t["width"], t["gross_saving"] * 100,
               yerr=np.nan_to_num(yerr), marker="o", capsize=3, color=col, label=lab or "gross")
        f.draw(ax.plot, f"{lab or 'gross'}: net", t["width"], t["net_saving"] * 100, marker="s",
               ls="--", color=col)
        f.draw(ax.plot, f"{lab or 'gross'}: disk", t["width"], t["gross_saving_disk"] * 100,
               marker="^", ls=":", color=col)
        f.draw(ax.plot, f"{lab or 'gross'}: quiet", t["width"], t["gross_saving_quiet"] * 100,
               marker="x", ls="none", color=col)
        ymax = max(ymax, float(np.nanmax(t[["gross_saving", "gross_saving_quiet"]].to_numpy())) * 100)
    ax.set_ylim(min(0.0, ax.get_ylim()[0]) if ymax <= 0 else -0.05 * ymax * 1.6, ymax * 1.6 or 1)
    ax.set_xlabel("width (sessions)")
    ax.set_ylabel("% of endpoint busy time")
    ax.grid(alpha=.3)
    ax.legend(fontsize=7, loc="upper left")
    f.png = _png(fig)
    f.caption = ("solid with bars: gross saving = (store-served tokens / prefill rate) / busy time, "
                 "95% t-interval (bars may run off the axis when few windows/runs); dashed: net "
                 "(read paths charged pro rata); dotted: the disk tier's part; x: gross over "
                 "quiet windows (no preemption burst).")
    return f


def fig_hit_shares(summ: Sequence[RunSummary]) -> Figure:
    f = Figure("hit_shares_vs_width", "GPU vs store hit share vs width")
    ws = _widths(summ, "store_hit_share")
    if len(ws) < 2:
        f.reason = f"needs runs at >= 2 widths with hit shares (have widths {ws or 'none'})"
        return f
    t = sweep_table(summ)
    t = t[t["width"].notna()]
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    ops = list(dict.fromkeys(t["operating_point"]))
    for op in ops:
        u = t[t["operating_point"] == op]
        sfx = f" ({op})" if len(ops) > 1 else ""
        for col, name, kw in (("gpu_hit_share", "GPU prefix cache" + sfx, {"marker": "o"}),
                              ("store_hit_share", "store (RAM + disk)" + sfx,
                               {"marker": "s", "ls": "--"})):
            f.draw(ax.plot, name, u["width"], u[col] * 100, label=name, **kw)
    ax.set_xlabel("width (sessions)")
    ax.set_ylabel("% of prompt tokens")
    ax.grid(alpha=.3)
    ax.legend(fontsize=7, loc="best")
    f.png = _png(fig)
    return f


def fig_operating_points(summ: Sequence[RunSummary], width: int = OP_WIDTH) -> Figure:
    f = Figure("operating_points", f"{width}-session operating points")
    op = operating_points(summ, width)
    if not len(op) or op["gross_saving"].isna().all():
        have = sorted({s.width for s in summ if s.width is not None})
        f.reason = f"no run at width {width} with a gross saving (widths present: {have or 'none'})"
        return f
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(op)), 4))
    x = np.arange(len(op))
    lab = [r.operating_point.replace(", ", "\n") for r in op.itertuples()]
    for i, (col, name) in enumerate((("gross_saving", "gross"), ("net_saving", "net"),
                                     ("gross_saving_disk", "disk part"),
                                     ("refused_share", "refused share of writes"))):
        f.draw(ax.bar, name, x + (i - 1.5) * 0.2, op[col].fillna(0) * 100, width=0.2, label=name)
    ax.set_xticks(x, lab, fontsize=7)
    ax.set_ylabel("%")
    ax.legend(fontsize=7)
    ax.grid(alpha=.3, axis="y")
    f.png = _png(fig)
    return f


def fig_ttft_cdfs(loaded: Sequence[Loaded], labels: Sequence[str] | None = None) -> Figure:
    f = Figure("ttft_cdfs", "TTFT CDFs (first content)")
    series = []
    for i, ld in enumerate(loaded):
        c = ld.run.calls
        c = c[c["status"] == "ok"] if len(c) else c
        if not len(c):
            continue
        a, b = ttft_from_send(c), ttft_from_schedule(c)
        a, b = a[~np.isnan(a)], b[~np.isnan(b)]
        if len(a):
            series.append(((labels[i] if labels else ld.summary.label), a, b))
    if not series:
        f.reason = "no OK call with a first-content stamp in any run"
        return f
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for lab, a, b in series[:12]:
        for ax, v, t in zip(axes, (a, b), ("from send", "from schedule"), strict=True):
            x, y = _cdf(v)
            f.draw(ax.step, f"{lab}: {t}", x, y, where="post", label=lab)
    from matplotlib.ticker import NullFormatter
    for ax, t in zip(axes, ("from send", "from schedule"), strict=True):
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(f"TTFT {t} (model s)")
        ax.grid(alpha=.3)
    axes[0].set_ylabel("fraction of calls")
    axes[1].legend(fontsize=7, loc="lower right")
    f.png = _png(fig)
    return f


def fig_reuse(loaded: Sequence[Loaded]) -> Figure:
    f = Figure("reuse_distance", "Reuse-distance profile (reuse ledger)")
    from .ledger import CROSS_SESSION, SAME_SESSION
    have = [(ld, ld.run.ledger) for ld in loaded]
    have = [(ld, led) for ld, led in have if led is not None and len(led.touches)]
    if not have:
        f.reason = "; ".join(f"{ld.summary.label}: {ld.run.missing.get('ledger', 'empty ledger')}"
                             for ld in loaded)[:500] or "no runs"
        return f
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    for ld, led in have[:6]:
        c = led.classified(ld.run.lease_ttl_s)
        for code, ls, nm in ((SAME_SESSION, "-", "same session"), (CROSS_SESSION, "--", "cross")):
            d = c.distance[c.cls == code]
            d = d[d > 0] if len(d) else d
            if len(d):
                x, y = _cdf(d)
                lab = f"{ld.summary.label}: {nm} ({(c.cls == code).mean():.0%} of touches)"
                f.draw(ax.step, lab, x, y, where="post", ls=ls, label=lab)
        if ld.run.lease_ttl_s:
            ax.axvline(ld.run.lease_ttl_s, color="grey", lw=.8)
    ax.set_xscale("log")
    ax.set_xlabel("reuse distance (model s); grey line: lease TTL")
    ax.set_ylabel("fraction of reuse touches")
    ax.grid(alpha=.3)
    ax.legend(fontsize=7, loc="lower right")
    f.png = _png(fig)
    return f
