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


# -- hand-built summaries: sweep rows, pooling across runs, operating-point labels ------------

def _summary(run_id, width, gross, *, conf="store-ram+disk", disk="local-raid0", lease=5.0,
             pause=0.0, quiet=None, windows=(0.1, 0.2), reuse=None, **means):
    from adev.analysis.aggregate import RunSummary
    stats = {"gross_saving": spread([gross])}
    stats.update({k: spread([v]) for k, v in means.items()})
    return RunSummary(run_id, run_id, "/x", width, "steady", conf, lease, pause, 2, 0, 0,
                      stats, {"gross_saving": spread([gross if quiet is None else quiet])},
                      {"gross_saving": t_interval(list(windows))}, reuse, {}, disk)


def test_sweep_table_rows_by_hand():
    a = _summary("a", 4, 0.10, net_saving=0.08, gpu_hit_share=0.3,
                 reuse={"share_same_session": 0.5, "share_cross_session": 0.2, "aged_share": 0.1})
    b = _summary("b", 4, 0.20, quiet=0.30, net_saving=0.12, gpu_hit_share=0.1,
                 reuse={"share_same_session": 0.7, "share_cross_session": None, "aged_share": 0.3})
    c = _summary("c", 2, 0.05, windows=(0.04, 0.05, 0.06))
    d = _summary("d", 2, 0.01, lease=300.0, conf="store-ram", disk="local-raid0")
    sw = sweep_table([a, b, c, d])
    assert list(zip(sw.operating_point, sw.width, sw.runs, strict=True)) == [
        ("store-ram, lease 300 s, pause 0 s", 2, 1),
        ("store-ram+disk (local-raid0), lease 5 s, pause 0 s", 2, 1),
        ("store-ram+disk (local-raid0), lease 5 s, pause 0 s", 4, 2)]
    two = sw.iloc[2]
    # two runs at one point: pooled as samples; interval across the runs' means (0.1, 0.2)
    h = 12.706204736174707 * math.sqrt(0.005) / math.sqrt(2)     # t_{0.975, 1} * s / sqrt(2)
    assert two.gross_saving == pytest.approx(0.15) and two.interval_basis == "2 runs"
    assert (two.gross_saving_lo, two.gross_saving_hi) == (pytest.approx(0.15 - h),
                                                          pytest.approx(0.15 + h))
    assert two.gross_saving_quiet == pytest.approx(0.20)          # (0.10 + 0.30) / 2
    assert two.net_saving == pytest.approx(0.10) and two.gpu_hit_share == pytest.approx(0.2)
    assert math.isnan(two.store_hit_share)                        # no run has it
    assert two.reuse_share_same_session == pytest.approx(0.6)
    assert two.reuse_share_cross_session == pytest.approx(0.2)    # the None is left out
    assert two.reuse_aged_share == pytest.approx(0.2)
    one = sw.iloc[1]
    # one run: the interval across its windows (0.04, 0.05, 0.06)
    h1 = 4.302652729911275 * 0.01 / math.sqrt(3)
    assert one.interval_basis == "3 windows" and one.gross_saving == pytest.approx(0.05)
    assert (one.gross_saving_lo, one.gross_saving_hi) == (pytest.approx(0.05 - h1),
                                                          pytest.approx(0.05 + h1))
    assert math.isnan(one.reuse_aged_share)


def test_operating_point_key_label_and_order():
    from adev.analysis.aggregate import op_key, op_label
    a = _summary("a", 12, 0.1, conf="store-ram", disk="local-raid0", lease=60.0, pause=30.0)
    assert op_key(a) == ("store-ram", None, 60.0, 30.0)           # no disk tier in this config
    assert op_label(op_key(a)) == "store-ram, lease 60 s, pause 30 s"
    b = _summary("b", 12, 0.2, conf="disk-only", disk="remote-nvmeof", lease=0.5, pause=None)
    assert op_label(op_key(b)) == "disk-only (remote-nvmeof), lease 0.5 s, pause ? s"
    assert op_label((None, None, None, 0.0)) == "?, lease ? s, pause 0 s"
    c = _summary("c", 12, 0.3, conf="store-ram", disk=None, lease=5.0, pause=0.0,
                 refused_share=0.25)
    w = _summary("w", 4, 0.9)
    op = operating_points([a, b, c, w])
    # sorted by configuration, the run's disk tier (none last), lease, pause
    assert list(op.run_id) == ["b", "a", "c"]
    assert list(op.gross_saving) == [0.2, 0.1, 0.3] and op.iloc[2].refused_share == 0.25
    assert list(operating_points([a, b, c, w], None).run_id) == ["b", "a", "c", "w"]
    assert len(operating_points([w])) == 0


