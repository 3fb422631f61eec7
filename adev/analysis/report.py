"""``adev report RUN [RUN ...]`` and ``adev report --compare A B``: markdown + one self-contained
HTML page (plots as base64 PNG, matplotlib Agg).

A RUN is a run directory (``manifest.json`` / ``calls.jsonl``) or a folder of run directories (a
night of a campaign). Figures: saving vs width, GPU vs store hit share vs width, the 12-session
operating points, TTFT CDFs, the reuse-distance profile, and a per-window table. A figure whose
inputs are missing is printed as missing with the reason, never filled in.

Also :func:`summarise_run` (a short text for the end of a fleet run) and :func:`write_report`
(what the fleet calls to write the full report of one run).
"""
from __future__ import annotations

import argparse
import base64
import datetime
import html
import io
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from .aggregate import RunSummary, operating_points, summarise, sweep_table
from .run import Run, load_run
from .windows import ttft_from_schedule, ttft_from_send, window_table

OP_WIDTH = 12


# -----------------------------------------------------------------------------------------------
# Loading


def is_run_dir(p: Path) -> bool:
    return p.is_dir() and ((p / "manifest.json").exists() or (p / "calls.jsonl").exists())


def expand(paths: Sequence[str | Path]) -> list[Path]:
    """Run directories named by ``paths`` (a folder of runs expands to its run directories)."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if is_run_dir(p):
            out.append(p)
        elif p.is_dir():
            subs = sorted(q for q in p.iterdir() if is_run_dir(q))
            if not subs:
                raise FileNotFoundError(f"{p}: neither a run directory nor a folder of runs")
            out.extend(subs)
        else:
            raise FileNotFoundError(f"run directory not found: {p}")
    seen, uniq = set(), []
    for p in out:
        if p.resolve() not in seen:
            seen.add(p.resolve())
            uniq.append(p)
    return uniq


@dataclass
class Loaded:
    run: Run
    table: pd.DataFrame
    summary: RunSummary


def load_all(paths: Sequence[str | Path], with_reuse: bool = True) -> list[Loaded]:
    out = []
    for p in expand(paths):
        run = load_run(p)
        t = window_table(run)
        out.append(Loaded(run, t, summarise(run, t, with_reuse=with_reuse)))
    return out


# -----------------------------------------------------------------------------------------------
# Figures


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
    for g, lab in zip(groups, labels):
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
    for i, l in enumerate(loaded):
        c = l.run.calls
        c = c[c["status"] == "ok"] if len(c) else c
        if not len(c):
            continue
        a, b = ttft_from_send(c), ttft_from_schedule(c)
        a, b = a[~np.isnan(a)], b[~np.isnan(b)]
        if len(a):
            series.append(((labels[i] if labels else l.summary.label), a, b))
    if not series:
        f.reason = "no OK call with a first-content stamp in any run"
        return f
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for lab, a, b in series[:12]:
        for ax, v, t in zip(axes, (a, b), ("from send", "from schedule")):
            x, y = _cdf(v)
            f.draw(ax.step, f"{lab}: {t}", x, y, where="post", label=lab)
    from matplotlib.ticker import NullFormatter
    for ax, t in zip(axes, ("from send", "from schedule")):
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
    have = [(l, l.run.ledger) for l in loaded]
    have = [(l, led) for l, led in have if led is not None and len(led.touches)]
    if not have:
        f.reason = "; ".join(f"{l.summary.label}: {l.run.missing.get('ledger', 'empty ledger')}"
                             for l in loaded)[:500] or "no runs"
        return f
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    for l, led in have[:6]:
        c = led.classified(l.run.lease_ttl_s)
        for code, ls, nm in ((SAME_SESSION, "-", "same session"), (CROSS_SESSION, "--", "cross")):
            d = c.distance[c.cls == code]
            d = d[d > 0] if len(d) else d
            if len(d):
                x, y = _cdf(d)
                lab = f"{l.summary.label}: {nm} ({(c.cls == code).mean():.0%} of touches)"
                f.draw(ax.step, lab, x, y, where="post", ls=ls, label=lab)
        if l.run.lease_ttl_s:
            ax.axvline(l.run.lease_ttl_s, color="grey", lw=.8)
    ax.set_xscale("log")
    ax.set_xlabel("reuse distance (model s); grey line: lease TTL")
    ax.set_ylabel("fraction of reuse touches")
    ax.grid(alpha=.3)
    ax.legend(fontsize=7, loc="lower right")
    f.png = _png(fig)
    return f


# -----------------------------------------------------------------------------------------------
# Tables and text


def _fmt(v: Any, pctg: bool = False) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if isinstance(v, float):
        if pctg:
            return f"{v * 100:.2f}%"
        return f"{v:.4g}"
    return str(v)


PCT_COLS = {"gross_saving", "gross_saving_disk", "net_saving", "net_saving_full", "gpu_hit_share",
            "store_hit_share", "store_hit_rate", "refused_share", "disk_share_of_saving",
            "busy_share", "gross_saving_quiet", "gross_saving_lo", "gross_saving_hi",
            "reuse_share_same_session", "reuse_share_cross_session", "reuse_aged_share",
            "ttft_model_err_p50", "ttft_model_err_p99"}


def md_table(df: pd.DataFrame, cols: Sequence[str] | None = None) -> str:
    if df is None or not len(df):
        return "_(no rows)_\n"
    cols = [c for c in (cols or list(df.columns)) if c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df[cols].iterrows():
        lines.append("| " + " | ".join(_fmt(r[c], c in PCT_COLS) for c in cols) + " |")
    return "\n".join(lines) + "\n"


WINDOW_COLS = ["window", "endpoint", "valid", "calls", "busy_s", "busy_share", "gpu_hit_share",
               "store_hit_share", "gross_saving", "gross_saving_disk", "net_saving",
               "net_saving_full", "store_hit_rate", "refused_share", "preemptions",
               "ttft_send_p50", "ttft_send_p99", "ttft_model_err_p50", "ttft_model_err_p99",
               "store_read_over_p50", "store_read_over_p99", "counter_resets", "scrape_gaps",
               "xcheck_gpu_rel", "xcheck_store_rel", "xcheck_disk_rel", "store_load_failed_tokens"]
SWEEP_COLS = ["operating_point", "width", "runs", "interval_basis", "gross_saving", "gross_saving_lo",
              "gross_saving_hi", "gross_saving_quiet", "net_saving", "gross_saving_disk",
              "disk_share_of_saving", "gpu_hit_share", "store_hit_share", "store_hit_rate",
              "refused_share", "reuse_share_same_session", "reuse_share_cross_session"]
OP_COLS = ["operating_point", "label", "gross_saving",
           "gross_saving_quiet", "net_saving", "gross_saving_disk", "disk_share_of_saving",
           "gpu_hit_share", "store_hit_share", "store_hit_rate", "refused_share",
           "burst_windows", "windows"]


def _run_header(l: Loaded) -> str:
    r, s = l.run, l.summary
    bits = [f"**{s.label}** (`{r.run_id}`)", f"width {_fmt(r.width)}", f"protocol {_fmt(r.protocol)}",
            f"configuration {_fmt(r.configuration)}", f"lease {_fmt(r.lease_ttl_s)} s",
            f"pause {_fmt(r.pause_s)} s", f"windows {s.windows} ({s.invalid_windows} invalid, "
            f"{s.burst_windows} with preemption bursts)"]
    txt = " · ".join(bits) + "\n"
    if r.torn:
        txt += f"\nTorn record lines (crash mid-write, skipped): {r.torn}\n"
    return txt


def _reuse_md(l: Loaded) -> str:
    ru = l.summary.reuse
    if not ru:
        return f"- {l.summary.label}: reuse ledger missing — {l.summary.missing.get('reuse', 'no ledger')}"
    return (f"- {l.summary.label} (`{l.summary.run_id}`): {ru['touches']} touches, {ru['unique_blocks']} blocks; new "
            f"{_fmt(ru['share_new'], True)}, same-session {_fmt(ru['share_same_session'], True)}, "
            f"cross-session {_fmt(ru['share_cross_session'], True)}, aged (> lease "
            f"{_fmt(ru['lease_ttl_s'])} s) {_fmt(ru['aged_share'], True)}; reuse distance p50 "
            f"{_fmt(ru['distance_p50_s'])} s, p99 {_fmt(ru['distance_p99_s'])} s, max "
            f"{_fmt(ru['distance_max_s'])} s")


def _missing_md(l: Loaded) -> str:
    m = l.summary.missing
    if not m:
        return ""
    return "Missing figures (reason):\n\n" + "\n".join(
        f"- `{k}`: {v}" for k, v in sorted(m.items())) + "\n"


@dataclass
class Doc:
    title: str
    blocks: list[Any] = field(default_factory=list)  # str (markdown) or Figure

    def md(self, fig_dir: Path | None = None, rel: str = "") -> str:
        out = [f"# {self.title}\n"]
        for b in self.blocks:
            if isinstance(b, Figure):
                out.append(f"### {b.title}\n")
                if b.png is None:
                    out.append(f"**Missing:** {b.reason}\n")
                elif fig_dir is not None:
                    fig_dir.mkdir(parents=True, exist_ok=True)
                    (fig_dir / f"{b.key}.png").write_bytes(b.png)
                    out.append(f"![{b.title}]({rel}{b.key}.png)\n")
                if b.caption:
                    out.append(f"_{b.caption}_\n")
            else:
                out.append(b)
        return "\n".join(out)

    def html(self) -> str:
        parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(self.title)}"
                 "</title><style>body{font-family:sans-serif;max-width:1200px;margin:auto;"
                 "padding:1em}table{border-collapse:collapse;font-size:12px}td,th{border:1px solid"
                 " #ccc;padding:2px 6px;text-align:right}.missing{color:#a00}</style></head><body>",
                 f"<h1>{html.escape(self.title)}</h1>"]
        for b in self.blocks:
            if isinstance(b, Figure):
                parts.append(f"<h3>{html.escape(b.title)}</h3>")
                if b.png is None:
                    parts.append(f"<p class='missing'><b>Missing:</b> {html.escape(b.reason or '')}</p>")
                else:
                    parts.append("<img alt='%s' src='data:image/png;base64,%s'>"
                                 % (html.escape(b.title), base64.b64encode(b.png).decode()))
                if b.caption:
                    parts.append(f"<p><i>{html.escape(b.caption)}</i></p>")
            else:
                parts.append(_md_to_html(b))
        parts.append("</body></html>")
        return "\n".join(parts)


def _md_to_html(md: str) -> str:
    """The small markdown subset this module writes: headings, tables, bullets, paragraphs."""
    import re

    def inline(s: str) -> str:
        s = html.escape(s)
        s = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", s)
        s = re.sub(r"`(.+?)`", r"<code>\1</code>", s)
        return re.sub(r"(?<!\w)_(.+?)_(?!\w)", r"<i>\1</i>", s)

    out, rows, items = [], [], []

    def flush():
        if rows:
            body = [r for r in rows if not set(r.replace("|", "").strip()) <= {"-"}]
            h, *rest = body
            out.append("<table><tr>" + "".join(f"<th>{inline(c.strip())}</th>"
                                               for c in h.strip("|").split("|")) + "</tr>")
            for r in rest:
                out.append("<tr>" + "".join(f"<td>{inline(c.strip())}</td>"
                                            for c in r.strip().strip("|").split("|")) + "</tr>")
            out.append("</table>")
            rows.clear()
        if items:
            out.append("<ul>" + "".join(f"<li>{inline(i)}</li>" for i in items) + "</ul>")
            items.clear()

    for line in md.splitlines():
        if line.startswith("|"):
            rows.append(line)
            continue
        if line.startswith("- "):
            items.append(line[2:])
            continue
        flush()
        if line.startswith("#"):
            n = len(line) - len(line.lstrip("#"))
            out.append(f"<h{n}>{inline(line[n:].strip())}</h{n}>")
        elif line.strip():
            out.append(f"<p>{inline(line)}</p>")
    flush()
    return "\n".join(out)


def build_report(loaded: Sequence[Loaded], title: str | None = None) -> Doc:
    summ = [l.summary for l in loaded]
    doc = Doc(title or f"adev report: {len(loaded)} run(s)")
    doc.blocks.append("## Runs\n\n" + "\n".join("- " + _run_header(l).strip() for l in loaded) + "\n")
    doc.blocks.append("## Width sweep\n\n" + md_table(sweep_table(summ), SWEEP_COLS))
    doc.blocks.append(fig_saving_vs_width(summ))
    doc.blocks.append(fig_hit_shares(summ))
    doc.blocks.append(f"## {OP_WIDTH}-session operating points\n\n"
                      + md_table(operating_points(summ, OP_WIDTH), OP_COLS))
    doc.blocks.append(fig_operating_points(summ))
    doc.blocks.append("## Latency\n")
    doc.blocks.append(fig_ttft_cdfs(loaded))
    doc.blocks.append("## Reuse\n\n" + "\n".join(_reuse_md(l) for l in loaded) + "\n")
    doc.blocks.append(fig_reuse(loaded))
    for l in loaded:
        from .windows import cross_check
        xc = cross_check(l.run)
        doc.blocks.append(f"## Per-window figures: {l.summary.label}\n\n" + _run_header(l) + "\n"
                          + md_table(l.table, WINDOW_COLS) + "\n"
                          + "Cross-check over the measured span (counters vs the emulator's per-request "
                          "tier split; empty without scrapes):\n\n" + md_table(xc) + "\n"
                          + _missing_md(l))
    return doc


def build_compare(a: Sequence[Loaded], b: Sequence[Loaded], la: str, lb: str) -> Doc:
    sa, sb = [l.summary for l in a], [l.summary for l in b]
    doc = Doc(f"adev compare: {la} vs {lb}")
    ta, tb = sweep_table(sa), sweep_table(sb)
    cols = ["gross_saving", "net_saving", "gross_saving_disk", "gpu_hit_share", "store_hit_share",
            "store_hit_rate", "refused_share", "ttft_send_p50"]
    rows = []
    keys = []
    for t in (ta, tb):
        for r in t.itertuples() if len(t) else []:
            if r.width is not None and not (isinstance(r.width, float) and math.isnan(r.width)):
                if (r.operating_point, r.width) not in keys:
                    keys.append((r.operating_point, r.width))
    for op, w in sorted(keys, key=lambda k: (k[0], k[1])):
        ra = ta[(ta["operating_point"] == op) & (ta["width"] == w)] if len(ta) else ta
        rb = tb[(tb["operating_point"] == op) & (tb["width"] == w)] if len(tb) else tb
        for c in cols:
            va = float(ra[c].iloc[0]) if len(ra) else math.nan
            vb = float(rb[c].iloc[0]) if len(rb) else math.nan
            rows.append({"point": op, "width": int(w), "figure": c, la: va, lb: vb,
                         "delta (B-A)": vb - va})
    cmp = pd.DataFrame(rows)
    txt = "## Side by side (means per width)\n\n"
    if len(cmp):
        lines = ["| operating point | width | figure | " + la + " | " + lb + " | delta (B-A) |",
                 "|---|---|---|---|---|---|"]
        for r in rows:
            p = r["figure"] in PCT_COLS
            lines.append(f"| {r['point']} | {r['width']} | {r['figure']} | {_fmt(r[la], p)} | {_fmt(r[lb], p)} | "
                         f"{_fmt(r['delta (B-A)'], p)} |")
        txt += "\n".join(lines) + "\n"
    else:
        txt += "**Missing:** neither side has runs with a width in its manifest\n"
    doc.blocks.append(txt)
    doc.blocks.append(fig_saving_vs_width(sa + sb, labels=[la, lb], groups=[sa, sb]))
    doc.blocks.append(fig_ttft_cdfs(list(a) + list(b),
                                    labels=[f"{la}: {l.summary.label}" for l in a]
                                    + [f"{lb}: {l.summary.label}" for l in b]))
    doc.blocks.append(f"## {la}\n\n" + md_table(ta, SWEEP_COLS))
    doc.blocks.append(f"## {lb}\n\n" + md_table(tb, SWEEP_COLS))
    return doc


def _write(doc: Doc, out: Path) -> Path:
    """Write ``out``.md (+ ``out``_files/ PNGs) and the self-contained ``out``.html."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fig_dir = out.parent / f"{out.name}_files"
    (out.parent / f"{out.name}.md").write_text(doc.md(fig_dir, f"{out.name}_files/"))
    h = out.parent / f"{out.name}.html"
    h.write_text(doc.html())
    return h


