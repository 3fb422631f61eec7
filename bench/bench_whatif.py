"""What-if simulator speed on a run's reuse ledger, against a plain OrderedDict LRU.

Two figures, both on one run's ledger (by default the newest width-18 run under results/runs/):

- **touches/s**: block touches (full prompt blocks of every call in the ledger) replayed per
  second by :func:`adev.whatif.simulator.simulate` for the run's own configuration (GPU prefix
  pool per endpoint, Mooncake RAM tier with leases and watermark eviction, disk tier), best of
  ``--repeat``; beside it, the same touch stream through a plain ``collections.OrderedDict`` LRU
  of the GPU pool's size (``move_to_end`` on a hit, ``popitem(last=False)`` past capacity), the
  baseline, measured in the same process, each repeat right before the simulator's (a shared
  host's load varies), best of ``--repeat``. Target: at least
  2M touches/s on one core. The simulator does more per touch than the baseline (two tiers,
  leases, refcounts), so the ratio understates its per-operation speed;
- **sweep**: the wall time of a 20-point sweep (RAM 4, 8, 16, 32, 64 GB x lease 1, 5, 60,
  300 s), the simulations plus the per-window figures. Target: under a minute.

    .venv/bin/python bench/bench_whatif.py [--run results/runs/<id>] [--repeat 5]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections import OrderedDict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from adev.analysis.run import load_run
from adev.whatif.simulator import simulate
from adev.whatif.sweep import run_sweep
from adev.whatif.validate import run_busy, run_params, run_windows
from adev.whatif.workload import from_run

SWEEP = {"ram": [4.0, 8.0, 16.0, 32.0, 64.0], "lease": [1.0, 5.0, 60.0, 300.0]}


def newest_run(width: int) -> Path | None:
    runs = sorted((ROOT / "results" / "runs").glob("*/manifest.json"),
                  key=lambda p: p.stat().st_mtime, reverse=True)
    for m in runs:
        try:
            fleet = json.loads(m.read_text()).get("config", {}).get("fleet", {})
        except (OSError, ValueError):
            continue
        if fleet.get("width") == width and (m.parent / "ledger" / "meta.json").exists():
            return m.parent
    return None


def lru_baseline(keys: list[int], capacity: int) -> tuple[float, int]:
    od: OrderedDict[int, None] = OrderedDict()
    hits = 0
    t = time.perf_counter()
    for k in keys:
        if k in od:
            od.move_to_end(k)
            hits += 1
        else:
            od[k] = None
            if len(od) > capacity:
                od.popitem(last=False)
    return time.perf_counter() - t, hits


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, help="run directory (default: newest width-18 run)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    path = args.run or newest_run(18)
    if path is None:
        print("bench_whatif: no width-18 run with a reuse ledger under results/runs/; run "
              "`adev fleet --width 18` first or pass --run", file=sys.stderr)
        return 2
    run = load_run(path)
    w = from_run(run)
    p = run_params(run)
    print(f"run {path.name}: width {run.width}, {w.calls} calls, {w.touches} block touches, "
          f"{w.n_ids} distinct blocks; Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    keys = w.ids.tolist()
    cap = p.gpu_pool_tokens // w.block_size
    lru, sim = [], []
    for _ in range(args.repeat):   # interleaved: a shared host's load hits both alike
        lru.append(lru_baseline(keys, cap)[0])
        t = time.perf_counter()
        simulate(w, p)
        sim.append(time.perf_counter() - t)
    base, best = min(lru), min(sim)
    print(f"OrderedDict LRU baseline : {w.touches / base / 1e6:6.2f} M touches/s "
          f"(best of {args.repeat}, {base * 1e3:.1f} ms)")
    print(f"simulator (run's config) : {w.touches / best / 1e6:6.2f} M touches/s "
          f"(best of {args.repeat}, {best * 1e3:.1f} ms; ratio {base / best:.2f}x; "
          f"target >= 2 M/s)")
    t = time.perf_counter()
    df = run_sweep(w, p, SWEEP, run_windows(run), run_busy(run, w))
    dt = time.perf_counter() - t
    n = len(df[df["window"] == -1])
    print(f"{n}-point sweep (ram x lease)  : {dt:.2f} s wall (target < 60 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
