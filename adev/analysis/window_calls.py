"""Call-level figures of a window: TTFT, dispatch delay and the emulator's per-request fields
(store keys, refusals, modelled TTFT and store reads) over the calls *sent* in the window."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .figures import (
    dispatch_delay,
    pct,
    refusal_share,
    store_hit_rate,
    store_read_late,
    store_read_over_profile,
    ttft_from_schedule,
    ttft_from_send,
    ttft_model_error,
)
from .run import Run
from .window_row import NAN, WindowFigures


def ttft_block(fig: WindowFigures, c: pd.DataFrame) -> None:
    """TTFT from send and from schedule, first byte and dispatch delay of the calls ``c``."""
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


def client_block(fig: WindowFigures, c: pd.DataFrame, run: Run) -> None:
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


def calls_of(run: Run, endpoint: str | None) -> pd.DataFrame:
    """The run's calls to ``endpoint`` (all calls when None)."""
    c = run.calls
    if endpoint is not None and len(c):
        c = c[c["endpoint"] == endpoint]
    return c