def test_summary_flat_names_every_figure():
    s = _summary("a", 4, 0.1, reuse={"touches": 10, "aged_share": None, "note": "x"})
    s.xcheck = {"xcheck_gpu_rel": 0.01}
    f = s.flat()
    assert f["gross_saving"] == 0.1 and math.isnan(f["gross_saving_cv"])
    assert f["gross_saving_quiet"] == 0.1 and f["gross_saving_lo"] < 0.15 < f["gross_saving_hi"]
    assert f["run_xcheck_gpu_rel"] == 0.01
    assert f["reuse_touches"] == 10 and f["reuse_aged_share"] is None and "reuse_note" not in f
    assert f["width"] == 4 and "stats" not in f and "missing" not in f
    assert s.mean("gross_saving") == 0.1 and math.isnan(s.mean("nope"))


def test_burst_rule_falls_back_to_the_emulators_count_and_ignores_invalid_windows():
    t = _table([math.nan, math.nan, math.nan, math.nan])
    t["preemptions_server"] = [1, 1, 2, 4]               # median 1.5 -> threshold max(3, 4.5)
    assert burst_windows(t).to_dict() == {1: False, 2: False, 3: False, 4: False}
    t["preemptions_server"] = [1, 1, 2, 5]
    assert burst_windows(t).to_dict() == {1: False, 2: False, 3: False, 4: True}
    assert burst_windows(t, factor=1.0, min_count=1).to_dict() == {1: False, 2: False, 3: True,
                                                                  4: True}
    t.loc[3, "valid"] = False                           # window 4 invalid: not judged
    assert burst_windows(t).to_dict() == {1: False, 2: False, 3: False}
    assert len(burst_windows(t[t.window > 10])) == 0
    s = spread([0.0, 0.0])
    assert s["mean"] == 0.0 and math.isnan(s["cv"])     # CV undefined at mean 0
    assert math.isnan(spread([])["mean"]) and spread([None, 1.0])["n"] == 1


def _four_windows(tmp_path, valid=(True, True, True, False)):
    """One coder call busy over [0, 40); store tokens 1, 2, 3, 4 x the prefill rate per 10-s
    window (1, 2, 3, 4 s of prefill spared over 10 s busy), so the
    gross saving is 0.1, 0.2, 0.3, 0.4; preemptions 0, 0, 10, 0 (window 3 is a burst)."""
    import json

    from adev.config import load_model_profile

    from .test_windows import _call, _vllm, make_hand_run
    rate = load_model_profile("qwen3-coder-30b-a3b").prefill_tokens_per_s
    ext = [0, 1, 3, 6, 10]
    pre = [0, 0, 0, 10, 10]
    scr = [("coder", 10.0 * i, True, _vllm(0, ext[i] * rate, 1000 * i, pre=pre[i]))
           for i in range(5)]
    run = make_hand_run(tmp_path, [_call("a", 0.0, 40.0)], scr, [])
    with open(run.path / "windows.jsonl", "a") as f:
        for i, ok in enumerate(valid):
            f.write(json.dumps({"kind": "window", "run_id": "hand", "index": i + 1, "t0": 10.0 * i,
                                "t1": 10.0 * (i + 1), "valid": ok,
                                "reason": None if ok else "stack restarted"}) + "\n")
    return load_run(run.path)


def test_summarise_valid_and_quiet_windows_by_hand(tmp_path):
    run = _four_windows(tmp_path)
    t = window_table(run)
    s = summarise(run)                                  # the table computed when not given
    assert (s.windows, s.invalid_windows, s.burst_windows) == (4, 1, 1)
    assert s.mean("gross_saving") == pytest.approx(0.2)              # windows 1-3
    assert s.stats["gross_saving"]["n"] == 3
    assert s.mean("gross_saving", quiet=True) == pytest.approx(0.15)  # window 3 left out
    assert s.interval["gross_saving"]["mean"] == pytest.approx(0.2)
    assert s.interval["gross_saving"]["hi"] - 0.2 == pytest.approx(4.302652729911275 * 0.1
                                                                   / math.sqrt(3))
    assert s.mean("preemptions") == pytest.approx(10 / 3)
    assert "extension field" in s.missing["net_saving"] and "ledger" in s.missing["reuse"]
    assert "windows" not in s.missing and s.width == 2 and s.lease_ttl_s == 5.0
    assert s.xcheck is not None and set(s.xcheck) == {"xcheck_gpu_rel", "xcheck_store_rel",
                                                       "xcheck_disk_rel", "store_load_failed_tokens"}
    assert summarise(run, t, with_reuse=False).missing.get("reuse") is None
    from adev.analysis.windows import cross_check
    x = cross_check(run).set_index("endpoint")
    assert (x.loc[ALL, "span_from"], x.loc[ALL, "span_to"]) == (0.0, 30.0)   # valid windows only
    assert x.loc["coder", "store_tokens"] == pytest.approx(6 * run.prefill_tokens_per_s)


