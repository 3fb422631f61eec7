"""Rendering of reports: values formatted for reading, columns labelled in words with units,
markdown tables, and a document written as markdown (+ PNG files) and as one self-contained HTML
page (markdown rendered by the ``markdown`` library, plots inlined as base64 PNG)."""
from __future__ import annotations

import base64
import html
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import markdown as _markdown
import pandas as pd

from .plots import Figure

PCT_COLS = {"gross_saving", "gross_saving_disk", "net_saving", "net_saving_full", "gpu_hit_share",
            "store_hit_share", "store_hit_rate", "refused_share", "disk_share_of_saving",
            "busy_share", "gross_saving_quiet", "gross_saving_lo", "gross_saving_hi",
            "reuse_share_same_session", "reuse_share_cross_session", "reuse_aged_share",
            "reuse_owner_share_same_session", "reuse_owner_share_cross_session",
            "ttft_model_err_p50", "ttft_model_err_p99", "store_late_share",
            "physical_read_share", "stickiness", "exact_output_share", "drain_share",
            "ttft_over_model_p50", "ttft_over_model_p99", "user_ttft_over_model_p50",
            "user_ttft_over_model_p99", "xcheck_gpu_rel", "xcheck_store_rel", "xcheck_disk_rel"}
"""Columns that hold shares (0..1) or relative differences, printed as percentages."""

LABELS = {
    "window": "Window", "endpoint": "Endpoint", "valid": "Valid", "faults": "Faults",
    "calls": "Calls", "calls_failed": "Failed calls",
    "busy_s": "Busy (s)", "busy_share": "Busy share", "gpu_hit_share": "GPU hit share",
    "store_hit_share": "Store hit share", "gross_saving": "Gross saving",
    "gross_saving_disk": "Gross saving, disk tier", "net_saving": "Net saving",
    "net_saving_full": "Net saving, fully charged", "store_hit_rate": "Store hit rate",
    "refused_share": "Refused writes", "preemptions": "Preemptions",
    "ttft_send_p50": "TTFT p50 (s)", "ttft_send_p99": "TTFT p99 (s)",
    "ttft_model_err_p50": "TTFT over model, p50", "ttft_model_err_p99": "TTFT over model, p99",
    "store_read_over_p50": "Store reads / profile, p50 (×)",
    "store_read_over_p99": "Store reads / profile, p99 (×)",
    "store_late_share": "Store reads behind profile", "store_behind": "Store behind (median read)",
    "read_overrun_s": "Model time past reads' modelled ends (s)",
    "counter_resets": "Counter resets", "scrape_gaps": "Scrape gaps",
    "xcheck_gpu_rel": "Cross-check GPU (rel.)", "xcheck_store_rel": "Cross-check store (rel.)",
    "xcheck_disk_rel": "Cross-check disk (rel.)",
    "span_from": "From (model s)", "span_to": "To (model s)",
    "gpu_tokens": "GPU tokens, requests", "srv_gpu_tokens": "GPU tokens, counters",
    "store_tokens": "Store tokens, requests", "store_disk_tokens": "Store disk tokens, requests",
    "srv_store_ram_tokens": "Store RAM tokens, counters",
    "srv_store_disk_tokens": "Store disk tokens, counters",
    "store_load_failed_tokens": "Store-hit tokens failed to load",
    "operating_point": "Operating point", "width": "Width (sessions)", "runs": "Runs",
    "interval_basis": "Interval over", "gross_saving_lo": "Gross saving, 95% low",
    "gross_saving_hi": "Gross saving, 95% high", "gross_saving_quiet": "Gross saving, quiet",
    "disk_share_of_saving": "Disk tier's part of saving", "label": "Run",
    "burst_windows": "Burst windows", "windows": "Windows",
    "reuse_share_same_session": "Same-session reuse (last toucher)",
    "reuse_share_cross_session": "Cross-session reuse (last toucher)",
    "reuse_owner_share_same_session": "Same-session reuse (ownership)",
    "reuse_owner_share_cross_session": "Cross-session reuse (ownership)",
    "reuse_aged_share": "Aged reuse", "store_gib_served": "Store served (GiB)",
    "reuse_distance_p99_s": "Reuse distance p99 (s)", "reuse_distance_max_s": "Reuse distance max (s)",
    "dispatch_p50": "Dispatch delay p50 (s)",
    "throughput_rps": "Throughput (calls/s)", "ttft_p50_s": "User TTFT p50 (s)",
    "ttft_p90_s": "User TTFT p90 (s)", "ttft_p99_s": "User TTFT p99 (s)",
    "ttft_later_p99_s": "User TTFT p99, later turns (s)",
    "ttft_p50_upto32k_s": "User TTFT p50, prompts <=32K (s)",
    "ttft_p50_32to64k_s": "User TTFT p50, prompts 32-64K (s)",
    "ttft_p50_64to96k_s": "User TTFT p50, prompts 64-96K (s)",
    "ttft_p50_over96k_s": "User TTFT p50, prompts >96K (s)",
    "evictions": "RAM eviction cycles", "physical_read_share": "Disk reads / store loads",
    "prompt_load": "Prompt tokens / prefill capacity",
    "calls_in_flight_mean": "Calls in flight (mean)",
    "drain_share": "Drain (share of the run)",
    "throughput_full_rps": "Throughput before the drain (calls/s)",
    "throughput_full_vs_recompute": "The same / recompute's",
    "throughput_vs_recompute": "Throughput / recompute's", "crossover_tokens":
    "Beats recompute from (prompt tokens)", "stickiness": "Stickiness", "ok_calls": "OK calls",
    "errors": "Errors", "exact_output_share": "Exact output length", "itl_p50_s":
    "Inter-token latency p50 (s)", "store_load_bytes": "Store loads",
    "physical_read_bytes": "Disk reads", "evicted_bytes": "Evicted",
    "promoted_bytes": "Promoted to RAM", "stored_bytes": "Stored",
    "stored_bytes_per_call": "Stored per call",
    "store_load_bytes_per_call": "Store loads per call",
    "physical_read_bytes_per_call": "Disk reads per call",
    "evicted_bytes_per_call": "Evicted per call",
    "unsaved_bytes": "Refused or skipped saves",
    "disk_read_rate_Bps": "Disk read rate while loading",
    "disk_read_avg_Bps": "Disk reads per run second",
    "disk_wait_mean_s": "Disk device wait, mean (s)",
    "load_wait_mean_s": "Load thread wait, mean (s)",
    "ttft_mean_s": "User TTFT, mean (s)", "ttft_queue_mean_s": "Queue (s)",
    "ttft_read_path_mean_s": "Store read path (s)",
    "ttft_prefill_mean_s": "Prefill, behind earlier chunks and its own (s)",
    "ttft_transfer_mean_s": "KV transfer (s)",
    "ttft_rest_mean_s": "First decode step and hand-over (s)",
    "dispatch_delay_p99_s": "Dispatch delay p99 (s)",
    "store_read_over_profile_p50": "Store reads / profile, p50 (×)",
    "time_scale": "Time scale (model s per wall s)",
    "ttft_over_model_p50": "TTFT over model p50", "ttft_over_model_p99": "TTFT over model p99",
    "user_ttft_over_model_p50": "User TTFT over model p50",
    "user_ttft_over_model_p99": "User TTFT over model p99",
}
"""Column name -> heading in words, with its unit where it has one (byte volumes and rates carry
their unit in each value: :func:`unit_of`)."""


