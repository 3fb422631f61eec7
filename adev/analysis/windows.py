"""Window analytics (docs/design.md §5.1): per endpoint and window W = [t0, t1).

Each figure is defined once in :mod:`adev.analysis.figures`, as a function with its formula in
the docstring (re-exported here); :func:`analyse_window` assembles them into one
:class:`WindowFigures` per (window, endpoint), plus an ``ALL`` row that pools the endpoints
(tokens and busy times summed, ratios recomputed from the sums, percentiles over all calls).
:func:`window_table` returns every window of a run as a pandas DataFrame. A figure whose inputs
are missing is NaN and ``missing[figure]`` says why.

Attribution: call-level figures (TTFT, dispatch delay, keys per call, refusals) use the calls
*sent* in W. Counter figures use the counter span (the boundary scrapes nearest t0 and t1, see
:mod:`adev.analysis.counters`); savings divide by the busy time over that same span
(``busy_span_s``; equal to B when the boundary scrapes sit on the window edges, as the fleet
takes them). The emulator's per-request figures that are cross-checked against counters
(tier tokens, read path) use the requests *admitted* in the counter span
(admission ``t_admit``: the server's arrival stamp on the run clock + ``queue_s``, see
:func:`adev.analysis.run.add_admission`). Master counters are global: they appear in the ALL
row only. The store tier split (RAM vs disk) of each endpoint's store tokens uses the endpoint's
own per-tier counters where it exports them (the emulator does: hits less failed loads, per tier),
else the master's byte shares over the window (the same for every endpoint);
``disk_split_source`` says which. Store tokens are
the lookup hits less the hit blocks whose load failed (:func:`served_store_tokens`).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from . import counters as C
from .figures import (  # noqa: F401
    busy_time,
    disk_fraction,
    disk_rate_estimate,
    dispatch_delay,
    effective_read_rate,
    gross_saving,
    hit_share,
    in_flight,
    net_saving,
    net_saving_full,
    pct,
    recompute_rate,
    refusal_share,
    rel_diff,
    served_store_tokens,
    store_hit_rate,
    store_read_late,
    store_read_over_profile,
    tier_tokens_from_bytes,
    ttft_from_schedule,
    ttft_from_send,
    ttft_model_error,
)
from .run import Run

GiB = 1024 ** 3
ALL = "ALL"


# -----------------------------------------------------------------------------------------------
# Assembly


NAN = math.nan


@dataclass
class WindowFigures:
    run_id: str
    label: str
    width: int | None
    window: int
    t0: float
    t1: float
    valid: bool
    protocol: str
    endpoint: str
    calls: int = 0
    calls_failed: int = 0
    calls_open: int = 0
    busy_s: float = NAN
    busy_share: float = NAN
    span_from: float = NAN
    span_to: float = NAN
    busy_span_s: float = NAN
    counter_resets: int = 0
    scrape_gaps: int = 0
    prompt_tokens: float = NAN
    gpu_tokens: float = NAN
    store_tokens: float = NAN
    store_ram_tokens: float = NAN
    store_disk_tokens: float = NAN
    store_load_failed_tokens: float = NAN
    disk_fraction: float = NAN
    disk_split_source: str = ""
    gpu_hit_share: float = NAN
    store_hit_share: float = NAN
    gross_saving: float = NAN
    gross_saving_disk: float = NAN
    disk_share_of_saving: float = NAN
    net_saving: float = NAN
    net_saving_full: float = NAN
    read_path_s: float = NAN
    store_hit_rate: float = NAN
    store_hit_rate_source: str = ""
    store_keys_per_call: float = NAN
    put_blocks: float = NAN
    put_refused_blocks: float = NAN
    refused_bytes: float = NAN
    refused_share: float = NAN
    refused_source: str = ""
    master_put_alloc_failures: float = NAN
    master_batch_put_failed_items: float = NAN
    master_batch_put_items: float = NAN
    evictions: float = NAN
    eviction_attempts: float = NAN
    evicted_keys: float = NAN
    evicted_bytes: float = NAN
    store_gib_served: float = NAN
    store_ram_gib: float = NAN
    store_disk_gib: float = NAN
    disk_read_rate: float = NAN
    recompute_rate: float = NAN
    disk_vs_recompute: float = NAN
    preemptions: float = NAN
    preemptions_server: float = NAN
    ttft_send_p50: float = NAN
    ttft_send_p90: float = NAN
    ttft_send_p99: float = NAN
    ttft_sched_p50: float = NAN
    ttft_sched_p90: float = NAN
    ttft_sched_p99: float = NAN
    ttfb_send_p50: float = NAN
    ttft_model_err_p50: float = NAN   # emulated stack only: ttft_model_error, fraction
    ttft_model_err_p99: float = NAN
    store_read_over_p50: float = NAN   # emulated stack only: store_read_over_profile, ratio
    store_read_over_p99: float = NAN
    store_late_share: float = NAN      # emulated stack only: mean of store_read_late, fraction
    store_behind: float = NAN          # 1.0 when the median loaded call's read fell behind (p50 > 1)
    dispatch_p50: float = NAN
    dispatch_p90: float = NAN
    dispatch_p99: float = NAN
    dispatch_mean: float = NAN
    srv_requests: int = 0
    srv_gpu_tokens: float = NAN
    srv_store_ram_tokens: float = NAN
    srv_store_disk_tokens: float = NAN
    srv_computed_tokens: float = NAN
    xcheck_gpu_rel: float = NAN
    xcheck_store_rel: float = NAN
    xcheck_disk_rel: float = NAN
    faults: str = ""   # faults that touched the window (adev.analysis.faults); "" = none
    missing: dict[str, str] = field(default_factory=dict)


def _safe(fig: WindowFigures, name: str, fn, *args, need: dict[str, Any] | None = None) -> None:
    """Set ``fig.name = fn(*args)`` unless an input is missing (records why)."""
    for k, v in (need or {}).items():
        if v is None or (isinstance(v, float) and math.isnan(v)):
            why = fig.missing.get(k) or f"{k} unavailable"
            fig.missing[name] = why
            return
    try:
        val = fn(*args)
    except ZeroDivisionError:
        fig.missing[name] = "division by zero (" + ", ".join(
            k for k, v in (need or {}).items() if v == 0) + " is 0)"
        return
    if isinstance(val, float) and (math.isnan(val) or math.isinf(val)):
        zero = [k for k, v in (need or {}).items() if v == 0]
        fig.missing[name] = f"{' and '.join(zero) or 'a divisor'} is 0" if zero else "not finite"
        return
    setattr(fig, name, float(val))


def _ttft_block(fig: WindowFigures, c: pd.DataFrame) -> None:
    ok = c[c["status"] == "ok"]
    ts = ttft_from_send(ok)
    tc = ttft_from_schedule(ok)
    if np.isnan(ts).all():
        fig.missing["ttft"] = "no OK call with a first-content stamp in the window"
    fig.ttft_send_p50, fig.ttft_send_p90, fig.ttft_send_p99 = (pct(ts, q) for q in (50, 90, 99))
    fig.ttft_sched_p50, fig.ttft_sched_p90, fig.ttft_sched_p99 = (pct(tc, q) for q in (50, 90, 99))
    fig.ttfb_send_p50 = pct((ok["t_first_byte"] - ok["t_sent"]).to_numpy(dtype=float), 50)
    dd = dispatch_delay(c)
    fig.dispatch_p50, fig.dispatch_p90, fig.dispatch_p99 = (pct(dd, q) for q in (50, 90, 99))
    fig.dispatch_mean = float(np.nanmean(dd)) if len(dd) and not np.isnan(dd).all() else NAN


def _client_block(fig: WindowFigures, c: pd.DataFrame, run: Run) -> None:
    """Per-call figures from the emulator's extension field (calls sent in W)."""
    srv = c[c["has_server"].astype(bool)] if len(c) else c
    if not len(srv):
        why = ("no call in the window carries the emulator's `adev` field (real vLLM exposes no "
               "per-request store figures)" if len(c) else "no calls in the window")
        for k in ("store_keys_per_call", "put_refused_blocks", "preemptions_server"):
            fig.missing[k] = why
        for k in ("ttft_model_err_p50", "ttft_model_err_p99", "store_read_over_p50", "store_read_over_p99",
                  "store_late_share", "store_behind"):
            fig.missing[k] = ("no call in the window carries the emulator's `adev` field (only the "
                              "emulated endpoint models TTFT and store reads)" if len(c)
                              else "no calls in the window")
        return
    ok = srv[srv["status"] == "ok"]
    err = ttft_model_error(ttft_from_send(ok), ok["srv_ttft_s"]) if len(ok) else np.array([])
    if np.isnan(err).all():
        fig.missing["ttft_model_err_p50"] = fig.missing["ttft_model_err_p99"] = (
            "no OK call in the window with both a first-content stamp and a modelled TTFT")
    else:
        fig.ttft_model_err_p50, fig.ttft_model_err_p99 = pct(err, 50), pct(err, 99)
    loaded = ok[ok["srv_store_hit_blocks"] > 0] if len(ok) else ok
    over = store_read_over_profile(loaded["srv_read_path_host_s"], loaded["srv_read_path_s"]) \
        if len(loaded) else np.array([])
    if np.isnan(over).all():
        fig.missing["store_read_over_p50"] = fig.missing["store_read_over_p99"] = \
            fig.missing["store_late_share"] = fig.missing["store_behind"] = (
            "no OK call in the window loaded store hits" if not len(loaded) else
            "no call in the window carries `read_path_host_s` (an emulator from before it was added)")
    else:
        fig.store_read_over_p50, fig.store_read_over_p99 = pct(over, 50), pct(over, 99)
        fig.store_late_share = float(np.nanmean(store_read_late(loaded["srv_read_path_host_s"],
                                                                loaded["srv_read_path_s"])))
        fig.store_behind = float(fig.store_read_over_p50 > 1.0)
    keys = srv["srv_store_keys_looked_up"].sum()
    fig.store_keys_per_call = float(keys / len(srv))
    fig.put_blocks = float(srv["srv_put_blocks"].sum())
    fig.put_refused_blocks = float(srv["srv_put_refused_blocks"].sum())
    fig.preemptions_server = float(srv["srv_preemptions"].sum())
    hits = srv["srv_store_hit_blocks"].sum()
    if keys > 0:
        fig.store_hit_rate = store_hit_rate(float(hits), float(keys))
        fig.store_hit_rate_source = "emulator per-request store_hit_blocks / store_keys_looked_up"
    if fig.put_blocks + fig.put_refused_blocks > 0:
        fig.refused_share = refusal_share(fig.put_refused_blocks,
                                          fig.put_blocks + fig.put_refused_blocks)
        fig.refused_source = "emulator per-request put_refused_blocks / (put_blocks + refused)"
    if run.profile is not None:
        fig.refused_bytes = fig.put_refused_blocks * run.profile.bytes_per_block
    else:
        fig.missing["refused_bytes"] = run.missing.get("profile", "no model profile")


