"""The ``ALL`` row of a window: the endpoints' figures pooled (tokens and busy times summed, ratios
recomputed from the sums, percentiles over all calls), the master's counters added."""
from __future__ import annotations

import math
from typing import Any

import pandas as pd

from .figures import refusal_share, rel_diff
from .run import Run
from .window_calls import client_block, ttft_block
from .window_endpoint import set_disk_read_rate, set_gross_savings, set_hit_shares
from .window_master import master_block
from .window_row import ALL, NAN, WindowFigures


def pool_endpoints(run: Run, w: dict[str, Any], rows: list[WindowFigures]) -> WindowFigures:
    """The ALL row: endpoint figures pooled, master counters added."""
    t0, t1 = float(w["t0"]), float(w["t1"])
    fig = WindowFigures(run.run_id, run.label, run.width, int(w.get("index", 0)), t0, t1,
                        bool(w.get("valid", True)), str(w.get("protocol") or ""), ALL)
    fig.faults = ", ".join(w.get("faults") or [])
    for r in rows:
        for k, v in r.missing.items():
            fig.missing.setdefault(k, f"{r.endpoint}: {v}")
    allc = run.calls
    sent_in = allc[(allc["t_sent"] >= t0) & (allc["t_sent"] < t1)] if len(allc) else allc
    fig.calls = sum(r.calls for r in rows)
    fig.calls_failed = sum(r.calls_failed for r in rows)
    fig.calls_open = sum(r.calls_open for r in rows)
    ttft_block(fig, sent_in)
    client_block(fig, sent_in, run)

    def ssum(name: str) -> float:
        vals = [getattr(r, name) for r in rows]
        return NAN if not vals or any(math.isnan(v) for v in vals) else float(sum(vals))

    for name in ("busy_s", "busy_span_s", "prompt_tokens", "gpu_tokens", "store_tokens",
                 "store_ram_tokens", "store_disk_tokens", "store_load_failed_tokens",
                 "preemptions", "read_path_s", "read_overrun_s",
                 "srv_gpu_tokens", "srv_store_ram_tokens", "srv_store_disk_tokens",
                 "srv_computed_tokens"):
        setattr(fig, name, ssum(name))
    fig.srv_requests = sum(r.srv_requests for r in rows)
    if rows and all(r.refused_source.startswith("store client counters") for r in rows):
        fig.put_blocks = float(sum(r.put_blocks for r in rows))
        fig.put_refused_blocks = float(sum(r.put_refused_blocks for r in rows))
        off = fig.put_blocks + fig.put_refused_blocks
        fig.refused_share = refusal_share(fig.put_refused_blocks, off) if off else NAN
        fig.refused_source = rows[0].refused_source
        fig.refused_bytes = float(sum(r.refused_bytes for r in rows))
    fig.busy_share = fig.busy_s / (len(rows) * (t1 - t0)) if rows and t1 > t0 else NAN
    fig.counter_resets = max([r.counter_resets for r in rows] or [0])
    fig.scrape_gaps = max([r.scrape_gaps for r in rows] or [0])
    spans = [(r.span_from, r.span_to) for r in rows if not math.isnan(r.span_from)]
    if spans:
        fig.span_from = min(s[0] for s in spans)
        fig.span_to = max(s[1] for s in spans)
    rate = run.prefill_tokens_per_s
    b = fig.busy_span_s
    for k in [k for k in fig.missing if k in ("gpu_hit_share", "store_hit_share", "gross_saving",
                                              "gross_saving_disk", "net_saving", "net_saving_full",
                                              "disk_share_of_saving", "store_hit_rate")]:
        del fig.missing[k]
    set_hit_shares(fig)
    set_gross_savings(fig, rate, b)
    # net savings: pool the per-endpoint charges (sum_r rp_r/n_r is additive over endpoints)
    # an endpoint with no busy time and no admitted request contributes no read-path charge
    idle_rows = [r for r in rows if r.busy_span_s == 0 and r.srv_requests == 0]
    live = [r for r in rows if r not in idle_rows]
    if live and all(not math.isnan(r.net_saving) for r in live) and not math.isnan(fig.gross_saving):
        charged = sum((r.gross_saving - r.net_saving) * r.busy_span_s for r in live)
        fig.net_saving = fig.gross_saving - charged / b
        fig.net_saving_full = fig.gross_saving - fig.read_path_s / b
    else:
        why = next((f"{r.endpoint}: {r.missing.get('net_saving', 'unavailable')}" for r in rows
                    if math.isnan(r.net_saving)), "no endpoints")
        fig.missing["net_saving"] = fig.missing["net_saving_full"] = why
    if math.isnan(fig.store_hit_rate):
        hits = [r.store_hit_rate * 1.0 for r in rows]
        fig.missing["store_hit_rate"] = "no store lookups" if not any(
            not math.isnan(h) for h in hits) else "pooled only from per-request fields"
    fig.disk_fraction = (fig.store_disk_tokens / fig.store_tokens
                         if fig.store_tokens and not math.isnan(fig.store_disk_tokens) else NAN)
    if not math.isnan(fig.srv_gpu_tokens) and not math.isnan(fig.gpu_tokens):
        fig.xcheck_gpu_rel = rel_diff(fig.srv_gpu_tokens, fig.gpu_tokens)
    if not math.isnan(fig.srv_store_ram_tokens) and not math.isnan(fig.store_tokens):
        fig.xcheck_store_rel = rel_diff(fig.srv_store_ram_tokens + fig.srv_store_disk_tokens,
                                        fig.store_tokens)
    if not math.isnan(fig.srv_store_disk_tokens) and not math.isnan(fig.store_disk_tokens):
        fig.xcheck_disk_rel = rel_diff(fig.srv_store_disk_tokens, fig.store_disk_tokens)
    # disk read rate over every endpoint's requests admitted in its counter span
    fig.recompute_rate = rows[0].recompute_rate if rows else NAN
    fig.missing.pop("disk_read_rate", None)
    bpt = run.bytes_per_token
    parts = []
    for r in rows:
        if math.isnan(r.span_from) or not len(allc):
            continue
        c = allc[(allc["endpoint"] == r.endpoint) & allc["has_server"].astype(bool)]
        adm = c["t_admit"].to_numpy(dtype=float)
        parts.append(c[(adm >= r.span_from) & (adm < r.span_to)])
    if bpt is None or math.isnan(fig.recompute_rate):
        fig.missing["disk_read_rate"] = run.missing.get("profile", "no model profile")
    elif not parts or not sum(len(p) for p in parts):
        fig.missing["disk_read_rate"] = "no request with the emulator's fields in the counter spans"
    else:
        set_disk_read_rate(fig, pd.concat(parts), bpt)
    master_block(fig, run, t0, t1)
    return fig
