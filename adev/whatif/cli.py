"""``adev whatif``: replay a run's reuse ledger (or a trace) through other tier configurations.

    adev whatif RUN|TRACE [--ram 8,16,32] [--lease 5,300] [--disk on,off] [--gpu-pool ...]
                          [--lookup past-gpu,whole] [--disk-writes evict,put]
                          [--promotion off,2]
    adev whatif validate RUN [RUN ...]

Parameters not given are the run's own configuration (for a trace: the default stack's).
Writes ``whatif.csv`` (every point and window) and ``whatif.png`` (heat map) under ``--out``
(default ``<run>/whatif/``, or ``results/whatif/<trace name>/``); ``validate`` writes
``validate.csv`` under each run's ``whatif/``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from .workload import WorkloadError, load_workload


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "whatif", help="predict hit shares, refusals and saving for other tier configurations",
        description="Replay a run's reuse ledger or a trace through models of the GPU prefix "
                    "pool, Mooncake's RAM tier and a disk tier, per window. Comma-separated "
                    "values sweep every combination. `adev whatif validate RUN...` sets the "
                    "predictions for each run's own configuration beside what it measured.")
    p.add_argument("target", nargs="+", metavar="RUN|TRACE",
                   help="a run directory or trace file; or: validate RUN [RUN ...]")
    p.add_argument("--ram", help="RAM tier sizes, GB at model scale (0 = no store)")
    p.add_argument("--lease", help="lease TTLs, model seconds")
    p.add_argument("--disk", help="disk tier: on, off")
    p.add_argument("--gpu-pool", help="GPU prefix pool per endpoint, tokens (e.g. 166512, 80k)")
    p.add_argument("--disk-gb", help="disk tier capacity, GB (inf = unbounded)")
    p.add_argument("--disk-read", help="disk tier read rate, GB/s")
    p.add_argument("--lookup", help="blocks a store lookup covers: past-gpu (the emulator's: "
                                    "past the GPU hit), whole (vLLM's Mooncake store connector: "
                                    "every block from the first)")
    p.add_argument("--disk-writes", help="when the disk tier is written: evict (when RAM evicts a "
                                         "block, Mooncake's offload_on_evict), put (every block "
                                         "after its put)")
    p.add_argument("--promotion", help="Mooncake's promotion on hit (disk tier on): off, or the "
                                       "reads of a disk-only key before it is copied back to RAM")
    p.add_argument("--offload-heartbeat", help="the disk tier's offload heartbeat, model seconds "
                                               "(objects waiting for the disk tier stay in RAM "
                                               "until it writes them; default: the run's)")
    p.add_argument("--metric", default="store_hit_share",
                   choices=["store_hit_share", "gpu_hit_share", "refused_share", "gross_saving"],
                   help="figure of the heat map (default store_hit_share)")
    p.add_argument("--out", metavar="DIR", help="output folder")
    p.set_defaults(func=main)


def _fail(msg: str) -> int:
    print(f"adev whatif: {msg}", file=sys.stderr)
    return 2


def main(args: argparse.Namespace) -> int:
    try:
        if args.target[0] == "validate":
            if len(args.target) < 2:
                return _fail("validate needs at least one run directory")
            return _validate(args.target[1:])
        if len(args.target) != 1:
            return _fail(f"one run or trace expected, got {len(args.target)}: {args.target}")
        return _sweep(args)
    except (WorkloadError, FileNotFoundError) as e:
        return _fail(str(e))


def _sweep(args: argparse.Namespace) -> int:
    from . import sweep as S
    from .validate import run_busy, run_params, run_windows, stack_params
    axes: dict[str, list[Any]] = {}
    for name in S.AXES:
        text = getattr(args, name)
        if text is not None:
            axes[name] = S.parse_axis(name, text)
    target = Path(args.target[0])
    w = load_workload(target)
    windows: list = []
    busy = None
    if target.is_dir():
        from ..analysis.run import load_run
        run = load_run(target)
        base = run_params(run)
        windows, busy = run_windows(run), run_busy(run, w)
        out = Path(args.out) if args.out else target / "whatif"
    else:
        base = stack_params(None, 1.0, block_size=w.block_size)
        out = Path(args.out) if args.out else Path("results") / "whatif" / target.stem
    if not axes:
        axes = {"ram": [base.ram_gb], "lease": [base.lease_s]}
    df = S.run_sweep(w, base, axes, windows, busy)
    out.mkdir(parents=True, exist_ok=True)
    csv = out / "whatif.csv"
    tmp = csv.with_suffix(".csv.tmp")
    df.to_csv(tmp, index=False)
    tmp.replace(csv)
    png = S.plot(df, list(axes), out / "whatif.png", args.metric,
                 title=f"{target.name}: {w.calls} calls, {w.touches} block touches "
                       f"({w.block_size}-token blocks)")
    with pd.option_context("display.width", 160, "display.max_columns", 20):
        print(f"{w.source}: {w.calls} calls, {w.touches} block touches, "
              f"{len(S.grid(base, axes))} points")
        print(S.summary(df, list(axes)).to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    print(f"table: {csv}\nplot: {png}")
    return 0


def _validate(paths: list[str]) -> int:
    from ..analysis.run import load_run
    from .validate import lease_ranking, validate
    vals = []
    for p in paths:
        run = load_run(p)
        v = validate(run)
        vals.append(v)
        out = Path(p) / "whatif"
        out.mkdir(parents=True, exist_ok=True)
        tmp = out / "validate.csv.tmp"
        v.table.to_csv(tmp, index=False)
        tmp.replace(out / "validate.csv")
        print(f"{v.run_id}: width {v.width}, lease {v.lease_s:g} s")
        cols = ["window", "calls"] + [c for k in ("store_hit_share", "gpu_hit_share",
                                                  "refused_share", "gross_saving")
                                      for c in (f"{k}_pred", f"{k}_meas")] \
            + ["store_hit_share_diff_pp"]
        print(v.table[cols].to_string(index=False, float_format=lambda x: f"{x:.4f}"))
        m = v.table[["store_hit_share_pred", "store_hit_share_meas"]].mean()
        print(f"  mean over windows: store hit share predicted {m.iloc[0]:.4f}, measured "
              f"{m.iloc[1]:.4f} ({(m.iloc[0] - m.iloc[1]) * 100:+.2f} pp); max window "
              f"difference {v.table['store_hit_share_diff_pp'].abs().max():.2f} pp")
    rank = lease_ranking(vals)
    if len(rank):
        print("lease ranking (mean store hit share over windows):")
        print(rank.to_string(index=False))
    return 0
