from adev.fleet.config import WarmupRule
from adev.fleet.windows import RegimeDetector, last_stamp, plan_windows, pool_tokens_from_samples, resume_plan

Q = "vllm:prefix_cache_queries_total"
U = "vllm:kv_cache_usage_perc"


def samples(q, u=0.0):
    return {f'{Q}{{model_name="m"}}': q, f'{U}{{model_name="m"}}': u}


def test_regime_needs_full_width_then_pool_turnover():
    rule = WarmupRule(kv_usage=0.9, pool_turnover=1.0, max_s=10_000)
    d = RegimeDetector(width=4, rule=rule, pool_tokens=1000)
    served = {"a": True, "b": True}
    # baseline: a reused stack had already served 5000 tokens; they do not count
    assert not d.observe(0, 0, {"a": samples(5000), "b": samples(0)}, served).open
    # all sessions active but the pool has seen too little since the start
    r = d.observe(100, 4, {"a": samples(5500), "b": samples(2000)}, served)
    assert not r.open and "a: queried 500" in r.reason
    # a warm by turnover, b warm by turnover: open
    r = d.observe(200, 4, {"a": samples(6000), "b": samples(2500)}, served)
    assert r.open and not r.timeout
    # fewer active sessions than the width: closed whatever the pool says
    assert not d.observe(300, 3, {"a": samples(9000), "b": samples(9000)}, served).open


def test_regime_kv_usage_and_unserved_endpoint_ignored():
    d = RegimeDetector(2, WarmupRule(kv_usage=0.5, pool_turnover=0.0), pool_tokens=1000)
    r = d.observe(10, 2, {"a": samples(0, 0.6), "b": samples(0, 0.0)}, {"a": True, "b": False})
    assert r.open  # b serves no role: it cannot warm up and is ignored
    r = d.observe(10, 2, {"a": samples(0, 0.4)}, {"a": True})
    assert not r.open


def test_regime_min_and_timeout():
    d = RegimeDetector(1, WarmupRule(min_s=50, max_s=500, kv_usage=0.5), pool_tokens=1000)
    warm = {"a": samples(0, 0.9)}
    assert not d.observe(10, 1, warm, {"a": True}).open
    assert d.observe(60, 1, warm, {"a": True}).open
    cold = {"a": samples(0, 0.0)}
    assert not d.observe(400, 1, cold, {"a": True}).open
    r = d.observe(500, 0, cold, {"a": True})
    assert r.open and r.timeout


def test_regime_counter_reset_counts_from_zero():
    d = RegimeDetector(1, WarmupRule(kv_usage=0, pool_turnover=1.0), pool_tokens=1000)
    assert not d.observe(0, 1, {"a": samples(800)}, {"a": True}).open
    r = d.observe(5, 1, {"a": samples(300)}, {"a": True})  # endpoint restarted: 300 new
    assert not r.open and "queried 300" in r.reason
    assert d.observe(9, 1, {"a": samples(1100)}, {"a": True}).open


def test_pool_from_cache_config_info():
    s = {'vllm:cache_config_info{block_size="16",enable_prefix_caching="True",'
         'num_gpu_blocks="100"}': 1.0}
    assert pool_tokens_from_samples(s) == 1600
    assert pool_tokens_from_samples({}) is None


def test_plan_windows_are_consecutive():
    w = plan_windows(120.0, 3, 600.0)
    assert w == [(1, 120.0, 720.0), (2, 720.0, 1320.0), (3, 1320.0, 1920.0)]
    assert plan_windows(0.0, 2, 10.0, first_index=5)[0][0] == 5


def _ev(name, **d):
    return {"event": name, "t": d.get("t0", 0.0), "detail": d}


def test_resume_plan_marks_interrupted_window_and_counts_remaining():
    windows = [{"index": 1, "t0": 100.0, "t1": 700.0, "valid": True}]
    events = [_ev("fleet_start", epoch=0), _ev("window_open", index=1, t0=100.0),
              _ev("window_open", index=2, t0=700.0)]
    sessions = [{"session_id": "e0-s000-g000", "status": "started", "seed": 0},
                {"session_id": "e0-s000-g000", "status": "passed", "seed": 0},
                {"session_id": "e0-s001-g000", "status": "started", "seed": 1, "task": "t"}]
    p = resume_plan(windows, events, sessions, count=3, t_last=950.0)
    assert p.interrupted == [{"index": 2, "t0": 700.0, "t1": 950.0, "valid": False,
                              "reason": p.interrupted[0]["reason"], "protocol": "steady"}]
    assert (p.next_index, p.valid_done, p.remaining, p.epoch, p.max_seed) == (3, 1, 2, 1, 1)
    assert [s["session_id"] for s in p.orphan_sessions] == ["e0-s001-g000"]
    # a second resume after the first: epoch 2, windows 3 valid now
    windows2 = windows + [{"index": 2, "valid": False}, {"index": 3, "valid": True}]
    events2 = events + [_ev("resume", epoch=1), _ev("window_open", index=3, t0=1000.0),
                        _ev("window_open", index=4, t0=1600.0)]
    p2 = resume_plan(windows2, events2, [], count=3, t_last=1700.0)
    assert [w["index"] for w in p2.interrupted] == [4]
    assert (p2.next_index, p2.valid_done, p2.remaining, p2.epoch) == (5, 2, 1, 2)


def test_last_stamp():
    assert last_stamp({"calls": [{"t_sent": 3.0, "t_end": 9.5}], "scrapes": [{"t": 7.0}],
                       "windows": [{"t0": 1.0, "t1": 8.0}]}) == 9.5


def test_boundary_scrapes_share_the_send_stamp():
    import asyncio

    from adev.clock import RunClock
    from adev.fleet.scraper import Scraper

    class Sink:
        def __init__(self):
            self.recs = []

        def append(self, r):
            self.recs.append(r)

    sink = Sink()
    sc = Scraper(sink, "r", RunClock(10.0), {"a": "http://127.0.0.1:9/metrics",
                                             "b": "http://127.0.0.1:9/x"})
    tb = asyncio.run(sc.boundary())
    assert [r.t for r in sink.recs] == [tb, tb]
    assert all(not r.ok and r.error and r.t_answer is None for r in sink.recs)


def test_warmup_counts_from_the_detectors_start():
    """After --resume the warm-up limit counts from the resume, not from the run's start."""
    d = RegimeDetector(3, WarmupRule(min_s=10, max_s=100, kv_usage=0.5), pool_tokens=1000)
    d.start(1000.0)
    early = d.observe(1005.0, 1, {})
    assert not early.open and "min_s" in early.reason
    mid = d.observe(1050.0, 1, {})
    assert not mid.open and not mid.timeout and "1/3 sessions active" in mid.reason
    late = d.observe(1100.0, 1, {})
    assert late.open and late.timeout
