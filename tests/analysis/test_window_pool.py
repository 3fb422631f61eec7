"""The ALL row of a window (adev.analysis.window_pool): endpoint rows pooled, every figure worked
out by hand."""
from __future__ import annotations

import math

import pytest

from adev.analysis.window_pool import pool_endpoints
from adev.analysis.window_row import ALL, WindowFigures
from adev.analysis.windows import analyse_window

from .test_windows import BPT, PROF, RATE, _call, _master, _srv, _vllm, make_hand_run

CLIENT = "store client counters adev_emulator_store_put_{refused_,}blocks"
RR = RATE * BPT


def row(ep, **kw) -> WindowFigures:
    f = WindowFigures("hand", "hand", 2, 1, 0.0, 10.0, True, "steady", ep)
    for k, v in kw.items():
        setattr(f, k, v)
    return f


def _two_rows():
    g1, g2 = 400 / RATE / 5, 200 / RATE / 3
    coder = row("coder", calls=3, calls_failed=1, calls_open=0, busy_s=4.0, busy_span_s=5.0,
                prompt_tokens=1000.0, gpu_tokens=100.0, store_tokens=400.0, store_ram_tokens=300.0,
                store_disk_tokens=100.0, store_load_failed_tokens=16.0, preemptions=2.0,
                read_path_s=0.5, srv_gpu_tokens=90.0, srv_store_ram_tokens=280.0,
                srv_store_disk_tokens=120.0, srv_computed_tokens=500.0, srv_requests=2,
                counter_resets=1, scrape_gaps=0, span_from=0.0, span_to=10.0,
                refused_source=CLIENT, put_blocks=30.0, put_refused_blocks=10.0,
                refused_bytes=10.0 * PROF.bytes_per_block, gross_saving=g1,
                net_saving=g1 - 0.3 / 5, store_hit_rate=0.5, recompute_rate=RR,
                missing={"gpu_hit_share": "x", "ttft": "coder ttft", "foo": "bar",
                         **dict.fromkeys(("store_hit_share", "gross_saving", "gross_saving_disk",
                                          "net_saving", "disk_share_of_saving"), "y")})
    reasoner = row("reasoner", calls=2, calls_failed=0, calls_open=1, busy_s=2.0, busy_span_s=3.0,
                   prompt_tokens=1000.0, gpu_tokens=0.0, store_tokens=200.0,
                   store_ram_tokens=200.0, store_disk_tokens=0.0, store_load_failed_tokens=0.0,
                   preemptions=1.0, read_path_s=0.2, srv_gpu_tokens=0.0,
                   srv_store_ram_tokens=200.0, srv_store_disk_tokens=0.0,
                   srv_computed_tokens=800.0, srv_requests=1, counter_resets=0, scrape_gaps=2,
                   span_from=1.0, span_to=11.0, refused_source=CLIENT + " too", put_blocks=10.0,
                   put_refused_blocks=0.0, refused_bytes=0.0, gross_saving=g2,
                   net_saving=g2 - 0.1 / 3, recompute_rate=-1.0,
                   missing={"foo": "baz", "net_saving_full": "q", "disk_read_rate": "r"})
    return coder, reasoner


def _empty_run(tmp_path, scr=()):
    return make_hand_run(tmp_path, [], list(scr), [(0.0, 10.0)])


