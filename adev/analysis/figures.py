"""The figures of docs/design.md §5.1, each defined once, with its formula in the docstring.

Pure functions of numbers and arrays (no run, no window): busy time, requests in flight, gross and
net saving, hit shares and rates, refusal share, tier split, read rates, TTFT and dispatch delay,
and the host-fidelity ratios. :mod:`adev.analysis.windows` assembles them per window and endpoint.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd


def busy_time(starts: np.ndarray, ends: np.ndarray, t0: float, t1: float) -> float:
    """Busy time B = | U_i [s_i, e_i] ∩ [t0, t1) |: the length of the union of the intervals in
    which at least one request is outstanding (sent .. last byte), clipped to the window.
    Intervals with a missing end are ignored (count them separately)."""
    s = np.asarray(starts, dtype=float)
    e = np.asarray(ends, dtype=float)
    ok = ~(np.isnan(s) | np.isnan(e))
    s, e = np.clip(s[ok], t0, t1), np.clip(e[ok], t0, t1)
    keep = e > s
    s, e = s[keep], e[keep]
    if not len(s):
        return 0.0
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    # a new merged interval starts where s_i > max end of everything before it
    starts_new = np.ones(len(s), dtype=bool)
    starts_new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(starts_new)
    seg_end = np.append(idx[1:], len(s)) - 1
    return float(np.sum(run_end[seg_end] - s[idx]))


def in_flight(starts: np.ndarray, ends: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Requests in flight at each time ``a``: #{i : s_i <= a < e_i} (intervals with a missing
    end are not counted)."""
    s = np.asarray(starts, dtype=float)
    e = np.asarray(ends, dtype=float)
    ok = ~(np.isnan(s) | np.isnan(e))
    s, e = np.sort(s[ok]), np.sort(e[ok])
    a = np.asarray(at, dtype=float)
    return np.searchsorted(s, a, side="right") - np.searchsorted(e, a, side="right")


def gross_saving(store_tokens: float, prefill_tokens_per_s: float, busy_s: float) -> float:
    """Gross saving = (store-served tokens / prefill rate) / B: the prefill time the store tier
    spared, as a share of busy time (the GPU prefix cache is not counted: it exists without the
    store). The disk tier's part is the same with the disk tier's tokens."""
    return (store_tokens / prefill_tokens_per_s) / busy_s


def prompt_per_busy_s(prompt_tokens: float, prefill_tokens_per_s: float, busy_s: float) -> float:
    """Prompt intensity = (prompt tokens / prefill rate) / B: the prompt tokens the endpoints take
    per second of busy time, in units of the prefill rate, whatever serves them (GPU cache, store
    or compute). Over the same tokens and busy time it equals gross saving / store hit share, so
    a study that gives those two gives its workload's intensity too."""
    return (prompt_tokens / prefill_tokens_per_s) / busy_s


def net_saving(gross: float, read_path_s: np.ndarray, in_flight_n: np.ndarray,
               busy_s: float) -> float:
    """Net saving = gross - (sum_r read_path_r / n_r) / B, where read_path_r = lookup + load time
    of request r and n_r the requests in flight on its endpoint when its read path started
    (itself included; at least 1): read-path time overlapped with other work is charged
    pro rata."""
    n = np.maximum(np.asarray(in_flight_n, dtype=float), 1.0)
    return gross - float(np.sum(np.asarray(read_path_s, dtype=float) / n)) / busy_s


def net_saving_full(gross: float, read_path_s: np.ndarray, busy_s: float) -> float:
    """Fully charged net saving = gross - (sum_r read_path_r) / B (every read-path microsecond
    charged as if it stalled the GPU)."""
    return gross - float(np.sum(np.asarray(read_path_s, dtype=float))) / busy_s


def hit_share(hit_tokens: float, prompt_tokens: float) -> float:
    """Hit share = tier-hit tokens / prompt tokens (GPU: ``prefix_cache_hits``; store: the
    store-served tokens, ``external_prefix_cache_hits`` less the hit blocks whose load failed
    (:func:`served_store_tokens`); prompt: ``prompt_tokens``; counter deltas)."""
    return hit_tokens / prompt_tokens


def gpu_tokens_from_calls(cached_tokens: float, external_hits: float) -> float:
    """GPU-hit tokens = sum over the calls of ``cached_tokens`` - ``external_prefix_cache_hits``.
    vLLM reports a request's ``prompt_tokens_details.cached_tokens`` once, at admission: its local
    (GPU) plus external (store) hits. The external hits counter also counts each request once,
    at admission, failed loads included. The difference is the GPU's part, for a release whose
    ``prefix_cache_hits`` counts a waiting request at every step (:mod:`adev.vllm_release`)."""
    return cached_tokens - external_hits


def store_hit_rate(hit_blocks: float, lookups: float) -> float:
    """Store hit rate = store-hit blocks / store lookups (keys looked up). Against a real vLLM
    (no per-request fields) the token counters stand in: external hits / external queries."""
    return hit_blocks / lookups


