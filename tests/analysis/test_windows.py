"""Window analytics on hand-built records whose answers are known exactly."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from adev.analysis import counters as C
from adev.analysis.figures import busy_time, in_flight, store_read_late, store_read_over_profile, ttft_model_error
from adev.analysis.run import Scrape, load_run
from adev.analysis.windows import ALL, analyse_window, window_table
from adev.config import StackConfig, StoreSpec, load_model_profile
from adev.records import CallRecord, RunDir, ScrapeRecord, WindowRecord

PROF = load_model_profile("qwen3-coder-30b-a3b")
RATE = PROF.prefill_tokens_per_s
BPT = PROF.bytes_per_token


# -- pure functions ------------------------------------------------------------------------

def test_busy_time_overlapping_intervals():
    s = np.array([0.0, 1.0, 5.0, 5.5])
    e = np.array([2.0, 3.0, 6.0, 5.7])
    assert busy_time(s, e, 0.0, 10.0) == pytest.approx(4.0)
    # unsorted input, nested interval, identical intervals
    assert busy_time(np.array([5.0, 0.0, 0.0]), np.array([6.0, 3.0, 3.0]), 0, 10) == pytest.approx(4.0)


def test_busy_time_window_boundary_cuts_requests():
    s = np.array([0.0, 1.0, 5.0])
    e = np.array([2.0, 3.0, 6.0])
    assert busy_time(s, e, 2.5, 5.5) == pytest.approx(0.5 + 0.5)
    assert busy_time(s, e, 1.5, 2.0) == pytest.approx(0.5)       # inside the union
    assert busy_time(np.array([0.0]), np.array([100.0]), 10.0, 20.0) == pytest.approx(10.0)


def test_busy_time_zero_and_open_intervals():
    assert busy_time(np.array([]), np.array([]), 0, 10) == 0.0
    assert busy_time(np.array([20.0]), np.array([30.0]), 0, 10) == 0.0
    assert busy_time(np.array([1.0, 2.0]), np.array([np.nan, 3.0]), 0, 10) == pytest.approx(1.0)


def test_in_flight_skips_intervals_without_an_end():
    assert in_flight(np.array([0.0, 1.0, np.nan]), np.array([np.nan, 2.0, 3.0]),
                     np.array([1.5, 5.0])).tolist() == [1, 0]


def test_in_flight_counts_half_open_intervals():
    s = np.array([0.0, 1.0, 2.0])
    e = np.array([3.0, 2.0, 4.0])
    assert in_flight(s, e, np.array([0.0, 1.5, 2.0, 3.0, 4.0])).tolist() == [1, 2, 2, 1, 0]


def _sc(t, v, ok=True, name="vllm:prefix_cache_hits_total"):
    return Scrape(t, ok, {f'{name}{{engine="0"}}': v} if ok and v is not None else {})


def test_counter_delta_plain_and_reset():
    sc = [_sc(0, 0), _sc(5, 100), _sc(10, 150), _sc(15, 30), _sc(20, 80)]
    d = C.counter_delta(sc, C.PREFIX_HITS, 0, 20)
    assert d.value == 100 + 50 + 30 + 50 and d.resets == 1 and d.gaps == 0
    d = C.counter_delta(sc, C.PREFIX_HITS, 5, 10)
    assert d.value == 50 and d.resets == 0 and (d.t_from, d.t_to) == (5, 10)


def test_counter_delta_missing_scrape_inside_and_at_boundary():
    sc = [_sc(0, 0), _sc(5, 10), _sc(10, None, ok=False), _sc(15, 40), _sc(20, 60)]
    d = C.counter_delta(sc, C.PREFIX_HITS, 0, 20)
    assert d.value == 60 and d.gaps == 1
    # the boundary scrape at t=10 failed: the nearest OK one within one interval is used
    d = C.counter_delta(sc, C.PREFIX_HITS, 0, 10)
    assert d.value in (10, 40) and d.t_to in (5, 15)
    # no OK scrape within tolerance of the boundary -> no value, with a reason
    d = C.counter_delta(sc, C.PREFIX_HITS, 0, 10, tol=2.0)
    assert d.value is None and "t=10" in d.reason
    d = C.counter_delta([], C.PREFIX_HITS, 0, 10, target="coder")
    assert d.value is None and "no scrapes" in d.reason
    d = C.counter_delta([_sc(0, 1, name="other"), _sc(5, 2, name="other")], C.PREFIX_HITS, 0, 5)
    assert d.value is None and "never exported" in d.reason


# -- whole windows from a hand-built run directory --------------------------------------------

def _vllm(gpu, ext, prompt, pre=0, extq=None):
    lab = '{engine="0",model_name="m"}'
    return {f"vllm:prefix_cache_hits_total{lab}": gpu,
            f"vllm:external_prefix_cache_hits_total{lab}": ext,
            f"vllm:external_prefix_cache_queries_total{lab}": extq if extq is not None else prompt - gpu,
            f"vllm:prompt_tokens_total{lab}": prompt,
            f"vllm:num_preemptions_total{lab}": pre}


def _master(mem_b, file_b, items=0, failed=0):
    return {"mem_cache_hit_bytes_total": mem_b, "file_cache_hit_bytes_total": file_b,
            "master_batch_put_start_items_total": items,
            "master_batch_put_start_failed_items_total": failed,
            "master_put_start_alloc_failures_total": failed,
            "master_successful_evictions_total": 0, "master_attempted_evictions_total": 0,
            "master_evicted_key_count": 0, "master_evicted_size_bytes": 0}


def _srv(queue, rp, gpu, ram, disk, comp, keys=0, hits=0, put=0, refused=0, load=None):
    return {"queue_s": queue, "lookup_s": 0.0, "load_s": rp if load is None else load,
            "read_path_s": rp, "prefill_s": 0.0, "ttft_s": 0.0,
            "tokens": {"gpu": gpu, "store_ram": ram, "store_disk": disk, "computed": comp},
            "store_keys_looked_up": keys, "store_hit_blocks": hits, "put_blocks": put,
            "put_refused_blocks": refused, "store_errors": 0, "preemptions": 0}


def make_hand_run(tmp_path, calls, scrapes, windows, payload_scale=64):
    rd = RunDir(tmp_path / "run")
    rd.path.mkdir()
    stack = StackConfig(payload_scale=payload_scale, store=StoreSpec(lease_ttl_s=5.0))
    rd.write_json("manifest.json", {"run_id": "hand", "time_scale": 10.0,
                                    "config": {"fleet": {"width": 2, "name": "hand"},
                                               "stack": dataclasses.asdict(stack)}})
    for c in calls:
        rd.append(c)
    for target, t, ok, samples in scrapes:
        rd.append(ScrapeRecord(run_id="hand", target=target, url="u", t=t, ok=ok,
                               samples=samples if ok else {}, error=None if ok else "boom"))
    for i, (t0, t1, *valid) in enumerate(windows):   # (t0, t1) or (t0, t1, valid)
        ok = valid[0] if valid else True
        rd.append(WindowRecord(run_id="hand", index=i + 1, t0=t0, t1=t1, valid=ok,
                               reason=None if ok else "recorded invalid"))
    rd.close()
    return load_run(rd.path)


def _call(cid, t_sent, t_end, srv=None, ep="coder", t_sched=None, t_fc=None):
    return CallRecord(run_id="hand", session_id="s", call_id=cid, endpoint=ep,
                      t_scheduled=t_sent if t_sched is None else t_sched, t_sent=t_sent,
                      t_first_byte=t_sent, t_first_content=t_fc if t_fc is not None else t_sent + 1,
                      t_end=t_end, prompt_tokens=1000, server=srv)


def test_window_figures_exact(tmp_path):
    # two overlapping requests on coder: [1, 5] and [3, 9] -> B = 8 in W = [0, 10)
    # request a: read path 0.4 s starting at t=1 (1 in flight); b: 0.6 s at t=3.5 (2 in flight)
    calls = [_call("a", 1.0, 5.0, _srv(0.0, 0.4, 160, 480, 320, 40, keys=60, hits=50, put=4, refused=1),
                   t_sched=0.5, t_fc=2.0),
             _call("b", 3.0, 9.0, _srv(0.5, 0.6, 0, 160, 0, 840, keys=60, hits=10, put=50, refused=9),
                   t_sched=3.0, t_fc=4.0)]
    # disk share from the master: file bytes / all bytes = 320 / 960 tokens' worth
    scale = 64
    scr = [("coder", 0.0, True, _vllm(0, 0, 0)),
           ("coder", 10.0, True, _vllm(160, 960, 2000)),
           ("master", 0.0, True, _master(0, 0)),
           ("master", 10.0, True, _master(640 * BPT / scale, 320 * BPT / scale, items=54, failed=10))]
    run = make_hand_run(tmp_path, calls, scr, [(0.0, 10.0)])
    rows = {f.endpoint: f for f in analyse_window(run, run.measurement_windows()[0])}
    f = rows["coder"]
    assert f.calls == 2 and f.busy_s == pytest.approx(8.0) and f.busy_share == pytest.approx(0.8)
    assert (f.span_from, f.span_to, f.busy_span_s) == (0.0, 10.0, 8.0)
    assert f.gpu_tokens == 160 and f.store_tokens == 960 and f.prompt_tokens == 2000
    assert f.gpu_hit_share == pytest.approx(0.08) and f.store_hit_share == pytest.approx(0.48)
    assert f.disk_fraction == pytest.approx(1 / 3)
    assert f.store_disk_tokens == pytest.approx(320) and f.store_ram_tokens == pytest.approx(640)
    g = (960 / RATE) / 8.0
    assert f.gross_saving == pytest.approx(g)
    assert f.gross_saving_disk == pytest.approx((320 / RATE) / 8.0)
    assert f.disk_share_of_saving == pytest.approx(1 / 3)
    assert f.net_saving == pytest.approx(g - (0.4 / 1 + 0.6 / 2) / 8.0)
    assert f.net_saving_full == pytest.approx(g - 1.0 / 8.0)
    assert f.store_hit_rate == pytest.approx(60 / 120)
    assert f.store_keys_per_call == pytest.approx(60)
    assert f.refused_share == pytest.approx(10 / 64)   # refused / (accepted + refused)
    assert "per-request" in f.refused_source
    assert f.refused_bytes == pytest.approx(10 * BPT * 16)
    assert f.xcheck_gpu_rel == 0 and f.xcheck_store_rel == 0 and f.xcheck_disk_rel == 0
    assert f.ttft_send_p50 == pytest.approx(1.0)            # 2-1 and 4-3
    assert f.ttft_sched_p50 == pytest.approx((1.5 + 1.0) / 2)
    assert f.dispatch_mean == pytest.approx(0.25)
    # disk-only request a: 320 tokens' bytes in 0.4 s... a also read RAM, so the NNLS path or
    # none; only check the recompute rate exactly
    assert f.recompute_rate == pytest.approx(RATE * BPT)
    a = rows[ALL]
    assert a.gross_saving == pytest.approx(g) and a.net_saving == pytest.approx(f.net_saving)
    assert a.store_gib_served == pytest.approx(960 * BPT / 1024 ** 3)
    assert a.master_batch_put_failed_items == 10


def test_window_figures_exact_two_endpoints_pool_into_all(tmp_path):
    """The ALL row pools two endpoints: busy times and tokens summed, the busy share divided by
    endpoints x window length, ratios recomputed from the sums, read-path charges added."""
    # coder: [1, 5] and [3, 9] -> B = 8; read paths 0.4 (1 in flight) + 0.6 (2 in flight)
    # reasoner: [2, 4] -> B = 2; read path 0.2 (1 in flight on its own endpoint)
    calls = [_call("a", 1.0, 5.0, _srv(0.0, 0.4, 160, 480, 320, 40)),
             _call("b", 3.0, 9.0, _srv(0.5, 0.6, 0, 160, 0, 840)),
             _call("c", 2.0, 4.0, _srv(0.0, 0.2, 0, 320, 0, 680), ep="reasoner", t_fc=2.5)]
    scr = [("coder", 0.0, True, _vllm(0, 0, 0)), ("coder", 10.0, True, _vllm(160, 960, 2000)),
           ("reasoner", 0.0, True, _vllm(0, 0, 0)), ("reasoner", 10.0, True, _vllm(0, 320, 1000))]
    run = make_hand_run(tmp_path, calls, scr, [(0.0, 10.0)])
    rows = {f.endpoint: f for f in analyse_window(run, run.measurement_windows()[0])}
    assert sorted(rows) == [ALL, "coder", "reasoner"]
    c, r, a = rows["coder"], rows["reasoner"], rows[ALL]
    assert (c.busy_s, c.busy_share) == (pytest.approx(8.0), pytest.approx(0.8))
    assert (r.busy_s, r.busy_share) == (pytest.approx(2.0), pytest.approx(0.2))
    assert r.gross_saving == pytest.approx((320 / RATE) / 2.0)
    assert r.net_saving == pytest.approx((320 / RATE) / 2.0 - 0.2 / 2.0)
    # ALL: 10 busy seconds over 2 endpoints x 10 s
    assert a.calls == 3 and a.busy_s == pytest.approx(10.0) and a.busy_share == pytest.approx(0.5)
    assert a.busy_span_s == pytest.approx(10.0)
    assert (a.span_from, a.span_to) == (0.0, 10.0)
    assert (a.prompt_tokens, a.gpu_tokens, a.store_tokens) == (3000, 160, 1280)
    assert a.gpu_hit_share == pytest.approx(160 / 3000)
    assert a.store_hit_share == pytest.approx(1280 / 3000)
    g = (1280 / RATE) / 10.0
    assert a.gross_saving == pytest.approx(g)
    assert a.net_saving == pytest.approx(g - (0.4 + 0.6 / 2 + 0.2) / 10.0)
    assert a.net_saving_full == pytest.approx(g - (0.4 + 0.6 + 0.2) / 10.0)
    assert a.read_path_s == pytest.approx(1.2)
    assert a.srv_requests == 3 and a.srv_store_ram_tokens == 960 and a.srv_gpu_tokens == 160
    assert a.ttft_send_p50 == pytest.approx(1.0)               # TTFTs 1, 1 (coder), 0.5
    assert a.dispatch_mean == pytest.approx(0.0)


def test_zero_busy_time_reports_missing_saving(tmp_path):
    scr = [("coder", 0.0, True, _vllm(0, 0, 0)), ("coder", 10.0, True, _vllm(0, 0, 0)),
           ("master", 0.0, True, _master(0, 0)), ("master", 10.0, True, _master(0, 0))]
    run = make_hand_run(tmp_path, [_call("a", 20.0, 25.0, _srv(0, 0, 0, 0, 0, 1000))], scr,
                        [(0.0, 10.0)])
    f = {r.endpoint: r for r in analyse_window(run, run.measurement_windows()[0])}["coder"]
    assert f.busy_s == 0.0 and f.calls == 0
    assert math.isnan(f.gross_saving) and "busy_span_s" in f.missing["gross_saving"]
    assert math.isnan(f.gpu_hit_share) and "prompt_tokens" in f.missing["gpu_hit_share"]


def test_counter_reset_inside_window(tmp_path):
    # the endpoint restarted between t=10 and t=15: 300 store tokens before, 200 after
    scr = [("coder", 0.0, True, _vllm(0, 0, 0)), ("coder", 5.0, True, _vllm(0, 100, 500)),
           ("coder", 10.0, True, _vllm(0, 300, 1000)), ("coder", 15.0, True, _vllm(0, 50, 300)),
           ("coder", 20.0, True, _vllm(0, 200, 900))]
    run = make_hand_run(tmp_path, [_call("a", 0.0, 20.0)], scr, [(0.0, 20.0)])
    f = {r.endpoint: r for r in analyse_window(run, run.measurement_windows()[0])}["coder"]
    assert f.store_tokens == 500 and f.prompt_tokens == 1900 and f.counter_resets == 1
    assert f.gross_saving == pytest.approx((500 / RATE) / 20.0)


def test_missing_scrape_at_boundary(tmp_path):
    scr = [("coder", 0.0, True, _vllm(0, 0, 0)), ("coder", 5.0, True, _vllm(0, 10, 100)),
           ("coder", 10.0, False, {}), ("coder", 15.0, True, _vllm(0, 40, 400)),
           ("coder", 20.0, True, _vllm(0, 60, 600)), ("coder", 30.0, False, {})]
    run = make_hand_run(tmp_path, [_call("a", 0.0, 20.0)], scr, [(0.0, 10.0), (10.0, 30.0)])
    t = window_table(run)
    w1 = t[(t.window == 1) & (t.endpoint == "coder")].iloc[0]
    # the failed boundary scrape at 10 is replaced by the nearest OK one (5 or 15), reported
    assert w1.span_to in (5.0, 15.0) and w1.span_from == 0.0
    w2 = t[(t.window == 2) & (t.endpoint == "coder")].iloc[0]
    # nothing within one scrape interval of t=30: no counter figures, with the reason
    assert math.isnan(w2.store_tokens) and "t=30" in w2.missing["store_tokens"]
    assert math.isnan(w2.gross_saving)
    assert w2.busy_s == pytest.approx(10.0)


def test_real_vllm_run_without_extension_fields(tmp_path):
    scr = [("coder", 0.0, True, _vllm(0, 0, 0, extq=0)),
           ("coder", 10.0, True, _vllm(100, 400, 1000, extq=800))]
    run = make_hand_run(tmp_path, [_call("a", 0.0, 10.0, None)], scr, [(0.0, 10.0)])
    f = {r.endpoint: r for r in analyse_window(run, run.measurement_windows()[0])}["coder"]
    assert f.gross_saving == pytest.approx((400 / RATE) / 10.0)
    assert f.store_hit_rate == pytest.approx(0.5) and "external" in f.store_hit_rate_source
    assert math.isnan(f.net_saving) and "extension field" in f.missing["net_saving"]
    assert "no scrapes" in f.missing["store_disk_tokens"]        # no master scraped


def test_synthetic_run_cross_check_and_shapes(tmp_path):
    from .synth import make_run
    small = load_run(make_run(tmp_path, width=2, windows=2, window_s=200, seed=1))
    big = load_run(make_run(tmp_path, width=12, windows=2, window_s=200, seed=1))
    ts, tb = window_table(small), window_table(big)
    for t in (ts, tb):
        a = t[t.endpoint == ALL]
        assert (a.xcheck_gpu_rel < 0.01).all() and (a.xcheck_store_rel < 0.01).all()
        assert (a.xcheck_disk_rel < 0.01).all()
    assert ts[ts.endpoint == ALL].gpu_hit_share.mean() > tb[tb.endpoint == ALL].gpu_hit_share.mean()
    assert ts[ts.endpoint == ALL].store_hit_share.mean() < tb[tb.endpoint == ALL].store_hit_share.mean()


def test_refusals_prefer_store_client_counters(tmp_path):
    lab = '{engine="0",model_name="m"}'
    def emu(acc, ref):
        return {**_vllm(0, 0, 0), f"adev_emulator_store_put_blocks_total{lab}": acc,
                f"adev_emulator_store_put_refused_blocks_total{lab}": ref}
    scr = [("coder", 0.0, True, emu(100, 5)), ("coder", 10.0, True, emu(130, 15))]
    run = make_hand_run(tmp_path, [_call("a", 1.0, 2.0, _srv(0, 0, 0, 0, 0, 1000, put=1, refused=1))],
                        scr, [(0.0, 10.0)])
    rows = {r.endpoint: r for r in analyse_window(run, run.measurement_windows()[0])}
    f = rows["coder"]
    assert f.refused_share == pytest.approx(10 / 40) and f.refused_source.startswith("store client")
    assert f.refused_bytes == pytest.approx(10 * PROF.bytes_per_block)
    assert rows[ALL].refused_share == pytest.approx(0.25)


def test_tier_split_prefers_the_endpoints_own_counter_and_failed_loads_are_not_served(tmp_path):
    """Emulated endpoints export lookup hits and failed loads per tier: the RAM/disk split uses
    the endpoint's own counters (the master's byte shares are global and would give 50/50 here),
    and store-served tokens are the lookup hits less the hit blocks whose load failed."""
    lab = '{engine="0",model_name="m"'
    def emu(ext, ram, disk, failed_ram, failed_disk):
        return {**_vllm(0, ext, 4000, extq=4000),
                f'adev_emulator_store_hit_blocks_total{lab},tier="ram"}}': ram,
                f'adev_emulator_store_hit_blocks_total{lab},tier="disk"}}': disk,
                f'adev_emulator_store_load_failed_blocks_total{lab},tier="ram"}}': failed_ram,
                f'adev_emulator_store_load_failed_blocks_total{lab},tier="disk"}}': failed_disk}
    # 100 hit blocks at lookup (80 RAM, 20 disk); 5 of each failed to load: 75 RAM + 15 disk served
    scr = [("coder", 0.0, True, emu(0, 0, 0, 0, 0)), ("coder", 10.0, True, emu(1600, 80, 20, 5, 5)),
           ("master", 0.0, True, _master(0, 0)), ("master", 10.0, True, _master(1000, 1000))]
    run = make_hand_run(tmp_path, [_call("a", 1.0, 2.0, _srv(0, 0.1, 0, 1200, 240, 2560))], scr, [(0.0, 10.0)])
    f = {r.endpoint: r for r in analyse_window(run, run.measurement_windows()[0])}["coder"]
    assert f.store_load_failed_tokens == 160 and f.store_tokens == 1600 - 160
    assert f.disk_fraction == pytest.approx(15 / 90) and f.disk_split_source.startswith("endpoint counter")
    assert f.store_disk_tokens == pytest.approx(240) and f.store_ram_tokens == pytest.approx(1200)
    assert f.xcheck_store_rel == 0 and f.xcheck_disk_rel == pytest.approx(0)


def test_boundary_scrape_late_but_endpoint_idle(tmp_path):
    # window opens at t=0; the first scrape only at t=40, but coder's first request is at 50:
    # the counter cannot have moved in [0, 40], so the t=40 scrape stands for t0
    scr = [("coder", float(t), True, _vllm(0, 0 if t < 50 else 300, 0 if t < 50 else 900))
           for t in range(40, 105, 5)]                   # scrapes every 5 s from t=40 only
    run = make_hand_run(tmp_path, [_call("a", 50.0, 60.0)], scr, [(0.0, 100.0)])
    f = {r.endpoint: r for r in analyse_window(run, run.measurement_windows()[0])}["coder"]
    assert f.store_tokens == 300 and f.span_from == 40.0
    # a request outstanding between the boundary and the late scrape: no value, with the reason
    (tmp_path / "b").mkdir()
    run2 = make_hand_run(tmp_path / "b", [_call("a", 5.0, 60.0)], scr, [(0.0, 100.0)])
    g = {r.endpoint: r for r in analyse_window(run2, run2.measurement_windows()[0])}["coder"]
    assert math.isnan(g.store_tokens) and "t=0" in g.missing["store_tokens"]


def test_admission_from_server_stamps(tmp_path):
    """The server's arrival stamp (host monotonic) placed on the run clock decides the span."""
    import json
    t0_mono, scale = 500.0, 10.0
    srv = _srv(0.5, 0.1, 160, 0, 0, 840)
    # client sent at 9.0, but the server only got it at run time 10.5 (model), admitted at 11.0
    srv.update(t_arrival_mono=t0_mono + 10.5 / scale, t_end_mono=t0_mono + 14.0 / scale)
    scr = [("coder", 0.0, True, _vllm(0, 0, 0)), ("coder", 10.0, True, _vllm(0, 0, 0)),
           ("coder", 20.0, True, _vllm(160, 0, 1000))]
    run = make_hand_run(tmp_path, [_call("a", 9.0, 14.5, srv)], scr, [(0.0, 10.0), (10.0, 20.0)])
    assert run.clock_source.startswith("estimated")      # no fleet.json: bound from the calls
    assert run.clock_t0_mono == pytest.approx(t0_mono + 14.0 / scale - 14.5 / scale)
    (run.path / "fleet.json").write_text(json.dumps({"clock": {"t0_mono": t0_mono}}))
    run = load_run(run.path)
    assert run.clock_source == "fleet.json clock.t0_mono"
    assert run.calls["t_admit"].iloc[0] == pytest.approx(11.0)
    t = window_table(run)
    w1 = t[(t.window == 1) & (t.endpoint == "coder")].iloc[0]
    w2 = t[(t.window == 2) & (t.endpoint == "coder")].iloc[0]
    assert w1.srv_requests == 0 and w2.srv_requests == 1
    assert w2.xcheck_gpu_rel == 0.0 and w1.xcheck_gpu_rel == 0.0