def test_pool_two_rows_by_hand(tmp_path):
    run = _empty_run(tmp_path)
    coder, reasoner = _two_rows()
    w = {"index": 4, "t0": 0.0, "t1": 10.0, "valid": False, "protocol": "steady",
         "faults": ["b", "a"]}
    a = pool_endpoints(run, w, [coder, reasoner])
    assert (a.run_id, a.label, a.width, a.window, a.t0, a.t1, a.valid, a.protocol, a.endpoint,
            a.faults) == ("hand", run.label, 2, 4, 0.0, 10.0, False, "steady", ALL, "b, a")
    assert run.label == "hand"
    assert (a.calls, a.calls_failed, a.calls_open) == (5, 1, 1)
    assert (a.busy_s, a.busy_span_s, a.prompt_tokens, a.gpu_tokens, a.store_tokens) == \
        (6.0, 8.0, 2000.0, 100.0, 600.0)
    assert (a.store_ram_tokens, a.store_disk_tokens, a.store_load_failed_tokens, a.preemptions) == \
        (500.0, 100.0, 16.0, 3.0)
    assert a.read_path_s == pytest.approx(0.7)
    assert (a.srv_gpu_tokens, a.srv_store_ram_tokens, a.srv_store_disk_tokens,
            a.srv_computed_tokens, a.srv_requests) == (90.0, 480.0, 120.0, 1300.0, 3)
    # refusals pooled from the store client counters: 10 refused of 40 + 10 offered
    assert (a.put_blocks, a.put_refused_blocks, a.refused_share) == (40.0, 10.0, 0.2)
    assert a.refused_source == CLIENT and a.refused_bytes == 10 * PROF.bytes_per_block
    # 6 busy seconds over 2 endpoints x 10 s
    assert a.busy_share == pytest.approx(0.3)
    assert (a.counter_resets, a.scrape_gaps, a.span_from, a.span_to) == (1, 2, 0.0, 11.0)
    assert (a.gpu_hit_share, a.store_hit_share) == (0.05, 0.3)
    G = 600 / RATE / 8
    assert a.gross_saving == pytest.approx(G)
    assert a.gross_saving_disk == pytest.approx(100 / RATE / 8)
    assert a.disk_share_of_saving == pytest.approx(1 / 6)
    # read-path charges: coder (g1 - net1) x 5 = 0.3, reasoner 0.1; full: every second, 0.7
    assert a.net_saving == pytest.approx(G - 0.4 / 8)
    assert a.net_saving_full == pytest.approx(G - 0.7 / 8)
    assert a.disk_fraction == pytest.approx(1 / 6)
    assert a.xcheck_gpu_rel == pytest.approx(0.1) and a.xcheck_store_rel == 0.0
    assert a.xcheck_disk_rel == pytest.approx(0.2)
    assert a.recompute_rate == RR                        # the first row's
    # the endpoints' reasons, first endpoint first; recomputed figures' reasons dropped
    assert a.missing["foo"] == "coder: bar"
    assert a.missing["ttft"] == "no OK call with a first-content stamp in the window"
    for k in ("gpu_hit_share", "store_hit_share", "gross_saving", "gross_saving_disk",
              "net_saving", "net_saving_full", "disk_share_of_saving"):
        assert k not in a.missing, k
    assert a.missing["store_hit_rate"] == "pooled only from per-request fields"
    assert a.missing["disk_read_rate"] == "no request with the emulator's fields in the counter spans"


def test_pool_refusals_only_when_every_row_has_the_client_counters(tmp_path):
    run = _empty_run(tmp_path)
    coder, reasoner = _two_rows()
    reasoner.refused_source = "emulator per-request put_refused_blocks / (put_blocks + refused)"
    a = pool_endpoints(run, {"t0": 0.0, "t1": 10.0}, [coder, reasoner])
    assert math.isnan(a.put_blocks) and math.isnan(a.refused_share) and a.refused_source == ""
    assert a.missing["refused_share"] == "no offered writes counted (emulator or master)"
    # every row counted, nothing offered: no share
    c2, r2 = _two_rows()
    for r in (c2, r2):
        r.put_blocks = r.put_refused_blocks = r.refused_bytes = 0.0
    b = pool_endpoints(run, {"t0": 0.0, "t1": 10.0}, [c2, r2])
    assert (b.put_blocks, b.put_refused_blocks, b.refused_bytes) == (0.0, 0.0, 0.0)
    assert math.isnan(b.refused_share) and b.refused_source == CLIENT
    # one row offering one block, refused
    c3, r3 = _two_rows()
    c3.put_blocks, c3.put_refused_blocks, r3.put_blocks, r3.put_refused_blocks = 0.0, 1.0, 0.0, 0.0
    assert pool_endpoints(run, {"t0": 0.0, "t1": 10.0}, [c3, r3]).refused_share == 1.0


