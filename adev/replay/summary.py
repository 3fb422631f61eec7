"""Figures of one replay run, computed from its records only (``replay.jsonl``, ``calls.jsonl``,
``scrapes.jsonl``, ``manifest.json``). Formulas that the fleet analysis already defines are
called from :mod:`adev.analysis.figures`, not restated. A figure that cannot be computed is None
with its reason in ``missing``.

- ``throughput_rps`` = OK calls / ``span_s``, where ``span_s`` = last call end - first call
  ready (model seconds);
- ``calls_in_flight_mean`` = sum over OK calls of (end - ready) / the same span: the mean number
  of calls in flight (the long gap allows at most 16);
- the drain (:func:`drain_start`): ``drain_start_s``, the moment fewer sessions have calls left
  than the schedule has slots (the short gap's ``active`` sessions, the long gap's
  ``max_in_flight`` calls), after which slots stay empty for good and the last sessions' turns
  run with less and less beside them; ``drain_share`` = (last call end - drain_start_s) / the
  span; ``throughput_full_rps`` = OK calls that ended by drain_start_s / (drain_start_s - first
  call ready): the throughput while every slot could be filled. None for the timestamps
  schedule (no slots) and, for throughput_full_rps, where the drain is the whole run (fewer
  sessions than slots);
- ``ttft_p50/p90/p99_s``: user TTFT (:class:`adev.replay.experiment.ReplayRecord.ttft_s`);
  ``ttft_later_p99_s``: its p99 over later turns only (not a session's first call, which no
  cache can serve: where first calls are long and many, as in a trace of short sessions, they
  alone make the p99 of every configuration);
  ``ttft_by_group_p50_s``: its median per prompt-length group, also as one key per group
  (:data:`GROUP_P50_KEYS`: ``ttft_p50_upto32k_s`` ... ``ttft_p50_over96k_s``) for the shapes;
- where the user TTFT goes (:func:`ttft_parts`): ``ttft_mean_s`` and ``ttft_<part>_mean_s``
  for the parts :data:`TTFT_PARTS` (queue, read path, prefill, KV transfer, the rest), means
  over the OK calls whose every request carries the emulator's figures;
- ``itl_p50_s``: median of the calls' mean inter-token latency;
- ``exact_output_share``: OK calls whose live output length equals the recorded one;
- ``stickiness``: non-initial turns on their session's preferred prefill replica / non-initial
  turns; ``traffic``: calls per ``"prefill>decode"`` pair, and ``traffic_shares``;
- ``dispatch_delay_p99_s``: :func:`adev.analysis.figures.dispatch_delay` of the first request of
  every call;
- ``prompt_load`` = (sum over OK calls of the model profile's prefill time of the whole prompt
  from position 0, ``prefill_time.chunk_s(prompt tokens)``, / the same span) / prefill replicas:
  the offered prompt work against the prefill capacity. Under
  ``recompute`` it is the prefill replicas' utilisation; near or above 1 the replay is
  prefill-bound and the configurations' throughputs can part, well below 1 the schedule, not the
  service, sets the throughput;
- ``experiment``, ``seed`` and ``configuration`` (the manifest's replay options; a run
  whose manifest names no configuration: its label without the ``-s<seed>``): the point the
  run was made at;
- store figures, counter deltas between the first and last OK scrape of each target:
  ``store_load_bytes`` = blocks the endpoints loaded from the store (RAM + disk tiers) x model
  bytes per block; ``promoted_bytes`` = the master's completed promotions' bytes x payload scale
  (disk-only objects copied back to RAM after a hit, ``store.promotion_on_hit``; 0 when off),
  ``promotions`` their count;
  ``physical_read_bytes`` = the bytes loaded from the disk tier + promoted_bytes (a promotion
  reads the disk as a load does); ``physical_read_share`` = physical_read_bytes /
  store_load_bytes (None without loads);
  ``refused_share``: :func:`adev.analysis.figures.refusal_share` of the endpoints' refused and
  accepted blocks; ``unsaved_bytes`` = (refused + skipped blocks) x model bytes per block: the KV
  that saves offered and the store refused, and the KV that saves skipped while the store was
  under pressure would have offered, per save (a refused or skipped range is offered again by the
  request's next prefill step, so a block can count more than once, and a block counted here may
  be stored by a later save); ``evictions`` =
  the master's successful eviction cycles; ``evicted_bytes`` = its evicted bytes x payload scale
  (model bytes); ``disk_read_rate_Bps``: :func:`adev.analysis.figures.disk_rate_estimate` over
  the calls' tier split and load time (the rate of a load while it runs);
  ``disk_read_avg_Bps`` = physical_read_bytes / the span of ``throughput_rps``: the disk tier's
  read rate averaged over the run, the way the source states its figures ("about 34.6 TiB at an
  average 3.40 GiB/s" is a run of 34.6 TiB / 3.40 GiB/s = 10,420 s, its 7,903 calls at 0.76
  requests/s). It moves with throughput and with the share of loads the disk serves, and is
  bounded by the device's rate when the replicas keep the device busy;
  ``disk_wait_mean_s``, ``disk_wait_p99_s``: mean and p99 over the requests that loaded from the
  disk tier of their wait for the disk device the stack's endpoints share (``adev.disk_wait_s``,
  part of their modelled load; :mod:`adev.emulator.disk_device`); ``load_wait_mean_s``,
  ``load_wait_p99_s``: the same over the requests that loaded from the store, of their wait for
  a load thread of their endpoint (``adev.load_wait_s``; 0 without ``store.load_threads``);
  ``stored_bytes`` = blocks the store accepted from the endpoints' puts x model bytes per block:
  the KV the store took in (with the disk tier written at put, as the replay's own stack does,
  also the disk tier's writes);
- volumes per call, which a slice and the whole trace can be read beside: ``<volume>_per_call``
  = the run's ``<volume>`` / ``ok_calls``, for ``stored_bytes``, ``store_load_bytes``,
  ``physical_read_bytes`` and ``evicted_bytes`` (None where the volume or the calls are
  missing). The stored bytes per call are the trace's new content as the store sees it (what no
  earlier call left there, recomputed prefixes included), the reads and evictions its reuse;
- host fidelity: ``time_scale`` (the manifest's; ``time_scale_chosen``: whether pilots chose it,
  :mod:`adev.replay.pace`), ``store_read_over_profile_p50/p99``
  (:func:`adev.analysis.figures.store_read_over_profile`, over the ``store_read_calls`` calls
  that loaded store hits, as the fleet's windows count it; ``reads_at_pace``: the median at
  most :data:`READS_AT_PACE`, None without such calls) and ``ttft_over_model_p50/p99``
  (:func:`adev.analysis.figures.ttft_model_error` of TTFT from send against the endpoint's
  modelled TTFT), over the calls that carry the emulator's figures;
  ``user_ttft_over_model_p50/p99``: the same for the user TTFT (the study's headline figure)
  against the model's: ``ttft_model_error(ttft_s, m)`` per OK replay call, ``m`` the sum of the
  modelled TTFTs of its requests (the prefill request's and the decode request's under P/D; the
  model puts nothing between them or before the first), over the calls whose every request
  carries the emulator's figure; ``read_overrun_s``: the model seconds by which model time passed
  store reads' modelled ends before they ended (the endpoints'
  ``adev_emulator_read_path_overrun_seconds_total`` deltas; 0 where the held clock held).
"""
from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from ..analysis import counters as K
from ..analysis.figures import (
    disk_rate_estimate,
    dispatch_delay,
    pct,
    refusal_share,
    store_read_over_profile,
    ttft_from_send,
    ttft_model_error,
)
from ..records import RunDir
from .traces import GROUPS