def _calls_of(run: Run, endpoint: str | None) -> pd.DataFrame:
    c = run.calls
    if endpoint is not None and len(c):
        c = c[c["endpoint"] == endpoint]
    return c


def analyse_endpoint(run: Run, w: dict[str, Any], endpoint: str) -> WindowFigures:
    t0, t1 = float(w["t0"]), float(w["t1"])
    fig = WindowFigures(run.run_id, run.label, run.width, int(w.get("index", 0)), t0, t1,
                        bool(w.get("valid", True)), str(w.get("protocol") or ""), endpoint)
    fig.faults = ", ".join(w.get("faults") or [])
    if not fig.valid:
        fig.missing["window"] = f"invalid window: {w.get('reason') or 'no reason given'}"
    allc = _calls_of(run, endpoint)
    starts = allc["t_sent"].to_numpy(dtype=float) if len(allc) else np.empty(0)
    ends = allc["t_end"].to_numpy(dtype=float) if len(allc) else np.empty(0)
    sent_in = allc[(allc["t_sent"] >= t0) & (allc["t_sent"] < t1)] if len(allc) else allc
    fig.calls = int(len(sent_in))
    fig.calls_failed = int((sent_in["status"] != "ok").sum()) if len(sent_in) else 0
    fig.calls_open = int(sent_in["t_end"].isna().sum()) if len(sent_in) else 0
    fig.busy_s = busy_time(starts, ends, t0, t1)
    fig.busy_share = fig.busy_s / (t1 - t0) if t1 > t0 else NAN
    _ttft_block(fig, sent_in)
    _client_block(fig, sent_in, run)

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
    ref = next((d for d in (d_ext, d_gpu, d_prompt) if isinstance(d, C.Delta)), None)
    if ref is not None:
        fig.span_from, fig.span_to = ref.t_from, ref.t_to
        fig.busy_span_s = busy_time(starts, ends, ref.t_from, ref.t_to)
    fig.counter_resets = max(d.resets for d in (d_gpu, d_ext, d_prompt, d_pre))
    fig.scrape_gaps = max(d.gaps for d in (d_gpu, d_ext, d_prompt, d_pre))

    _safe(fig, "gpu_hit_share", hit_share, fig.gpu_tokens, fig.prompt_tokens,
          need={"gpu_tokens": fig.gpu_tokens, "prompt_tokens": fig.prompt_tokens})
    _safe(fig, "store_hit_share", hit_share, fig.store_tokens, fig.prompt_tokens,
          need={"store_tokens": fig.store_tokens, "prompt_tokens": fig.prompt_tokens})
    if math.isnan(fig.store_hit_rate) and d_ext.ok and d_ext_q.ok and d_ext_q.value:
        fig.store_hit_rate = store_hit_rate(d_ext.value, d_ext_q.value)
        fig.store_hit_rate_source = "vLLM counters external hits / external queries (tokens)"
    elif math.isnan(fig.store_hit_rate):
        fig.missing["store_hit_rate"] = (d_ext_q.reason or "no store lookups in the window")

    d_acc = C.counter_delta(sc, C.EMU_PUT_ACCEPTED, t0, t1, target=endpoint, idle=idle)
    d_ref = C.counter_delta(sc, C.EMU_PUT_REFUSED, t0, t1, target=endpoint, idle=idle)
    d_fail = C.counter_delta(sc, C.EMU_LOAD_FAILED, t0, t1, target=endpoint, idle=idle)
    if d_fail.ok:
        # counted as store hits by external_prefix_cache_hits (at lookup), then recomputed
        fig.store_load_failed_tokens = d_fail.value * run.block_size
        if d_ext.ok:
            fig.store_tokens = served_store_tokens(d_ext.value, fig.store_load_failed_tokens)
    if d_acc.ok and d_ref.ok:
        fig.put_blocks, fig.put_refused_blocks = d_acc.value, d_ref.value
        if d_acc.value + d_ref.value > 0:
            fig.refused_share = refusal_share(d_ref.value, d_acc.value + d_ref.value)
            fig.refused_source = "store client counters adev_emulator_store_put_{refused_,}blocks"
        if run.profile is not None:
            fig.refused_bytes = d_ref.value * run.profile.bytes_per_block
    if not _endpoint_split(fig, sc, t0, t1, endpoint, idle):
        _master_split(fig, run, t0, t1)
    _savings(fig, run, allc, starts, ends)
    return fig


