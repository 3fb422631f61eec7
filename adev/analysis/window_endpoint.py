"""The figures of one endpoint in one window: calls, busy time, counter deltas over the counter
span, hit shares, refusals, the tier split and the savings (docs/design.md §5.1)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ..vllm_release import counts_waiting_lookups
from . import counters as C
from .counters import idle_checker
from .figures import (
    busy_time,
    disk_rate_estimate,
    gpu_tokens_from_calls,
    gross_saving,
    hit_share,
    in_flight,
    net_saving,
    net_saving_full,
    recompute_rate,
    refusal_share,
    rel_diff,
    served_store_tokens,
    store_hit_rate,
)
from .run import Run
from .window_calls import calls_of, client_block, ttft_block
from .window_row import NAN, WindowFigures, set_figure
from .window_tiers import endpoint_split, master_split


def analyse_endpoint(run: Run, w: dict[str, Any], endpoint: str) -> WindowFigures:
    """The figures of ``endpoint`` in window ``w`` (a ``windows.jsonl`` record)."""
    t0, t1 = float(w["t0"]), float(w["t1"])
    fig = WindowFigures(run.run_id, run.label, run.width, int(w.get("index", 0)), t0, t1,
                        bool(w.get("valid", True)), str(w.get("protocol") or ""), endpoint)
    fig.faults = ", ".join(w.get("faults") or [])
    if not fig.valid:
        fig.missing["window"] = f"invalid window: {w.get('reason') or 'no reason given'}"
    allc = calls_of(run, endpoint)
    starts = allc["t_sent"].to_numpy(dtype=float) if len(allc) else np.empty(0)
    ends = allc["t_end"].to_numpy(dtype=float) if len(allc) else np.empty(0)
    sent_in = allc[(allc["t_sent"] >= t0) & (allc["t_sent"] < t1)] if len(allc) else allc
    fig.calls = int(len(sent_in))
    fig.calls_failed = int((sent_in["status"] != "ok").sum()) if len(sent_in) else 0
    fig.calls_open = int(sent_in["t_end"].isna().sum()) if len(sent_in) else 0
    fig.busy_s = busy_time(starts, ends, t0, t1)
    fig.busy_share = fig.busy_s / (t1 - t0) if t1 > t0 else NAN
    ttft_block(fig, sent_in)
    client_block(fig, sent_in, run)

    # -- endpoint counters over the counter span
    sc = run.scrapes.get(endpoint, [])
    idle = idle_checker(starts, ends)
    d_gpu = C.counter_delta(sc, C.PREFIX_HITS, t0, t1, target=endpoint, idle=idle)
    d_ext = C.counter_delta(sc, C.EXT_HITS, t0, t1, target=endpoint, idle=idle)
    d_ext_q = C.counter_delta(sc, C.EXT_QUERIES, t0, t1, target=endpoint, idle=idle)
    d_prompt = C.counter_delta(sc, C.PROMPT_TOKENS, t0, t1, target=endpoint, idle=idle)
    d_pre = C.counter_delta(sc, C.PREEMPTIONS, t0, t1, target=endpoint, idle=idle)
    for name, d in (("gpu_tokens", d_gpu), ("store_tokens", d_ext), ("prompt_tokens", d_prompt),
                    ("preemptions", d_pre)):
        if d.ok:
            setattr(fig, name, d.value)
        else:
            fig.missing[name] = d.reason
    if d_gpu.ok:
        fig.gpu_tokens_source = "vllm:prefix_cache_hits"
    ref = next((d for d in (d_ext, d_gpu, d_prompt) if isinstance(d, C.Delta)), None)
    if ref is not None:
        fig.span_from, fig.span_to = ref.t_from, ref.t_to
        fig.busy_span_s = busy_time(starts, ends, ref.t_from, ref.t_to)
    release = run.server_versions.get(endpoint)
    if counts_waiting_lookups(release):
        gpu_from_calls(fig, allc, d_ext, str(release))
    fig.counter_resets = max(d.resets for d in (d_gpu, d_ext, d_prompt, d_pre))
    fig.scrape_gaps = max(d.gaps for d in (d_gpu, d_ext, d_prompt, d_pre))

    if math.isnan(fig.store_hit_rate) and d_ext.ok and d_ext_q.ok and d_ext_q.value:
        fig.store_hit_rate = store_hit_rate(d_ext.value, d_ext_q.value)
        fig.store_hit_rate_source = "vLLM counters external hits / external queries (tokens)"
    elif math.isnan(fig.store_hit_rate):
        fig.missing["store_hit_rate"] = (d_ext_q.reason or "no store lookups in the window")

    d_acc = C.counter_delta(sc, C.EMU_PUT_ACCEPTED, t0, t1, target=endpoint, idle=idle)
    d_ref = C.counter_delta(sc, C.EMU_PUT_REFUSED, t0, t1, target=endpoint, idle=idle)
    d_fail = C.counter_delta(sc, C.EMU_LOAD_FAILED, t0, t1, target=endpoint, idle=idle)
    d_over = C.counter_delta(sc, C.EMU_READ_OVERRUN, t0, t1, target=endpoint, idle=idle)
    if d_over.ok:
        # model time that passed store reads' modelled ends before the real reads ended: the
        # host's time in the model (0 on a held clock that held; the lag itself on a free one)
        fig.read_overrun_s = d_over.value
    else:
        fig.missing["read_overrun_s"] = d_over.reason
    if d_fail.ok:
        # counted as store hits by external_prefix_cache_hits (at lookup), then recomputed
        fig.store_load_failed_tokens = d_fail.value * run.block_size
        if d_ext.ok:
            fig.store_tokens = served_store_tokens(d_ext.value, fig.store_load_failed_tokens)
    set_hit_shares(fig)   # of the store-served tokens, as the ALL row's
    if d_acc.ok and d_ref.ok:
        fig.put_blocks, fig.put_refused_blocks = d_acc.value, d_ref.value
        if d_acc.value + d_ref.value > 0:
            fig.refused_share = refusal_share(d_ref.value, d_acc.value + d_ref.value)
            fig.refused_source = "store client counters adev_emulator_store_put_{refused_,}blocks"
        if run.profile is not None:
            fig.refused_bytes = d_ref.value * run.profile.bytes_per_block
    if not endpoint_split(fig, sc, t0, t1, endpoint, idle):
        master_split(fig, run, t0, t1)
    savings_block(fig, run, allc, starts, ends)
    return fig


def gpu_from_calls(fig: WindowFigures, c: pd.DataFrame, d_ext: C.Delta | C.NoDelta,
                   release: str) -> None:
    """GPU-hit tokens of an endpoint whose vLLM release adds a waiting request's lookup to
    ``vllm:prefix_cache_hits`` at every scheduler step it waits (before 0.26.0,
    :mod:`adev.vllm_release`): that counter then over-counts the requests that waited, by as many
    times as they waited. The calls' own ``cached_tokens`` count each request once
    (:func:`adev.analysis.figures.gpu_tokens_from_calls`), over the OK calls of ``c`` admitted in
    the counter span, as the external hits counter counts them: by ``t_admit`` where the endpoint
    stamps it, else by when they were sent. Without cached tokens the figure is missing, with the
    reason."""
    why = (f"vLLM {release} adds a waiting request's lookup to prefix_cache_hits at every step "
           f"it waits (vLLM#43736, fixed in 0.26.0)")
    ok = admitted_in_span(c, fig)
    ok = ok[ok["status"] == "ok"]
    if ok["cached_tokens"].isna().all():   # (also when there is no OK call)
        lack = ("no OK call in the window reports cached_tokens (serve with "
                "--enable-prompt-tokens-details)")
    elif not d_ext.ok:
        lack = f"the external hits counter is missing: {d_ext.reason}"
    else:
        fig.gpu_tokens = gpu_tokens_from_calls(float(ok["cached_tokens"].fillna(0).sum()),
                                               d_ext.value)
        fig.gpu_tokens_source = f"{why}: calls' cached_tokens less vllm:external_prefix_cache_hits"
        return
    fig.gpu_tokens, fig.gpu_tokens_source = NAN, ""
    fig.missing["gpu_tokens"] = f"{why}, and {lack}"


def admitted_in_span(c: pd.DataFrame, fig: WindowFigures) -> pd.DataFrame:
    """The calls of ``c`` the endpoint admitted in ``fig``'s counter span, where its counters
    count them: by ``t_admit`` where the endpoint stamps it, else by when they were sent (none
    without a span)."""
    if not len(c) or math.isnan(fig.span_from):
        return c.iloc[0:0]
    at = c["t_admit"].fillna(c["t_sent"])
    return c[(at >= fig.span_from) & (at < fig.span_to)]


def set_hit_shares(fig: WindowFigures) -> None:
    """GPU and store hit shares of the prompt tokens (:func:`adev.analysis.figures.hit_share`)."""
    set_figure(fig, "gpu_hit_share", hit_share, fig.gpu_tokens, fig.prompt_tokens,
               need={"gpu_tokens": fig.gpu_tokens, "prompt_tokens": fig.prompt_tokens})
    set_figure(fig, "store_hit_share", hit_share, fig.store_tokens, fig.prompt_tokens,
               need={"store_tokens": fig.store_tokens, "prompt_tokens": fig.prompt_tokens})


def set_gross_savings(fig: WindowFigures, rate: float | None, b: float) -> None:
    """Gross saving, its disk tier's part and the disk share of it
    (:func:`adev.analysis.figures.gross_saving`) at prefill rate ``rate`` over busy time ``b``."""
    need = {"store_tokens": fig.store_tokens, "prefill_rate": rate, "busy_span_s": b}
    set_figure(fig, "gross_saving", gross_saving, fig.store_tokens, rate, b, need=need)
    set_figure(fig, "gross_saving_disk", gross_saving, fig.store_disk_tokens, rate, b,
               need={**need, "store_disk_tokens": fig.store_disk_tokens})
    set_figure(fig, "disk_share_of_saving", lambda d, s: d / s, fig.store_disk_tokens, fig.store_tokens,
               need={"store_disk_tokens": fig.store_disk_tokens, "store_tokens": fig.store_tokens})


def savings_block(fig: WindowFigures, run: Run, allc: pd.DataFrame, starts: np.ndarray,
                  ends: np.ndarray) -> None:
    """Gross and net savings, the emulator's per-request tier split over the requests admitted in
    the counter span (cross-checked against the counters) and the disk tier's read rate."""
    rate = run.prefill_tokens_per_s
    if rate is None:
        fig.missing["prefill_rate"] = run.missing.get("profile", "no model profile")
    b = fig.busy_span_s
    if math.isnan(b):
        fig.missing["busy_span_s"] = "no counter span (boundary scrapes missing)"
    set_gross_savings(fig, rate, b)

    # emulator per-request figures over the requests admitted in the counter span
    if math.isnan(fig.span_from) or not len(allc):
        return
    srv = allc[allc["has_server"].astype(bool)]
    if not len(srv):
        fig.missing["net_saving"] = ("read-path time not exposed by the endpoint (no `adev` "
                                     "extension field on its responses)")
        fig.missing["net_saving_full"] = fig.missing["net_saving"]
        return
    r = admitted_in_span(srv, fig)
    fig.srv_requests = int(len(r))
    fig.srv_gpu_tokens = float(r["srv_tok_gpu"].sum())
    fig.srv_store_ram_tokens = float(r["srv_tok_store_ram"].sum())
    fig.srv_store_disk_tokens = float(r["srv_tok_store_disk"].sum())
    fig.srv_computed_tokens = float(r["srv_tok_computed"].sum())
    if not math.isnan(fig.gpu_tokens):
        fig.xcheck_gpu_rel = rel_diff(fig.srv_gpu_tokens, fig.gpu_tokens)
    if not math.isnan(fig.store_tokens):
        fig.xcheck_store_rel = rel_diff(fig.srv_store_ram_tokens + fig.srv_store_disk_tokens,
                                        fig.store_tokens)
    if not math.isnan(fig.store_disk_tokens):
        fig.xcheck_disk_rel = rel_diff(fig.srv_store_disk_tokens, fig.store_disk_tokens)
    rp = r["srv_read_path_s"].fillna(0.0).to_numpy(dtype=float)
    fig.read_path_s = float(rp.sum())
    n = in_flight(starts, ends, r["t_admit"].to_numpy(dtype=float))
    set_figure(fig, "net_saving", net_saving, fig.gross_saving, rp, n, b,
               need={"gross_saving": fig.gross_saving, "busy_span_s": b})
    set_figure(fig, "net_saving_full", net_saving_full, fig.gross_saving, rp, b,
               need={"gross_saving": fig.gross_saving, "busy_span_s": b})
    # effective disk-tier read rate
    bpt = run.bytes_per_token
    if bpt is None or rate is None:
        fig.missing["disk_read_rate"] = run.missing.get("profile", "no model profile")
        return
    fig.recompute_rate = recompute_rate(rate, bpt)
    set_disk_read_rate(fig, r, bpt)


def set_disk_read_rate(fig: WindowFigures, r: pd.DataFrame, bpt: float) -> None:
    """The disk tier's effective read rate (:func:`adev.analysis.figures.disk_rate_estimate`) over
    the requests ``r`` with the emulator's fields, and its ratio to ``fig.recompute_rate``."""
    est = disk_rate_estimate(r["srv_tok_store_ram"].fillna(0).to_numpy(dtype=float) * bpt,
                             r["srv_tok_store_disk"].fillna(0).to_numpy(dtype=float) * bpt,
                             r["srv_load_s"].to_numpy(dtype=float))
    if isinstance(est, str):
        fig.missing["disk_read_rate"] = est
    else:
        fig.disk_read_rate = est
        fig.disk_vs_recompute = fig.disk_read_rate / fig.recompute_rate