def test_pool_a_missing_endpoint_figure_makes_the_sum_missing(tmp_path):
    run = _empty_run(tmp_path)
    coder, reasoner = _two_rows()
    reasoner.store_tokens = reasoner.gross_saving = reasoner.net_saving = math.nan
    for k in ("store_tokens", "gross_saving", "net_saving"):
        reasoner.missing[k] = "no scrapes of reasoner"
    a = pool_endpoints(run, {"t0": 0.0, "t1": 10.0}, [coder, reasoner])
    assert math.isnan(a.store_tokens) and a.prompt_tokens == 2000.0
    assert a.missing["store_tokens"] == "reasoner: no scrapes of reasoner"
    assert a.missing["store_hit_share"] == "reasoner: no scrapes of reasoner"
    assert math.isnan(a.gross_saving) and math.isnan(a.disk_fraction)
    assert math.isnan(a.xcheck_store_rel) and a.xcheck_gpu_rel == pytest.approx(0.1)
    assert a.missing["net_saving"] == a.missing["net_saving_full"] == \
        "reasoner: no scrapes of reasoner"
    assert math.isnan(a.net_saving) and math.isnan(a.net_saving_full)


def test_pool_net_saving_leaves_out_idle_endpoints_and_names_the_missing_one(tmp_path):
    run = _empty_run(tmp_path)
    coder, reasoner = _two_rows()
    # reasoner idle over its span (no busy time, no admitted request): no net saving of its own
    reasoner.busy_span_s, reasoner.srv_requests, reasoner.net_saving = 0.0, 0, math.nan
    reasoner.read_path_s = 0.0
    reasoner.missing["net_saving"] = "division by zero (busy_span_s is 0)"
    a = pool_endpoints(run, {"t0": 0.0, "t1": 10.0}, [coder, reasoner])
    assert "net_saving" not in a.missing
    G = 600 / RATE / 5
    assert a.gross_saving == pytest.approx(G)
    assert a.net_saving == pytest.approx(G - 0.3 / 5) and a.net_saving_full == pytest.approx(G - 0.5 / 5)
    # busy but with no admitted request: not idle, its missing net saving is named
    c2, r2 = _two_rows()
    r2.srv_requests, r2.net_saving = 0, math.nan
    r2.missing["net_saving"] = "read-path time not exposed"
    b = pool_endpoints(run, {"t0": 0.0, "t1": 10.0}, [c2, r2])
    assert math.isnan(b.net_saving) and math.isnan(b.net_saving_full)
    assert b.missing["net_saving"] == b.missing["net_saving_full"] == \
        "reasoner: read-path time not exposed"
    # admitted requests but no busy time in the span: not idle either
    c3, r3 = _two_rows()
    r3.busy_span_s, r3.net_saving = 0.0, math.nan
    c = pool_endpoints(run, {"t0": 0.0, "t1": 10.0}, [c3, r3])
    assert math.isnan(c.net_saving) and c.missing["net_saving"] == "reasoner: unavailable"
    # every endpoint idle: no pooled net saving
    c4, r4 = _two_rows()
    for r in (c4, r4):
        r.busy_span_s, r.srv_requests = 0.0, 0
    d = pool_endpoints(run, {"t0": 0.0, "t1": 10.0}, [c4, r4])
    assert math.isnan(d.net_saving) and d.missing["net_saving"] == "no endpoints"


def test_pool_no_rows_or_an_empty_window(tmp_path):
    run = _empty_run(tmp_path)
    a = pool_endpoints(run, {"t0": 0.0, "t1": 10.0}, [])
    assert (a.calls, a.srv_requests, a.counter_resets, a.scrape_gaps) == (0, 0, 0, 0)
    assert math.isnan(a.busy_s) and math.isnan(a.busy_share) and math.isnan(a.span_from)
    assert math.isnan(a.recompute_rate) and math.isnan(a.put_blocks)
    assert a.missing["net_saving"] == "no endpoints" and a.missing["store_hit_rate"] == "no store lookups"
    assert a.missing["disk_read_rate"] == "no model profile"
    coder, reasoner = _two_rows()
    b = pool_endpoints(run, {"t0": 5.0, "t1": 5.0}, [coder, reasoner])
    assert math.isnan(b.busy_share) and b.busy_s == 6.0
    # rows without a counter span: no span
    c2, r2 = _two_rows()
    c2.span_from = r2.span_from = math.nan
    assert math.isnan(pool_endpoints(run, {"t0": 0.0, "t1": 10.0}, [c2, r2]).span_to)