def _master_idle(run: Run):
    c = run.calls
    if not len(c):
        return idle_checker(np.empty(0), np.empty(0))
    return idle_checker(c["t_sent"].to_numpy(dtype=float), c["t_end"].to_numpy(dtype=float))


def idle_checker(starts: np.ndarray, ends: np.ndarray):
    """``idle(a, b)``: True when no request interval [s, e] touches [a, b] (a request with no
    end counts as outstanding from its send onwards)."""
    s = np.asarray(starts, dtype=float)
    e = np.asarray(ends, dtype=float)
    e = np.where(np.isnan(e), np.inf, e)
    ok = ~np.isnan(s)
    s, e = s[ok], e[ok]

    def idle(a: float, b: float) -> bool:
        return not bool(np.any((s <= b) & (e >= a)))
    return idle


def _split(fig: WindowFigures, fraction: float, source: str) -> None:
    fig.disk_fraction = fraction
    fig.disk_split_source = source
    if not math.isnan(fig.store_tokens):
        fig.store_disk_tokens = fig.store_tokens * fraction
        fig.store_ram_tokens = fig.store_tokens - fig.store_disk_tokens


def _endpoint_split(fig: WindowFigures, sc, t0: float, t1: float, endpoint: str, idle) -> bool:
    """RAM/disk split of the endpoint's store tokens from its own per-tier counters (the emulated
    endpoint's): blocks served from a tier = lookup hits in it
    (``adev_emulator_store_hit_blocks_total{tier}``) - failed loads from it
    (``adev_emulator_store_load_failed_blocks_total{tier}``). False when the endpoint does not
    export them (a real vLLM) or served nothing in the window."""
    served = {}
    for t in ("ram", "disk"):
        hit = C.counter_delta(sc, C.EMU_HIT_BLOCKS, t0, t1, target=endpoint, idle=idle, match={"tier": t})
        lost = C.counter_delta(sc, C.EMU_LOAD_FAILED, t0, t1, target=endpoint, idle=idle, match={"tier": t})
        if not (hit.ok and lost.ok):
            return False
        served[t] = hit.value - lost.value
    if served["ram"] + served["disk"] <= 0:
        return False
    _split(fig, disk_fraction(served["ram"], served["disk"]),
           "endpoint counters adev_emulator_store_{hit,load_failed}_blocks_total{tier}")
    return True


