"""Running figures for the live display."""
from __future__ import annotations

import math

import pytest

from adev.analysis.live import _default_prefill_rate, running_figures


def _scr(t, target, ext, gpu, prompt):
    lab = '{engine="0"}'
    return {"target": target, "t": t, "ok": True,
            "samples": {f"vllm:external_prefix_cache_hits_total{lab}": ext,
                        f"vllm:prefix_cache_hits_total{lab}": gpu,
                        f"vllm:prompt_tokens_total{lab}": prompt}}


def test_running_figures_exact():
    calls = [{"endpoint": "coder", "t_sent": 100.0, "t_end": 104.0, "status": "ok",
              "t_first_content": 101.0, "server": {"put_blocks": 10, "put_refused_blocks": 5}},
             {"endpoint": "coder", "t_sent": 102.0, "t_end": 106.0, "status": "ok",
              "t_first_content": 105.0, "server": None}]
    scr = [_scr(100.0, "coder", 0, 0, 0), _scr(110.0, "coder", 1485, 500, 5000),
           {"target": "master", "t": 110.0, "ok": True, "samples": {}}]
    f = running_figures(calls, scr, 100.0, 110.0, prefill_tokens_per_s=1485.0)
    assert f["busy_share"] == {"coder": pytest.approx(0.6)}
    assert f["gross_saving"] == pytest.approx((1485 / 1485.0) / 6.0)
    assert f["gpu_hit_share"] == pytest.approx(0.1) and f["store_hit_share"] == pytest.approx(0.297)
    # refused / offered, offered = accepted (put_blocks) + refused
    assert f["refused_share"] == pytest.approx(5 / 15) and f["ttft_p50_s"] == pytest.approx(2.0)


def test_running_figures_before_any_scrape():
    f = running_figures([], [], 0.0, 0.0)
    assert f["gross_saving"] is None and f["busy_share"] == {} and f["calls"] == 0


def test_running_figures_two_endpoints_resets_gaps_and_open_calls():
    calls = [
        # coder: [100, 104] and [102, 106] -> 6 s busy; a call still open is not counted
        {"endpoint": "coder", "t_sent": 100.0, "t_end": 104.0, "status": "ok",
         "t_first_content": 101.0, "server": {"put_blocks": 10, "put_refused_blocks": 5}},
        {"endpoint": "coder", "t_sent": 102.0, "t_end": 106.0, "status": "ok",
         "t_first_content": 105.0, "server": None},
        {"endpoint": "coder", "t_sent": 108.0, "t_end": None, "status": None,
         "t_first_content": None},
        # reasoner: [103, 112] clipped to t_now = 110, [99, 101] clipped to t0 = 100 -> 8 s
        {"endpoint": "reasoner", "t_sent": 103.0, "t_end": 112.0, "status": "ok",
         "t_first_content": 103.5, "server": {"put_blocks": 6, "put_refused_blocks": 0}},
        {"endpoint": "reasoner", "t_sent": 99.0, "t_end": 101.0, "status": "error",
         "t_first_content": 100.5, "server": None},
    ]
    failed = _scr(105.0, "coder", 99999, 99999, 99999)
    failed["ok"] = False
    planner = [{"target": "planner", "t": t, "ok": True,          # no store counter: skipped
                "samples": {'vllm:prompt_tokens_total{engine="0"}': v}} for t, v in ((100, 0), (110, 9))]
    scr = [_scr(110.0, "coder", 1485, 500, 5000), failed, _scr(100.0, "coder", 0, 0, 0),
           # reasoner restarts between 104 and 108: the counters fall and count from 0 again
           _scr(100.0, "reasoner", 100, 0, 200), _scr(104.0, "reasoner", 300, 50, 1000),
           _scr(108.0, "reasoner", 50, 10, 100), _scr(110.0, "reasoner", 250, 30, 600),
           {"target": "master", "t": 110.0, "ok": True, "samples": {}}, *planner]
    f = running_figures(calls, scr, 100.0, 110.0, prefill_tokens_per_s=1485.0)
    assert f["busy_share"] == {"coder": pytest.approx(0.6), "planner": 0.0,
                               "reasoner": pytest.approx(0.8)}
    store, gpu, prompt = 1485 + (200 + 50 + 200), 500 + (50 + 10 + 20), 5000 + (800 + 100 + 500)
    assert f["gross_saving"] == pytest.approx((store / 1485.0) / (6.0 + 8.0))
    assert f["gpu_hit_share"] == pytest.approx(gpu / prompt)
    assert f["store_hit_share"] == pytest.approx(store / prompt)
    assert f["refused_share"] == pytest.approx(5 / (16 + 5))
    assert f["ttft_p50_s"] == pytest.approx(1.0)        # ok calls: 1.0, 3.0, 0.5
    assert f["calls"] == 5
    # the stack's model profile gives the prefill rate when none is passed
    assert _default_prefill_rate() == 14850.0
    g = running_figures(calls, scr, 100.0, 110.0)
    assert g["gross_saving"] == pytest.approx((store / 14850.0) / 14.0)