def test_summarise_without_a_valid_window(tmp_path):
    run = _four_windows(tmp_path, valid=(False,) * 4)
    s = summarise(run, with_reuse=False)
    assert (s.windows, s.invalid_windows, s.burst_windows) == (4, 4, 0)
    assert s.missing["windows"] == "no valid window in the run"
    assert math.isnan(s.mean("gross_saving")) and s.stats["gross_saving"]["n"] == 0
    assert s.interval["gross_saving"]["n"] == 0 and s.xcheck is None
    from adev.analysis.windows import cross_check
    assert cross_check(run).empty and "xcheck_gpu_rel" in cross_check(run).columns


def test_tier_token_and_read_rate_formulas():
    from adev.analysis.figures import effective_read_rate, tier_tokens_from_bytes
    assert tier_tokens_from_bytes(1536.0, 64, 98304) == pytest.approx(1.0)   # 1536 x 64 / 98304
    assert effective_read_rate(3e9, 1.5) == 2e9


def _no_warnings():
    import warnings
    w = warnings.catch_warnings()
    w.__enter__()
    warnings.simplefilter("error")
    return w


def test_interval_and_spread_dicts_of_zero_one_and_three_values():
    w = _no_warnings()
    try:
        e, one, three = t_interval([]), t_interval([2.0]), t_interval([1.0, 2.0, 3.0])
        se, s1 = spread([]), spread([5.0])         # one value: sd undefined, and no warning
    finally:
        w.__exit__(None, None, None)
    assert list(e) == ["n", "mean", "lo", "hi", "sd"] and e["n"] == 0
    assert all(math.isnan(e[k]) for k in ("mean", "lo", "hi", "sd"))
    assert list(one) == ["n", "mean", "lo", "hi", "sd"] and (one["n"], one["mean"]) == (1, 2.0)
    assert all(math.isnan(one[k]) for k in ("lo", "hi", "sd"))
    assert three["sd"] == 1.0 and three["n"] == 3          # sample sd of 1, 2, 3
    assert list(se) == ["n", "mean", "sd", "min", "max", "cv"] and se["n"] == 0
    assert all(math.isnan(se[k]) for k in ("mean", "sd", "min", "max", "cv"))
    assert (s1["n"], s1["mean"], s1["min"], s1["max"]) == (1, 5.0, 5.0, 5.0)
    assert math.isnan(s1["sd"]) and math.isnan(s1["cv"])


def test_burst_rule_edge_cases():
    from adev.analysis.aggregate import _nanmean
    empty = burst_windows(_table([]))
    assert len(empty) == 0 and empty.dtype == bool
    w = _no_warnings()
    try:
        # no preemption figure at all: median taken as 0 (no warning), nothing is a burst
        t = _table([math.nan] * 3)
        assert burst_windows(t).to_dict() == {1: False, 2: False, 3: False}
        assert math.isnan(_nanmean([])) and math.isnan(_nanmean([None]))
    finally:
        w.__exit__(None, None, None)
    # threshold max(0, 3 x median 0) = 0: a window without a figure counts 0, not a burst
    t = _table([0, 0, math.nan])
    assert burst_windows(t, min_count=0).to_dict() == {1: False, 2: False, 3: False}
    assert _nanmean([1.0, None, 3.0, math.nan]) == 2.0


def test_window_stats_only_the_endpoints_valid_rows_and_absent_figures():
    t = pd.DataFrame({"endpoint": [ALL, ALL, "coder", "coder"], "valid": [True, False, True, True],
                      "window": [1, 2, 1, 2], "gross_saving": [0.1, 0.5, 0.7, 0.9]})
    ws = window_stats(t, ["gross_saving", "nope"])
    assert ws.loc["gross_saving", "n"] == 1 and ws.loc["gross_saving", "mean"] == 0.1
    assert ws.loc["nope", "n"] == 0 and math.isnan(ws.loc["nope", "mean"])
    assert window_stats(t, ["gross_saving"], endpoint="coder").loc["gross_saving", "mean"] == \
        pytest.approx(0.8)


def test_summary_flat_leaves_out_the_nested_dicts():
    s = _summary("a", 4, 0.1, reuse={"touches": 10})
    f = s.flat()
    assert not {"stats", "quiet", "interval", "reuse", "missing"} & set(f)