GROUP_P50_KEYS = {"<=32K": "ttft_p50_upto32k_s", "32-64K": "ttft_p50_32to64k_s",
                  "64-96K": "ttft_p50_64to96k_s", ">96K": "ttft_p50_over96k_s"}
"""The summary key of each prompt-length group's median user TTFT (``ttft_by_group_p50_s``)."""

READS_AT_PACE = 1.2
"""A run's real store reads keep pace with the tier profile where their median is at most this
many times the profile's (``reads_at_pace``)."""


def _f(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def _delta(scrapes: list[dict[str, Any]], names, match: dict[str, str] | None = None
           ) -> float | None:
    ok = [s for s in scrapes if s.get("ok") and K.value(s.get("samples") or {}, names, match)
          is not None]
    if len(ok) < 2:
        return None
    ok.sort(key=lambda s: s["t"])
    return (K.value(ok[-1]["samples"], names, match) or 0.0) - (
        K.value(ok[0]["samples"], names, match) or 0.0)


def split_label(label: str) -> tuple[str, str]:
    """(configuration, seed) of a run label ``<configuration>-s<seed>``; a label without
    ``-s``: (the label, "")."""
    conf, sep, seed = label.rpartition("-s")
    return (conf, seed) if sep else (label, "")


def request_ids(rec: dict[str, Any]) -> list[str]:
    """The call ids of a replay call's requests on the endpoints: the call's own when it is
    decoded where it is prefilled, else its prefill request's (the call's + ``-prefill``) and its
    decode request's."""
    cid = rec["call_id"]
    return [cid] if rec.get("decode") == "colocated" else [cid + "-prefill", cid]


def user_ttft_over_model(recs: list[dict[str, Any]], modelled: dict[str, float]) -> np.ndarray:
    """Per replay call (``recs``: OK records of ``replay.jsonl``), its user TTFT against the sum of
    the modelled TTFTs of its requests (``modelled``: call id -> the endpoint's ``ttft_s``; the
    prefill request's id is the call's + ``-prefill``); calls with a request the model does not
    cover are left out."""
    obs, mod = [], []
    for r in recs:
        ms = [modelled.get(p) for p in request_ids(r)]
        if any(m is None or m != m for m in ms):
            continue
        obs.append(r["ttft_s"])
        mod.append(sum(ms))   # type: ignore[arg-type]
    return ttft_model_error(obs, mod)


TTFT_PARTS = ("queue", "read_path", "prefill", "transfer", "rest")
"""The parts of a call's user TTFT (:func:`ttft_parts`)."""


def ttft_parts(recs: list[dict[str, Any]], srv: dict[str, tuple[float, float, float, float]]
               ) -> dict[str, float] | None:
    """Where the user TTFT of the OK replay calls ``recs`` went, mean model seconds per call,
    from the figures of the call's requests (``srv``: request call id -> its ``queue_s``,
    ``read_path_s``, ``prefill_s``, ``transfer_s``; the prefill request's id is the call's +
    ``-prefill``), each summed over the call's requests:

        queue     = queue_s: arrival to admission (waiting for token budget or for blocks)
        read_path = read_path_s: the store lookup and load, their waits for the disk device and
                    for a load thread included
        prefill   = prefill_s: from the end of the read path to the end of prefill (the chunks of
                    requests admitted ahead of it, then its own)
        transfer  = transfer_s: the prefill-to-decode KV transfer
        rest      = user TTFT - the four: the first decode step and the hand-over between replicas

    Calls with a request the emulator's figures do not cover are left out; None if none is."""
    rows = []
    for r in recs:
        rids = request_ids(r)
        figs = [g for g in (srv.get(i) for i in rids) if g is not None and not any(x != x for x in g)]
        if len(figs) < len(rids):
            continue
        q, rp, pf, tr = (float(sum(g[i] for g in figs)) for i in range(4))
        rows.append((q, rp, pf, tr, r["ttft_s"] - q - rp - pf - tr, r["ttft_s"]))
    if not rows:
        return None
    m = np.asarray(rows, dtype=float).mean(axis=0)
    return {**dict(zip(TTFT_PARTS, (float(x) for x in m[:5]), strict=True)), "ttft": float(m[5])}


def summarise(path: str | Path) -> dict[str, Any]:
    from ..analysis.run import load_run
    rd = RunDir(path)
    man = rd.manifest()
    recs = rd.read("replay")
    missing: dict[str, str] = {}
    rep = man.get("replay") or {}
    lab = rep.get("label")
    out: dict[str, Any] = {"run": rd.path.name, "label": lab,
                           "experiment": rep.get("experiment"), "seed": rep.get("seed"),
                           "configuration": rep.get("configuration")
                           or (split_label(lab)[0] if lab else None),
                           "time_scale": man.get("time_scale"),
                           "time_scale_chosen": bool((man.get("time_scale_choice") or {})
                                                     .get("pilots")),
                           "calls": len(recs), "missing": missing}
    okr = [r for r in recs if r.get("status") == "ok" and r.get("ttft_s") is not None]
    out["ok_calls"] = len(okr)
    out["errors"] = len(recs) - len(okr)
    span = 0.0
    if okr:
        span = max(r["t_end"] for r in okr) - min(r["t_ready"] for r in okr)
        out["throughput_rps"] = len(okr) / span if span > 0 else None
        out["span_s"] = span if span > 0 else None
        out["calls_in_flight_mean"] = (sum(r["t_end"] - r["t_ready"] for r in okr) / span
                                       if span > 0 else None)
        _drain(out, recs, okr, rep, missing)
        tt = np.array([r["ttft_s"] for r in okr])
        for q in (50, 90, 99):
            out[f"ttft_p{q}_s"] = _f(pct(tt, q))
        later_tt = [r["ttft_s"] for r in okr if not r["initial"]]
        out["ttft_later_p99_s"] = _f(pct(later_tt, 99))
        if not later_tt:
            missing["ttft_later_p99_s"] = "no later turn completed"
        out["ttft_by_group_p50_s"] = {
            g: _f(pct([r["ttft_s"] for r in okr if r["group"] == g], 50)) for _, _, g in GROUPS}
        for g, key in GROUP_P50_KEYS.items():
            out[key] = out["ttft_by_group_p50_s"][g]
        out["calls_by_group"] = dict(Counter(r["group"] for r in okr))
        out["itl_p50_s"] = _f(pct([r["itl_s"] for r in okr if r.get("itl_s") is not None], 50))
        out["exact_output_share"] = float(np.mean(
            [r.get("live_output_tokens") == max(1, r["recorded_output_tokens"]) for r in okr]))
    else:
        missing["ttft"] = "no call completed"
    later = [r for r in recs if not r["initial"]]
    out["stickiness"] = (sum(bool(r["sticky"]) for r in later) / len(later)) if later else None
    if not later:
        missing["stickiness"] = "no session had a second turn"
    traffic = Counter(f"{r['prefill']}>{r['decode']}" for r in recs)
    out["traffic"] = dict(sorted(traffic.items()))
    n = sum(traffic.values())
    out["traffic_shares"] = {k: v / n for k, v in sorted(traffic.items())} if n else {}

    run = load_run(rd.path)
    n_pre = len(((rep.get("topology") or {}).get("prefill")) or [])
    if span and n_pre and run.profile:
        pt = run.profile.prefill_time
        out["prompt_load"] = sum(pt.chunk_s(int(r["prompt_tokens"])) for r in okr) / span / n_pre
    else:
        out["prompt_load"] = None
        missing["prompt_load"] = "no completed call, no prefill replica or no model profile"
    c = run.calls
    if len(c):
        ids = c["call_id"].astype(str)
        pre = ids.str.endswith("-prefill")
        first = c[(c["attempt"] == 0) & (pre if pre.any() else True)]
        out["dispatch_delay_p99_s"] = _f(pct(dispatch_delay(first), 99))
        okc = c[(c["status"] == "ok") & c["has_server"].astype(bool)]
        loaded = okc[okc["srv_store_hit_blocks"] > 0]
        rop = store_read_over_profile(loaded["srv_read_path_host_s"], loaded["srv_read_path_s"])
        out["store_read_over_profile_p50"] = _f(pct(rop, 50))
        out["store_read_over_profile_p99"] = _f(pct(rop, 99))
        out["store_read_calls"] = int(len(loaded))
        p50 = out["store_read_over_profile_p50"]
        out["reads_at_pace"] = None if p50 is None else bool(p50 <= READS_AT_PACE)
        if len(okc) and not len(loaded):
            missing["store_read_over_profile"] = "no OK call loaded store hits"
        tom = ttft_model_error(ttft_from_send(okc), okc["srv_ttft_s"])
        out["ttft_over_model_p50"] = _f(pct(tom, 50))
        out["ttft_over_model_p99"] = _f(pct(tom, 99))
        uom = user_ttft_over_model(okr, dict(zip(okc["call_id"].astype(str), okc["srv_ttft_s"],
                                                 strict=True)))
        out["user_ttft_over_model_p50"] = _f(pct(uom, 50))
        out["user_ttft_over_model_p99"] = _f(pct(uom, 99))
        cols = ["srv_queue_s", "srv_read_path_s", "srv_prefill_s", "srv_transfer_s"]
        tp = ttft_parts(okr, dict(zip(okc["call_id"].astype(str),
                                      okc[cols].astype(float).itertuples(index=False, name=None),
                                      strict=True))) if all(k in okc for k in cols) else None
        out["ttft_mean_s"] = tp["ttft"] if tp else None
        for k in TTFT_PARTS:
            out[f"ttft_{k}_mean_s"] = tp[k] if tp else None
        if tp is None and okr:
            missing["ttft_parts"] = "no completed call carries the emulator's figures"
        if not len(okc) and not (c["status"] == "ok").any():
            missing["host_fidelity"] = "no call completed"
        elif not len(okc):
            missing["host_fidelity"] = "the endpoints report no emulator figures (real vLLM)"
        bpt = run.bytes_per_token
        if bpt:
            ram_b = okc["srv_tok_store_ram"].fillna(0).to_numpy(float) * bpt
            disk_b = okc["srv_tok_store_disk"].fillna(0).to_numpy(float) * bpt
            rate: float | str | None = disk_rate_estimate(ram_b, disk_b, okc["srv_load_s"].to_numpy(float))
            if isinstance(rate, str):
                missing["disk_read_rate_Bps"] = rate
                rate = None
            out["disk_read_rate_Bps"] = rate
        _disk_wait(out, okc, missing)
        _load_wait(out, okc, missing)
    _store(out, run, missing)
    _per_call(out)
    return out


def drain_start(recs: list[dict[str, Any]], slots: int) -> float | None:
    """When the run's drain starts: with the sessions' finishes ``f_1 <= ... <= f_N`` (a
    session's finish = the latest end of its calls), fewer than ``slots`` sessions have calls
    left from ``f_(N - slots + 1)`` on; with fewer sessions than slots, from the first call's
    ready time. None without ended calls."""
    finish: dict[Any, float] = {}
    for r in recs:
        if r.get("t_end") is not None:
            finish[r["session"]] = max(finish.get(r["session"], -math.inf), r["t_end"])
    if not finish:
        return None
    ends = sorted(finish.values())
    if len(ends) < slots:
        return min(r["t_ready"] for r in recs)
    return ends[len(ends) - slots]


SLOTS_KEY = {"short": "active", "long": "max_in_flight"}
"""The replay option that sets each schedule's slots (:func:`drain_start`)."""


def _drain(out: dict[str, Any], recs: list[dict[str, Any]], okr: list[dict[str, Any]],
           rep: dict[str, Any], missing: dict[str, str]) -> None:
    key = SLOTS_KEY.get(str(rep.get("experiment")))
    slots = rep.get(key) if key else None
    out["drain_start_s"] = out["drain_share"] = out["throughput_full_rps"] = None
    if not slots:
        missing["drain"] = (f"the manifest names no {key}" if key else
                            "a schedule without slots (trace timestamps) has no drain")
        return
    ds = drain_start(recs, int(slots))
    if ds is None:
        missing["drain"] = "no call ended"
        return
    t0, t1 = min(r["t_ready"] for r in okr), max(r["t_end"] for r in okr)
    ds = min(max(ds, t0), t1)
    out["drain_start_s"] = ds
    out["drain_share"] = (t1 - ds) / (t1 - t0) if t1 > t0 else None
    if ds > t0:
        out["throughput_full_rps"] = sum(r["t_end"] <= ds for r in okr) / (ds - t0)
    else:
        missing["throughput_full_rps"] = (f"fewer sessions than the schedule's {slots} slots: "
                                          "the drain is the whole run")


PER_CALL = ("stored_bytes", "store_load_bytes", "physical_read_bytes", "evicted_bytes")
"""The run's volumes also given per OK call (``<volume>_per_call``)."""


def _per_call(out: dict[str, Any]) -> None:
    """``<volume>_per_call`` = ``out[<volume>]`` / ``out["ok_calls"]``, None where either is
    missing or there is no OK call."""
    n = out.get("ok_calls") or 0
    for k in PER_CALL:
        v = out.get(k)
        out[f"{k}_per_call"] = v / n if v is not None and n else None


def _disk_wait(out: dict[str, Any], okc: Any, missing: dict[str, str]) -> None:
    """``disk_wait_mean_s`` and ``disk_wait_p99_s`` over the requests that loaded from the disk
    tier: their loads' wait for the disk device the stack's endpoints share."""
    disk = okc[okc["srv_tok_store_disk"].fillna(0) > 0] if "srv_tok_store_disk" in okc else okc[:0]
    _wait(out, missing, disk, "disk_wait", "no request loaded from the disk tier",
          "the records carry no disk device wait (an older emulator)")


def _load_wait(out: dict[str, Any], okc: Any, missing: dict[str, str]) -> None:
    """``load_wait_mean_s`` and ``load_wait_p99_s`` over the requests that loaded from the store:
    their loads' wait for one of their endpoint's load threads (``store.load_threads``)."""
    cols = [c for c in ("srv_tok_store_ram", "srv_tok_store_disk") if c in okc]
    loaded = okc[okc[cols].fillna(0).sum(axis=1) > 0] if cols else okc[:0]
    _wait(out, missing, loaded, "load_wait", "no request loaded from the store",
          "the records carry no load thread wait (an older emulator)")


def _wait(out: dict[str, Any], missing: dict[str, str], rows: Any, name: str, none: str,
          old: str) -> None:
    """``<name>_mean_s`` and ``<name>_p99_s`` of the records' ``srv_<name>_s`` over ``rows``;
    None, with ``none`` (no rows) or ``old`` (no such column) as the reason, where there are none."""
    col = f"srv_{name}_s"
    waits = rows[col].dropna().to_numpy(float) if col in rows else np.array([])
    out[f"{name}_mean_s"] = float(waits.mean()) if len(waits) else None
    out[f"{name}_p99_s"] = _f(pct(waits, 99)) if len(waits) else None
    if not len(waits):
        missing[name] = none if not len(rows) else old


def _store(out: dict[str, Any], run: Any, missing: dict[str, str]) -> None:
    bpb = run.profile.bytes_per_block if run.profile else None
    ram = disk = 0.0
    seen = False
    overrun: list[float] = []
    puts: dict[str, float] = {"accepted": 0.0, "refused": 0.0, "skipped": 0.0}
    put_seen = False
    for name, ss in run.scrapes.items():
        if name == "master":
            continue
        rows = [{"t": s.t, "ok": s.ok, "samples": s.samples} for s in ss]
        for key, names in (("accepted", K.EMU_PUT_ACCEPTED), ("refused", K.EMU_PUT_REFUSED),
                           ("skipped", K.EMU_PUT_SKIPPED)):
            x = _delta(rows, names)
            if x is not None:
                put_seen = True
                puts[key] += x
        r = _delta(rows, K.EMU_HIT_BLOCKS, {"tier": "ram"})
        d = _delta(rows, K.EMU_HIT_BLOCKS, {"tier": "disk"})
        if r is not None or d is not None:
            seen = True
            ram += r or 0.0
            disk += d or 0.0
        o = _delta(rows, K.EMU_READ_OVERRUN)
        if o is not None:
            overrun.append(o)
    out["read_overrun_s"] = sum(overrun) if overrun else None
    offered = puts["accepted"] + puts["refused"]
    out["refused_share"] = refusal_share(puts["refused"], offered) if offered else None
    out["unsaved_bytes"] = (puts["refused"] + puts["skipped"]) * bpb if put_seen and bpb else None
    out["stored_bytes"] = puts["accepted"] * bpb if put_seen and bpb else None
    no_puts = "no store put counters scraped (no store, or real vLLM)"
    if out["stored_bytes"] is None:
        missing["stored_bytes"] = no_puts if not put_seen else "no model profile: bytes per block unknown"
    if out["refused_share"] is None:
        missing["refused_share"] = "no block offered to the store" if put_seen else no_puts
    if not overrun:
        missing["read_overrun_s"] = "no read-path overrun counter scraped (no store, or real vLLM)"
    master = [{"t": s.t, "ok": s.ok, "samples": s.samples} for s in run.scrapes.get("master", [])]
    pb = _delta(master, K.PROMOTED_BYTES)
    promoted = pb * run.payload_scale if pb is not None and run.payload_scale else None
    out["promoted_bytes"] = promoted
    out["promotions"] = _delta(master, K.PROMOTED)
    if promoted is None:
        missing["promoted_bytes"] = ("no master promotion counter scraped (no store, or a "
                                     "Mooncake master without promotion on hit)")
    if seen and bpb:
        out["store_load_bytes"] = (ram + disk) * bpb
        phys = disk * bpb + (promoted or 0.0)
        out["physical_read_bytes"] = phys
        out["store_load_blocks"] = ram + disk
        out["physical_read_blocks"] = disk
        out["physical_read_share"] = phys / ((ram + disk) * bpb) if ram + disk > 0 else None
        span = out.get("span_s")
        out["disk_read_avg_Bps"] = phys / span if span else None
        if span is None:
            missing["disk_read_avg_Bps"] = "no completed call: the run has no span"
        if out["physical_read_share"] is None:
            missing["physical_read_share"] = "no store loads"
    else:
        out["store_load_bytes"] = out["physical_read_bytes"] = out["physical_read_share"] = None
        out["disk_read_avg_Bps"] = None
        missing["store_loads"] = "no store hit-block counters scraped (no store, or real vLLM)"
    out["evictions"] = _delta(master, K.EVICTIONS_OK)
    eb = _delta(master, K.EVICTED_BYTES)
    out["evicted_bytes"] = eb * run.payload_scale if eb is not None and run.payload_scale \
        else None
    if out["evictions"] is None:
        missing["evictions"] = "no master eviction counters scraped (no store in this run)"