def test_pool_store_hit_rate_reason_and_disk_fraction_edges(tmp_path):
    run = _empty_run(tmp_path)
    coder, reasoner = _two_rows()
    coder.store_hit_rate = math.nan
    coder.store_tokens = reasoner.store_tokens = 0.0
    coder.store_disk_tokens = reasoner.store_disk_tokens = 0.0
    a = pool_endpoints(run, {"t0": 0.0, "t1": 10.0}, [coder, reasoner])
    assert a.missing["store_hit_rate"] == "no store lookups"
    assert math.isnan(a.disk_fraction) and a.store_tokens == 0.0     # no store tokens: no share
    c2, r2 = _two_rows()
    r2.store_disk_tokens = math.nan
    assert math.isnan(pool_endpoints(run, {"t0": 0.0, "t1": 10.0}, [c2, r2]).disk_fraction)
    c3, r3 = _two_rows()                 # per-tier tokens known, the total token count not
    c3.srv_store_ram_tokens = math.nan
    b = pool_endpoints(run, {"t0": 0.0, "t1": 10.0}, [c3, r3])
    assert math.isnan(b.xcheck_store_rel) and b.xcheck_disk_rel == pytest.approx(0.2)
    c4, r4 = _two_rows()
    c4.srv_gpu_tokens, r4.srv_store_disk_tokens = math.nan, math.nan
    c = pool_endpoints(run, {"t0": 0.0, "t1": 10.0}, [c4, r4])
    assert math.isnan(c.xcheck_gpu_rel) and math.isnan(c.xcheck_disk_rel)
    assert math.isnan(c.xcheck_store_rel)
    c5, r5 = _two_rows()
    c5.gpu_tokens = math.nan
    assert math.isnan(pool_endpoints(run, {"t0": 0.0, "t1": 10.0}, [c5, r5]).xcheck_gpu_rel)


def test_pool_master_counters_in_the_all_row(tmp_path):
    scr = [("master", 0.0, True, _master(0, 0, items=10, failed=1)),
           ("master", 10.0, True, _master(0, 0, items=30, failed=6))]
    run = _empty_run(tmp_path, scr)
    coder, reasoner = _two_rows()
    reasoner.refused_source = "other"
    a = pool_endpoints(run, {"t0": 0.0, "t1": 10.0}, [coder, reasoner])
    assert (a.master_batch_put_items, a.master_batch_put_failed_items) == (20, 5)
    assert a.refused_share == 0.25 and a.refused_source.startswith("master")


def test_all_row_of_two_endpoints_served_tokens_disk_rate_over_each_span(tmp_path):
    """Two emulated endpoints: the ALL row's store hit share of the store-served tokens (coder's
    lookup hits less its failed loads, like coder's own row), and the disk read rate over each
    endpoint's requests admitted in its own counter span."""
    lab = '{engine="0",model_name="m"}'
    def emu(ext, prompt, failed, over=0.0):
        return {**_vllm(0, ext, prompt),
                f"adev_emulator_store_load_failed_blocks_total{lab}": failed,
                f"adev_emulator_read_path_overrun_seconds_total{lab}": over}
    # coder: span [0, 10], 800 looked-up hit tokens, 2 blocks (32 tokens) failed -> 768 served
    # reasoner: scrapes at 2 and 8 only (6 s apart): span [2, 8], 200 hit tokens, none failed
    # model time past the reads' modelled ends: coder 0.25 -> 0.75, reasoner 1.0 -> 1.125
    scr = [("coder", 0.0, True, emu(0, 0, 0, 0.25)), ("coder", 10.0, True, emu(800, 2000, 2, 0.75)),
           ("reasoner", 2.0, True, emu(0, 0, 0, 1.0)), ("reasoner", 8.0, True, emu(200, 1000, 0, 1.125))]
    # disk-only loads: coder a 30 tokens in 0.5 s, reasoner c 10 tokens in 0.5 s (in spans);
    # reasoner d admitted at 9, after its span (in coder's): 1000 tokens in 1 ms, left out
    calls = [_call("a", 1.0, 5.0, _srv(0.0, 0.5, 0, 0, 30, 10)),
             _call("b", 2.0, 4.0, None),
             _call("c", 3.0, 6.0, _srv(0.0, 0.5, 0, 0, 10, 10), ep="reasoner"),
             _call("d", 9.0, 9.5, _srv(0.0, 0.001, 0, 0, 1000, 10), ep="reasoner")]
    run = make_hand_run(tmp_path, calls, scr, [(0.0, 10.0)])
    rows = {r.endpoint: r for r in analyse_window(run, run.measurement_windows()[0])}
    c, r, a = rows["coder"], rows["reasoner"], rows[ALL]
    assert c.store_tokens == 768 and c.store_hit_share == pytest.approx(768 / 2000)
    assert r.span_from == 2.0 and r.store_hit_share == pytest.approx(0.2)
    assert a.store_hit_share == pytest.approx(968 / 3000)
    assert (c.read_overrun_s, r.read_overrun_s, a.read_overrun_s) == (0.5, 0.125, 0.625)
    assert c.disk_read_rate == pytest.approx(60 * BPT) and r.disk_read_rate == pytest.approx(20 * BPT)
    assert a.disk_read_rate == pytest.approx(40 * BPT)          # (30 + 10) tokens in 1.0 s
    assert a.disk_vs_recompute == pytest.approx(40 / RATE) and "disk_read_rate" not in a.missing


