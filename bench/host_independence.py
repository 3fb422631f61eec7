"""Host independence of the headline figures: two runs of the same fleet (same seed) at different
time scales, window by window (prints figures; not a test).

    .venv/bin/python bench/host_independence.py RUN_A RUN_B [--tolerance 0.015]

For each window present in both runs it prints, from the all-endpoint row of each run's window
table (:func:`adev.analysis.windows.window_table`), the gross saving, GPU hit share and store hit
share of A and B and their difference in percentage points, and how far each run's real store
reads were from the tier profile (``store_read_over_p50``, ``store_late_share``, ``store_behind``).
A run's time scale and model clock (``stack.model_clock``) come from its manifest. The last line
gives the largest difference and whether it is within ``--tolerance`` (a share, default 1.5
points). Exit status 0 either way (a measurement, not a check).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

HEADLINE = ("gross_saving", "gpu_hit_share", "store_hit_share")
HOST = ("store_read_over_p50", "store_late_share", "store_behind")


def _rows(path: str):
    from adev.analysis.run import load_run
    from adev.analysis.windows import ALL, window_table
    run = load_run(Path(path))
    t = window_table(run)
    t = t[t["endpoint"] == ALL].set_index("window")
    clock = ((run.stack or {}).get("model_clock") or "free")
    return run, t, clock


def _f(v: float, pct: bool = True) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return f"{100 * v:.2f}%" if pct else f"{v:.3g}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_a")
    ap.add_argument("run_b")
    ap.add_argument("--tolerance", type=float, default=0.015)
    a = ap.parse_args(argv)
    ra, ta, ca = _rows(a.run_a)
    rb, tb, cb = _rows(a.run_b)
    print(f"A: {ra.run_id} (time scale {ra.time_scale:g}, model clock {ca})")
    print(f"B: {rb.run_id} (time scale {rb.time_scale:g}, model clock {cb})")
    worst = 0.0
    for w in sorted(set(ta.index) & set(tb.index)):
        print(f"window {w}:")
        for k in HEADLINE:
            x, y = float(ta.at[w, k]), float(tb.at[w, k])
            d = 100 * (x - y)
            if not math.isnan(d):
                worst = max(worst, abs(d))
            print(f"  {k:<16} A {_f(x):>8}  B {_f(y):>8}  A-B {d:+.2f} points")
        for k in HOST:
            pct = k == "store_late_share"
            print(f"  {k:<20} A {_f(float(ta.at[w, k]), pct):>8}  B {_f(float(tb.at[w, k]), pct):>8}")
    ok = worst <= 100 * a.tolerance
    print(f"largest difference: {worst:.2f} points ({'within' if ok else 'beyond'} "
          f"{100 * a.tolerance:g} points)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
