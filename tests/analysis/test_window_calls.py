"""Call-level figures of a window (adev.analysis.window_calls), each worked out by hand from a
few hand-made calls."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from adev.analysis.window_calls import calls_of, client_block, ttft_block
from adev.analysis.window_row import WindowFigures
from adev.records import CallRecord

from .test_windows import PROF, _vllm, make_hand_run

NO_ADEV_FIELD = ("no call in the window carries the emulator's `adev` field (real vLLM exposes "
                 "no per-request store figures)")
NO_ADEV_MODEL = ("no call in the window carries the emulator's `adev` field (only the emulated "
                 "endpoint models TTFT and store reads)")
PER_CALL = ("store_keys_per_call", "put_refused_blocks", "preemptions_server")
MODELLED = ("ttft_model_err_p50", "ttft_model_err_p99", "store_read_over_p50",
            "store_read_over_p99", "store_late_share", "store_behind")
LATE_FOUR = ("store_read_over_p50", "store_read_over_p99", "store_late_share", "store_behind")


def _fig(ep="coder") -> WindowFigures:
    return WindowFigures("hand", "lab", 2, 1, 0.0, 10.0, True, "steady", ep)


def srv(ttft=None, keys=0, hits=0, put=0, refused=0, pre=0, rp=0.0, host=None):
    """The emulator's extension field with only what window_calls reads."""
    return {"queue_s": 0.0, "lookup_s": 0.0, "load_s": rp, "read_path_s": rp,
            "read_path_host_s": host, "prefill_s": 0.0, "ttft_s": ttft,
            "tokens": {"gpu": 0, "store_ram": 0, "store_disk": 0, "computed": 100},
            "store_keys_looked_up": keys, "store_hit_blocks": hits, "put_blocks": put,
            "put_refused_blocks": refused, "store_errors": 0, "preemptions": pre}


def call(cid, sent, sched, fb, fc, status="ok", server=None, ep="coder", end=None):
    return CallRecord(run_id="hand", session_id="s", call_id=cid, endpoint=ep, t_scheduled=sched,
                      t_sent=sent, t_first_byte=fb, t_first_content=fc,
                      t_end=sent + 5.0 if end is None else end, status=status,
                      error=None if status == "ok" else "boom", prompt_tokens=100, server=server)


def _run(tmp_path, calls, sub="a"):
    scr = [("coder", 0.0, True, _vllm(0, 0, 0)), ("coder", 10.0, True, _vllm(0, 0, 0))]
    (tmp_path / sub).mkdir()
    return make_hand_run(tmp_path / sub, calls, scr, [(0.0, 10.0)])


def test_ttft_block_percentiles_by_hand(tmp_path):
    # call  sent sched first-byte first-content status | ttft_send ttft_sched ttfb dispatch
    # a     1    0.5   1.5        2.0           ok     | 1.0       1.5        0.5  0.5
    # b     2    2     2.9        5.0           ok     | 3.0       3.0        0.9  0
    # c     3    1     3.1        3.2           ok     | 0.2       2.2        0.1  2.0
    # d     4    3     -          -             error  | (not OK: only its dispatch, 1.0)
    run = _run(tmp_path, [call("a", 1.0, 0.5, 1.5, 2.0), call("b", 2.0, 2.0, 2.9, 5.0),
                          call("c", 3.0, 1.0, 3.1, 3.2), call("d", 4.0, 3.0, None, None, "error")])
    f = _fig()
    ttft_block(f, run.calls)
    # ttft_send sorted 0.2, 1.0, 3.0: p50 1.0; p90 at rank 1.8 = 1.0 + 0.8 x 2.0; p99 rank 1.98
    assert (f.ttft_send_p50, f.ttft_send_p90, f.ttft_send_p99) == \
        pytest.approx((1.0, 2.6, 2.96))
    # ttft_sched sorted 1.5, 2.2, 3.0: p50 2.2; p90 = 2.2 + 0.8 x 0.8; p99 = 2.2 + 0.98 x 0.8
    assert (f.ttft_sched_p50, f.ttft_sched_p90, f.ttft_sched_p99) == \
        pytest.approx((2.2, 2.84, 2.984))
    assert f.ttfb_send_p50 == pytest.approx(0.5)                  # 0.1, 0.5, 0.9
    # dispatch over all four calls, sorted 0, 0.5, 1.0, 2.0: p50 0.75; p90 rank 2.7 = 1.0 + 0.7;
    # p99 rank 2.97 = 1.0 + 0.97; mean 3.5 / 4
    assert (f.dispatch_p50, f.dispatch_p90, f.dispatch_p99) == pytest.approx((0.75, 1.7, 1.97))
    assert f.dispatch_mean == pytest.approx(0.875)
    assert "ttft" not in f.missing


