"""One endpoint's figures in one window (adev.analysis.window_endpoint), every figure worked out by
hand from hand-made calls and scrapes."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from adev.analysis.run import load_run
from adev.analysis.window_endpoint import (
    analyse_endpoint,
    savings_block,
    set_disk_read_rate,
    set_gross_savings,
    set_hit_shares,
)
from adev.analysis.window_row import WindowFigures

from .test_windows import BPT, PROF, RATE, _call, _master, _srv, _vllm, make_hand_run

LAB = '{engine="0",model_name="m"'


def emu(gpu, ext, extq, prompt, pre, acc, ref, hit_ram, hit_disk, fail_ram, fail_disk):
    """An emulated endpoint's counters: vLLM's, the store client's puts and per-tier hits and
    failed loads."""
    return {**_vllm(gpu, ext, prompt, pre, extq=extq),
            f"adev_emulator_store_put_blocks_total{LAB}}}": acc,
            f"adev_emulator_store_put_refused_blocks_total{LAB}}}": ref,
            f'adev_emulator_store_hit_blocks_total{LAB},tier="ram"}}': hit_ram,
            f'adev_emulator_store_hit_blocks_total{LAB},tier="disk"}}': hit_disk,
            f'adev_emulator_store_load_failed_blocks_total{LAB},tier="ram"}}': fail_ram,
            f'adev_emulator_store_load_failed_blocks_total{LAB},tier="disk"}}': fail_disk}


def _full_run(tmp_path):
    # coder's calls (sent, end, queue) -> admitted at sent + queue:
    #   a [8, 12]   queue 2.5 -> 10.5  (sent before W, admitted in the span)
    #   b [10, 15]  queue 0   -> 10    (sent at t0: in W)
    #   c [14, -]   no server field, still open
    #   d [16, 17]  status error, queue 0 -> 16
    #   e [20, 22]  queue 0   -> 20    (sent at t1: not in W, not in the span)
    # server tokens gpu/ram/disk/computed, read path, load:
    #   a 10/0/30/40 rp 0.2 load 0.5 (disk only); b 1/2/3/4 rp 0.4; d 100/200/300/400 rp 0.3
    calls = [_call("a", 8.0, 12.0, _srv(2.5, 0.2, 10, 0, 30, 40, load=0.5)),
             _call("b", 10.0, 15.0, _srv(0.0, 0.4, 1, 2, 3, 4, put=1)),
             _call("c", 14.0, None, None),
             _call("d", 16.0, 17.0, _srv(0.0, 0.3, 100, 200, 300, 400, put=2)),
             _call("e", 20.0, 22.0, _srv(0.0, 9.0, 1000, 1000, 1000, 1000))]
    calls[3].status, calls[3].error = "error", "boom"
    # counters at 10 and 20 (a failed scrape at 15 between them): gpu +300, external hits +800
    # of +1600 queried, prompt +2000, preemptions 5 -> 3 (a reset: +3), puts +30 accepted and
    # +10 refused, hit blocks +30 RAM / +20 disk, failed loads +1 RAM / +1 disk
    s0 = emu(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    s10 = emu(100, 200, 1000, 2000, 5, 10, 2, 5, 5, 1, 0)
    s20 = emu(400, 1000, 2600, 4000, 3, 40, 12, 35, 25, 2, 1)
    scr = [("coder", 0.0, True, s0), ("coder", 10.0, True, s10), ("coder", 15.0, False, {}),
           ("coder", 20.0, True, s20), ("coder", 30.0, True, s20),
           ("master", 10.0, True, _master(0, 0)), ("master", 20.0, True, _master(500, 500))]
    return make_hand_run(tmp_path, calls, scr, [(10.0, 20.0)])


def test_analyse_endpoint_every_figure_by_hand(tmp_path):
    run = _full_run(tmp_path)
    w = {"index": 7, "t0": 10, "t1": 20, "valid": True, "protocol": "steady",
         "faults": ["scrape_failed:coder", "x"]}
    f = analyse_endpoint(run, w, "coder")
    assert (f.run_id, f.label, f.width, f.window, f.t0, f.t1, f.valid, f.protocol, f.endpoint) == \
        ("hand", run.label, 2, 7, 10.0, 20.0, True, "steady", "coder")
    assert f.faults == "scrape_failed:coder, x" and "window" not in f.missing
    # sent in [10, 20): b, c, d; d failed, c open
    assert (f.calls, f.calls_failed, f.calls_open) == (3, 1, 1)
    # busy: [10, 12] u [10, 15] u [16, 17] in W (c has no end, e starts at 20) = 5 + 1
    assert f.busy_s == pytest.approx(6.0) and f.busy_share == pytest.approx(0.6)
    # counter span: the scrapes at 10 and 20; the failed one at 15 is a gap; the preemption
    # counter reset once
    assert (f.span_from, f.span_to, f.busy_span_s) == (10.0, 20.0, pytest.approx(6.0))
    assert (f.counter_resets, f.scrape_gaps) == (1, 1)
    assert (f.gpu_tokens, f.prompt_tokens, f.preemptions) == (300, 2000, 3)
    # 2 failed blocks x 16 tokens: 800 - 32 = 768 store tokens served
    assert f.store_load_failed_tokens == 32 and f.store_tokens == 768
    assert f.gpu_hit_share == pytest.approx(0.15) and f.store_hit_share == pytest.approx(0.384)
    # no keys looked up per request: the hit rate from the token counters, 800 / 1600
    assert f.store_hit_rate == 0.5
    assert f.store_hit_rate_source == "vLLM counters external hits / external queries (tokens)"
    # refusals from the store client's counters: 10 of 40 offered
    assert (f.put_blocks, f.put_refused_blocks) == (30, 10)
    assert f.refused_share == 0.25
    assert f.refused_source == "store client counters adev_emulator_store_put_{refused_,}blocks"
    assert f.refused_bytes == 10 * PROF.bytes_per_block
    # tier split from the endpoint's counters: 29 RAM and 19 disk blocks served (the master's
    # 50/50 is not used)
    assert f.disk_fraction == pytest.approx(19 / 48) and f.disk_split_source.startswith("endpoint")
    assert (f.store_disk_tokens, f.store_ram_tokens) == pytest.approx((304.0, 464.0))
    g = 768 / RATE / 6.0
    assert f.gross_saving == pytest.approx(g)
    assert f.gross_saving_disk == pytest.approx(304 / RATE / 6.0)
    assert f.disk_share_of_saving == pytest.approx(304 / 768)
    # admitted in [10, 20): a, b, d (e at 20 is not)
    assert f.srv_requests == 3
    assert (f.srv_gpu_tokens, f.srv_store_ram_tokens, f.srv_store_disk_tokens,
            f.srv_computed_tokens) == (111, 202, 333, 444)
    assert f.xcheck_gpu_rel == pytest.approx(189 / 300)
    assert f.xcheck_store_rel == pytest.approx(233 / 768)
    assert f.xcheck_disk_rel == pytest.approx(29 / 304)
    assert f.read_path_s == pytest.approx(0.9)
    # in flight at admission: a at 10.5 (a, b) 2, b at 10 (a, b) 2, d at 16 (d; c has no end) 1
    assert f.net_saving == pytest.approx(g - (0.2 / 2 + 0.4 / 2 + 0.3 / 1) / 6.0)
    assert f.net_saving_full == pytest.approx(g - 0.9 / 6.0)
    # disk rate from the disk-only request a: 30 tokens' bytes in 0.5 s
    assert f.recompute_rate == RATE * BPT
    assert f.disk_read_rate == pytest.approx(60 * BPT)
    assert f.disk_vs_recompute == pytest.approx(60 / RATE)


def test_analyse_endpoint_window_header_defaults_and_invalid_windows(tmp_path):
    run = _full_run(tmp_path)
    f = analyse_endpoint(run, {"t0": 10.0, "t1": 20.0, "protocol": None}, "coder")
    assert (f.window, f.valid, f.protocol, f.faults) == (0, True, "", "")
    assert "window" not in f.missing
    g = analyse_endpoint(run, {"index": 2, "t0": 10.0, "t1": 20.0, "valid": False,
                               "reason": "fault: endpoint_down:coder (1)"}, "coder")
    assert g.valid is False and g.missing["window"] == "invalid window: fault: endpoint_down:coder (1)"
    h = analyse_endpoint(run, {"t0": 10.0, "t1": 20.0, "valid": False}, "coder")
    assert h.missing["window"] == "invalid window: no reason given"
    # an empty window: no busy share
    z = analyse_endpoint(run, {"t0": 10.0, "t1": 10.0}, "coder")
    assert z.busy_s == 0.0 and math.isnan(z.busy_share)
    assert (z.calls, z.calls_failed, z.calls_open) == (0, 0, 0)


def test_analyse_endpoint_real_vllm_counters_only(tmp_path):
    # a real vLLM: no store client or per-tier counters, no extension field; the tier split
    # comes from the master (RAM 300 bytes, disk 100 bytes)
    scr = [("coder", 0.0, True, _vllm(0, 0, 0, extq=0)),
           ("coder", 10.0, True, _vllm(50, 400, 1000, extq=0)),
           ("master", 0.0, True, _master(0, 0)), ("master", 10.0, True, _master(300, 100))]
    run = make_hand_run(tmp_path, [_call("a", 1.0, 6.0)], scr, [(0.0, 10.0)])
    f = analyse_endpoint(run, run.measurement_windows()[0], "coder")
    assert f.store_tokens == 400 and math.isnan(f.store_load_failed_tokens)
    assert (f.disk_fraction, f.store_disk_tokens) == (0.25, 100.0)
    assert f.disk_split_source == "master byte counters (global shares)"
    # no external queries counted: no hit rate, with the reason
    assert math.isnan(f.store_hit_rate) and f.missing["store_hit_rate"] == "no store lookups in the window"
    assert math.isnan(f.put_blocks) and math.isnan(f.refused_share) and f.refused_source == ""
    assert f.gross_saving == pytest.approx(400 / RATE / 5.0)
    assert f.missing["net_saving"] == f.missing["net_saving_full"] == (
        "read-path time not exposed by the endpoint (no `adev` extension field on its responses)")
    assert f.srv_requests == 0 and math.isnan(f.read_path_s) and math.isnan(f.recompute_rate)


def test_analyse_endpoint_store_hit_rate_reason_from_the_queries_counter(tmp_path):
    lab = '{engine="0",model_name="m"}'
    def samples(prompt):
        return {f"vllm:prefix_cache_hits_total{lab}": 0, f"vllm:prompt_tokens_total{lab}": prompt,
                f"vllm:external_prefix_cache_hits_total{lab}": 0}
    scr = [("coder", 0.0, True, samples(0)), ("coder", 10.0, True, samples(10))]
    run = make_hand_run(tmp_path, [_call("a", 1.0, 6.0)], scr, [(0.0, 10.0)])
    f = analyse_endpoint(run, run.measurement_windows()[0], "coder")
    assert f.missing["store_hit_rate"] == ("vllm:external_prefix_cache_queries_total of coder: "
                                           "never exported (or every scrape failed)")
    # the store token counter is there, the per-tier split is not (no master either)
    assert f.store_tokens == 0 and f.store_hit_share == 0.0


def test_analyse_endpoint_without_boundary_scrapes(tmp_path):
    # coder was never scraped: no counter figure, no span, no savings; the reasons say why
    run = make_hand_run(tmp_path, [_call("a", 1.0, 6.0, _srv(0, 0.1, 0, 10, 0, 90))],
                        [("reasoner", 0.0, True, _vllm(0, 0, 0))], [(0.0, 10.0)])
    f = analyse_endpoint(run, run.measurement_windows()[0], "coder")
    why = "vllm:prefix_cache_hits_total of coder: no scrapes of coder"
    assert f.missing["gpu_tokens"] == why and math.isnan(f.gpu_tokens)
    assert f.missing["store_tokens"] == "vllm:external_prefix_cache_hits_total of coder: no scrapes of coder"
    assert f.missing["prompt_tokens"] == "vllm:prompt_tokens_total of coder: no scrapes of coder"
    assert f.missing["preemptions"] == "vllm:num_preemptions_total of coder: no scrapes of coder"
    assert f.missing["store_hit_rate"] == \
        "vllm:external_prefix_cache_queries_total of coder: no scrapes of coder"
    assert f.missing["read_overrun_s"] == \
        "adev_emulator_read_path_overrun_seconds_total of coder: no scrapes of coder"
    assert math.isnan(f.read_overrun_s)
    assert math.isnan(f.span_from) and math.isnan(f.busy_span_s)
    assert (f.counter_resets, f.scrape_gaps) == (0, 0)
    assert f.missing["busy_span_s"] == "no counter span (boundary scrapes missing)"
    assert f.missing["gross_saving"] == f.missing["store_tokens"]
    assert f.busy_s == pytest.approx(5.0) and f.srv_requests == 0 and math.isnan(f.net_saving)


def test_analyse_endpoint_span_from_the_first_counter_found(tmp_path):
    # only the prompt counter is exported: it alone sets the counter span
    lab = '{engine="0",model_name="m"}'
    scr = [("coder", 2.0, True, {f"vllm:prompt_tokens_total{lab}": 0}),
           ("coder", 8.0, True, {f"vllm:prompt_tokens_total{lab}": 500})]
    run = make_hand_run(tmp_path, [_call("a", 1.0, 6.0), _call("b", 7.0, 9.0)], scr, [(0.0, 10.0)])
    f = analyse_endpoint(run, run.measurement_windows()[0], "coder")
    # scrapes 6 s apart (tolerance 6 s): 2 stands for 0, 8 for 10; busy over [2, 8]: 4 + 1
    assert (f.span_from, f.span_to) == (2.0, 8.0) and f.busy_span_s == pytest.approx(5.0)
    assert f.prompt_tokens == 500 and math.isnan(f.gpu_tokens) and math.isnan(f.store_tokens)


def test_gpu_counter_sets_the_span_when_no_store_counter(tmp_path):
    lab = '{engine="0",model_name="m"}'
    scr = [("coder", 1.0, True, {f"vllm:prompt_tokens_total{lab}": 0,
                                 f"vllm:prefix_cache_hits_total{lab}": 0}),
           ("coder", 9.0, True, {f"vllm:prompt_tokens_total{lab}": 500,
                                 f"vllm:prefix_cache_hits_total{lab}": 100})]
    run = make_hand_run(tmp_path, [_call("a", 0.0, 10.0)], scr, [(0.0, 10.0)])
    f = analyse_endpoint(run, run.measurement_windows()[0], "coder")
    assert (f.span_from, f.span_to, f.busy_span_s) == (1.0, 9.0, 8.0)
    assert f.gpu_hit_share == 0.2


def test_refusals_from_counters_with_nothing_offered_or_no_profile(tmp_path):
    lab = LAB + "}"
    def s(acc, ref):
        return {**_vllm(0, 0, 0), f"adev_emulator_store_put_blocks_total{lab}": acc,
                f"adev_emulator_store_put_refused_blocks_total{lab}": ref}
    scr = [("coder", 0.0, True, s(5, 5)), ("coder", 10.0, True, s(5, 5))]
    run = make_hand_run(tmp_path, [_call("a", 1.0, 2.0)], scr, [(0.0, 10.0)])
    f = analyse_endpoint(run, run.measurement_windows()[0], "coder")
    assert (f.put_blocks, f.put_refused_blocks) == (0, 0)
    assert math.isnan(f.refused_share) and f.refused_source == "" and f.refused_bytes == 0
    scr = [("coder", 0.0, True, s(5, 5)), ("coder", 10.0, True, s(5, 6))]
    (tmp_path / "b").mkdir()
    run = make_hand_run(tmp_path / "b", [_call("a", 1.0, 2.0)], scr, [(0.0, 10.0)])
    run.profile = None
    g = analyse_endpoint(run, run.measurement_windows()[0], "coder")
    assert g.refused_share == 1.0 and math.isnan(g.refused_bytes)
    # accepted blocks counted, refusals not exported: no counter figure (the calls' fields stand)
    acc_only = {**_vllm(0, 0, 0), f"adev_emulator_store_put_blocks_total{lab}": 5}
    (tmp_path / "c").mkdir()
    run = make_hand_run(tmp_path / "c", [_call("a", 1.0, 2.0)],
                        [("coder", 0.0, True, acc_only), ("coder", 10.0, True, acc_only)],
                        [(0.0, 10.0)])
    h = analyse_endpoint(run, run.measurement_windows()[0], "coder")
    assert math.isnan(h.put_blocks) and math.isnan(h.refused_share) and h.refused_source == ""


def _fig(**kw) -> WindowFigures:
    f = WindowFigures("r", "lab", 2, 1, 0.0, 10.0, True, "steady", "coder")
    for k, v in kw.items():
        setattr(f, k, v)
    return f


def test_set_hit_shares_and_gross_savings_by_hand():
    f = _fig(gpu_tokens=100.0, store_tokens=300.0, prompt_tokens=1000.0, store_disk_tokens=75.0)
    set_hit_shares(f)
    assert (f.gpu_hit_share, f.store_hit_share) == (0.1, 0.3)
    set_gross_savings(f, 1000.0, 2.0)
    # (300 / 1000) / 2, (75 / 1000) / 2, 75 / 300
    assert (f.gross_saving, f.gross_saving_disk, f.disk_share_of_saving) == (0.15, 0.0375, 0.25)
    g = _fig(store_tokens=300.0, prompt_tokens=0.0)
    set_hit_shares(g)
    assert g.missing["gpu_hit_share"] == "gpu_tokens unavailable"
    assert g.missing["store_hit_share"] == "division by zero (prompt_tokens is 0)"
    set_gross_savings(g, None, 2.0)
    assert g.missing["gross_saving"] == "prefill_rate unavailable"
    assert g.missing["gross_saving_disk"] == "prefill_rate unavailable"
    assert g.missing["disk_share_of_saving"] == "store_disk_tokens unavailable"
    h = _fig(store_tokens=0.0, store_disk_tokens=0.0)
    set_gross_savings(h, 1000.0, 0.0)
    assert h.missing["gross_saving"] == "division by zero (store_tokens, busy_span_s is 0)"
    assert h.missing["disk_share_of_saving"] == "division by zero (store_disk_tokens, store_tokens is 0)"
    z = _fig(gpu_tokens=5.0, prompt_tokens=0.0)
    set_hit_shares(z)
    assert z.missing["gpu_hit_share"] == "division by zero (prompt_tokens is 0)"
    n = _fig(gpu_tokens=5.0, prompt_tokens=math.nan)
    n.missing["prompt_tokens"] = "no scrapes of coder"
    set_hit_shares(n)
    assert n.missing["gpu_hit_share"] == "no scrapes of coder"
    k = _fig(store_tokens=math.nan, store_disk_tokens=5.0)
    k.missing["store_tokens"] = "no scrapes"
    set_gross_savings(k, 1000.0, 3.0)
    assert k.missing["gross_saving"] == k.missing["gross_saving_disk"] == "no scrapes"
    assert k.missing["disk_share_of_saving"] == "no scrapes"
    m = _fig(store_tokens=10.0)
    set_gross_savings(m, 1000.0, 3.0)
    assert m.missing["gross_saving_disk"] == "store_disk_tokens unavailable"


def test_savings_block_without_a_profile_or_a_span(tmp_path):
    run = _full_run(tmp_path)
    run.profile = None
    run.missing["profile"] = "no model profile for m"
    f = analyse_endpoint(run, {"index": 1, "t0": 10.0, "t1": 20.0}, "coder")
    assert f.missing["prefill_rate"] == "no model profile for m"
    assert f.missing["gross_saving"] == "no model profile for m"
    assert f.missing["disk_read_rate"] == "no model profile for m"
    assert math.isnan(f.recompute_rate) and math.isnan(f.disk_read_rate)
    # the per-request sums and the read-path charge do not need the profile
    assert f.srv_requests == 3 and f.read_path_s == pytest.approx(0.9)
    assert math.isnan(f.net_saving) and f.missing["net_saving"] == "no model profile for m"
    assert math.isnan(f.net_saving_full) and f.missing["net_saving_full"] == "no model profile for m"
    run.missing.clear()
    g = analyse_endpoint(run, {"index": 1, "t0": 10.0, "t1": 20.0}, "coder")
    assert g.missing["prefill_rate"] == g.missing["disk_read_rate"] == "no model profile"
    # no counter span: nothing from the requests
    h = _fig(busy_span_s=math.nan)
    savings_block(h, run, run.calls, np.empty(0), np.empty(0))
    assert h.srv_requests == 0 and math.isnan(h.srv_gpu_tokens)
    assert h.missing["busy_span_s"] == "no counter span (boundary scrapes missing)"


def test_savings_block_keeps_cross_checks_of_unknown_counters_nan(tmp_path):
    run = _full_run(tmp_path)
    f = _fig(span_from=10.0, span_to=20.0, busy_span_s=6.0)
    starts, ends = run.calls["t_sent"].to_numpy(float), run.calls["t_end"].to_numpy(float)
    savings_block(f, run, run.calls[run.calls.endpoint == "coder"], starts, ends)
    assert f.srv_requests == 3 and f.srv_gpu_tokens == 111
    assert math.isnan(f.xcheck_gpu_rel) and math.isnan(f.xcheck_store_rel)
    assert math.isnan(f.xcheck_disk_rel)
    assert f.missing["net_saving"] == "store_tokens unavailable"
    # no calls at all: nothing from the requests, no reason either
    g = _fig(span_from=10.0, span_to=20.0, busy_span_s=6.0)
    savings_block(g, run, run.calls.iloc[0:0], np.empty(0), np.empty(0))
    assert g.srv_requests == 0 and "net_saving" not in g.missing


def test_set_disk_read_rate_from_a_fit_or_a_reason():
    import pandas as pd
    G = 1e9
    # no disk-only request: load = 0.01 + ram / 20 GB/s + disk / 2 GB/s fitted exactly
    ram, disk = np.array([1 * G, 2 * G, 1 * G]), np.array([0, 0, 1 * G])
    # (a missing disk token count is 0: the RAM-only requests are in the fit)
    r = pd.DataFrame({"srv_tok_store_ram": ram / 1000,
                      "srv_tok_store_disk": np.where(disk > 0, disk / 1000, np.nan),
                      "srv_load_s": 0.01 + ram / 20e9 + disk / 2e9})
    f = _fig(recompute_rate=4e9)
    set_disk_read_rate(f, r, 1000.0)
    assert f.disk_read_rate == pytest.approx(2e9, rel=1e-6)
    assert f.disk_vs_recompute == pytest.approx(0.5, rel=1e-6)
    # NaN token counts are 0: one disk-only request, its bytes over its load time
    r2 = pd.DataFrame({"srv_tok_store_ram": [np.nan], "srv_tok_store_disk": [3.0],
                       "srv_load_s": [0.5]})
    g = _fig(recompute_rate=12.0)
    set_disk_read_rate(g, r2, 2.0)
    assert (g.disk_read_rate, g.disk_vs_recompute) == (12.0, 1.0)
    r3 = pd.DataFrame({"srv_tok_store_ram": [1.0, np.nan], "srv_tok_store_disk": [np.nan, np.nan],
                       "srv_load_s": [0.5, 0.1]})
    h = _fig(recompute_rate=12.0)
    set_disk_read_rate(h, r3, 2.0)
    assert h.missing["disk_read_rate"] == "too few requests loading from the disk tier in the window"
    assert math.isnan(h.disk_read_rate) and math.isnan(h.disk_vs_recompute)


def test_analyse_endpoint_late_boundary_scrape_of_an_idle_endpoint(tmp_path):
    # coder is first scraped at t=40 (every 5 s), the window is [0, 100); its only call runs
    # [50, 60], so nothing moved its counters over [0, 40]: the t=40 scrape stands for t0 for
    # every counter (vLLM's, the store client's, the per-tier ones)
    before = emu(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    after = emu(100, 400, 800, 1000, 2, 30, 10, 20, 10, 2, 3)
    scr = [("coder", float(t), True, before if t < 50 else after) for t in range(40, 105, 5)]
    run = make_hand_run(tmp_path, [_call("a", 50.0, 60.0)], scr, [(0.0, 100.0)])
    f = analyse_endpoint(run, run.measurement_windows()[0], "coder")
    assert (f.span_from, f.span_to) == (40.0, 100.0)
    assert (f.gpu_tokens, f.prompt_tokens, f.preemptions) == (100, 1000, 2)
    # 400 hit tokens less 5 failed blocks x 16; 400 of 800 queried
    assert f.store_tokens == 400 - 80 and f.store_hit_rate == 0.5
    assert (f.put_blocks, f.put_refused_blocks, f.refused_share) == (30, 10, 0.25)
    # served blocks: RAM 20 - 2, disk 10 - 3
    assert f.disk_fraction == pytest.approx(7 / 25) and f.disk_split_source.startswith("endpoint")
    # an endpoint scraped the same way but with no call at all is idle throughout
    (tmp_path / "idle").mkdir()
    scr2 = [("coder", float(t), True, before) for t in range(40, 105, 5)]
    run2 = make_hand_run(tmp_path / "idle", [_call("b", 50.0, 60.0, ep="reasoner")], scr2,
                         [(0.0, 100.0)])
    g = analyse_endpoint(run2, run2.measurement_windows()[0], "coder")
    assert (g.calls, g.calls_failed, g.calls_open) == (0, 0, 0)
    assert (g.busy_s, g.span_from, g.busy_span_s) == (0.0, 40.0, 0.0)
    assert (g.gpu_tokens, g.store_tokens, g.prompt_tokens) == (0, 0, 0)


def test_savings_block_a_request_without_a_read_path_is_charged_nothing(tmp_path):
    # a [1, 5] read path 0.4 s (1 in flight); b [2, 6] carries no read_path_s: charged 0
    sb = _srv(0.0, 0.0, 0, 100, 0, 900)
    sb["read_path_s"] = None
    calls = [_call("a", 1.0, 5.0, _srv(0.0, 0.4, 0, 100, 0, 900)), _call("b", 2.0, 6.0, sb)]
    scr = [("coder", 0.0, True, _vllm(0, 0, 0)), ("coder", 10.0, True, _vllm(0, 500, 2000))]
    run = make_hand_run(tmp_path, calls, scr, [(0.0, 10.0)])
    f = analyse_endpoint(run, run.measurement_windows()[0], "coder")
    g = 500 / RATE / 5.0
    assert f.srv_requests == 2 and f.read_path_s == pytest.approx(0.4)
    assert f.net_saving == pytest.approx(g - 0.4 / 5.0)
    assert f.net_saving_full == pytest.approx(g - 0.4 / 5.0)


def _release_run(tmp_path, release, cached=(300, 500, 90)):
    """Real-vLLM-shaped calls (no emulator field) on coder in W = [10, 20), and its counters:
    prefix_cache_hits +2,400 (a release before 0.26 counts a waiting request at every step),
    external hits +600, prompt +3,000."""
    calls = [_call("a", 11.0, 14.0), _call("b", 12.0, 18.0), _call("c", 13.0, 15.0),
             _call("d", 21.0, 23.0)]                  # d: sent after W
    for c, n in zip(calls, (*cached, 7000), strict=True):
        c.cached_tokens = n
    calls[2].status, calls[2].error = "error", "boom"   # not an OK call: its cached tokens unused
    scr = [("coder", 10.0, True, _vllm(0, 0, 0)), ("coder", 20.0, True, _vllm(2400, 600, 3000))]
    run = make_hand_run(tmp_path, calls, scr, [(10.0, 20.0)])
    if release is not None:
        (run.path / "endpoints.json").write_text(json.dumps(
            {"coder": {"base_url": "http://127.0.0.1:1/v1", "model": "m", "max_model_len": 1,
                       "server_version": release}}))
    return load_run(run.path)


@pytest.mark.parametrize("release", ["0.24.0", "0.25.1", "0.24.0+adev.emulator"])
def test_a_release_that_counts_waiting_lookups_takes_the_gpu_hits_from_the_calls(tmp_path, release):
    run = _release_run(tmp_path, release)
    f = analyse_endpoint(run, run.measurement_windows()[0], "coder")
    # OK calls admitted (real vLLM: sent) in the counter span [10, 20) report cached 300 + 500
    # = 800 (local + external, once per request);
    # external hits +600 over the span -> GPU 200 of 3,000 prompt tokens, where the counter's
    # 2,400 would read 80%
    assert f.gpu_tokens == 200
    assert f.gpu_hit_share == pytest.approx(200 / 3000)
    assert f.store_hit_share == pytest.approx(600 / 3000)
    assert "cached_tokens" in f.gpu_tokens_source and release in f.gpu_tokens_source


@pytest.mark.parametrize("release", ["0.26.0", "0.27.1", None])
def test_a_release_that_counts_once_keeps_the_prefix_cache_counter(tmp_path, release):
    run = _release_run(tmp_path, release)
    f = analyse_endpoint(run, run.measurement_windows()[0], "coder")
    assert f.gpu_tokens == 2400
    assert f.gpu_hit_share == pytest.approx(0.8)
    assert f.gpu_tokens_source == "vllm:prefix_cache_hits"


def test_without_cached_tokens_the_gpu_share_of_such_a_release_is_missing(tmp_path):
    run = _release_run(tmp_path, "0.24.0", cached=(None, None, None))
    f = analyse_endpoint(run, run.measurement_windows()[0], "coder")
    assert math.isnan(f.gpu_tokens) and math.isnan(f.gpu_hit_share)
    assert "--enable-prompt-tokens-details" in f.missing["gpu_tokens"]
    assert "vLLM 0.24.0" in f.missing["gpu_tokens"]
    assert f.store_hit_share == pytest.approx(0.2)