def write_report(paths: Sequence[str | Path] | str | Path, out: str | Path | None = None,
                 with_reuse: bool = True) -> Path:
    """Build and write the report of ``paths``; returns the HTML path. Default output: inside the
    run directory for one run, else ``results/reports/report-<UTC time>``."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    loaded = load_all(paths, with_reuse)
    if out is None:
        if len(loaded) == 1:
            out = loaded[0].run.path / "report"
        else:
            from ..config import ROOT
            ts = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
            out = ROOT / "results" / "reports" / f"report-{ts}"
    return _write(build_report(loaded), Path(out))


def write_compare(a: str | Path, b: str | Path, out: str | Path | None = None,
                  with_reuse: bool = True) -> Path:
    la, lb = Path(a).name, Path(b).name
    if la == lb:
        la, lb = f"A:{la}", f"B:{lb}"
    doc = build_compare(load_all([a], with_reuse), load_all([b], with_reuse), la, lb)
    if out is None:
        from ..config import ROOT
        ts = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
        out = ROOT / "results" / "reports" / f"compare-{ts}"
    return _write(doc, Path(out))


def summarise_run(path: str | Path) -> str:
    """A short text summary of one run (the fleet prints it at the end of a run)."""
    run = load_run(path)
    t = window_table(run)
    s = summarise(run, t, with_reuse=True)

    def line(name: str, fig: str, pctg: bool = True) -> str:
        st, iv = s.stats[fig], s.interval[fig]
        if st["n"] == 0:
            return f"  {name}: — ({s.missing.get(fig, 'no valid window')})"
        txt = f"  {name}: {_fmt(st['mean'], pctg)}"
        if st["n"] > 1:
            txt += (f" (CV {_fmt(st['cv'])}, 95% t-interval {_fmt(iv['lo'], pctg)}.."
                    f"{_fmt(iv['hi'], pctg)} over {st['n']} windows)")
        else:
            txt += " (1 window)"
        if st["n"] < s.windows - s.invalid_windows:
            txt += f"; missing in {s.windows - s.invalid_windows - st['n']} window(s): " + \
                   str(s.missing.get(fig, "see report"))[:160]
        return txt

    out = [f"run {s.run_id}: width {_fmt(s.width)}, {s.protocol or '?'}, {s.windows} window(s)"
           f" ({s.invalid_windows} invalid, {s.burst_windows} with preemption bursts)",
           line("gross saving", "gross_saving"), line("net saving", "net_saving"),
           line("disk tier's part", "gross_saving_disk"),
           line("GPU hit share", "gpu_hit_share"), line("store hit share", "store_hit_share"),
           line("store hit rate", "store_hit_rate"), line("refused writes", "refused_share"),
           line("TTFT p50 (s)", "ttft_send_p50", False)]
    if (s.stats.get("ttft_model_err_p99") or {}).get("n"):  # emulated stack only
        out += [line("TTFT over the emulator's model, p50", "ttft_model_err_p50"),
                line("TTFT over the emulator's model, p99", "ttft_model_err_p99")]
    if (s.stats.get("store_read_over_p99") or {}).get("n"):  # emulated stack with a store
        out += [line("real store reads / tier profile, p50 (x)", "store_read_over_p50", False),
                line("real store reads / tier profile, p99 (x)", "store_read_over_p99", False)]
        over = s.mean("store_read_over_p50")
        if over > 1:
            out.append(f"  note: this host's real store reads took {over:.3g}x the tier profile's time "
                       f"(median call; time scale {_fmt(run.time_scale)}); first tokens wait for them, "
                       "so TTFT and busy time include host time. bench/bench_store_io.py prints the "
                       "largest time scale at which each read path keeps pace on this host.")
    if s.burst_windows and s.quiet["gross_saving"]["n"]:
        out.append(f"  gross saving, quiet windows: {_fmt(s.quiet['gross_saving']['mean'], True)}")
    if s.reuse:
        out.append(f"  reuse: same-session {_fmt(s.reuse['share_same_session'], True)}, "
                   f"cross-session {_fmt(s.reuse['share_cross_session'], True)}, aged "
                   f"{_fmt(s.reuse['aged_share'], True)}")
    xc = s.xcheck or {}
    vals = [xc.get(k) for k in ("xcheck_gpu_rel", "xcheck_store_rel", "xcheck_disk_rel")]
    vals = [v for v in vals if v is not None and not math.isnan(v)]
    if vals:
        worst = max(vals)
        txt = f"  counters vs emulator per-request tier split (measured span): max rel. diff {_fmt(worst)}"
        failed = xc.get("store_load_failed_tokens")
        if worst > 0.01:
            txt += " (> 1%)"
        if failed and not math.isnan(failed):
            txt += (f"; {failed:.0f} store-hit tokens failed to load (recomputed, not counted as "
                    "store-served)")
        out.append(txt)
    if run.torn:
        out.append(f"  torn record lines skipped: {run.torn}")
    return "\n".join(out)


# -----------------------------------------------------------------------------------------------
# CLI


def _main(args: argparse.Namespace) -> int:
    try:
        if args.compare:
            p = write_compare(args.compare[0], args.compare[1], args.out, not args.no_reuse)
        elif args.runs:
            p = write_report(args.runs, args.out, not args.no_reuse)
        else:
            print("adev report: give RUN [RUN ...] or --compare A B", file=sys.stderr)
            return 2
    except FileNotFoundError as e:
        print(f"adev report: {e}", file=sys.stderr)
        return 2
    print(p.with_suffix(".md"))
    print(p)
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("report", help="tables and plots of runs (markdown + HTML)",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="*", metavar="RUN",
                   help="run directory, or a folder of run directories (a night)")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"),
                   help="compare two runs or two folders of runs (nights)")
    p.add_argument("--out", help="output path without suffix (writes OUT.md, OUT.html, OUT_files/)")
    p.add_argument("--no-reuse", action="store_true", help="skip the reuse ledger")
    p.set_defaults(func=_main)