def test_ttft_over_the_emulators_model(tmp_path):
    """(TTFT from send - the endpoint's modelled TTFT) / modelled, per OK call: how far what the
    client saw drifted from the emulator's model; missing, with the reason, without the field."""
    sa, sb = _srv(0, 0, 0, 0, 0, 1000), _srv(0, 0, 0, 0, 0, 1000)
    sa["ttft_s"], sb["ttft_s"] = 0.8, 1.0
    calls = [_call("a", 1.0, 5.0, sa, t_fc=2.0), _call("b", 3.0, 9.0, sb, t_fc=4.0)]
    scr = [("coder", 0.0, True, _vllm(0, 0, 0)), ("coder", 10.0, True, _vllm(0, 0, 2000))]
    run = make_hand_run(tmp_path, calls, scr, [(0.0, 10.0)])
    f = {r.endpoint: r for r in analyse_window(run, run.measurement_windows()[0])}["coder"]
    assert f.ttft_model_err_p50 == pytest.approx((0.25 + 0.0) / 2)   # 1.0 observed vs 0.8; 1.0 vs 1.0
    assert f.ttft_model_err_p99 == pytest.approx(0.25 * 0.99)
    np.testing.assert_allclose(ttft_model_error([1.0, 2.0, 1.0], [0.8, 0.0, float("nan")]),
                               [0.25, np.nan, np.nan])
    (tmp_path / "real").mkdir()
    real = make_hand_run(tmp_path / "real", [_call("a", 0.0, 10.0, None)], scr, [(0.0, 10.0)])
    g = {r.endpoint: r for r in analyse_window(real, real.measurement_windows()[0])}["coder"]
    assert math.isnan(g.ttft_model_err_p99) and "models TTFT" in g.missing["ttft_model_err_p99"]