def test_ttft_block_without_first_content_or_calls(tmp_path):
    run = _run(tmp_path, [call("a", 1.0, 0.5, 1.5, None), call("b", 2.0, 1.0, None, 3.0, "error")])
    f = _fig()
    ttft_block(f, run.calls)
    assert f.missing["ttft"] == "no OK call with a first-content stamp in the window"
    assert math.isnan(f.ttft_send_p50) and math.isnan(f.ttft_sched_p99)
    assert f.ttfb_send_p50 == pytest.approx(0.5)                  # a's first byte still counts
    assert f.dispatch_mean == pytest.approx(0.75) and f.dispatch_p50 == pytest.approx(0.75)
    g = _fig()
    ttft_block(g, run.calls.iloc[0:0])
    assert g.missing["ttft"] == "no OK call with a first-content stamp in the window"
    assert math.isnan(g.dispatch_mean) and math.isnan(g.dispatch_p50) and math.isnan(g.ttfb_send_p50)


def test_client_block_by_hand(tmp_path):
    # call status  server: modelled ttft / keys hits put refused preemptions / read path modelled host
    # a    ok      0.5 / 10 4 3 1 2 / 0.1 0.3   observed TTFT 1.0: err (1 - 0.5) / 0.5 = 1.0
    # b    ok      2.0 / 20 0 5 0 0 / 0.2 0.9   err (1 - 2) / 2 = -0.5; no hits: not a load
    # c    error   1.0 /  6 6 0 2 1 / 0.1 5.0   not OK: in the sums, not in err or the loads
    # d    ok      no server field              left out of everything here
    # e    ok      0.8 /  4 2 0 1 0 / 0.5 0.25  err (1 - 0.8) / 0.8 = 0.25
    calls = [call("a", 1.0, 1.0, 1.0, 2.0, server=srv(0.5, 10, 4, 3, 1, 2, 0.1, 0.3)),
             call("b", 2.0, 2.0, 2.0, 3.0, server=srv(2.0, 20, 0, 5, 0, 0, 0.2, 0.9)),
             call("c", 3.0, 3.0, None, None, "error", server=srv(1.0, 6, 6, 0, 2, 1, 0.1, 5.0)),
             call("d", 4.0, 4.0, 4.0, 5.0),
             call("e", 5.0, 5.0, 5.0, 6.0, server=srv(0.8, 4, 2, 0, 1, 0, 0.5, 0.25))]
    run = _run(tmp_path, calls)
    f = _fig()
    client_block(f, run.calls, run)
    # errors sorted -0.5, 0.25, 1.0: p50 0.25, p99 at rank 1.98 = 0.25 + 0.98 x 0.75
    assert (f.ttft_model_err_p50, f.ttft_model_err_p99) == pytest.approx((0.25, 0.985))
    # loads: a (0.3 / 0.1 = 3.0, late) and e (0.25 / 0.5 = 0.5, not late): p50 1.75,
    # p99 = 0.5 + 0.99 x 2.5; half the loads late; the median load is behind its profile
    assert (f.store_read_over_p50, f.store_read_over_p99) == pytest.approx((1.75, 2.975))
    assert f.store_late_share == pytest.approx(0.5) and f.store_behind == 1.0
    # sums over a, b, c, e (4 calls with the field): keys 40, hits 12, put 8, refused 4, pre 3
    assert f.store_keys_per_call == pytest.approx(10.0)
    assert (f.put_blocks, f.put_refused_blocks, f.preemptions_server) == (8.0, 4.0, 3.0)
    assert f.store_hit_rate == pytest.approx(0.3)
    assert f.store_hit_rate_source == "emulator per-request store_hit_blocks / store_keys_looked_up"
    assert f.refused_share == pytest.approx(4 / 12)
    assert f.refused_source == "emulator per-request put_refused_blocks / (put_blocks + refused)"
    assert f.refused_bytes == pytest.approx(4 * PROF.bytes_per_block)
    assert f.missing == {}


