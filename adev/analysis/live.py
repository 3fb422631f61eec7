"""Running figures of the current window for the fleet's live display.

``running_figures(window_calls, window_scrapes, t0, t_now)`` takes what the fleet has seen since
the window opened (call and scrape records as dicts) and returns the window-so-far figures,
computed with the same metric functions as the report (:mod:`adev.analysis.figures`):
busy share per endpoint, gross saving, GPU and store hit shares, refusal share, TTFT p50.
Counters are differenced between the first and the latest OK scrape of each target in the list
(a running figure, not the window's final one: in-flight calls are not yet in the busy time).
An endpoint whose release counts a waiting request's prefix cache lookup at every step
(``server_versions``, :mod:`adev.vllm_release`) has its GPU hits from the calls' cached tokens
less its store hits, as the report takes them.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from ..vllm_release import counts_waiting_lookups
from . import counters as C
from .figures import busy_time, gpu_tokens_from_calls, gross_saving, hit_share, pct, refusal_share


@lru_cache(maxsize=4)
def _default_prefill_rate() -> float | None:
    try:
        from ..config import load_model_profile, load_stack
        return load_model_profile(load_stack().profile).prefill_tokens_per_s
    except Exception:
        return None


def _first_last(scrapes: Sequence[dict[str, Any]], target: str, names) -> float | None:
    got = [(s["t"], C.value(s.get("samples") or {}, names)) for s in scrapes
           if s.get("target") == target and s.get("ok")]
    vals = [(t, v) for t, v in sorted(got, key=lambda x: x[0]) if v is not None]
    if len(vals) < 2:
        return None
    acc, prev = 0.0, vals[0][1]
    for _, v in vals[1:]:
        acc += v - prev if v >= prev else v
        prev = v
    return acc


def running_figures(window_calls: Sequence[dict[str, Any]], window_scrapes: Sequence[dict[str, Any]],
                    t0: float, t_now: float, prefill_tokens_per_s: float | None = None,
                    server_versions: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Window-so-far figures (see module docstring); unavailable figures are None."""
    rate = prefill_tokens_per_s or _default_prefill_rate()
    eps: list[str] = sorted({c["endpoint"] for c in window_calls if c.get("endpoint")}
                            | {s["target"] for s in window_scrapes if s.get("target") not in (None, "master")})
    busy_share: dict[str, float | None] = {}
    busy_total = 0.0
    for ep in eps:
        cs = [c for c in window_calls if c.get("endpoint") == ep]
        s = np.array([c.get("t_sent") if c.get("t_sent") is not None else np.nan for c in cs], float)
        e = np.array([c.get("t_end") if c.get("t_end") is not None else np.nan for c in cs], float)
        b = busy_time(s, e, t0, t_now) if t_now > t0 else 0.0
        busy_total += b
        busy_share[ep] = b / (t_now - t0) if t_now > t0 else None
    store = gpu = prompt = 0.0
    have = False
    for ep in eps:
        st = _first_last(window_scrapes, ep, C.EXT_HITS)
        gp = _first_last(window_scrapes, ep, C.PREFIX_HITS)
        pr = _first_last(window_scrapes, ep, C.PROMPT_TOKENS)
        if st is None or gp is None or pr is None:
            continue
        if counts_waiting_lookups((server_versions or {}).get(ep)):
            cached = [c.get("cached_tokens") for c in window_calls
                      if c.get("endpoint") == ep and c.get("status") == "ok"]
            if all(v is None for v in cached):
                continue   # no once-counted GPU hits: the window's shares wait for the report
            gp = gpu_tokens_from_calls(float(sum(v or 0 for v in cached)), st)
        have = True
        store, gpu, prompt = store + st, gpu + gp, prompt + pr
    # per-request fields: put_blocks = accepted writes, put_refused_blocks = refused ones
    put = sum(float((c.get("server") or {}).get("put_blocks") or 0) for c in window_calls)
    refused = sum(float((c.get("server") or {}).get("put_refused_blocks") or 0) for c in window_calls)
    ttft = [c["t_first_content"] - c["t_sent"] for c in window_calls
            if c.get("status") == "ok" and c.get("t_first_content") is not None]
    out: dict[str, Any] = {
        "busy_share": busy_share,
        "gross_saving": (gross_saving(store, rate, busy_total)
                         if have and rate and busy_total > 0 else None),
        "gpu_hit_share": hit_share(gpu, prompt) if have and prompt > 0 else None,
        "store_hit_share": hit_share(store, prompt) if have and prompt > 0 else None,
        "refused_share": refusal_share(refused, put + refused) if put + refused > 0 else None,
        "ttft_p50_s": pct(ttft, 50) if ttft else None,
        "calls": len(window_calls),
    }
    for k, v in list(out.items()):
        if isinstance(v, float) and math.isnan(v):
            out[k] = None
    return out