def test_real_store_reads_over_the_tier_profile(tmp_path):
    """read_path_host_s / read_path_s over the OK calls that loaded store hits: how much slower
    this host's real Mooncake reads ran than the tier profile; calls without hits do not count;
    missing, with the reason, when no call loaded hits or the emulator predates the field."""
    sa = _srv(0, 0.010, 0, 160, 0, 40, keys=12, hits=10)     # 10 store blocks, modelled 10 ms
    sb = _srv(0, 0.020, 0, 0, 320, 40, keys=22, hits=20)
    sc = _srv(0, 0.0005, 0, 0, 0, 200, keys=12, hits=0)       # lookup only: not a load
    sa["read_path_host_s"], sb["read_path_host_s"], sc["read_path_host_s"] = 0.030, 0.020, 0.5
    calls = [_call("a", 1.0, 5.0, sa), _call("b", 3.0, 9.0, sb), _call("c", 4.0, 9.0, sc)]
    scr = [("coder", 0.0, True, _vllm(0, 0, 0)), ("coder", 10.0, True, _vllm(0, 0, 2000))]
    run = make_hand_run(tmp_path, calls, scr, [(0.0, 10.0)])
    f = {r.endpoint: r for r in analyse_window(run, run.measurement_windows()[0])}["coder"]
    assert f.store_read_over_p50 == pytest.approx((3.0 + 1.0) / 2)   # 30 ms real vs 10; 20 vs 20
    assert f.store_read_over_p99 == pytest.approx(1.0 + 2.0 * 0.99)
    # a's read (30 ms real vs 10 modelled) fell behind, b's (20 vs 20) did not: half the loads;
    # the median read is 2x its profile: the window is behind
    assert f.store_late_share == pytest.approx(0.5) and f.store_behind == 1.0
    np.testing.assert_allclose(store_read_late([0.03, 0.02, float("nan")], [0.01, 0.02, 0.01]),
                               [1.0, 0.0, np.nan])
    np.testing.assert_allclose(store_read_over_profile([0.03, 0.01, float("nan")], [0.01, 0.0, 0.01]),
                               [3.0, np.nan, np.nan])
    for sub, srv, why in (("old", _srv(0, 0.01, 0, 160, 0, 40, keys=12, hits=10), "read_path_host_s"),
                          ("nohits", sc, "loaded store hits")):
        (tmp_path / sub).mkdir()
        r = make_hand_run(tmp_path / sub, [_call("a", 1.0, 5.0, srv)], scr, [(0.0, 10.0)])
        g = {x.endpoint: x for x in analyse_window(r, r.measurement_windows()[0])}["coder"]
        assert math.isnan(g.store_read_over_p50) and why in g.missing["store_read_over_p50"]
        assert math.isnan(g.store_behind) and why in g.missing["store_behind"]


