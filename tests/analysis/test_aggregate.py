"""Aggregates: spread/CV, t-intervals, the preemption-burst rule, sweep and operating points."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from adev.analysis.aggregate import (
    burst_windows,
    operating_points,
    spread,
    summarise,
    sweep_table,
    t_interval,
    window_stats,
)
from adev.analysis.run import load_run
from adev.analysis.windows import ALL, window_table

from .synth import make_run


def test_t_interval_and_spread_exact():
    iv = t_interval([1.0, 2.0, 3.0])
    h = 4.302652729911275 * 1.0 / math.sqrt(3)          # t_{0.975, 2} * s / sqrt(n)
    assert iv["mean"] == 2.0 and iv["lo"] == pytest.approx(2 - h) and iv["hi"] == pytest.approx(2 + h)
    assert math.isnan(t_interval([5.0])["lo"]) and t_interval([])["n"] == 0
    assert t_interval([1.0, float("nan"), 3.0])["n"] == 2
    s = spread([2.0, 4.0])
    assert s["mean"] == 3.0 and s["sd"] == pytest.approx(math.sqrt(2))
    assert s["cv"] == pytest.approx(math.sqrt(2) / 3) and (s["min"], s["max"]) == (2.0, 4.0)


def _table(pre):
    return pd.DataFrame({"endpoint": [ALL] * len(pre), "valid": [True] * len(pre),
                         "window": list(range(1, len(pre) + 1)), "preemptions": pre,
                         "preemptions_server": [math.nan] * len(pre),
                         "gross_saving": [0.1, 0.2, 0.3, 0.9][:len(pre)]})


def test_burst_rule_and_quiet_windows():
    t = _table([0, 0, 1, 10])            # median 0.5 -> threshold max(3, 1.5) = 3
    b = burst_windows(t)
    assert b.to_dict() == {1: False, 2: False, 3: False, 4: True}
    t2 = _table([4, 4, 4, 13])           # median 4 -> threshold 12
    assert burst_windows(t2).to_dict() == {1: False, 2: False, 3: False, 4: True}
    assert not burst_windows(_table([4, 4, 4, 12])).any()
    q = window_stats(t, ["gross_saving"], quiet_only=True)
    assert q.loc["gross_saving", "n"] == 3 and q.loc["gross_saving", "mean"] == pytest.approx(0.2)
    a = window_stats(t, ["gross_saving"])
    assert a.loc["gross_saving", "mean"] == pytest.approx(0.375)


def test_sweep_and_operating_points(tmp_path):
    runs = [load_run(make_run(tmp_path, width=w, windows=2, window_s=150, seed=w, ledger=False))
            for w in (2, 4)]
    runs.append(load_run(make_run(tmp_path, width=4, windows=2, window_s=150, seed=9,
                                  ledger=False, lease_ttl_s=300.0, run_id="long-lease")))
    summ = [summarise(r, window_table(r)) for r in runs]
    assert summ[0].reuse is None and "ledger" in summ[0].missing["reuse"]
    sw = sweep_table(summ)
    assert len(sw) == 3                                   # (lease 5: w2, w4), (lease 300: w4)
    assert set(sw["width"]) == {2, 4} and (sw["runs"] == 1).all()
    op = operating_points(summ, 4)
    assert list(op["lease_ttl_s"]) == [5.0, 300.0]
    long, short = op.iloc[1], op.iloc[0]
    assert long["refused_share"] > short["refused_share"]
    assert long["gross_saving"] < short["gross_saving"]


def test_batch_runs_interval_across_runs(tmp_path):
    """Batch protocol: each run is one window on a fresh stack (counters restart from 0)."""
    run = load_run(make_run(tmp_path, width=3, windows=3, window_s=150, seed=4,
                            protocol="batch", ledger=False))
    t = window_table(run)
    a = t[t.endpoint == ALL]
    assert len(a) == 3 and a.gross_saving.notna().all()
    assert (a.xcheck_store_rel < 0.01).all() and (a.xcheck_gpu_rel < 0.01).all()
    s = summarise(run, t, with_reuse=False)
    iv = s.interval["gross_saving"]
    assert iv["n"] == 3 and iv["lo"] < iv["mean"] < iv["hi"]
    assert iv["mean"] == pytest.approx(a.gross_saving.mean())
