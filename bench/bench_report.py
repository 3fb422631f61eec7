"""Wall time of ``adev report`` on a synthetic 5-window width-18 run (target < 30 s).

Writes the run with ``tests/analysis/synth.py`` (900 model-second windows, reuse ledger on), then
times ``adev report RUN`` as a subprocess (what a user waits for, imports included) and the
in-process stages (load + window table, reuse profile, figures + writing).

Usage: .venv/bin/python bench/bench_report.py [--width 18] [--windows 5] [--window-s 900]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--width", type=int, default=18)
    ap.add_argument("--windows", type=int, default=5)
    ap.add_argument("--window-s", type=float, default=900.0)
    a = ap.parse_args()
    from tests.analysis.synth import make_run
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        run = make_run(d, width=a.width, windows=a.windows, window_s=a.window_s, seed=18)
        gen = time.perf_counter() - t0
        from adev.analysis.ledger import read_ledger
        led = read_ledger(run)
        n_calls = sum(1 for _ in open(run / "calls.jsonl"))
        n_scr = sum(1 for _ in open(run / "scrapes.jsonl"))
        print(f"synthetic run: width {a.width}, {a.windows} windows x {a.window_s:g} s, "
              f"{n_calls} calls, {n_scr} scrapes, {len(led.touches)} ledger touches "
              f"(generated in {gen:.1f} s)")
        import os
        t0 = time.perf_counter()
        c0 = os.times()
        r = subprocess.run([sys.executable, "-m", "adev.cli", "report", str(run)], cwd=ROOT,
                           capture_output=True, text=True)
        wall = time.perf_counter() - t0
        c1 = os.times()
        cpu = (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)
        if r.returncode != 0:
            print(r.stdout, r.stderr)
            return 1
        print(f"adev report RUN (subprocess): {wall:.2f} s wall, {cpu:.2f} s CPU (target < 30 s); "
              f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs -> "
              f"{r.stdout.split()[-1]}")
        # stages in-process
        from adev.analysis import report as R
        from adev.analysis.aggregate import summarise
        from adev.analysis.ledger import reuse_profile
        from adev.analysis.run import load_run
        from adev.analysis.windows import window_table
        t0 = time.perf_counter()
        run_o = load_run(run)
        t1 = time.perf_counter()
        tab = window_table(run_o)
        t2 = time.perf_counter()
        reuse_profile(run_o.ledger, run_o.lease_ttl_s)
        t3 = time.perf_counter()
        loaded = [R.Loaded(run_o, tab, summarise(run_o, tab))]
        doc = R.build_report(loaded)
        R._write(doc, Path(d) / "rep")
        t4 = time.perf_counter()
        print(f"  load_run {t1 - t0:.2f} s, window_table {t2 - t1:.2f} s, reuse profile "
              f"{t3 - t2:.2f} s, summary + figures + write {t4 - t3:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