def test_pool_window_header_defaults_and_busy_share_of_a_later_window(tmp_path):
    run = _empty_run(tmp_path)
    coder, reasoner = _two_rows()
    a = pool_endpoints(run, {"t0": 5.0, "t1": 15.0, "protocol": None}, [coder, reasoner])
    assert (a.window, a.valid, a.protocol, a.faults) == (0, True, "", "")
    # 6 busy seconds over 2 endpoints x (15 - 5) s
    assert a.busy_share == pytest.approx(0.3)


def test_pool_without_a_model_profile_says_why(tmp_path):
    run = _empty_run(tmp_path)
    run.profile = None
    run.missing["profile"] = "no model profile for m"
    coder, reasoner = _two_rows()
    a = pool_endpoints(run, {"t0": 0.0, "t1": 10.0}, [coder, reasoner])
    assert a.missing["disk_read_rate"] == "no model profile for m" and math.isnan(a.disk_read_rate)
    assert a.missing["gross_saving"] == "prefill_rate unavailable"


def _calls_run(tmp_path):
    # coder's calls, disk-only store loads (tokens, load time) and first-content after send:
    #   p sent 5  (before W)   1000 tokens in 1 ms   keys 100 hits 0    TTFT 3
    #   q sent 10 (at t0)        10 tokens in 0.5 s  keys 10  hits 5    TTFT 1
    #   r sent 20 (at t1)      1000 tokens in 1 ms   keys 100 hits 100  TTFT 5
    def srv(disk, load, keys, hits):
        return _srv(0.0, load, 0, 0, disk, 10, keys=keys, hits=hits, load=load)
    calls = [_call("p", 5.0, 6.0, srv(1000, 0.001, 100, 0), t_fc=8.0),
             _call("q", 10.0, 12.0, srv(10, 0.5, 10, 5), t_fc=11.0),
             _call("r", 20.0, 21.0, srv(1000, 0.001, 100, 100), t_fc=25.0)]
    return make_hand_run(tmp_path, calls, [], [(10.0, 20.0)])


def test_pool_calls_sent_in_the_window_and_disk_rate_over_each_rows_span(tmp_path):
    run = _calls_run(tmp_path)
    coder, reasoner = _two_rows()
    coder.span_from, coder.span_to = 10.0, 20.0
    coder.missing["store_hit_rate"] = "x"
    reasoner.span_from = reasoner.span_to = math.nan       # first in the list: skipped
    reasoner.recompute_rate = RR
    a = pool_endpoints(run, {"t0": 10.0, "t1": 20.0}, [reasoner, coder])
    # only q was sent in [10, 20)
    assert a.ttft_send_p50 == 1.0 and a.store_keys_per_call == 10.0 and a.store_hit_rate == 0.5
    assert "store_hit_rate" not in a.missing
    # only q was admitted in coder's span [10, 20): 10 tokens' bytes in 0.5 s
    assert a.disk_read_rate == pytest.approx(20 * BPT) and "disk_read_rate" not in a.missing
    # a span that admits none of the calls: no request to estimate from
    c2, r2 = _two_rows()
    c2.span_from, c2.span_to, r2.span_from, r2.span_to = 10.5, 19.0, 10.5, 19.0
    b = pool_endpoints(run, {"t0": 10.0, "t1": 20.0}, [c2, r2])
    assert b.missing["disk_read_rate"] == "no request with the emulator's fields in the counter spans"
