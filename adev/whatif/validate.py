"""A run's own tier configuration as simulator parameters, and its predictions beside what it
measured.

:func:`run_params` reads the run's manifest (``config.stack``, the model profile, the tier
profiles) the way the stack set up the master and the endpoints:

- RAM capacity: every endpoint contributes a segment of ``max(16 MiB, ram_gb x 1e9 /
  payload_scale / endpoints)`` real bytes holding blocks of ``bytes_per_block // payload_scale``
  bytes (:mod:`adev.emulator.server`, :mod:`adev.emulator.store`);
- lease TTL ``stack.store.lease_ttl_s`` (model seconds; the master gets it divided by the time
  scale);
- the eviction thread's 10 ms period and the offload heartbeat, both real time, times the time
  scale (the heartbeat: ``max(1, round(stack.store.offload_heartbeat_s / time_scale))`` real
  seconds, :func:`adev.stack.commands.heartbeat_real_s`; 1 s for a run whose manifest
  has no ``offload_heartbeat_s``: a run of an earlier adev version); Mooncake's default high
  watermark (0.90) and eviction ratio (0.05), which the stack does not change;
- disk tier on for ``store-ram+disk``; no store for ``gpu-only`` and ``recompute`` (and no GPU
  prefix cache for ``recompute``).

:func:`validate` simulates the run with them and sets, per window, the prediction beside the
figures :func:`adev.analysis.windows.window_table` computes from the run's records (its pooled
``ALL`` rows).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from ..config import SERIAL_STAGINGS, ConfigError, load_stack, load_tier_profile, stack_model_profile
from ..stack.commands import heartbeat_real_s
from .simulator import Params, Result, figures, simulate
from .workload import Workload, from_run

MIN_SEGMENT = 16 << 20
EVICT_PERIOD_REAL_S = 0.010     # Mooncake's kEvictionThreadSleepMs
OFFLOAD_HEARTBEAT_REAL_S = 1.0  # the heartbeat of runs recorded without store.offload_heartbeat_s
FIGURES = ("store_hit_share", "gpu_hit_share", "refused_share", "gross_saving")


def stack_params(stack: dict[str, Any] | None, time_scale: float | None = None,
                 block_size: int | None = None) -> Params:
    """Parameters of a stack configuration (a manifest's ``config.stack`` dict, or the default
    stack file when None); ``block_size`` re-sizes blocks for a trace's own block size."""
    cfg = stack or {}
    if stack is None:
        from ..config import to_dict
        cfg = to_dict(load_stack())
    store = cfg.get("store") or {}
    prof = stack_model_profile(cfg.get("profile", "qwen3-coder-30b-a3b"), cfg.get("gpu_pool_tokens"))
    ram_t = load_tier_profile(store.get("ram_tier", "ram"))
    disk_t = load_tier_profile(store.get("disk_tier", "local-raid0"))
    conf = cfg.get("configuration", "store-ram+disk")
    s = float(time_scale or cfg.get("time_scale") or 1.0)
    bs = block_size or prof.block_size
    bpb = prof.bytes_per_token * bs
    disk_only = conf == "disk-only"   # the RAM segments are a staging area of ram_gb
    ram_gb = float(store.get("ram_gb", 32.0)) if conf in ("store-ram", "store-ram+disk") \
        or disk_only else 0.0
    cap = None
    if ram_gb > 0 and bs == prof.block_size:
        n_eps = max(1, len(cfg.get("endpoints") or [1, 2]))
        scale = int(cfg.get("payload_scale", 256))
        seg = max(MIN_SEGMENT, int(ram_gb * 1e9 / scale / n_eps))
        cap = n_eps * (seg // max(1, prof.bytes_per_block // scale))
    return Params(gpu_pool_tokens=0 if conf == "recompute" else prof.gpu_pool_tokens,
                  ram_gb=ram_gb, lease_s=float(store.get("lease_ttl_s", 5.0)),
                  disk=conf in ("store-ram+disk", "disk-only"), disk_only=disk_only,
                  bytes_per_block=bpb,
                  ram_read_bytes_per_s=ram_t.read_bytes_per_s,
                  disk_read_bytes_per_s=disk_t.read_bytes_per_s,
                  tick_s=EVICT_PERIOD_REAL_S * s, offload_delay_s=_heartbeat_real_s(store, s) * s,
                  prefill_tokens_per_s=prof.prefill_tokens_per_s, ram_capacity_blocks=cap,
                  batch_keys=max(1, prof.max_num_batched_tokens // bs),
                  chunk_blocks=int(store.get("chunk_blocks", 1)) if bs == prof.block_size else 1,
                  promotion_threshold=int(store.get("promotion_threshold", 2))
                  if store.get("promotion_on_hit") and conf == "store-ram+disk" else 0,
                  promotion_per_heartbeat=int(store.get("promotion_per_heartbeat", 0)),
                  disk_writes="put" if disk_only else str(store.get("disk_writes", "evict")),
                  # a manifest without the key: its run overlapped the hops (the one timing then)
                  # (the simulator has no disk device: "shared" reads as "serial" there)
                  staging="serial" if store.get("staging") in SERIAL_STAGINGS else "overlap")


def _heartbeat_real_s(store: dict[str, Any], time_scale: float) -> float:
    """The offload heartbeat the stack gave the run's endpoints, in real seconds."""
    if "offload_heartbeat_s" not in store:
        return OFFLOAD_HEARTBEAT_REAL_S
    return float(heartbeat_real_s(float(store["offload_heartbeat_s"]), time_scale))


def run_params(run: Any) -> Params:
    """The parameters of a loaded run's own configuration."""
    if run.stack is None:
        raise ConfigError(f"{run.path / 'manifest.json'}: field config.stack missing; the "
                          "run's tier configuration is unknown")
    return stack_params(run.stack, run.time_scale)


def run_windows(run: Any) -> list[tuple[int, float, float]]:
    return [(int(w["index"]), float(w["t0"]), float(w["t1"])) for w in run.measurement_windows()]


def run_busy(run: Any, w: Workload) -> tuple[np.ndarray, np.ndarray]:
    """(send, end) of each workload call from the run's records (busy time as the run's)."""
    c = run.calls.drop_duplicates("call_id", keep="last").set_index("call_id")
    s = c["t_sent"].reindex(w.call_ids).to_numpy(dtype=float)
    e = c["t_end"].reindex(w.call_ids).to_numpy(dtype=float)
    return np.where(np.isnan(s), w.t_admit, s), np.where(np.isnan(e), w.t_end, e)


def simulate_run(run: Any, params: Params | None = None,
                 workload: Workload | None = None) -> tuple[Workload, Result]:
    w = workload or from_run(run)
    r = simulate(w, params or run_params(run))
    return w, figures(w, r, run_windows(run), run_busy(run, w))


@dataclass
class Validation:
    run_id: str
    width: int | None
    lease_s: float | None
    table: pd.DataFrame      # one row per window: predicted and measured figures, difference
    result: Result
    ram_gb: float | None = None


def validate(run: Any) -> Validation:
    """Predictions for the run's own configuration beside its measured window figures."""
    from ..analysis.windows import ALL, window_table
    _, r = simulate_run(run)
    meas = window_table(run)
    meas = meas[meas["endpoint"] == ALL].set_index("window") if len(meas) else meas
    rows = []
    for f in r.windows:
        row: dict[str, Any] = {"window": f.window, "t0": f.t0, "t1": f.t1, "calls": f.calls}
        m = meas.loc[f.window] if len(meas) and f.window in meas.index else None
        for k in FIGURES:
            pred = getattr(f, k)
            got = float(m[k]) if m is not None else math.nan
            row[f"{k}_pred"] = pred
            row[f"{k}_meas"] = got
            row[f"{k}_diff_pp"] = (pred - got) * 100.0
        rows.append(row)
    return Validation(run.run_id, run.width, run.lease_ttl_s, pd.DataFrame(rows), r,
                      r.params.ram_gb)


def lease_ranking(vals: list[Validation]) -> pd.DataFrame:
    """For runs of equal width and RAM tier at different leases: whether the predicted store hit
    shares (mean over windows) order the leases as the measured ones do. A run whose manifest
    does not record its lease cannot be placed in the order and is left out."""
    rows = []
    groups: dict[Any, list[Validation]] = {}
    for v in vals:
        groups.setdefault((v.width, v.ram_gb), []).append(v)
    for (width, ram), vs in sorted(groups.items(), key=lambda kv: (kv[0][0] is None, kv[0])):
        known = [v for v in vs if v.lease_s is not None]
        if len({v.lease_s for v in known}) < 2:
            continue
        vs = sorted(known, key=lambda v: v.lease_s or 0.0)  # no lease is None in `known`
        pred = [float(v.table["store_hit_share_pred"].mean()) for v in vs]
        meas = [float(v.table["store_hit_share_meas"].mean()) for v in vs]
        same = list(np.argsort(pred, kind="stable")) == list(np.argsort(meas, kind="stable"))
        rows.append({"width": width, "ram_gb": ram, "leases": [v.lease_s for v in vs],
                     "pred_store_hit_share": [round(x, 4) for x in pred],
                     "meas_store_hit_share": [round(x, 4) for x in meas],
                     "ranking_kept": bool(same)})
    return pd.DataFrame(rows)


def with_overrides(p: Params, **kw: Any) -> Params:
    """``p`` with some fields changed; a new RAM size drops the stack's exact segment rounding."""
    if "ram_gb" in kw:
        kw.setdefault("ram_capacity_blocks", None)
    return replace(p, **kw)