def test_operating_point_row_has_every_figure():
    s = _summary("a", 12, 0.11, conf="store-ram+disk", disk="remote-nvmeof", lease=60.0,
                 pause=30.0, quiet=0.12, net_saving=0.09, gross_saving_disk=0.04,
                 disk_share_of_saving=0.36, gpu_hit_share=0.5, store_hit_share=0.3,
                 store_hit_rate=0.8, refused_share=0.05)
    s.burst_windows, s.windows = 1, 7
    op = operating_points([s])
    assert list(op.index) == [0]
    assert op.iloc[0].to_dict() == {
        "operating_point": "store-ram+disk (remote-nvmeof), lease 60 s, pause 30 s",
        "label": "a", "run_id": "a", "width": 12, "configuration": "store-ram+disk",
        "disk_tier": "remote-nvmeof", "lease_ttl_s": 60.0, "pause_s": 30.0,
        "protocol": "steady", "gross_saving": 0.11, "gross_saving_quiet": 0.12,
        "net_saving": 0.09, "gross_saving_disk": 0.04, "disk_share_of_saving": 0.36,
        "gpu_hit_share": 0.5, "store_hit_share": 0.3, "store_hit_rate": 0.8,
        "refused_share": 0.05, "burst_windows": 1, "windows": 7}


def test_sweep_table_every_mean_and_the_order_of_unknowns():
    figs = dict(net_saving=0.09, net_saving_full=0.07, gross_saving_disk=0.04,
                disk_share_of_saving=0.36, gpu_hit_share=0.5, store_hit_share=0.3,
                store_hit_rate=0.8, refused_share=0.05, ttft_send_p50=1.5, ttft_send_p99=4.0)
    a = _summary("a", 4, 0.1, **figs)
    w = _no_warnings()
    try:
        sw = sweep_table([a])
    finally:
        w.__exit__(None, None, None)
    row = sw.iloc[0]
    assert {k: row[k] for k in figs} == figs
    assert math.isnan(row["reuse_aged_share"])          # no run has it (and no warning)
    # pause unknown sorts before pause 0 ("" < "0.0"); an unknown width after the known ones
    p0 = _summary("p0", 4, 0.1, conf="store-ram", pause=0.0)
    pn = _summary("pn", 4, 0.2, conf="store-ram", pause=None)
    wn = _summary("wn", None, 0.3, conf="store-ram", pause=0.0)
    sw = sweep_table([wn, p0, pn])
    assert list(sw.gross_saving) == [0.2, 0.1, 0.3]
    assert list(sw.operating_point) == ["store-ram, lease 5 s, pause ? s"] + \
        ["store-ram, lease 5 s, pause 0 s"] * 2


def test_summarise_a_given_empty_table_and_the_runs_own_fields(tmp_path):
    from dataclasses import asdict

    from adev.analysis.ledger import reuse_profile
    from adev.analysis.windows import cross_check
    run = load_run(make_run(tmp_path, width=2, windows=2, window_s=150, seed=1))
    empty = window_table(run).iloc[0:0]
    s0 = summarise(run, empty, with_reuse=False)
    assert (s0.windows, s0.invalid_windows, s0.burst_windows) == (0, 0, 0)
    s = summarise(run)
    assert (s.run_id, s.label, s.path, s.width, s.protocol, s.configuration, s.lease_ttl_s,
            s.pause_s, s.disk_tier) == (run.run_id, run.label, str(run.path), run.width,
                                        run.protocol, run.configuration, run.lease_ttl_s,
                                        run.pause_s, run.disk_tier)
    assert None not in (run.protocol, run.configuration, run.pause_s, run.disk_tier)
    assert s.reuse == asdict(reuse_profile(run.ledger, run.lease_ttl_s)) and "reuse" not in s.missing
    x = cross_check(run).set_index("endpoint")
    assert list(x.index)[-1] == ALL and len(x) == 3
    keys = ("xcheck_gpu_rel", "xcheck_store_rel", "xcheck_disk_rel", "store_load_failed_tokens")
    assert s.xcheck == pytest.approx({k: float(x.loc[ALL, k]) for k in keys}, nan_ok=True)
    # the ALL row, not the first endpoint's
    assert s.xcheck["xcheck_disk_rel"] != float(x.iloc[0]["xcheck_disk_rel"])


def test_summarise_without_a_ledger_says_why(tmp_path):
    run = load_run(make_run(tmp_path, width=2, windows=1, window_s=150, seed=2, ledger=False))
    s = summarise(run)
    assert s.reuse is None and s.missing["reuse"] == run.missing["ledger"]
    assert "ledger" in s.missing["reuse"] and s.missing["reuse"] != "no ledger"


def test_sweep_table_orders_operating_points_by_their_values():
    # lease 60 inserted first; "5.0" < "60.0" puts lease 5 first
    l60 = _summary("l60", 4, 0.6, conf="store-ram", lease=60.0)
    l5 = _summary("l5", 4, 0.5, conf="store-ram", lease=5.0)
    assert list(sweep_table([l60, l5]).gross_saving) == [0.5, 0.6]