def _master_split(fig: WindowFigures, run: Run, t0: float, t1: float) -> None:
    """RAM/disk split of the endpoint's store tokens from the master's byte counters (global:
    the same shares for every endpoint; used when the endpoint has no per-tier counter)."""
    ms = run.scrapes.get("master", [])
    idle = _master_idle(run)
    d_mem = C.counter_delta(ms, C.MEM_HIT_BYTES, t0, t1, target="master", idle=idle)
    d_file = C.counter_delta(ms, C.FILE_HIT_BYTES, t0, t1, target="master", idle=idle)
    if not (d_mem.ok and d_file.ok):
        why = C.why(d_mem, d_file)
        for k in ("disk_fraction", "store_ram_tokens", "store_disk_tokens"):
            fig.missing[k] = why
        return
    src = "master byte counters (global shares)"
    if d_mem.value + d_file.value > 0:
        _split(fig, disk_fraction(d_mem.value, d_file.value), src)
    elif not math.isnan(fig.store_tokens) and fig.store_tokens == 0:
        _split(fig, 0.0, src)
    else:
        fig.missing["disk_fraction"] = "the master counted no store reads in the window"
    if math.isnan(fig.disk_fraction) or math.isnan(fig.store_tokens):
        for k in ("store_ram_tokens", "store_disk_tokens"):
            fig.missing[k] = fig.missing.get("disk_fraction") or fig.missing.get("store_tokens", "")