def test_rel_diff_by_hand():
    from adev.analysis.figures import rel_diff
    assert rel_diff(3.0, 2.0) == 0.5 and rel_diff(1.0, -2.0) == 1.5
    assert rel_diff(0.5, 0.2) == pytest.approx(0.3)            # |b| < 1: divided by 1


def test_disk_rate_from_disk_only_requests_or_a_fit():
    from adev.analysis.figures import disk_rate_estimate as est
    G = 1e9
    # requests that read only from disk: sum of disk bytes / sum of load time (NaN loads skipped)
    # (a request that loaded nothing is not disk-only, whatever its load time)
    r = est(np.array([0, 0, 1 * G, 0, 0]), np.array([2 * G, 4 * G, 1 * G, 9 * G, 0]),
            np.array([0.5, 2.5, 0.7, np.nan, 0.2]))
    assert r == pytest.approx(6 * G / 3.0)
    assert est(np.zeros(2), np.array([G, G / 2]), np.array([0.5, 0.25])) == pytest.approx(2 * G)
    # none disk-only: load = 0.01 + ram / 20 GB/s + disk / 2 GB/s, fitted exactly (3 requests,
    # one of them reading from disk, is the least the fit takes)
    ram, disk = np.array([1 * G, 2 * G, 1 * G]), np.array([0, 0, 1 * G])
    load = 0.01 + ram / 20e9 + disk / 2e9
    assert est(ram, disk, load) == pytest.approx(2e9, rel=1e-6)
    # a request that loaded nothing in no time is not part of the fit
    assert est(np.append(ram, 0), np.append(disk, 0), np.append(load, 0.0)) == \
        pytest.approx(2e9, rel=1e-6)
    # disk-only requests that took no time: the fit instead
    assert est(np.append(ram, 0), np.append(disk, 3 * G), np.append(load, 0.0)) != \
        pytest.approx(2e9, rel=1e-3)
    ram4, disk4 = np.array([1 * G, 2 * G, 1 * G, 3 * G]), np.array([1 * G, G / 2, 2 * G, G])
    assert est(ram4, disk4, 0.01 + ram4 / 20e9 + disk4 / 2e9) == pytest.approx(2e9, rel=1e-6)
    too_few = "too few requests loading from the disk tier in the window"
    assert est(ram[:2], np.array([G, G]), load[:2]) == too_few             # 2 loading requests
    assert est(ram, np.zeros(3), 0.01 + ram / 20e9) == too_few             # none from disk
    # disk bytes that cost no time: not separable
    assert est(ram, disk, 0.01 + ram / 20e9) == ("disk loads not separable from RAM loads (fit "
                                                 "gave no disk time)")


