"""What storage planning reads from a run's records (``calls.jsonl`` + manifest, via
:func:`adev.analysis.run.load_run`).

- prefill time per token ``t_prefill = TTFT / context length`` (the source study's definition),
  from the run's calls that hit no cache (``cached_tokens`` 0 or absent, and no store tokens in
  the emulator's extension field): the median over those calls of
  ``(t_first_content - t_sent) / prompt_tokens``;
- KV per session: each session's largest working set x bytes per token; the planner takes the
  mean and the largest over sessions. A session's working set at one of its calls is that
  call's prompt and the latest prompt of each other chain of the session that a later call
  continues (:func:`adev.replay.traces.working_set_tokens`, from the run's reuse ledger): a
  session of one conversation holds its largest prompt, one whose roles are agents of their own
  (``context = "per-role"``) a prompt per agent. A run without a reuse ledger gives each
  session's largest prompt (``kv_per_session_source`` says which);
- new KV per hour: tokens the run computed (prefilled), which become new KV, per model hour:
  ``sum(computed) * bytes_per_token / (span_s / 3600)``, with computed tokens from the
  emulator's extension field when present, else ``prompt_tokens - cached_tokens``, and the span
  from the first send to the last end (model seconds).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import ConfigError
from ..replay.format import TraceError


@dataclass
class RunKV:
    run: str
    bytes_per_token: int
    sessions: int
    kv_per_session_mean_bytes: float
    kv_per_session_max_bytes: float
    computed_tokens: float
    span_s: float
    new_kv_bytes_per_hour: float
    computed_source: str
    kv_per_session_source: str = "largest prompt"


def _load(path: str | Path):
    from ..analysis.run import load_run
    try:
        run = load_run(path)
    except FileNotFoundError as e:
        raise ConfigError(str(e)) from None
    ok = run.calls[run.calls["status"] == "ok"] if len(run.calls) else run.calls
    if not len(ok):
        raise ConfigError(f"{path}: calls.jsonl has no successful calls")
    return run, ok


def prefill_time_per_token(path: str | Path) -> tuple[float, int]:
    """(median t_prefill in model seconds per token, number of uncached calls used)."""
    _, c = _load(path)
    cached = c["cached_tokens"].fillna(0.0)
    store = c["srv_tok_store_ram"].fillna(0.0) + c["srv_tok_store_disk"].fillna(0.0)
    sel = c[(cached <= 0) & (store <= 0) & c["t_first_content"].notna() & (c["prompt_tokens"] > 0)]
    if not len(sel):
        raise ConfigError(f"{path}: no call without a cache hit and with a first token; t_prefill "
                          "needs one (or give --prefill-rate / --profile)")
    t = (sel["t_first_content"] - sel["t_sent"]) / sel["prompt_tokens"]
    return float(np.median(t.to_numpy(dtype=float))), int(len(sel))


def run_kv(path: str | Path, bytes_per_token: int | None = None) -> RunKV:
    """KV per session and new KV per hour of a run (see the module doc). ``bytes_per_token``
    overrides the run's model profile."""
    run, c = _load(path)
    bpt = bytes_per_token or run.bytes_per_token
    if not bpt:
        raise ConfigError(f"{path}: the run's manifest names no model profile "
                          f"({run.missing.get('profile', 'unknown')}); give --profile")
    peak = c.groupby("session_id")["prompt_tokens"].max().dropna()
    if not len(peak):
        raise ConfigError(f"{path}: no call records prompt_tokens")
    kv_src = "largest prompt"
    try:
        held = _working_set_peaks(path)
    except TraceError as e:
        held, kv_src = None, f"largest prompt (the reuse ledger was not read: {e})"
    if held is not None and len(held):
        peak, kv_src = held, "largest working set (reuse ledger)"
    srv = c["srv_tok_computed"]
    if srv.notna().all():
        computed, src = float(srv.sum()), "emulator extension field (tokens.computed)"
    else:
        computed = float((c["prompt_tokens"].fillna(0) - c["cached_tokens"].fillna(0)).sum())
        src = "prompt_tokens - cached_tokens"
    ends = c["t_end"].to_numpy(dtype=float)
    span = float(np.nanmax(ends) - c["t_sent"].min()) if np.isfinite(ends).any() else math.nan
    if not span > 0:
        raise ConfigError(f"{path}: the run's calls span no time (t_sent..t_end)")
    return RunKV(run=str(path), bytes_per_token=int(bpt), sessions=int(len(peak)),
                 kv_per_session_mean_bytes=float(peak.mean()) * bpt,
                 kv_per_session_max_bytes=float(peak.max()) * bpt, computed_tokens=computed,
                 span_s=span, new_kv_bytes_per_hour=computed * bpt / (span / 3600.0),
                 computed_source=src, kv_per_session_source=kv_src)


def _working_set_peaks(path: str | Path) -> np.ndarray | None:
    """Each session's largest working set in tokens (module doc), or None without a reuse
    ledger."""
    from ..analysis.ledger import has_ledger
    from ..replay.importers import import_adev_run
    from ..replay.traces import working_set_tokens
    if not has_ledger(path):
        return None
    trace = import_adev_run(path)
    return np.array([working_set_tokens([cs], trace.block_tokens).max()
                     for cs in trace.sessions().values()], dtype=float)
