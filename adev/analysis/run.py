"""A run directory loaded for analysis: :func:`load_run` -> :class:`Run`.

The report, the notebooks and the fleet's end-of-run summary all read runs through this one API.
Everything the figures need from the manifest (profile -> prefill rate and bytes per token,
payload scale, lease TTL, width, pause) is resolved here once; a value that cannot be found is
None and ``Run.missing[name]`` says why (figures that need it are then reported missing, never
filled in with a default).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..config import ConfigError, ModelProfile, from_dict, stack_model_profile
from ..emulator.schema import scalar_fields, token_fields
from ..records import RecordError, RunDir, read_json

SERVER_SCALARS = scalar_fields()
"""Numeric fields of the endpoint's extension object (``adev.emulator.schema.EndpointExtension``),
tabulated as ``srv_<name>``."""
SERVER_TIERS = token_fields()
"""Fields of its ``tokens`` split (``TokenSplit``), tabulated as ``srv_tok_<name>``."""


@dataclass
class Scrape:
    t: float
    ok: bool
    samples: dict[str, float]
    error: str | None = None


def _dig(d: Any, *path: str) -> Any:
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return d


@dataclass
class Run:
    path: Path
    run_id: str
    manifest: dict[str, Any]
    calls: pd.DataFrame
    scrapes: dict[str, list[Scrape]]
    windows: list[dict[str, Any]]
    sessions: pd.DataFrame
    gates: pd.DataFrame
    events: pd.DataFrame
    torn: dict[str, int]
    stack: dict[str, Any] | None
    fleet: dict[str, Any] | None
    profile: ModelProfile | None
    time_scale: float | None
    payload_scale: float | None
    lease_ttl_s: float | None
    width: int | None
    pause_s: float | None
    protocol: str | None
    configuration: str | None
    label: str
    disk_tier: str | None = None
    clock_t0_mono: float | None = None
    clock_source: str = ""
    missing: dict[str, str] = field(default_factory=dict)
    faults: Any = None  # adev.analysis.faults.FaultTracker over the run's records
    # each endpoint's release as its server answered GET /version (endpoints.json; an endpoint
    # that answered none, or a run from before the file, is absent)
    server_versions: dict[str, str] = field(default_factory=dict)

    # -- derived constants -------------------------------------------------------------------
    @property
    def prefill_tokens_per_s(self) -> float | None:
        return self.profile.prefill_tokens_per_s if self.profile else None

    @property
    def bytes_per_token(self) -> int | None:
        return self.profile.bytes_per_token if self.profile else None

    @property
    def block_size(self) -> int:
        return self.profile.block_size if self.profile else 16

    @property
    def endpoints(self) -> list[str]:
        eps = set(self.calls["endpoint"].dropna().unique()) if len(self.calls) else set()
        eps |= {k for k in self.scrapes if k != "master"}
        return sorted(eps)

    @cached_property
    def ledger(self):
        """The reuse ledger (:class:`adev.analysis.ledger.Ledger`) or None (see missing)."""
        from .ledger import read_ledger
        try:
            return read_ledger(self.path)
        except FileNotFoundError as e:
            self.missing["ledger"] = str(e)
            return None

    def measurement_windows(self) -> list[dict[str, Any]]:
        """The run's windows, each with the faults that touched it (and invalid when the rule of
        :mod:`adev.analysis.faults` says so); a run without ``windows.jsonl`` is one window over
        its calls (first send .. last end), marked ``protocol='whole-run'``."""
        from .faults import mark_windows
        if self.windows:
            return mark_windows(sorted(self.windows, key=lambda w: (w["t0"], w["index"])),
                                self.faults)
        c = self.calls
        if not len(c):
            return []
        t0 = float(c["t_sent"].min())
        t1 = float(np.nanmax(c["t_end"].to_numpy(dtype=float))) if c["t_end"].notna().any() else t0
        fleet = self.manifest.get("kind") == "fleet"  # a fleet run records its windows
        return mark_windows([{"run_id": self.run_id, "index": 0, "t0": t0, "t1": t1,
                              "valid": not fleet, "protocol": "whole-run",
                              "reason": "no windows.jsonl: the whole run is one window"
                              + (" (a fleet run without windows: stopped before its first "
                                 "window, or the file is lost)" if fleet else "")}],
                            self.faults)


def _flatten_calls(rows: list[dict[str, Any]]) -> pd.DataFrame:
    from ..records import CallRecord
    cols = [f.name for f in dataclasses.fields(CallRecord) if f.name != "server"]
    if not rows:
        df = pd.DataFrame(columns=cols + [f"srv_{k}" for k in SERVER_SCALARS]
                          + [f"srv_tok_{k}" for k in SERVER_TIERS] + ["has_server"])
        return df
    flat = []
    for r in rows:
        srv = r.get("server") or None
        d = {k: r.get(k) for k in cols}
        d["has_server"] = srv is not None
        for k in SERVER_SCALARS:
            v = srv.get(k) if srv else None
            d[f"srv_{k}"] = float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else np.nan
        toks = (srv or {}).get("tokens") or {}
        for k in SERVER_TIERS:
            v = toks.get(k) if isinstance(toks, dict) else None
            d[f"srv_tok_{k}"] = float(v) if isinstance(v, (int, float)) else np.nan
        flat.append(d)
    df = pd.DataFrame(flat)
    for c in ("t_scheduled", "t_sent", "t_first_byte", "t_first_content", "t_end", "prompt_tokens",
              "completion_tokens", "cached_tokens"):
        df[c] = pd.to_numeric(df[c], errors="coerce").astype(float)
    return df


def load_run(path: str | Path) -> Run:
    """Load a run directory (``results/runs/<id>``) for analysis."""
    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"run directory not found: {p}")
    rd = RunDir(p)
    manifest = rd.manifest()
    missing: dict[str, str] = {}
    if not manifest:
        missing["manifest"] = f"{p / 'manifest.json'} missing or empty"
    cfg = manifest.get("config") or {}
    stack = cfg.get("stack") if isinstance(cfg.get("stack"), dict) else None
    if stack is None and isinstance(cfg, dict) and "profile" in cfg and "store" in cfg:
        stack = cfg
    fleet = cfg.get("fleet") if isinstance(cfg.get("fleet"), dict) else None
    if stack is None and fleet and isinstance(fleet.get("stack"), dict):
        stack = fleet["stack"]

    profile = None
    prof_src = manifest.get("profile") if isinstance(manifest.get("profile"), dict) else None
    try:
        if prof_src:
            profile = from_dict(ModelProfile, prof_src, "manifest.profile")
        elif stack and stack.get("profile"):
            profile = stack_model_profile(stack["profile"], stack.get("gpu_pool_tokens"))
        else:
            missing["profile"] = "manifest names no model profile (config.stack.profile)"
    except ConfigError as e:
        missing["profile"] = f"model profile unreadable: {e}"

    def num(v: Any) -> float | None:
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    time_scale = num(manifest.get("time_scale")) or num(_dig(stack, "time_scale"))
    payload_scale = num(_dig(stack, "payload_scale"))
    if payload_scale is None:
        missing["payload_scale"] = "config.stack.payload_scale not in the manifest"
    lease = num(_dig(stack, "store", "lease_ttl_s"))
    if lease is None:
        missing["lease_ttl_s"] = "config.stack.store.lease_ttl_s not in the manifest"
    width = _dig(fleet, "width") if fleet else manifest.get("width")
    width = int(width) if isinstance(width, (int, float)) and not isinstance(width, bool) else None
    if width is None:
        missing["width"] = "config.fleet.width not in the manifest"
    pause = num(_dig(fleet, "pause_s")) if fleet else num(manifest.get("pause_s"))
    protocol = manifest.get("protocol") or _dig(fleet, "protocol")
    configuration = _dig(stack, "configuration")
    disk_tier = _dig(stack, "store", "disk_tier")
    label = str(_dig(fleet, "name") or manifest.get("run_id") or p.name)

    scrapes: dict[str, list[Scrape]] = {}
    for r in rd.iter_records("scrapes", strict=True):
        scrapes.setdefault(r.get("target", "?"), []).append(
            Scrape(float(r.get("t", math.nan)), bool(r.get("ok")), r.get("samples") or {},
                   r.get("error")))
    for v in scrapes.values():
        v.sort(key=lambda s: s.t)

    from .faults import tracker_from_records
    raw_calls = rd.read("calls", strict=True)
    calls = _flatten_calls(raw_calls)
    t0_mono, clock_src = _clock_t0(p, manifest, calls, time_scale)
    add_admission(calls, t0_mono, time_scale)
    torn = {k: rd.torn_lines(k) for k in ("calls", "scrapes", "windows", "sessions", "gates",
                                          "events")}
    windows, events = rd.read("windows", True), rd.read("events", True)
    sessions = rd.read("sessions", True)
    faults = tracker_from_records({"calls": raw_calls, "scrapes": rd.read("scrapes"),
                                   "sessions": sessions, "events": events})
    if not windows:
        missing["windows"] = (f"{p / 'windows.jsonl'} missing or empty: the whole run is "
                              "treated as one window"
                              + (", invalid (a fleet run without windows: stopped before its "
                                 "first window, or the file is lost)"
                                 if manifest.get("kind") == "fleet" else ""))
    return Run(path=p, run_id=manifest.get("run_id") or p.name, manifest=manifest,
               calls=calls, scrapes=scrapes, faults=faults, server_versions=_server_versions(p),
               windows=windows, sessions=rd.frame("sessions"),
               gates=rd.frame("gates", True), events=rd.frame("events"),
               torn={k: v for k, v in torn.items() if v}, stack=stack, fleet=fleet,
               profile=profile, time_scale=time_scale, payload_scale=payload_scale,
               lease_ttl_s=lease, width=width, pause_s=pause, protocol=protocol,
               configuration=configuration, label=label, disk_tier=disk_tier,
               clock_t0_mono=t0_mono, clock_source=clock_src, missing=missing)


def _server_versions(path: Path) -> dict[str, str]:
    """Endpoint -> release from ``endpoints.json`` ({} when the run has none)."""
    f = path / "endpoints.json"
    if not f.exists():
        return {}
    doc = read_json(f, "an endpoints file adev wrote", RecordError)
    if not isinstance(doc, dict):
        raise RecordError(f"{f}: not a JSON object; not an endpoints file adev wrote")
    return {str(k): v["server_version"] for k, v in doc.items()
            if isinstance(v, dict) and isinstance(v.get("server_version"), str)}


def _clock_t0(path: Path, manifest: dict[str, Any], calls: pd.DataFrame,
              time_scale: float | None) -> tuple[float | None, str]:
    """The run clock's origin on the host monotonic clock (to place the emulator's server stamps
    on the run's time axis): ``fleet.json`` / the manifest's ``clock.t0_mono`` when recorded, else
    the tightest bound from the calls, ``max_i(t_end_mono_i - t_end_i / time_scale)`` (the
    client's last byte comes after the server's)."""
    import json
    for src in (path / "fleet.json", None):
        try:
            doc = json.loads(src.read_text()) if src is not None else manifest
        except (OSError, ValueError):
            continue
        v = _dig(doc, "clock", "t0_mono")
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v), f"{src.name if src else 'manifest.json'} clock.t0_mono"
    if time_scale and len(calls) and "srv_t_end_mono" in calls and calls["srv_t_end_mono"].notna().any():
        est = calls["srv_t_end_mono"] - calls["t_end"] / time_scale
        if est.notna().any():
            return float(est.max()), "estimated from calls (max of t_end_mono - t_end / time_scale)"
    return None, "unknown"


ADMIT_TOL_S = 1.0
"""Model seconds a server's admission stamp may lie outside its call (send to end) and still be
read on the run's clock (:func:`add_admission`)."""