def test_window_table_rows_and_an_empty_run(tmp_path):
    from adev.analysis.window_row import WindowFigures
    scr = [("coder", t, True, _vllm(0, 10 * t, 100 * t)) for t in (0.0, 10.0, 20.0)] + \
          [("reasoner", t, True, _vllm(0, 0, 10 * t)) for t in (0.0, 10.0, 20.0)]
    run = make_hand_run(tmp_path, [_call("a", 1.0, 2.0), _call("b", 12.0, 15.0, ep="reasoner")],
                        scr, [(0.0, 10.0), (10.0, 20.0)])
    t = window_table(run)
    # windows x (endpoints in name order, then ALL)
    assert list(zip(t.window, t.endpoint, strict=True)) == [(1, "coder"), (1, "reasoner"), (1, ALL),
                                                            (2, "coder"), (2, "reasoner"), (2, ALL)]
    assert list(t.store_tokens) == [100.0, 0.0, 100.0, 100.0, 0.0, 100.0]
    assert list(t.calls) == [1, 0, 1, 0, 1, 1]
    assert list(t.columns) == list(WindowFigures.__dataclass_fields__)
    rows = analyse_window(run, run.measurement_windows()[1])
    assert [r.endpoint for r in rows] == ["coder", "reasoner", ALL] and rows[2].busy_s == 3.0
    (tmp_path / "e").mkdir()
    empty = make_hand_run(tmp_path / "e", [], [], [])
    e = window_table(empty)
    assert e.empty and list(e.columns) == list(WindowFigures.__dataclass_fields__)


