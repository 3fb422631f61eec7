"""Fleet benchmarks (printed figures, not a timed test).

1. Scheduler overhead at width 64 on the embedded stack (emulated endpoints): the time from a
   session's next call becoming ready to its request being sent, per call
   ``(CallRecord.t_sent - t_scheduled) / time_scale`` in wall milliseconds; p50 / p99 / max
   (target p99 < 10 ms).
2. Wall time of the default main job (``adev fleet --width 12`` with fleets/default.toml), run
   as a subprocess on a private stack state dir.

    .venv/bin/python bench/bench_fleet.py [--width 64] [--window-length 120] [--skip-main]
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def scheduler_overhead(width: int, time_scale: float, window_s: float, policy: str | None,
                       keep: bool = False, scrape_s: float = 5.0) -> None:
    from adev.config import load_stack
    from adev.fleet.config import fleet_from_dict
    from adev.fleet.runner import run_fleet
    from adev.records import RunDir
    from adev.stack import stop_stack

    sdir = Path(tempfile.mkdtemp(prefix="adev-bench-"))
    tmp = Path(tempfile.mkdtemp(prefix="adev-bench-runs-"))
    try:
        st = dataclasses.asdict(load_stack(time_scale=time_scale))
        st["state_dir"] = str(sdir)
        st["store"]["lease_ttl_s"] = 0.5 * time_scale  # 500 ms real (a loaded machine)
        if policy:
            st["policy"] = policy
        cfg = fleet_from_dict({"width": width, "protocol": "steady", "stagger_s": 0.0,
                               "windows": {"count": 1, "length_s": window_s},
                               "warmup": {"max_s": window_s}, "drain_s": 0.0, "stack": st,
                               "scrape_interval_s": scrape_s,
                               "results_dir": str(tmp), "live": "off", "report": False})
        t = time.monotonic()
        out = run_fleet(cfg)
        wall = time.monotonic() - t
        calls = RunDir(out.run_dir).read("calls")
        d = np.array([(c["t_sent"] - c["t_scheduled"]) / time_scale * 1000.0 for c in calls
                      if c.get("t_sent") is not None and c.get("t_scheduled") is not None])
        print(f"scheduler overhead at width {width} (time scale {time_scale:g}, policy "
              f"{st['policy']}, scrapes every {scrape_s:g} model s, {wall:.0f} s wall, "
              f"{len(d)} calls):")
        if len(d):
            print(f"  t_sent - t_scheduled: p50 {np.percentile(d, 50):.3f} ms, "
                  f"p99 {np.percentile(d, 99):.3f} ms, max {d.max():.3f} ms "
                  f"(target p99 < 10 ms: {'met' if np.percentile(d, 99) < 10 else 'NOT met'})")
            ws = RunDir(out.run_dir).read("windows")
            if ws:
                t0 = ws[0]["t0"]
                late = np.array([(c["t_sent"] - c["t_scheduled"]) / time_scale * 1000.0
                                 for c in calls if c.get("t_scheduled", -1) >= t0])
                if len(late):
                    print(f"  calls scheduled inside the window (after the start burst): "
                          f"{len(late)}, p50 {np.percentile(late, 50):.3f} ms, "
                          f"p99 {np.percentile(late, 99):.3f} ms")
        else:
            print("  no calls recorded: figure unavailable")
        try:
            import resource
            ru = resource.getrusage(resource.RUSAGE_SELF)
            print(f"  fleet process CPU: {ru.ru_utime + ru.ru_stime:.1f} s over {wall:.0f} s wall "
                  f"(machine load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
        except Exception:
            pass
        ends = {}
        for s in RunDir(out.run_dir).read("sessions"):
            if s["status"] != "started":
                ends[s["status"]] = ends.get(s["status"], 0) + 1
        print(f"  sessions ended: {ends}; run {out.run_dir}")
    finally:
        stop_stack(str(sdir))
        shutil.rmtree(sdir, ignore_errors=True)
        if keep:
            print(f"  run kept: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def main_job_wall() -> None:
    sdir = Path(tempfile.mkdtemp(prefix="adev-bench-main-"))
    tmp = Path(tempfile.mkdtemp(prefix="adev-bench-main-runs-"))
    stack = tmp / "stack.toml"
    stack.write_text((ROOT / "stacks" / "embedded.toml").read_text()
                     .replace("[stack]\n", f'[stack]\nstate_dir = "{sdir}"\n', 1))
    cmd = [str(ROOT / ".venv" / "bin" / "adev"), "fleet", "--width", "12", "--stack", str(stack),
           "--results-dir", str(tmp / "runs"), "--live", "plain"]
    t = time.monotonic()
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - t
    tail = "\n".join((p.stdout + p.stderr).strip().splitlines()[-25:])
    print(f"main job (adev fleet --width 12, fleets/default.toml): exit {p.returncode}, "
          f"wall {wall:.0f} s ({wall / 60:.1f} min)")
    print("  last lines:\n    " + tail.replace("\n", "\n    "))
    from adev.stack import stop_stack
    stop_stack(str(sdir))
    shutil.rmtree(sdir, ignore_errors=True)
    shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--time-scale", type=float, default=20.0)
    ap.add_argument("--window-length", type=float, default=300.0, help="model seconds")
    ap.add_argument("--policy", help="emulator policy (default: the stack file's)")
    ap.add_argument("--skip-main", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the width-64 run directory")
    ap.add_argument("--scrape-interval", type=float, default=5.0, help="model seconds")
    ap.add_argument("--skip-overhead", action="store_true")
    a = ap.parse_args()
    from adev import event_loop
    print(f"({event_loop.describe()})")
    if not a.skip_overhead:
        scheduler_overhead(a.width, a.time_scale, a.window_length, a.policy, a.keep,
                           a.scrape_interval)
    if not a.skip_main:
        main_job_wall()
    return 0


if __name__ == "__main__":
    sys.exit(main())