def test_running_figures_missing_inputs_are_none():
    calls = [{"endpoint": "coder", "t_sent": 100.0, "t_end": 104.0, "status": "ok",
              "t_first_content": math.nan, "server": {"put_blocks": 0, "put_refused_blocks": 0}}]
    one = [_scr(100.0, "coder", 0, 0, 0)]                  # a single scrape: no difference yet
    f = running_figures(calls, one, 100.0, 110.0, prefill_tokens_per_s=1000.0)
    assert f["busy_share"] == {"coder": pytest.approx(0.4)}
    assert f["gross_saving"] is None and f["gpu_hit_share"] is None
    assert f["refused_share"] is None and f["ttft_p50_s"] is None   # NaN TTFT -> None
    two = one + [_scr(110.0, "coder", 100, 0, 0)]           # no prompt tokens counted
    f = running_figures(calls, two, 100.0, 110.0, prefill_tokens_per_s=1000.0)
    assert f["gross_saving"] == pytest.approx(0.1 / 4.0) and f["store_hit_share"] is None
    f = running_figures(calls, two, 100.0, 100.0, prefill_tokens_per_s=1000.0)   # t_now == t0
    assert f["busy_share"] == {"coder": None} and f["gross_saving"] is None
    f = running_figures([], two, 100.0, 110.0, prefill_tokens_per_s=1000.0)      # idle
    assert f["busy_share"] == {"coder": 0.0} and f["gross_saving"] is None


def test_counters_unchanged_same_time_scrapes_and_partial_counters():
    # coder: 50 -> 50 -> 80 is +30 (an unchanged counter adds 0, it is not a restart); a second
    # OK scrape at t = 105 without the counters is skipped, not compared with the other one
    coder = [_scr(100.0, "coder", 50, 10, 100), _scr(105.0, "coder", 50, 10, 100),
             {"target": "coder", "t": 105.0, "ok": True, "samples": {}},
             _scr(110.0, "coder", 80, 30, 400)]
    # reasoner: no prefix-hit counter; planner: no store counter: neither counts, whichever
    # counter is absent (the store, GPU and prompt sums stay those of coder)
    lab = '{engine="0"}'
    reasoner = [{"target": "reasoner", "t": t, "ok": True,
                 "samples": {f"vllm:external_prefix_cache_hits_total{lab}": v,
                             f"vllm:prompt_tokens_total{lab}": 10 * v}} for t, v in ((100, 1), (110, 9))]
    planner = [{"target": "planner", "t": t, "ok": True,
                "samples": {f"vllm:prefix_cache_hits_total{lab}": v,
                            f"vllm:prompt_tokens_total{lab}": 10 * v}} for t, v in ((100, 1), (110, 9))]
    # a call whose endpoint has no scrape yet still has a busy share; a call without an
    # endpoint has none
    calls = [{"endpoint": "fresh", "t_sent": 100.0, "t_end": 100.5, "status": "ok",
              "t_first_content": 100.25, "server": {"put_blocks": 0, "put_refused_blocks": 1}},
             {"endpoint": None, "t_sent": 100.0, "t_end": 109.0, "status": None}]
    f = running_figures(calls, coder + reasoner + planner, 100.0, 110.0,
                        prefill_tokens_per_s=60.0)
    assert f["busy_share"] == {"coder": 0.0, "fresh": pytest.approx(0.05), "planner": 0.0,
                               "reasoner": 0.0}
    # busy 0.5 s (under one second); store-served 30 tokens at 60 tokens/s = 0.5 s saved
    assert f["gross_saving"] == pytest.approx(0.5 / 0.5)
    assert f["gpu_hit_share"] == pytest.approx(20 / 300)
    assert f["store_hit_share"] == pytest.approx(30 / 300)
    # one offered block, refused: all writes refused (refused >= accepted still counts)
    assert f["refused_share"] == 1.0
    assert f["ttft_p50_s"] == pytest.approx(0.25) and f["calls"] == 2