def test_cross_check_over_the_valid_windows_span_with_its_faults(tmp_path):
    from adev.analysis.windows import cross_check
    # store hits 0, 100, 250, 400, 900 at t = 0, 10, 20, 30, 40; windows 1 and 4 recorded invalid
    ext = {0.0: 0, 10.0: 100, 20.0: 250, 30.0: 400, 40.0: 900}
    scr = [("coder", t, True, _vllm(0, v, 10 * v)) for t, v in ext.items()]
    calls = [_call("a", 11.0, 29.0, _srv(0.0, 0.1, 0, 300, 0, 2700))]
    run = make_hand_run(tmp_path, calls, scr,
                        [(0.0, 10.0, False), (10.0, 20.0), (20.0, 30.0), (30.0, 40.0, False)])
    # two faults that do not invalidate a window, fed in reverse name order
    run.faults.feed("sessions", {"status": "ended", "reason": "llm_error: boom", "t": 25.0})
    run.faults.feed("events", {"event": "session_error", "t": 12.0})
    x = cross_check(run)
    assert list(x.columns) == ["endpoint", "span_from", "span_to", "gpu_tokens", "srv_gpu_tokens",
                               "store_tokens", "srv_store_ram_tokens", "srv_store_disk_tokens",
                               "store_disk_tokens", "store_load_failed_tokens", "xcheck_gpu_rel",
                               "xcheck_store_rel", "xcheck_disk_rel", "faults"]
    x = x.set_index("endpoint")
    assert list(x.index) == ["coder", ALL]
    # the span [10, 30] of windows 2 and 3: 400 - 100 store tokens; a's 300 RAM tokens agree
    assert (x.loc["coder", "span_from"], x.loc["coder", "span_to"]) == (10.0, 30.0)
    assert x.loc["coder", "store_tokens"] == 300 and x.loc["coder", "srv_store_ram_tokens"] == 300
    assert x.loc["coder", "xcheck_store_rel"] == 0.0 and x.loc[ALL, "store_tokens"] == 300
    assert x.loc["coder", "faults"] == x.loc[ALL, "faults"] == "session_error, sessions_llm_error"
    # no valid window: an empty frame with the columns
    (tmp_path / "b").mkdir()
    bad = make_hand_run(tmp_path / "b", calls, scr, [(0.0, 10.0, False)])
    y = cross_check(bad)
    assert y.empty and list(y.columns) == list(x.reset_index().columns)