def add_admission(calls: pd.DataFrame, t0_mono: float | None, time_scale: float | None) -> None:
    """Column ``t_admit``: when the endpoint admitted the request (and counted its cache hits),
    in run model seconds: ``(t_arrival_mono - t0_mono) x time_scale + queue_s`` from the server's
    own stamps when the clock origin is known and the result lies within the call (from
    :data:`ADMIT_TOL_S` before its send to as long after its end), else ``t_sent + queue_s``; NaN
    without the extension field. A stamp outside its call is on another clock: each run of a
    batch fleet starts a stack of its own, whose held clock has an origin of its own."""
    if not len(calls):
        calls["t_admit"] = pd.Series(dtype=float)
        return
    q = calls["srv_queue_s"].fillna(0.0)
    adm = calls["t_sent"] + q
    if t0_mono is not None and time_scale:
        srv = (calls["srv_t_arrival_mono"] - t0_mono) * time_scale + q
        end = calls["t_end"].fillna(np.inf)
        inside = (srv >= calls["t_sent"] - ADMIT_TOL_S) & (srv <= end + ADMIT_TOL_S)
        adm = srv.where(calls["srv_t_arrival_mono"].notna() & (calls["srv_t_arrival_mono"] > 0)
                        & inside, adm)
    calls["t_admit"] = adm.where(calls["has_server"].astype(bool))