def label(col: str) -> str:
    """The heading of column ``col`` (the column name itself when it has none)."""
    return LABELS.get(col, col)


def unit_of(col: str) -> str | None:
    """The unit a column's values are printed with: ``"%"`` (a share or relative difference,
    :data:`PCT_COLS`), ``"B"`` (bytes: names ending ``_bytes`` or ``_bytes_per_call``), ``"B/s"``
    (names ending ``_Bps``), ``"count"`` (token counts: names ending ``_tokens``), else None."""
    if col in PCT_COLS:
        return "%"
    if col.endswith(("_bytes", "_bytes_per_call")):
        return "B"
    if col.endswith("_Bps"):
        return "B/s"
    if col.endswith("_tokens"):
        return "count"
    return None


_SI = ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"))


def fmt(v: Any, pctg: bool = False, unit: str | None = None) -> str:
    """A value for reading, the one formatter of figures. Missing values: an em dash. Numbers:

    - a share (0..1) with ``unit="%"`` (or a float with ``pctg``): a percentage with 2 decimals,
      never ``-0.00%``;
    - ``unit="B"`` / ``"B/s"``: 3 significant digits with a decimal prefix (``1.50 GB``,
      ``5.45 GB/s``; under 1 kB whole bytes: ``512 B``);
    - ``unit="count"``, and any other float of 10,000 or more: a whole number with thousands
      separators (``6,004,000``), never exponent notation;
    - other floats: 4 significant digits; other integers as they are.

    Anything else (text, booleans) as ``str``."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        return str(v)
    integral = isinstance(v, numbers.Integral)
    x = float(v)
    if unit == "%" or (pctg and not integral):
        out = f"{x * 100:.2f}%"
        return "0.00%" if out == "-0.00%" else out
    if unit in ("B", "B/s"):
        for size, prefix in _SI:
            if abs(x) >= size * 0.9995:
                return f"{_sig3(x / size)} {prefix}{unit[1:]}"
        return f"{x:.0f} {unit}"
    if unit == "count" or (not integral and abs(x) >= 1e4):
        return f"{x:,.0f}"
    return str(v) if integral else f"{x:.4g}"


def change_text(d: float, unit: str | None = None) -> str:
    """A signed difference between two values of one column: of shares (``unit="%"``) in
    percentage points (``+1.25 points``), else a sign and :func:`fmt` of its size in the unit
    (``+1.50 GB``, ``-0.1234``); a missing difference as an em dash."""
    if d is None or math.isnan(d):
        return "—"
    if unit == "%":
        out = f"{d * 100:+.2f} points"
        return "+0.00 points" if out == "-0.00 points" else out
    return ("-" if d < 0 else "+") + fmt(abs(float(d)), unit=unit)


def _sig3(x: float) -> str:
    """``x`` with 3 significant digits, trailing zeros kept (1.50, 15.0, 150)."""
    return f"{x:#.3g}".rstrip(".") if x else "0"


def md_table(df: pd.DataFrame, cols: Sequence[str] | None = None) -> str:
    """``df`` as a markdown table with headings in words (:func:`label`)."""
    if df is None or not len(df):
        return "_(no rows)_\n"
    cols = [c for c in (cols or list(df.columns)) if c in df.columns]
    lines = ["| " + " | ".join(label(c) for c in cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df[cols].iterrows():
        lines.append("| " + " | ".join(fmt(r[c], unit=unit_of(c)) for c in cols) + " |")
    return "\n".join(lines) + "\n"


CSS = ("body{font-family:system-ui,sans-serif;max-width:1100px;margin:auto;padding:1em;"
       "line-height:1.4;color:#222}"
       ".tw{overflow-x:auto;max-width:100%}"
       "table{border-collapse:collapse;font-size:12px;margin:.5em 0}"
       "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
       "th{background:#f4f4f4;text-align:center;white-space:normal;max-width:9em}"
       "td:first-child,th:first-child{text-align:left}"
       "img{max-width:100%}.missing{color:#a00}code{font-size:90%}")


@dataclass
class Doc:
    """A report: a title and blocks, each markdown text or a :class:`Figure`."""

    title: str
    blocks: list[Any] = field(default_factory=list)

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
                 f"</title><style>{CSS}</style></head><body>",
                 f"<h1>{html.escape(self.title)}</h1>"]
        for b in self.blocks:
            if isinstance(b, Figure):
                parts.append(f"<h3>{html.escape(b.title)}</h3>")
                if b.png is None:
                    parts.append(f"<p class='missing'><b>Missing:</b> {html.escape(b.reason or '')}</p>")
                else:
                    parts.append(f"<img alt='{html.escape(b.title)}' "
                                 f"src='data:image/png;base64,{base64.b64encode(b.png).decode()}'>")
                if b.caption:
                    parts.append(f"<p><i>{html.escape(b.caption)}</i></p>")
            else:
                parts.append(md_to_html(b))
        parts.append("</body></html>")
        return "\n".join(parts)


def md_to_html(md: str) -> str:
    """Markdown (tables included) to HTML; raw HTML in the text is escaped, every table is
    wrapped so that a wide one scrolls inside the page instead of overflowing it."""
    out = _markdown.markdown(html.escape(md, quote=False), extensions=["tables"],
                             output_format="html")
    return out.replace("<table>", "<div class='tw'><table>").replace("</table>", "</table></div>")


def write(doc: Doc, out: Path) -> Path:
    """Write ``out``.md (+ ``out``_files/ PNGs) and the self-contained ``out``.html."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fig_dir = out.parent / f"{out.name}_files"
    (out.parent / f"{out.name}.md").write_text(doc.md(fig_dir, f"{out.name}_files/"))
    h = out.parent / f"{out.name}.html"
    h.write_text(doc.html())
    return h
