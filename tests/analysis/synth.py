"""Synthetic run directories for analysis tests, benches and notebooks (no services needed).

``make_run(base, width=6, ...)`` writes a run directory shaped like a fleet run on the embedded
stack: ``manifest.json`` (config.fleet + config.stack), ``calls.jsonl`` with the emulator's
``server`` extension field, ``scrapes.jsonl`` (each endpoint's vLLM counters and the master's
Mooncake counters, every ``scrape_interval_s`` and at window boundaries, accumulated from the very
calls written, so counters and per-request fields agree), ``windows.jsonl``, ``sessions.jsonl``
and a reuse ledger. The numbers are a toy model with the right *shapes* (GPU hit share falls and
store hit share rises with width; a long lease refuses writes), not predictions.

Reusable from other tests: ``from tests.analysis.synth import make_run`` (with the project root
on ``sys.path``) or ``python -m tests.analysis.synth OUT_DIR --width 6``.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from adev.analysis.ledger import LedgerWriter
from adev.config import StackConfig, StoreSpec, load_model_profile
from adev.records import CallRecord, RunDir, ScrapeRecord, SessionRecord, WindowRecord

T0_MONO = 1000.0   # the run clock's origin on the (synthetic) host monotonic clock
TIME_SCALE = 10.0


def make_run(base: str | Path, width: int = 6, windows: int = 3, window_s: float = 300.0,
             seed: int = 0, protocol: str = "steady", lease_ttl_s: float = 5.0,
             scrape_interval_s: float = 5.0, endpoints: Sequence[str] = ("coder", "reasoner"),
             emulator_fields: bool = True, ledger: bool = True, warmup_s: float = 120.0,
             pause_s: float = 0.0, run_id: str | None = None, max_prompt: int = 60000,
             call_gap_s: float = 20.0, name: str | None = None) -> Path:
    """Write one synthetic run directory under ``base``; returns its path."""
    rng = np.random.default_rng(seed)
    prof = load_model_profile("qwen3-coder-30b-a3b")
    bpt, bs, rate = prof.bytes_per_token, prof.block_size, prof.prefill_tokens_per_s
    payload_scale = 64
    run_id = run_id or f"synth-w{width}-s{seed}-{protocol}"
    path = Path(base) / run_id
    path.mkdir(parents=True, exist_ok=False)
    rd = RunDir(path)
    stack = StackConfig(endpoints=[dataclasses.replace(StackConfig().endpoints[0], name=e)
                                   for e in endpoints],
                        store=StoreSpec(lease_ttl_s=lease_ttl_s))
    fleet = {"name": name or f"synth-w{width}", "width": width, "protocol": protocol,
             "pause_s": pause_s, "windows": {"count": windows, "length_s": window_s}}
    rd.write_json("manifest.json", {
        "run_id": run_id, "time_scale": TIME_SCALE, "kind": "fleet", "protocol": protocol,
        "config": {"fleet": fleet, "stack": dataclasses.asdict(stack)},
        "seeds": {"synth": seed}, "synthetic": True})

    # toy cache model: shapes only
    gpu_frac = 0.45 * math.exp(-(width - 1) / 7.0)
    store_frac = min(0.95 - gpu_frac, 0.35 + 0.02 * width)
    refuse_p = 0.05 if lease_ttl_s < 60 else 0.8
    disk_frac = min(0.7, 0.2 + 0.03 * width)
    if lease_ttl_s >= 60:
        store_frac *= 0.5

    if protocol == "batch":
        segs = [(i * (window_s + 60.0), i * (window_s + 60.0) + window_s) for i in range(windows)]
        t_end_all = segs[-1][1]
    else:
        segs = [(warmup_s + i * window_s, warmup_s + (i + 1) * window_s) for i in range(windows)]
        t_end_all = segs[-1][1] + 30.0

    ledger_w = LedgerWriter(rd, block_size=bs) if ledger else None
    shared_prefix = rng.integers(0, prof.vocab_size, 3000, dtype=np.uint32)
    events = []  # (t_admit, endpoint, contributions)
    calls = []
    n_call = 0
    for slot in range(width):
        if protocol == "batch":
            starts = [(s0, s1, k) for k, (s0, s1) in enumerate(segs)]
        else:
            starts = [(slot * 7.0, t_end_all, 0)]
        for s0, s1, run_k in starts:
            sid = f"r{run_k:02d}-s{slot:03d}"
            rd.append(SessionRecord(run_id=run_id, session_id=sid, task="synthetic", t=s0,
                                    status="started", seed=seed))
            t = s0 + float(rng.uniform(0, 5))
            prompt = np.concatenate([shared_prefix,
                                     rng.integers(0, prof.vocab_size, 500, dtype=np.uint32)])
            step = grow = 0  # grow: tokens the last call added to the prompt (read from step 1)
            while t < s1 - 5:
                ep = endpoints[step % len(endpoints)]
                p = len(prompt)
                prev_len = p if step == 0 else p - grow
                reuse = (prev_len // bs) * bs if step else (len(shared_prefix) // bs) * bs
                gpu = min(int(reuse * gpu_frac) // bs * bs, p - 1)
                store = min(int(reuse * store_frac) // bs * bs, p - 1 - gpu)
                disk = int(round(store * disk_frac * float(rng.uniform(0.7, 1.3))))
                disk = min(disk, store)
                ram = store - disk
                computed = p - gpu - store
                t_sched = t
                t_sent = t_sched + float(rng.exponential(0.05))
                queue = float(rng.exponential(0.2)) * (1 + width / 6)
                lookup = 0.002 + 0.00001 * (p // bs)
                load = ram * bpt / 20e9 + disk * bpt / 2e9
                prefill = computed / rate
                ttft = queue + lookup + load + prefill
                decode = float(rng.uniform(2, 8))
                t_fc = t_sent + ttft + 0.01
                t_end = t_fc + decode
                offered = computed // bs
                refused = int(rng.binomial(offered, refuse_p)) if offered else 0
                put = offered - refused  # accepted
                pre = int(rng.random() < 0.01 * width / 6)
                server = {"request_id": f"req-{n_call}",
                          "t_arrival_mono": T0_MONO + t_sent / TIME_SCALE,
                          "t_first_token_mono": T0_MONO + (t_fc - 0.002) / TIME_SCALE,
                          "t_end_mono": T0_MONO + (t_end - 0.002) / TIME_SCALE, "queue_s": queue,
                          "lookup_s": lookup, "load_s": load, "read_path_s": lookup + load,
                          "read_path_host_s": 3.0 * (lookup + load),   # the host 3x the profile
                          "prefill_s": prefill, "ttft_s": ttft,
                          "tokens": {"gpu": gpu, "store_ram": ram, "store_disk": disk,
                                     "computed": computed},
                          "store_keys_looked_up": (p - gpu) // bs, "store_hit_blocks": store // bs,
                          "put_blocks": put, "put_refused_blocks": refused, "store_errors": 0,
                          "preemptions": pre}
                cid = f"{sid}-c{step:03d}"
                calls.append(CallRecord(
                    run_id=run_id, session_id=sid, call_id=cid, endpoint=ep, role="implementer",
                    round=1, step=step, t_scheduled=t_sched, t_sent=t_sent,
                    t_first_byte=t_sent + 0.005, t_first_content=t_fc, t_end=t_end,
                    prompt_tokens=p, completion_tokens=int(decode * 60), cached_tokens=gpu + store,
                    n_prompt_blocks=p // bs, finish_reason="stop",
                    server=server if emulator_fields else None))
                events.append((t_sent + queue, ep, {
                    "vllm:prefix_cache_queries_total": p, "vllm:prefix_cache_hits_total": gpu,
                    "vllm:external_prefix_cache_queries_total": p - gpu,
                    "vllm:external_prefix_cache_hits_total": store,
                    "vllm:prompt_tokens_total": p, "vllm:num_preemptions_total": pre,
                    "adev_emulator_store_put_blocks_total": put,
                    "adev_emulator_store_put_refused_blocks_total": refused,
                    "adev_emulator_read_path_overrun_seconds_total": 0.0},   # a held clock
                    {"mem_cache_hit_bytes_total": ram * bpt / payload_scale,
                     "file_cache_hit_bytes_total": disk * bpt / payload_scale,
                     "master_batch_put_start_items_total": offered,
                     "master_batch_put_start_failed_items_total": refused,
                     "master_put_start_alloc_failures_total": refused,
                     "master_successful_evictions_total": int(put > 0),
                     "master_attempted_evictions_total": int(put > 0) + (refused > 0),
                     "master_evicted_key_count": put,
                     "master_evicted_size_bytes": put * bs * bpt / payload_scale}))
                if ledger_w is not None:
                    ledger_w.add(t_sent, sid, cid, prompt)
                n_call += 1
                step += 1
                grow = int(rng.integers(800, 2600))
                prompt = np.concatenate([prompt, rng.integers(0, prof.vocab_size, grow,
                                                              dtype=np.uint32)])
                if len(prompt) > max_prompt:  # next "session": a fresh prompt on the same slot
                    prompt = np.concatenate([shared_prefix, rng.integers(
                        0, prof.vocab_size, 500, dtype=np.uint32)])
                    grow = len(prompt)
                    step_reset = True
                else:
                    step_reset = False
                t = t_end + float(rng.exponential(call_gap_s)) + (pause_s if step % 4 == 0 else 0)
                if step_reset:
                    step = 0
            rd.append(SessionRecord(run_id=run_id, session_id=sid, task="synthetic", t=t,
                                    status="passed", seed=seed, calls=step))
    for c in sorted(calls, key=lambda c: c.t_end):
        rd.append(c)
    if ledger_w is not None:
        ledger_w.close()

    # scrapes: cumulative counters at each scrape time (fresh stack per batch run)
    times = set(np.arange(0.0, t_end_all + scrape_interval_s, scrape_interval_s).round(6))
    for s0, s1 in segs:
        times |= {round(s0 - 0.01, 6), round(s1, 6)}
    times = sorted(times)
    events.sort(key=lambda e: e[0])
    adm = np.array([e[0] for e in events])
    reset_t = [s0 - 30.0 for s0, _ in segs[1:]] if protocol == "batch" else []
    vkeys = list(events[0][2]) if events else []
    mkeys = list(events[0][3]) if events else []
    for target in list(endpoints) + ["master"]:
        if target == "master":
            mask = np.ones(len(events), dtype=bool)
            keys = mkeys
            vals = np.array([[e[3][k] for k in keys] for e in events], dtype=float)
        else:
            mask = np.array([e[1] == target for e in events], dtype=bool)
            keys = vkeys
            vals = np.array([[e[2][k] for k in keys] for e in events], dtype=float)
        vals = vals.reshape(len(events), len(keys)) * mask[:, None]
        cum = np.vstack([np.zeros((1, len(keys))), np.cumsum(vals, axis=0)])
        for ts in times:
            origin = max([r for r in reset_t if r <= ts], default=None)
            hi = int(np.searchsorted(adm, ts, side="right"))
            lo = int(np.searchsorted(adm, origin, side="right")) if origin is not None else 0
            cur = cum[hi] - cum[lo]
            if target == "master":
                samples = {k: float(v) for k, v in zip(keys, cur, strict=True)}
            else:
                samples = {f'{k}{{engine="0",model_name="m"}}': float(v) for k, v in zip(keys, cur, strict=True)}
                samples['vllm:num_requests_running{engine="0",model_name="m"}'] = 0.0
            rd.append(ScrapeRecord(run_id=run_id, target=target, url=f"http://127.0.0.1/{target}",
                                   t=float(ts), ok=True, samples=samples))
    for k, (s0, s1) in enumerate(segs):
        rd.append(WindowRecord(run_id=run_id, index=k + 1, t0=s0, t1=s1, valid=True,
                               protocol=protocol))
    rd.close()
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="write a synthetic adev run directory")
    ap.add_argument("out")
    ap.add_argument("--width", type=int, default=6)
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--window-s", type=float, default=300.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--protocol", default="steady", choices=["steady", "batch"])
    ap.add_argument("--lease-ttl-s", type=float, default=5.0)
    a = ap.parse_args(argv)
    p = make_run(a.out, width=a.width, windows=a.windows, window_s=a.window_s, seed=a.seed,
                 protocol=a.protocol, lease_ttl_s=a.lease_ttl_s)
    print(p)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
