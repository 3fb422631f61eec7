"""Stack lifecycle figures: start-up and shut-down wall time, idle CPU and memory of the stack.

    .venv/bin/python bench/bench_stack.py [--runs 3] [--idle-s 10] [--configuration store-ram+disk]

Starts the default two-endpoint embedded stack (real Mooncake master + emulator processes) in a
temp state dir ``--runs`` times; for each run prints the wall seconds until every process is
healthy, the idle CPU the stack's processes use over ``--idle-s`` seconds (cores = CPU seconds /
wall seconds), their resident memory, and the wall seconds ``stop_stack`` takes. Figures, not a
test: the machine is shared, so read them as +-30%.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from adev.stack import process_usage, small_config, start_stack, stop_stack  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--idle-s", type=float, default=10.0)
    ap.add_argument("--configuration", default="store-ram+disk")
    a = ap.parse_args()
    ups, downs, cores, rss = [], [], [], []
    for i in range(a.runs):
        sdir = Path(tempfile.mkdtemp(prefix="adev-bench-stack-"))
        try:
            cfg = small_config(sdir, configuration=a.configuration, store={"ram_gb": 32.0})
            t0 = time.monotonic()
            info = start_stack(cfg)
            up = time.monotonic() - t0
            u0 = process_usage(info)
            t1 = time.monotonic()
            time.sleep(a.idle_s)
            u1 = process_usage(info)
            wall = time.monotonic() - t1
            cpu = sum(u1[n]["cpu_s"] - u0[n]["cpu_s"] for n in u1 if n in u0) / wall
            mem = sum(v["rss_mb"] for v in u1.values())
            t2 = time.monotonic()
            stop_stack(info)
            down = time.monotonic() - t2
        finally:
            stop_stack(sdir)
            shutil.rmtree(sdir, ignore_errors=True)
        ups.append(up), downs.append(down), cores.append(cpu), rss.append(mem)
        per = ", ".join(f"{n} {v['rss_mb']:.0f} MiB" for n, v in u1.items())
        print(f"run {i}: up {up:.2f} s, idle CPU {cpu:.3f} cores, RSS {mem:.0f} MiB ({per}), "
              f"down {down:.2f} s")
    print(f"median over {a.runs} runs ({a.configuration}, 2 endpoints, RAM tier 32 GB at payload "
          f"scale 64): up {statistics.median(ups):.2f} s, idle CPU "
          f"{statistics.median(cores):.3f} cores, RSS {statistics.median(rss):.0f} MiB, down "
          f"{statistics.median(downs):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
