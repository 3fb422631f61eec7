"""Arithmetic of ``bench/workload_profile.py`` on a hand-made call table (values worked out by
hand in the comments)."""
from __future__ import annotations

import importlib.util

import pandas as pd
import pytest

from adev.config import ROOT

_spec = importlib.util.spec_from_file_location("workload_profile",
                                               ROOT / "bench" / "workload_profile.py")
wp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wp)


def _call(sid, ep, role, rnd, step, t0, t1, prompt, gpu, store, comp, out=100, tag=None,
          keys=0, status="ok"):
    return {"session_id": sid, "endpoint": ep, "role": role, "round": rnd, "step": step,
            "call_id": f"{sid}/r{rnd}/{tag or role}/s{step}", "t_sent": t0, "t_end": t1,
            "prompt_tokens": prompt, "completion_tokens": out, "status": status,
            "srv_tok_gpu": gpu, "srv_tok_store_ram": store, "srv_tok_store_disk": 0.0,
            "srv_tok_computed": comp, "srv_store_keys_looked_up": keys, "srv_preemptions": 0}


@pytest.fixture
def calls() -> pd.DataFrame:
    return pd.DataFrame([
        # session a: two reasoner calls, then a switch to the coder
        _call("a", "reasoner", "architect", 1, 0, 0.0, 2.0, 1000, 0, 0, 1000, keys=62),
        _call("a", "reasoner", "architect", 1, 1, 2.0, 4.0, 1200, 992, 0, 208, keys=13),
        _call("a", "coder", "test_writer", 1, 0, 4.0, 6.0, 1600, 0, 1184, 416, keys=100),
        # session b: one coder call overlapping a's coder call
        _call("b", "coder", "architect", 1, 0, 5.0, 7.0, 2000, 0, 0, 2000, out=400),
        # a failed call is ignored
        _call("b", "coder", "architect", 1, 1, 7.0, 8.0, 9999, 0, 0, 9999, status="error"),
    ])


def test_kinds_and_growth(calls):
    df = wp.prepare(calls).set_index("call_id")
    assert len(df) == 4
    assert df.loc["a/r1/architect/s0", "kind"] == "start"
    assert df.loc["a/r1/architect/s1", "kind"] == "same"
    assert df.loc["a/r1/test_writer/s0", "kind"] == "switch"
    assert df.loc["b/r1/architect/s0", "kind"] == "start"
    assert df.loc["a/r1/architect/s1", "growth"] == 200          # 1200 - 1000, same turn
    assert pd.isna(df.loc["a/r1/test_writer/s0", "growth"])       # first step of its turn


def test_shares_and_origin(calls):
    df = wp.prepare(calls)
    s = wp.shares(df)
    # prompt 1000+1200+1600+2000 = 5800; gpu 992; store 1184; computed 3624
    assert s["gpu"] == pytest.approx(992 / 5800)
    assert s["store"] == pytest.approx(1184 / 5800)
    assert s["computed"] == pytest.approx(3624 / 5800)
    o = wp.store_origin(df)
    assert o == {"start": 0.0, "switch": 1.0, "same": 0.0}


def test_breakdown_by_endpoint(calls):
    t = wp.breakdown(wp.prepare(calls), ["endpoint"]).set_index("endpoint")
    assert t.loc["coder", "calls"] == 2
    assert t.loc["coder", "prompt_sum"] == 3600
    assert t.loc["coder", "of_run"] == pytest.approx(3600 / 5800)
    assert t.loc["coder", "store"] == pytest.approx(1184 / 3600)
    assert t.loc["reasoner", "prompt_mean"] == pytest.approx(1100)


def test_peak_concurrent_tokens(calls):
    p = wp.peak_concurrent_tokens(wp.prepare(calls))
    # coder: a [4,6) 1700 tokens, b [5,7) 2400 tokens -> peak 4100;
    # time-weighted mean over [4,7): (1700*1 + 4100*1 + 2400*1) / 3
    assert p["coder"][0] == pytest.approx(4100)
    assert p["coder"][1] == pytest.approx((1700 + 4100 + 2400) / 3)
    # reasoner: back-to-back calls never overlap (an end and a start at t=2 do not add up)
    assert p["reasoner"][0] == pytest.approx(1300)


def test_mean_gauge():
    from adev.analysis.run import Scrape
    g = 'vllm:num_requests_running{engine="0"}'
    scrapes = {"coder": [Scrape(0.0, True, {g: 1.0}), Scrape(5.0, True, {g: 3.0}),
                         Scrape(10.0, False, {}), Scrape(20.0, True, {g: 9.0})],
               "master": [Scrape(0.0, True, {"other": 1.0})]}
    # scrapes at t=0 and t=5 fall in [0, 20): (1 + 3) / 2; the failed one is skipped
    assert wp.mean_gauge(scrapes, "vllm:num_requests_running", 0.0, 20.0) == {"coder": 2.0}


def test_turnover_before_calls():
    df = wp.prepare(pd.DataFrame([
        _call("a", "coder", "implementer", 1, 0, 0.0, 1.0, 1000, 0, 0, 1000, out=100),
        _call("b", "coder", "implementer", 1, 0, 1.0, 2.0, 2000, 0, 0, 500, out=50),
        _call("a", "coder", "implementer", 1, 1, 3.0, 4.0, 1200, 1000, 0, 200, out=10),
        _call("b", "coder", "implementer", 1, 1, 5.0, 6.0, 2100, 2000, 0, 100, out=10),
    ]))
    tv = wp.turnover_before_calls(df)
    by_call = {df.loc[i, "call_id"]: v for i, v in tv.items()}
    # a's second call: b's first call allocated 500 computed + 50 completion in between
    assert by_call["a/r1/implementer/s1"] == 550
    # b's second call: a's second call allocated 200 + 10
    assert by_call["b/r1/implementer/s1"] == 210
    assert len(by_call) == 2  # first calls have no earlier call of their session


def test_prompt_per_busy_second(calls):
    """Prompt 5,800 tokens (the failed call left out); busy: reasoner [0, 4] = 4 s, coder
    [4, 6] U [5, 7] = 3 s, 7 s in all; at 1,000 tokens/s: 5.8 s of prefill / 7 s = 0.8286. Cut
    at t = 5: reasoner 4 s + coder 1 s = 5 s: 1.16."""
    df = wp.prepare(calls)
    x, busy = wp.intensity(df, [(0.0, 8.0)], 1000.0)
    assert busy == pytest.approx(7.0) and x == pytest.approx(5.8 / 7.0)
    x, busy = wp.intensity(df, [(0.0, 5.0)], 1000.0)
    assert busy == pytest.approx(5.0) and x == pytest.approx(1.16)
    assert "prompt per busy second: 0.83 prefill-rates" in wp.report(df, None, None, 8.0,
                                                                     [(0.0, 8.0)], 1000.0)