def _savings(fig: WindowFigures, run: Run, allc: pd.DataFrame, starts: np.ndarray,
             ends: np.ndarray) -> None:
    rate = run.prefill_tokens_per_s
    if rate is None:
        fig.missing["prefill_rate"] = run.missing.get("profile", "no model profile")
    b = fig.busy_span_s
    if math.isnan(b):
        fig.missing["busy_span_s"] = "no counter span (boundary scrapes missing)"
    need = {"store_tokens": fig.store_tokens, "prefill_rate": rate, "busy_span_s": b}
    _safe(fig, "gross_saving", gross_saving, fig.store_tokens, rate, b, need=need)
    _safe(fig, "gross_saving_disk", gross_saving, fig.store_disk_tokens, rate, b,
          need={**need, "store_disk_tokens": fig.store_disk_tokens})
    _safe(fig, "disk_share_of_saving", lambda d, s: d / s, fig.store_disk_tokens, fig.store_tokens,
          need={"store_disk_tokens": fig.store_disk_tokens, "store_tokens": fig.store_tokens})

    # emulator per-request figures over the requests admitted in the counter span
    if math.isnan(fig.span_from) or not len(allc):
        return
    srv = allc[allc["has_server"].astype(bool)]
    if not len(srv):
        fig.missing["net_saving"] = ("read-path time not exposed by the endpoint (no `adev` "
                                     "extension field on its responses)")
        fig.missing["net_saving_full"] = fig.missing["net_saving"]
        return
    adm = srv["t_admit"].to_numpy(dtype=float)
    sel = (adm >= fig.span_from) & (adm < fig.span_to)
    r = srv[sel]
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
    n = in_flight(starts, ends, adm[sel])
    _safe(fig, "net_saving", net_saving, fig.gross_saving, rp, n, b,
          need={"gross_saving": fig.gross_saving, "busy_span_s": b})
    _safe(fig, "net_saving_full", net_saving_full, fig.gross_saving, rp, b,
          need={"gross_saving": fig.gross_saving, "busy_span_s": b})
    # effective disk-tier read rate
    bpt = run.bytes_per_token
    if bpt is None or rate is None:
        fig.missing["disk_read_rate"] = run.missing.get("profile", "no model profile")
        return
    fig.recompute_rate = recompute_rate(rate, bpt)
    est = disk_rate_estimate(r["srv_tok_store_ram"].fillna(0).to_numpy(dtype=float) * bpt,
                             r["srv_tok_store_disk"].fillna(0).to_numpy(dtype=float) * bpt,
                             r["srv_load_s"].to_numpy(dtype=float))
    if isinstance(est, str):
        fig.missing["disk_read_rate"] = est
    else:
        fig.disk_read_rate = est
        fig.disk_vs_recompute = fig.disk_read_rate / fig.recompute_rate