def test_client_block_median_read_at_its_profile_is_not_behind(tmp_path):
    # one load of one block (one key looked up), the real read exactly as modelled: ratio 1.0,
    # not late, not behind (behind is > 1)
    run = _run(tmp_path, [call("a", 1.0, 1.0, 1.0, 2.0, server=srv(1.0, 1, 1, 0, 0, 0, 0.2, 0.2))])
    f = _fig()
    client_block(f, run.calls, run)
    assert (f.store_read_over_p50, f.store_late_share, f.store_behind) == (1.0, 0.0, 0.0)
    assert f.ttft_model_err_p50 == 0.0 and f.store_hit_rate == 1.0
    # nothing offered: no refusal share; no lookups: no hit rate (and no source)
    assert math.isnan(f.refused_share) and f.refused_source == "" and f.refused_bytes == 0.0
    g = _fig()
    run2 = _run(tmp_path, [call("a", 1.0, 1.0, 1.0, 2.0, server=srv(1.0, 0, 0, 1, 0, 0))], "b")
    client_block(g, run2.calls, run2)
    assert math.isnan(g.store_hit_rate) and g.store_hit_rate_source == ""
    assert g.refused_share == 0.0 and g.refused_source.startswith("emulator")   # 1 offered
    assert g.store_keys_per_call == 0.0


def test_client_block_without_the_field_or_calls(tmp_path):
    run = _run(tmp_path, [call("a", 1.0, 1.0, 1.0, 2.0), call("b", 2.0, 2.0, 2.0, 3.0)])
    f = _fig()
    client_block(f, run.calls, run)
    assert {k: f.missing[k] for k in PER_CALL} == dict.fromkeys(PER_CALL, NO_ADEV_FIELD)
    assert {k: f.missing[k] for k in MODELLED} == dict.fromkeys(MODELLED, NO_ADEV_MODEL)
    assert len(f.missing) == 9 and math.isnan(f.store_keys_per_call)
    g = _fig()
    client_block(g, run.calls.iloc[0:0], run)
    assert g.missing == dict.fromkeys(PER_CALL + MODELLED, "no calls in the window")


def test_client_block_reasons_without_ok_calls_loads_or_host_reads(tmp_path):
    # only failed calls carry the field: no modelled TTFT error, no loads
    run = _run(tmp_path, [call("a", 1.0, 1.0, None, None, "error", server=srv(1.0, 5, 5, 1, 1))])
    f = _fig()
    client_block(f, run.calls, run)
    why = "no OK call in the window with both a first-content stamp and a modelled TTFT"
    assert (f.missing["ttft_model_err_p50"], f.missing["ttft_model_err_p99"]) == (why, why)
    assert {k: f.missing[k] for k in LATE_FOUR} == \
        dict.fromkeys(LATE_FOUR, "no OK call in the window loaded store hits")
    assert f.store_keys_per_call == 5.0 and f.refused_share == 0.5
    # an OK load without the host read figure (an older emulator), and no modelled TTFT
    run2 = _run(tmp_path, [call("a", 1.0, 1.0, 1.0, 2.0, server=srv(None, 5, 5, 0, 0, 0, 0.1))], "b")
    g = _fig()
    client_block(g, run2.calls, run2)
    assert g.missing["ttft_model_err_p99"] == why
    assert {k: g.missing[k] for k in LATE_FOUR} == dict.fromkeys(
        LATE_FOUR, "no call in the window carries `read_path_host_s` (an emulator from before it "
                   "was added)")
    assert math.isnan(g.store_behind) and math.isnan(g.store_late_share)


def test_client_block_without_a_model_profile(tmp_path):
    run = _run(tmp_path, [call("a", 1.0, 1.0, 1.0, 2.0, server=srv(1.0, 4, 2, 1, 3))])
    for missing, why in (({"profile": "manifest has no stack"}, "manifest has no stack"),
                         ({}, "no model profile")):
        f = _fig()
        client_block(f, run.calls, SimpleNamespace(profile=None, missing=missing))
        assert math.isnan(f.refused_bytes) and f.missing["refused_bytes"] == why
        assert f.refused_share == pytest.approx(0.75)


def test_calls_of_one_endpoint_or_all(tmp_path):
    run = _run(tmp_path, [call("a", 1.0, 1.0, 1.0, 2.0), call("b", 2.0, 2.0, 2.0, 3.0, ep="reasoner"),
                          call("c", 3.0, 3.0, 3.0, 4.0)])
    assert list(calls_of(run, "coder")["call_id"]) == ["a", "c"]
    assert list(calls_of(run, "reasoner")["call_id"]) == ["b"]
    assert list(calls_of(run, None)["call_id"]) == ["a", "b", "c"]
    empty = SimpleNamespace(calls=run.calls.iloc[0:0])
    assert len(calls_of(empty, "coder")) == 0 and np.array_equal(calls_of(empty, None).columns,
                                                                  run.calls.columns)
