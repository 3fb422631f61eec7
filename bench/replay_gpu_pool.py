"""The GPU prefix cache's hit share of replay runs, replayed again through pools of other sizes.

    python bench/replay_gpu_pool.py TRACE RUN [RUN ...] --pool 482165,241083

For each replay run directory (``adev replay``'s ``<out>/<label>``) of TRACE: its calls in the
order and on the prefill replicas the run recorded (``replay.jsonl``), through one GPU prefix pool
per prefill replica of each size given (tokens), with the what-if simulator's pool
(:class:`adev.whatif.gpu.GpuPool`, vLLM v1's rules). A call is admitted at its ``t_ready`` (the
lookup and the allocation), and its blocks are cached and freed at its first token (its prefill
and transfer to the decode replica are done). Prints per run and size the share of prompt
tokens the pool serves, beside the share the run's prefill replicas reported
(``cached_tokens``: for ``gpu-only`` the GPU prefix cache's alone), and the active sessions'
contexts against the pools: the mean, over calls, of the latest prompt of every session started
and not ended at the call's ``t_ready``.

Block identity comes from the trace: a trace block of ``block_tokens`` tokens is
``block_tokens / 16`` pool blocks, and equal trace ids mean equal prefixes (the trace format's
rule), so sub-block ``j`` of trace block ``b`` is one pool block whatever call it is in.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from adev.emulator.pool import max_hit_blocks  # noqa: E402
from adev.records import RunDir  # noqa: E402
from adev.replay.format import read_trace  # noqa: E402
from adev.whatif.gpu import GpuPool  # noqa: E402

BLOCK = 16


def pool_blocks(trace, wanted: set[tuple[str, int]]) -> tuple[dict[tuple[str, int], np.ndarray], int]:
    """(session, turn) -> dense pool-block ids of the call's full 16-token blocks, for the
    ``wanted`` calls; the number of distinct ids."""
    per = trace.block_tokens // BLOCK
    dense: dict[int, int] = {}
    out = {}
    for c in trace.calls:
        if (c.session, c.turn) not in wanted:
            continue
        tb = np.fromiter((dense.setdefault(b, len(dense)) for b in c.blocks), dtype=np.int64,
                         count=len(c.blocks))
        ids = np.repeat(tb * per, per) + np.tile(np.arange(per, dtype=np.int64), len(tb))
        out[(c.session, c.turn)] = ids[:c.prompt_tokens // BLOCK]
    return out, len(dense) * per


def replay_pool(recs: list[dict], blocks, n_ids: int, pool_tokens: int) -> float:
    """Share of prompt tokens the pools serve (whole blocks, capped at prompt length - 1)."""
    pools: dict[str, GpuPool] = {}
    events = []
    for i, r in enumerate(recs):
        events.append((r["t_ready"], 0, i))
        events.append((r["t_first_token"], 1, i))
    events.sort()
    hits = np.zeros(len(recs), dtype=np.int64)
    for _, kind, i in events:
        r = recs[i]
        ids = blocks[(r["session"], r["turn"])]
        p = pools.setdefault(r["prefill"], GpuPool(pool_tokens // BLOCK, n_ids))
        if kind == 0:
            hits[i] = p.lookup(ids, min(max_hit_blocks(r["prompt_tokens"], BLOCK), len(ids)))
            p.admit(ids, int(hits[i]))
        else:
            p.register(ids[hits[i]:])
            p.release(ids)
    return float(hits.sum() * BLOCK / sum(r["prompt_tokens"] for r in recs))


def active_contexts(recs: list[dict]) -> float:
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    for r in recs:
        first.setdefault(r["session"], r["t_ready"])
        last[r["session"]] = r["t_end"]
    cur: dict[str, int] = {}
    sums = []
    for r in recs:
        t = r["t_ready"]
        cur[r["session"]] = r["prompt_tokens"]
        sums.append(sum(v for s, v in cur.items() if first[s] <= t <= last[s]))
    return float(np.mean(sums)) if sums else 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--pool", required=True, help="GPU prefix pool sizes per replica, tokens")
    a = ap.parse_args()
    sizes = [int(x) for x in a.pool.split(",")]
    trace = read_trace(a.trace)
    runs = {}
    for run in a.runs:
        recs = [r for r in RunDir(run).read("replay")
                if r["status"] == "ok" and r["t_first_token"] is not None]
        runs[run] = sorted(recs, key=lambda r: r["t_ready"])
    blocks, n_ids = pool_blocks(trace, {(r["session"], r["turn"]) for rs in runs.values()
                                        for r in rs})
    for run, recs in runs.items():
        prompt = sum(r["prompt_tokens"] for r in recs)
        measured = sum(r["cached_tokens"] or 0 for r in recs) / prompt
        replicas = len({r["prefill"] for r in recs})
        print(f"{run}: {len(recs)} calls; cached by the run's prefill replicas {measured:.1%}; "
              f"active sessions' latest prompts {active_contexts(recs):,.0f} tokens "
              f"({replicas} replicas)")
        for s in sizes:
            share = replay_pool(recs, blocks, n_ids, s)
            print(f"  pool {s:,} tokens per replica ({s * replicas:,} in all): "
                  f"GPU prefix cache serves {share:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