def _pool(run: Run, w: dict[str, Any], rows: list[WindowFigures]) -> WindowFigures:
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
    _ttft_block(fig, sent_in)
    _client_block(fig, sent_in, run)

    def ssum(name: str) -> float:
        vals = [getattr(r, name) for r in rows]
        return NAN if not vals or any(math.isnan(v) for v in vals) else float(sum(vals))

    for name in ("busy_s", "busy_span_s", "prompt_tokens", "gpu_tokens", "store_tokens",
                 "store_ram_tokens", "store_disk_tokens", "store_load_failed_tokens",
                 "preemptions", "read_path_s",
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
    _safe(fig, "gpu_hit_share", hit_share, fig.gpu_tokens, fig.prompt_tokens,
          need={"gpu_tokens": fig.gpu_tokens, "prompt_tokens": fig.prompt_tokens})
    _safe(fig, "store_hit_share", hit_share, fig.store_tokens, fig.prompt_tokens,
          need={"store_tokens": fig.store_tokens, "prompt_tokens": fig.prompt_tokens})
    need = {"store_tokens": fig.store_tokens, "prefill_rate": rate, "busy_span_s": b}
    _safe(fig, "gross_saving", gross_saving, fig.store_tokens, rate, b, need=need)
    _safe(fig, "gross_saving_disk", gross_saving, fig.store_disk_tokens, rate, b,
          need={**need, "store_disk_tokens": fig.store_disk_tokens})
    _safe(fig, "disk_share_of_saving", lambda d, s: d / s, fig.store_disk_tokens, fig.store_tokens,
          need={"store_disk_tokens": fig.store_disk_tokens, "store_tokens": fig.store_tokens})
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
        r = pd.concat(parts)
        est = disk_rate_estimate(r["srv_tok_store_ram"].fillna(0).to_numpy(dtype=float) * bpt,
                                 r["srv_tok_store_disk"].fillna(0).to_numpy(dtype=float) * bpt,
                                 r["srv_load_s"].to_numpy(dtype=float))
        if isinstance(est, str):
            fig.missing["disk_read_rate"] = est
        else:
            fig.disk_read_rate = est
            fig.disk_vs_recompute = est / fig.recompute_rate
    _master_block(fig, run, t0, t1)
    return fig


def _master_block(fig: WindowFigures, run: Run, t0: float, t1: float) -> None:
    ms = run.scrapes.get("master", [])
    scale = run.payload_scale
    idle = _master_idle(run)

    def d(names) -> C.Delta | C.NoDelta:
        return C.counter_delta(ms, names, t0, t1, target="master", idle=idle)

    for name, names in (("master_put_alloc_failures", C.PUT_ALLOC_FAILURES),
                        ("master_batch_put_failed_items", C.BATCH_PUT_FAILED_ITEMS),
                        ("master_batch_put_items", C.BATCH_PUT_ITEMS),
                        ("evictions", C.EVICTIONS_OK), ("eviction_attempts", C.EVICTIONS_TRIED),
                        ("evicted_keys", C.EVICTED_KEYS)):
        r = d(names)
        if r.ok:
            setattr(fig, name, r.value)
        else:
            fig.missing[name] = r.reason
    ev = d(C.EVICTED_BYTES)
    mem, fil = d(C.MEM_HIT_BYTES), d(C.FILE_HIT_BYTES)
    if scale is None:
        for k in ("evicted_bytes", "store_gib_served"):
            fig.missing[k] = run.missing.get("payload_scale", "payload scale unknown")
    else:
        if ev.ok:
            fig.evicted_bytes = ev.value * scale
        else:
            fig.missing["evicted_bytes"] = ev.reason
        if mem.ok and fil.ok:
            fig.store_ram_gib = mem.value * scale / GiB
            fig.store_disk_gib = fil.value * scale / GiB
            fig.store_gib_served = fig.store_ram_gib + fig.store_disk_gib
        else:
            fig.missing["store_gib_served"] = C.why(mem, fil)
    if math.isnan(fig.refused_share):
        if not math.isnan(fig.master_batch_put_items) and fig.master_batch_put_items > 0:
            fig.refused_share = refusal_share(fig.master_batch_put_failed_items,
                                              fig.master_batch_put_items)
            fig.refused_source = "master batch_put_start failed items / items"
            if run.profile is not None:
                fig.refused_bytes = fig.master_batch_put_failed_items * run.profile.bytes_per_block
        else:
            fig.missing["refused_share"] = "no offered writes counted (emulator or master)"


def analyse_window(run: Run, w: dict[str, Any]) -> list[WindowFigures]:
    """Figures of one window: one per endpoint, then the ALL row."""
    rows = [analyse_endpoint(run, w, ep) for ep in run.endpoints]
    return rows + [_pool(run, w, rows)]


def cross_check(run: Run) -> pd.DataFrame:
    """Counters vs the emulator's per-request tier split over the measured span: from the first
    valid window's start to the last valid window's end (the whole run when it has no windows),
    each end resolved to its boundary scrape. Calls cancelled or failed after the server counted
    them (e.g. sessions stopped at the end of a run) carry no per-request fields, which is why
    the span stops at the last window. Per-window cross-checks also carry boundary effects: the
    emulator counts a request's hits when its event loop gets to it, which lags the modelled
    admission stamp under load, so a request admitted just before a boundary scrape can land in
    the next span."""
    cols = ["endpoint", "span_from", "span_to", "gpu_tokens", "srv_gpu_tokens", "store_tokens",
            "srv_store_ram_tokens", "srv_store_disk_tokens", "store_disk_tokens",
            "store_load_failed_tokens", "xcheck_gpu_rel", "xcheck_store_rel", "xcheck_disk_rel"]
    ws = [w for w in run.measurement_windows() if w.get("valid", True)]
    if not ws:
        return pd.DataFrame(columns=cols + ["faults"])
    w = {"index": 0, "t0": min(float(x["t0"]) for x in ws),
         "t1": max(float(x["t1"]) for x in ws), "valid": True, "protocol": "measured span"}
    if run.faults is not None:  # the span may cross an invalid window's fault: name it
        w["faults"] = sorted(run.faults.touching(w["t0"], w["t1"]))
    return pd.DataFrame([asdict(f) for f in analyse_window(run, w)])[cols + ["faults"]]


def window_table(run: Run) -> pd.DataFrame:
    """Every window of the run x (endpoints + ALL) as a DataFrame (one row per figure set)."""
    rows: list[dict[str, Any]] = []
    for w in run.measurement_windows():
        rows.extend(asdict(f) for f in analyse_window(run, w))
    if not rows:
        return pd.DataFrame(columns=[f.name for f in WindowFigures.__dataclass_fields__.values()])
    return pd.DataFrame(rows)