def test_one_prompt_token_and_one_accepted_write():
    calls = [{"endpoint": "coder", "t_sent": 100.0, "t_end": 102.0, "status": "ok",
              "t_first_content": 101.0, "server": {"put_blocks": 1, "put_refused_blocks": 0}}]
    scr = [_scr(100.0, "coder", 0, 0, 0), _scr(110.0, "coder", 1, 0, 1)]
    f = running_figures(calls, scr, 100.0, 110.0, prefill_tokens_per_s=1.0)
    assert f["gpu_hit_share"] == 0.0 and f["store_hit_share"] == 1.0
    assert f["refused_share"] == 0.0
    assert f["gross_saving"] == pytest.approx((1 / 1.0) / 2.0)


def test_a_release_that_counts_waiting_lookups_takes_the_gpu_hits_from_the_calls():
    """coder answers vLLM 0.24.0: its counter's 9,000 GPU hits of 5,000 prompt tokens count
    waiting requests at every step; the calls' cached tokens, 1,200 + 800 (GPU + store, once
    per request), less the 1,485 store hits give 515. reasoner (0.26.0) keeps its counter."""
    calls = [{"endpoint": "coder", "t_sent": 100.0, "t_end": 104.0, "status": "ok",
              "cached_tokens": 1200},
             {"endpoint": "coder", "t_sent": 102.0, "t_end": 106.0, "status": "ok",
              "cached_tokens": 800},
             {"endpoint": "coder", "t_sent": 103.0, "t_end": 106.0, "status": "error",
              "cached_tokens": 4000},
             {"endpoint": "reasoner", "t_sent": 100.0, "t_end": 101.0, "status": "ok",
              "cached_tokens": 7}]
    scr = [_scr(100.0, "coder", 0, 0, 0), _scr(110.0, "coder", 1485, 9000, 5000),
           _scr(100.0, "reasoner", 0, 0, 0), _scr(110.0, "reasoner", 0, 100, 1000)]
    f = running_figures(calls, scr, 100.0, 110.0, 1485.0,
                        {"coder": "0.24.0", "reasoner": "0.26.0"})
    assert f["gpu_hit_share"] == pytest.approx((515 + 100) / 6000)
    assert f["store_hit_share"] == pytest.approx(1485 / 6000)
    # without the releases the counters are taken as they are
    f = running_figures(calls, scr, 100.0, 110.0, 1485.0)
    assert f["gpu_hit_share"] == pytest.approx(9100 / 6000)
    # such a release without cached tokens in its calls: its endpoint waits for the report
    nocache = [{**c, "cached_tokens": None} for c in calls]
    f = running_figures(nocache, scr, 100.0, 110.0, 1485.0, {"coder": "0.24.0"})
    assert f["gpu_hit_share"] == pytest.approx(100 / 1000)
