"""Host independence of the headline figures: two runs of the same fleet (same seed) at different
time scales, window by window (prints figures; not a test).

    .venv/bin/python bench/host_independence.py RUN_A RUN_B [--tolerance 0.015]

For each window present in both runs it prints, from the all-endpoint row of each run's window
table (:func:`adev.analysis.windows.window_table`), the gross saving, GPU hit share and store hit
share of A and B and their difference in percentage points, and how far each run's real store
reads were from the tier profile (``store_read_over_p50``, ``store_late_share``, ``store_behind``),
and for each run how long its held model clock stood still and how often its offload heartbeat
came in model time (:func:`adev.analysis.report.clock_md`).
A run's time scale and model clock (``stack.model_clock``) come from its manifest. The last line
gives the largest difference and whether it is within ``--tolerance`` (a share, default 1.5
points). Before it, where the two runs part (:func:`parting`): the first call, in model time from
each run's first send, whose send, end, tier split or save (blocks taken and refused) differs
between them, and the share of the calls both made that are the same in all four; two runs of
one seed at one time scale show how far the stack itself repeats a run. Exit status 0 either
way (a measurement, not a check).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

HEADLINE = ("gross_saving", "gpu_hit_share", "store_hit_share")
HOST = ("store_read_over_p50", "store_late_share", "store_behind")
TIERS = ("srv_tok_gpu", "srv_tok_store_ram", "srv_tok_store_disk", "srv_tok_computed")
SAVES = ("srv_put_blocks", "srv_put_refused_blocks")
"""A call's save: blocks the store took, and blocks it refused (a RAM tier full of leased
objects); a save that differs changes no figure of that call, only what later calls find."""
SAME_S = 1e-6
"""Model seconds within which two runs' send or end times of a call count as the same."""


def _nan(v) -> bool:
    return isinstance(v, float) and math.isnan(v)


def parting(a, b) -> tuple[float | None, str | None, str | None, float, int]:
    """Where two runs' calls (call tables of :func:`adev.analysis.run.load_run`) part: (the model
    time of the first call, from the run's first send, whose send or end time differs by over
    :data:`SAME_S`, or whose tokens per tier or save (:data:`SAVES`) differ; its call id; what
    differs: ``send``, ``end``, ``tiers`` or ``saves``; the share of the calls made in both runs
    that are the same; their count). ``None`` where no call differs. A field missing from both
    calls (NaN: no server fields) is the same."""
    def differ(x, y, keys) -> bool:
        return any(x[k] != y[k] and not (_nan(x[k]) and _nan(y[k])) for k in keys)

    def table(c):
        c = c[c["status"] == "ok"]
        t0 = c["t_sent"].min()
        c = c.assign(rel_sent=c["t_sent"] - t0, rel_end=c["t_end"] - t0)
        return c.set_index("call_id")
    ta, tb = table(a), table(b)
    common = ta.index.intersection(tb.index)
    ta, tb = ta.loc[common].sort_values("rel_sent"), tb.loc[common]
    first: tuple[float, str, str] | None = None
    same = 0
    for cid, x in ta.iterrows():
        y = tb.loc[cid]
        what = ("send" if abs(x["rel_sent"] - y["rel_sent"]) > SAME_S else
                "end" if abs(x["rel_end"] - y["rel_end"]) > SAME_S else
                "tiers" if differ(x, y, TIERS) else
                "saves" if differ(x, y, SAVES) else None)
        if what is None:
            same += 1
        elif first is None:
            first = (float(x["rel_sent"]), str(cid), what)
    n = len(common)
    share = same / n if n else math.nan
    return (*(first or (None, None, None)), share, n)


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
    from adev.analysis.report import clock_md
    for name, r in (("A", ra), ("B", rb)):
        if clock_md(r):
            print(f"{name}: {clock_md(r).strip()}")
    t, cid, what, share, n = parting(ra.calls, rb.calls)
    where = ("no call differs" if t is None else
             f"the first call that differs is sent at model {t:.3f} s ({cid}: {what})")
    print(f"calls in both: {n}; {where}; the same in send, end, tier split and save: {_f(share)}")
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