def refusal_share(refused: float, offered: float) -> float:
    """Lease refusals, as a share of offered writes = refused blocks / offered blocks, where
    offered = accepted + refused (blocks already in the store are not offered; blocks a request
    stopped saving after a refusal are not offered either, as in vLLM's connector). Sources, in
    order: the store client's own counters (emulator ``adev_emulator_store_put_blocks_total`` and
    ``..._put_refused_blocks_total`` deltas), its per-request fields (``put_blocks`` = accepted,
    ``put_refused_blocks``), else the master's batch-put failed items / batch-put items. Bytes
    refused = refused blocks x bytes per block (model scale)."""
    return refused / offered


def evicted_unread_share(unread: float, evicted: float) -> float:
    """RAM writes that no one read: blocks the RAM tier evicted (memory freed) that no lookup,
    read or existence check had touched since their put / blocks it evicted. A store whose
    turnover is mostly such blocks spends its write bandwidth and its eviction on data that is
    never served. Source: the what-if store model's counters (``adev.whatif.store``); a real
    Mooncake master does not count it."""
    return unread / evicted


def tier_tokens_from_bytes(master_bytes: float, payload_scale: float,
                           bytes_per_token: float) -> float:
    """Tokens served by a store tier from the master's byte counter: the master counts stored
    (scaled) bytes, so model bytes = bytes x payload_scale; tokens = model bytes / bytes per
    token."""
    return master_bytes * payload_scale / bytes_per_token


def disk_fraction(ram: float, disk: float) -> float:
    """Disk tier's share of store reads = disk / (ram + disk), from counter deltas: the
    endpoint's blocks served per tier (``adev_emulator_store_hit_blocks_total{tier}`` -
    ``adev_emulator_store_load_failed_blocks_total{tier}``) where it exports them, else the master's
    ``file_cache_hit_bytes`` / (``mem_cache_hit_bytes`` + ``file_cache_hit_bytes``) (global: the
    same share for every endpoint). Each endpoint's store tokens are split RAM/disk by it."""
    return disk / (ram + disk)


def served_store_tokens(ext_hit_tokens: float, load_failed_tokens: float) -> float:
    """Store-served tokens = external prefix-cache hits (counted at lookup) - tokens of hit blocks
    whose load failed (recomputed; ``adev_emulator_store_load_failed_blocks_total`` x block
    size). Without the failure counter (a real vLLM) the hits are taken as served."""
    return ext_hit_tokens - load_failed_tokens


def effective_read_rate(bytes_loaded: float, load_s: float) -> float:
    """Effective tier read rate = model bytes loaded / load time (bytes/s) (emulator ``tokens`` x
    bytes per token and ``load_s``; see :func:`disk_rate_estimate` for which requests); compare
    with the recompute-equivalent rate :func:`recompute_rate`."""
    return bytes_loaded / load_s


def recompute_rate(prefill_tokens_per_s: float, bytes_per_token: float) -> float:
    """Recompute-equivalent rate = prefill rate x bytes per token (bytes/s of KV the GPU produces
    by recomputing): a tier read slower than this loses to recompute."""
    return prefill_tokens_per_s * bytes_per_token


def pct(x: Any, q: float) -> float:
    """Percentile ``q`` (numpy linear interpolation) of the non-NaN values; NaN if none."""
    a = np.asarray(x, dtype=float)
    a = a[~np.isnan(a)]
    return float(np.percentile(a, q)) if len(a) else math.nan


def ttft_from_send(c: pd.DataFrame) -> np.ndarray:
    """TTFT from send = t_first_content - t_sent (first chunk with content, reasoning or a
    tool-call delta), per OK call."""
    return (c["t_first_content"] - c["t_sent"]).to_numpy(dtype=float)


def ttft_from_schedule(c: pd.DataFrame) -> np.ndarray:
    """TTFT from schedule = t_first_content - t_scheduled (includes the client's dispatch delay)."""
    return (c["t_first_content"] - c["t_scheduled"]).to_numpy(dtype=float)


def ttft_model_error(observed_s, modelled_s) -> np.ndarray:
    """Emulator fidelity per call: (TTFT from send - the endpoint's modelled TTFT) / modelled
    TTFT, both in model seconds (``adev.ttft_s``: arrival -> first token on the engine's model
    clock). What a client saw beyond the model: the HTTP hops and process wake-ups, and real
    store I/O slower than its tier profile (at time scale S each wall millisecond is S model
    ms). Only the emulated endpoint models TTFT; NaN where a call has no such figure."""
    o = np.asarray(observed_s, dtype=float)
    m = np.asarray(modelled_s, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(m > 0, (o - m) / m, np.nan)


def store_read_over_profile(host_s, modelled_s) -> np.ndarray:
    """Real store reads against the tier profile, per call that loaded store hits: the endpoint's
    read path as it ran on this host (``adev.read_path_host_s``: store lookup through the end of
    the real load, wall seconds x S) / its modelled read path (``adev.read_path_s`` = lookup +
    load from the tier profiles), both in model seconds. Above 1 the host's real Mooncake reads
    were slower than the profile says at this time scale; the engine waits for them, so the
    excess shows up in TTFT over the model (:func:`ttft_model_error`). ``bench/bench_store_io.py``
    prints the largest S at which each read path keeps pace. NaN where a call has no figure."""
    h = np.asarray(host_s, dtype=float)
    m = np.asarray(modelled_s, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(m > 0, h / m, np.nan)


def store_read_late(host_s, modelled_s) -> np.ndarray:
    """Whether a call's real store read fell behind its tier profile: 1.0 where
    ``read_path_host_s > read_path_s`` (see :func:`store_read_over_profile`), else 0.0; NaN where
    a call has no figure. The mean over a window's calls that loaded store hits is its
    ``store_late_share``. With the held model clock (``stack.model_clock = "held"``) model time
    stood still while such a read ended, so no figure of the run sees the lag; with the free
    clock the request joined late and the lag is in TTFT and in what followed."""
    h = np.asarray(host_s, dtype=float)
    m = np.asarray(modelled_s, dtype=float)
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(h) & np.isfinite(m), (h > m).astype(float), np.nan)


def held_share(held_wall_s: float, wall_s: float) -> float:
    """Share of a run's wall time in which its held model clock stood still:
    ``held_wall_s / wall_s`` (the ``model_clock_held`` events, summed over the run's stacks).
    Model time ran ``time_scale x (1 - held_share)`` model seconds per wall second on average;
    what the stack does on the wall (the Mooncake master's eviction ticks, the store clients'
    offload heartbeat) ran that much more often per model second than at a share of 0. NaN
    without wall time."""
    return held_wall_s / wall_s if wall_s > 0 else math.nan


def offload_heartbeat_model_s(heartbeat_real_s: float, time_scale: float, held: float) -> float:
    """The disk tier's offload heartbeat as it came in model time: Mooncake's client writes the
    objects the master chose for eviction every ``heartbeat_real_s`` wall seconds, whatever the
    model clock does, so with the clock held for a share ``held`` of the wall time (:func:`held_share`)

        heartbeat_real_s x time_scale x (1 - held)

    model seconds apart on average, against ``heartbeat_real_s x time_scale`` with the clock
    never held. Until it comes, an object chosen for eviction keeps its RAM, so a shorter
    heartbeat frees RAM sooner and refuses fewer writes (``adev whatif --offload-heartbeat``)."""
    return heartbeat_real_s * time_scale * (1.0 - held)


def dispatch_delay(c: pd.DataFrame) -> np.ndarray:
    """Dispatch delay = t_sent - t_scheduled (call ready -> request written)."""
    return (c["t_sent"] - c["t_scheduled"]).to_numpy(dtype=float)


def rel_diff(a: float, b: float) -> float:
    """|a - b| / max(|b|, 1): agreement of a cross-checked figure ``a`` with the reference ``b``."""
    return abs(a - b) / max(abs(b), 1.0)


def disk_rate_estimate(ram_bytes: np.ndarray, disk_bytes: np.ndarray,
                       load_s: np.ndarray) -> float | str:
    """Effective disk-tier read rate (bytes/s) from per-request loads, or a reason string.

    With requests whose store tokens all came from disk: :func:`effective_read_rate` over them
    (sum of disk bytes / sum of load time). Otherwise the per-tier rates are separated by a
    non-negative least-squares fit ``load_s = a + ram_bytes / R_ram + disk_bytes / R_disk`` over
    the requests that loaded anything (needs >= 3 of them, some from disk); rate = R_disk. A fit
    whose disk time is below a billionth of the load time (numerically zero) gives no rate.
    """
    ok = ~np.isnan(load_s)
    ram, disk, load = ram_bytes[ok], disk_bytes[ok], load_s[ok]
    only = (disk > 0) & (ram == 0)
    if only.any() and load[only].sum() > 0:
        return effective_read_rate(float(disk[only].sum()), float(load[only].sum()))
    any_load = (disk + ram) > 0
    if (disk[any_load] > 0).sum() < 1 or any_load.sum() < 3:
        return "too few requests loading from the disk tier in the window"
    from scipy.optimize import nnls
    a = np.column_stack([np.ones(any_load.sum()), ram[any_load] / 1e9, disk[any_load] / 1e9])
    coef, _ = nnls(a, load[any_load])
    # the fitted disk time (coef x disk GB) below a billionth of the load time is rounding noise
    if coef[2] * disk[any_load].sum() / 1e9 <= 1e-9 * load[any_load].sum():
        return "disk loads not separable from RAM loads (fit gave no disk time)"
    return 1e9 / coef[2]
