"""Replay figures from hand-made records, worked by hand."""
from __future__ import annotations

import json

import pytest

from adev.config import load_model_profile
from adev.manifest import build_manifest
from adev.records import CallRecord, RunDir, ScrapeRecord
from adev.replay.cli import default_stack
from adev.replay.experiment import ReplayRecord
from adev.replay.summary import summarise


def _rec(turn, **kw):
    base = dict(run_id="r", session="s", turn=turn, call_id=f"c{turn}", prompt_tokens=1000,
                group="<=32K", recorded_output_tokens=10, prefill="p0", decode="colocated",
                preferred=None, initial=True, sticky=None, t_ready=0.0)
    return ReplayRecord(**{**base, **kw})


def test_summary_by_hand(tmp_path):
    stack = default_stack()
    rd = RunDir.create("r", base=tmp_path)
    rd.write_json("manifest.json", build_manifest(
        "r", config={"stack": stack}, time_scale=10.0,
        extra={"replay": {"label": "store-ram-s3", "experiment": "long", "seed": 3,
                          "topology": {"prefill": ["p0", "p1"], "decode": []}}}))
    rd.append(_rec(0, t_ready=0.0, t_first_token=1.0, t_end=5.0, ttft_s=1.0, itl_s=0.1,
                   live_output_tokens=10))
    rd.append(_rec(1, t_ready=2.0, t_first_token=5.0, t_end=10.0, ttft_s=3.0, itl_s=0.3,
                   live_output_tokens=10, initial=False, sticky=True, preferred="p0",
                   prompt_tokens=40000, group="32-64K"))
    rd.append(_rec(2, t_ready=4.0, t_first_token=6.0, t_end=8.0, ttft_s=2.0, itl_s=0.2,
                   live_output_tokens=9, initial=False, sticky=False, preferred="p1"))
    rd.append(_rec(3, status="error", error="HTTP 500"))
    srv = lambda ttft, rp, host, hits=4: {  # noqa: E731
        "ttft_s": ttft, "read_path_s": rp, "read_path_host_s": host, "load_s": rp,
        "store_hit_blocks": hits, "tokens": {"store_ram": 0, "store_disk": 0}}
    rd.append(CallRecord(run_id="r", session_id="s", call_id="c0", endpoint="p0",
                         t_scheduled=0.0, t_sent=0.01, t_first_content=1.11, t_end=5.0,
                         server=srv(1.0, 0.1, 0.15)))
    rd.append(CallRecord(run_id="r", session_id="s", call_id="c1", endpoint="p0",
                         t_scheduled=1.98, t_sent=2.0, t_first_content=4.0, t_end=10.0,
                         server=srv(2.0, 0.2, 0.2)))
    # a request that loaded nothing from the store: its lookup alone (0.5 s against 0.05) is not
    # a store read against the profile; its TTFT (1.05 against 1.0) is counted
    rd.append(CallRecord(run_id="r", session_id="s", call_id="x", endpoint="p0",
                         t_scheduled=0.0, t_sent=0.02, t_first_content=1.07, t_end=2.0,
                         server=srv(1.0, 0.05, 0.5, hits=0)))
    hit = 'adev_emulator_store_hit_blocks_total{tier="%s"}'
    over = "adev_emulator_read_path_overrun_seconds_total"
    put = "adev_emulator_store_put_%s_blocks_total"
    for t, ram, disk, ev, evb, ov, acc, ref, skip, prom in (
            (0.0, 10, 0, 3, 100, 0.5, 100, 2, 10, 1000),
            (10.0, 30, 5, 7, 600, 0.75, 130, 12, 50, 1000 + 3 * 6144)):
        rd.append(ScrapeRecord(run_id="r", target="p0", url="u", t=t, ok=True,
                               samples={hit % "ram": ram, hit % "disk": disk, over: ov,
                                        "adev_emulator_store_put_blocks_total": acc,
                                        put % "refused": ref, put % "skipped": skip}))
        rd.append(ScrapeRecord(run_id="r", target="master", url="m", t=t, ok=True,
                               samples={"master_successful_evictions_total": ev,
                                        "master_evicted_size_bytes": evb,
                                        "master_promotion_completed_bytes_total": prom,
                                        "master_promotion_completed_total": prom // 6144}))
    rd.close()
    s = summarise(rd.path)
    assert (s["calls"], s["ok_calls"], s["errors"]) == (4, 3, 1)
    assert s["throughput_rps"] == pytest.approx(3 / 10.0)        # 3 OK over [0, 10]
    assert s["calls_in_flight_mean"] == pytest.approx((5 + 8 + 4) / 10.0)  # busy 5, 8 and 4 s
    assert (s["experiment"], s["seed"], s["configuration"]) == ("long", 3, "store-ram")
    # 1,000 + 40,000 + 1,000 prompt tokens over 10 s, against two prefill replicas, at the
    # replay profile's (FP8 weights) 2.856912e-5 s per token + 1.062746e-9 s per token per
    # earlier token: 1,000 from 0: 0.02856912 + 1.062746e-9 * 1000 * 999 / 2 = 0.02909996 s;
    # 40,000 from 0: 1.142765 + 1.062746e-9 * 40000 * 39999 / 2 = 1.142765 + 0.850176 = 1.992940 s
    assert s["prompt_load"] == pytest.approx((2 * 0.02909996 + 1.992940) / 10.0 / 2, rel=1e-5)
    assert s["ttft_p50_s"] == pytest.approx(2.0)
    assert s["ttft_p90_s"] == pytest.approx(2.8)                 # 2 + 0.8 * (3 - 2)
    assert s["ttft_later_p99_s"] == pytest.approx(2.99)          # turns 1 and 2: 2 + 0.99 * 1
    assert s["ttft_by_group_p50_s"]["<=32K"] == pytest.approx(1.5)
    assert s["ttft_by_group_p50_s"]["32-64K"] == pytest.approx(3.0)
    assert s["ttft_by_group_p50_s"][">96K"] is None
    assert s["itl_p50_s"] == pytest.approx(0.2)
    assert s["exact_output_share"] == pytest.approx(2 / 3)
    assert s["stickiness"] == 0.5
    assert s["traffic"] == {"p0>colocated": 4}
    assert s["dispatch_delay_p99_s"] == pytest.approx(0.02)            # 0.01, 0.02 and 0.02
    assert s["store_read_over_profile_p50"] == pytest.approx(1.25)   # 1.5 and 1.0, not x's 10
    assert s["store_read_calls"] == 2                                # c0 and c1, not x
    assert s["reads_at_pace"] is False                               # 1.25 > 1.2
    assert (s["time_scale"], s["time_scale_chosen"]) == (10.0, False)  # given, no pilot
    assert s["ttft_over_model_p50"] == pytest.approx(0.05)           # 0.1, 0.0 and 0.05
    # user TTFT 1.0 and 3.0 against the model's 1.0 and 2.0 (c2 has no request record)
    assert s["user_ttft_over_model_p50"] == pytest.approx(0.25)      # 0.0 and 0.5
    assert s["user_ttft_over_model_p99"] == pytest.approx(0.495)
    bpb = load_model_profile(stack.profile).bytes_per_block
    # 3 promotions of 6,144 real bytes (a 1.5 MiB block at payload scale 256) read the disk too
    assert stack.payload_scale * 6144 == bpb
    assert s["promoted_bytes"] == 3 * bpb and s["promotions"] == 3
    assert s["store_load_bytes"] == 25 * bpb and s["physical_read_bytes"] == (5 + 3) * bpb
    assert s["physical_read_share"] == pytest.approx(8 / 25)
    # 5 disk blocks loaded and 3 promoted over the run's span of 10 model seconds
    assert s["span_s"] == pytest.approx(10.0)
    assert s["disk_read_avg_Bps"] == pytest.approx(8 * bpb / 10.0)
    assert s["evictions"] == 4
    assert s["read_overrun_s"] == pytest.approx(0.25)                 # 0.5 -> 0.75
    assert s["evicted_bytes"] == 500 * stack.payload_scale
    # 30 blocks accepted and 10 refused in the run; 40 more never offered after a refusal
    assert s["refused_share"] == pytest.approx(10 / 40)
    assert s["unsaved_bytes"] == 50 * bpb
    assert s["stored_bytes"] == 30 * bpb                             # 100 -> 130 accepted
    # per OK call (3): stored 30 blocks, loaded 25, read from disk 5 + 3 promoted, evicted 500
    # real bytes at the payload scale
    assert s["stored_bytes_per_call"] == pytest.approx(10 * bpb)
    assert s["store_load_bytes_per_call"] == pytest.approx(25 * bpb / 3)
    assert s["physical_read_bytes_per_call"] == pytest.approx(8 * bpb / 3)
    assert s["evicted_bytes_per_call"] == pytest.approx(500 * stack.payload_scale / 3)
    assert "stored_bytes" not in s["missing"]


def test_user_ttft_over_model_sums_the_requests_models():
    import numpy as np

    from adev.replay.summary import user_ttft_over_model
    recs = [
        # P/D: user TTFT 2.0 against 0.5 (prefill) + 1.0 (decode) = 1.5 -> +1/3
        {"call_id": "a", "decode": "d0", "ttft_s": 2.0},
        # colocated: 1.1 against 1.0 -> +0.1
        {"call_id": "b", "decode": "colocated", "ttft_s": 1.1},
        # P/D without its prefill's figure (real vLLM): left out
        {"call_id": "c", "decode": "d1", "ttft_s": 9.0},
        # a modelled figure that is NaN: left out
        {"call_id": "d", "decode": "colocated", "ttft_s": 9.0},
    ]
    modelled = {"a-prefill": 0.5, "a": 1.0, "b": 1.0, "c": 3.0, "d": float("nan")}
    assert user_ttft_over_model(recs, modelled) == pytest.approx(np.array([1 / 3, 0.1]))


def test_ttft_parts_sum_each_calls_requests_then_average_the_calls():
    from adev.replay.summary import ttft_parts
    recs = [
        # P/D: queue 0.5 + 0.1, read path 0.25, prefill 0.75 + 0.05, transfer 0.2: 1.85 of 2.0
        {"call_id": "a", "decode": "d0", "ttft_s": 2.0},
        # colocated: read path 0.5, prefill 0.25: 0.75 of 1.0
        {"call_id": "b", "decode": "colocated", "ttft_s": 1.0},
        # P/D without its prefill request's figures (real vLLM): left out
        {"call_id": "c", "decode": "d1", "ttft_s": 9.0},
    ]
    srv = {"a-prefill": (0.5, 0.25, 0.75, 0.0), "a": (0.1, 0.0, 0.05, 0.2),
           "b": (0.0, 0.5, 0.25, 0.0), "c": (1.0, 1.0, 1.0, 1.0)}
    assert ttft_parts(recs, srv) == pytest.approx(
        {"queue": 0.3, "read_path": 0.375, "prefill": 0.525, "transfer": 0.1,
         "rest": (0.15 + 0.25) / 2, "ttft": 1.5})
    assert ttft_parts(recs[2:], srv) is None


def test_adev_report_on_a_folder_of_replay_runs_writes_the_replay_report(tmp_path):
    """`adev report DIR` recomputes each replay run's summary and judges the source's shapes."""
    from adev.analysis.report import write_report
    stack = default_stack()
    for conf, p99 in (("recompute", 10.0), ("gpu-only", 9.0)):
        label = f"{conf}-s0"
        rd = RunDir.create(label, base=tmp_path / "m")
        rd.write_json("manifest.json", build_manifest(
            label, config={"stack": stack}, time_scale=10.0,
            extra={"replay": {"experiment": "short", "seed": 0, "label": label}}))
        for i, t in enumerate((1.0, 2.0, p99)):
            rd.append(_rec(i, call_id=f"c{i}", t_ready=float(i), t_first_token=i + t,
                           t_end=i + t + 1, ttft_s=t, live_output_tokens=10))
        rd.close()
        # the run's own summary: a figure recomputed from the records and one no record keeps
        rd.write_json("summary.json", {"ttft_p99_s": -1.0, "schedule": {"relaxed_starts": 7}})
    html = write_report([tmp_path / "m"])
    assert html == tmp_path / "m" / "report.html"
    md = html.with_suffix(".md").read_text()
    # p99 of (1, 2, 9) over p99 of (1, 2, 10): (2 + 0.98 * 7) / (2 + 0.98 * 8) = 8.86 / 9.84
    assert "## Shapes of the source" in md and "8.86 → 9.84 (ratio 0.90)" in md
    # the source's levels beside: recompute's median user TTFT, the median of (1, 2, 10)
    assert "| short gap, recompute | user TTFT p50 | model s | 27.87 | 2.00 | 1 |" in md
    assert "| short gap, store-ram | throughput | requests/s | 1.310 | not measured | 0 |" in md
    # 1.897 TiB over 7,903 calls; no run here stored anything (no store)
    assert ("| short gap, store-ram+raid0 | KV stored | GB per call | 0.264 | not measured | 0 |"
            in md)
    assert "## The same volumes per call" in md and "Stored per call" in md
    kept = json.loads((tmp_path / "m" / "gpu-only-s0" / "summary.json").read_text())
    assert kept["schedule"] == {"relaxed_starts": 7} and kept["ttft_p99_s"] == pytest.approx(8.86)


def _replay_run(base, label, experiment, configuration, ttfts):
    """A replay run of three calls, dispatched at 0, 1 and 2 s, each ending 1 s after its first
    token: throughput 3 / (2 + ttfts[-1] + 1) when the last call ends last."""
    rd = RunDir.create(label, base=base)
    rd.write_json("manifest.json", build_manifest(
        label, config={"stack": default_stack()}, time_scale=10.0,
        extra={"replay": {"experiment": experiment, "seed": 0, "label": label,
                          "configuration": configuration}}))
    for i, t in enumerate(ttfts):
        rd.append(_rec(i, call_id=f"c{i}", t_ready=float(i), t_first_token=i + t,
                       t_end=i + t + 1, ttft_s=t, live_output_tokens=10))
    rd.close()


def test_a_report_of_both_experiments_compares_each_run_with_recompute_of_its_own_experiment(
        tmp_path):
    """`adev replay --experiment short,long` puts both experiments' runs in one folder. Short:
    recompute spans 13 s (3 / 13 calls/s), gpu-only 12 s: 13 / 12 = 1.083. Long: recompute
    spans 7 s, gpu-only 6 s: 7 / 6 = 1.167. Keyed by seed alone, both gpu-only runs would be
    set against one recompute run."""
    from adev.analysis.report import write_report
    from adev.replay.report import labelled, table
    m = tmp_path / "m"
    for exp, rec, gpu in (("short", 10.0, 9.0), ("long", 4.0, 3.0)):
        _replay_run(m, f"{exp}-recompute-s0", exp, "recompute", (1.0, 2.0, rec))
        _replay_run(m, f"{exp}-gpu-only-s0", exp, "gpu-only", (1.0, 2.0, gpu))
    sums = labelled([summarise(p) for p in sorted(m.iterdir())])
    assert [s["configuration"] for s in sums] == ["gpu-only", "recompute"] * 2
    df = table(sums).set_index("label")
    assert df.loc["short-gpu-only-s0", "throughput_vs_recompute"] == pytest.approx(13 / 12)
    assert df.loc["long-gpu-only-s0", "throughput_vs_recompute"] == pytest.approx(7 / 6)
    assert df.loc["long-recompute-s0", "throughput_vs_recompute"] == pytest.approx(1.0)
    html = write_report([m])
    files = {p.name for p in (m / "report_files").iterdir()}
    assert {"ttft-short.png", "ttft-long.png"} <= files and "ttft.png" not in files
    # runs of one experiment each, given as two folders, are labelled by their experiment
    for exp in ("short", "long"):
        for conf in ("recompute", "gpu-only"):
            (tmp_path / exp).mkdir(exist_ok=True)
            (m / f"{exp}-{conf}-s0").rename(tmp_path / exp / f"{conf}-s0")
    sums = labelled([summarise(p) for p in sorted((tmp_path / "long").iterdir())]
                    + [summarise(p) for p in sorted((tmp_path / "short").iterdir())])
    assert [s["label"] for s in sums] == ["long-gpu-only-s0", "long-recompute-s0",
                                          "short-gpu-only-s0", "short-recompute-s0"]
    df = table(sums).set_index("label")
    assert df.loc["short-gpu-only-s0", "throughput_vs_recompute"] == pytest.approx(13 / 12)
    assert df.loc["long-gpu-only-s0", "throughput_vs_recompute"] == pytest.approx(7 / 6)
    assert "long-gpu-only-s0" in html.with_suffix(".md").read_text()


def test_the_report_names_the_runs_whose_reads_fell_behind():
    from adev.replay.report import _pace_note
    sums = [{"label": "store-ram-s0", "reads_at_pace": True, "store_read_over_profile_p50": 0.6,
             "time_scale": 4.0},
            {"label": "disk-only-s0", "reads_at_pace": False, "store_read_over_profile_p50": 1.31,
             "time_scale": 4.0},
            {"label": "recompute-s0", "reads_at_pace": None}]
    note = _pace_note(sums)
    assert "- disk-only-s0: 1.31 x at time scale 4.0" in note and "store-ram-s0" not in note
    assert "kept pace" in _pace_note(sums[:1]) and _pace_note(sums[2:]) == ""


def test_disk_wait_over_the_requests_that_loaded_from_disk():
    import pandas as pd

    from adev.replay.summary import _disk_wait
    okc = pd.DataFrame({"srv_tok_store_disk": [0, 32, 16, None],
                        "srv_disk_wait_s": [5.0, 1.0, 3.0, 7.0]})
    out: dict = {}
    missing: dict = {}
    _disk_wait(out, okc, missing)
    # the two requests with disk tokens: mean (1 + 3) / 2 = 2; p99 by linear interpolation
    # 1 + 0.99 x (3 - 1) = 2.98
    assert out == {"disk_wait_mean_s": 2.0, "disk_wait_p99_s": pytest.approx(2.98)}
    assert missing == {}
    _disk_wait(out, okc[okc["srv_tok_store_disk"].fillna(0) == 0], missing)
    assert out["disk_wait_mean_s"] is None
    assert missing["disk_wait"] == "no request loaded from the disk tier"
    missing.clear()
    _disk_wait(out, okc.drop(columns="srv_disk_wait_s"), missing)   # records of an older emulator
    assert out["disk_wait_mean_s"] is None and "older emulator" in missing["disk_wait"]


def test_load_wait_over_the_requests_that_loaded_from_the_store():
    import pandas as pd

    from adev.replay.summary import _load_wait
    okc = pd.DataFrame({"srv_tok_store_ram": [0, 32, 0, None],
                        "srv_tok_store_disk": [0, 0, 16, None],
                        "srv_load_wait_s": [9.0, 2.0, 4.0, 8.0]})
    out: dict = {}
    missing: dict = {}
    _load_wait(out, okc, missing)
    # the two requests that loaded (RAM, disk): mean (2 + 4) / 2 = 3; p99 2 + 0.99 x 2 = 3.98
    assert out == {"load_wait_mean_s": 3.0, "load_wait_p99_s": pytest.approx(3.98)}
    _load_wait(out, okc.iloc[[0, 3]], missing)
    assert out["load_wait_mean_s"] is None
    assert missing["load_wait"] == "no request loaded from the store"


def test_volumes_per_call_are_none_where_the_volume_or_the_calls_are_missing():
    from adev.replay.summary import _per_call
    out = {"ok_calls": 4, "stored_bytes": 10.0, "store_load_bytes": None,
           "physical_read_bytes": 0.0, "evicted_bytes": 6.0}
    _per_call(out)
    assert (out["stored_bytes_per_call"], out["store_load_bytes_per_call"],
            out["physical_read_bytes_per_call"], out["evicted_bytes_per_call"]) == (2.5, None, 0.0, 1.5)
    none = {"ok_calls": 0, "stored_bytes": 10.0}
    _per_call(none)
    assert none["stored_bytes_per_call"] is None and none["evicted_bytes_per_call"] is None


def test_the_group_medians_are_also_flat_keys(tmp_path):
    from adev.replay.summary import GROUP_P50_KEYS
    rd = RunDir.create("r", base=tmp_path)
    rd.write_json("manifest.json", build_manifest("r", config={"stack": default_stack()},
                                                  time_scale=10.0, extra={"replay": {"label": "x-s0"}}))
    rd.append(_rec(0, t_ready=0.0, t_first_token=1.0, t_end=2.0, ttft_s=1.0, live_output_tokens=10))
    rd.append(_rec(1, t_ready=0.0, t_first_token=3.0, t_end=4.0, ttft_s=3.0, live_output_tokens=10,
                   prompt_tokens=100000, group=">96K"))
    rd.append(_rec(2, t_ready=0.0, t_first_token=5.0, t_end=6.0, ttft_s=5.0, live_output_tokens=10,
                   prompt_tokens=110000, group=">96K"))
    rd.close()
    s = summarise(rd.path)
    assert s[GROUP_P50_KEYS["<=32K"]] == pytest.approx(1.0)
    assert s[GROUP_P50_KEYS[">96K"]] == pytest.approx(4.0)             # median of 3 and 5
    assert s[GROUP_P50_KEYS["32-64K"]] is None


def _sessions_run(base, label, experiment, configuration, calls, **opts):
    """A replay run of ``calls`` = (session, ready, end), each call's TTFT 1 s."""
    rd = RunDir.create(label, base=base)
    rd.write_json("manifest.json", build_manifest(
        label, config={"stack": default_stack()}, time_scale=10.0,
        extra={"replay": {"experiment": experiment, "seed": 0, "label": label,
                          "configuration": configuration, **opts}}))
    for i, (s, ready, end) in enumerate(calls):
        rd.append(_rec(i, session=s, call_id=f"c{i}", t_ready=ready, t_first_token=ready + 1,
                       t_end=end, ttft_s=1.0, live_output_tokens=10))
    rd.close()
    return rd.path


# session a: [0, 4] and [4, 9]; b: [0, 3]; c: [3, 6] and [6, 12]: finishes 3, 9 and 12
DRAIN_CALLS = [("a", 0.0, 4.0), ("b", 0.0, 3.0), ("c", 3.0, 6.0), ("a", 4.0, 9.0),
               ("c", 6.0, 12.0)]


def test_the_drain_starts_when_fewer_sessions_are_left_than_the_schedule_has_slots(tmp_path):
    """Two slots, three sessions finishing at 3, 9 and 12: from a's finish at 9 only c has
    calls left, so one slot stays empty. The drain is (12 - 9) / 12 = 25% of the span; before
    it 4 calls ended (at 3, 4, 6 and 9) in 9 s: 0.444 calls/s, against 5 / 12 = 0.417 over
    the whole run. The short gap's slots are its active sessions, the long gap's the calls in
    flight; the timestamps schedule has none."""
    from adev.replay.summary import drain_start
    assert drain_start([{"session": s, "t_ready": r, "t_end": e} for s, r, e in DRAIN_CALLS],
                       2) == 9.0
    for exp, opts in (("long", {"max_in_flight": 2}), ("short", {"active": 2})):
        s = summarise(_sessions_run(tmp_path, f"{exp}-x", exp, "recompute", DRAIN_CALLS,
                                    **opts))
        assert s["drain_start_s"] == 9.0
        assert s["drain_share"] == pytest.approx(0.25)
        assert s["throughput_full_rps"] == pytest.approx(4 / 9)
        assert s["throughput_rps"] == pytest.approx(5 / 12)
    # three slots, three sessions: a slot is empty from b's finish at 3
    s = summarise(_sessions_run(tmp_path, "three", "long", "recompute", DRAIN_CALLS,
                                max_in_flight=3))
    assert (s["drain_start_s"], s["drain_share"]) == (3.0, pytest.approx(0.75))
    assert s["throughput_full_rps"] == pytest.approx(1 / 3)          # b's call ended at 3
    # more slots than sessions: the drain is the whole run
    s = summarise(_sessions_run(tmp_path, "wide", "long", "recompute", DRAIN_CALLS,
                                max_in_flight=16))
    assert (s["drain_start_s"], s["drain_share"], s["throughput_full_rps"]) == (0.0, 1.0, None)
    assert "drain is the whole run" in s["missing"]["throughput_full_rps"]
    s = summarise(_sessions_run(tmp_path, "ts", "timestamps", "recompute", DRAIN_CALLS))
    assert s["drain_share"] is None and "no drain" in s["missing"]["drain"]


def test_the_report_sets_the_throughput_before_the_drain_against_recompute(tmp_path):
    """Recompute as above: 4 calls in 9 s before its drain. gpu-only ends every call 1 s
    earlier from 4 s on (a: [0, 4], [4, 8]; c: [3, 5], [5, 11]): its drain starts at a's finish,
    8; 4 calls ended by then: 4 / 8 = 0.5 calls/s, 0.5 / (4 / 9) = 1.125 of recompute's."""
    from adev.replay.report import table
    m = tmp_path / "m"
    _sessions_run(m, "recompute-s0", "long", "recompute", DRAIN_CALLS, max_in_flight=2)
    faster = [("a", 0.0, 4.0), ("b", 0.0, 3.0), ("c", 3.0, 5.0), ("a", 4.0, 8.0),
              ("c", 5.0, 11.0)]
    _sessions_run(m, "gpu-only-s0", "long", "gpu-only", faster, max_in_flight=2)
    df = table([summarise(p) for p in sorted(m.iterdir())]).set_index("label")
    assert df.loc["gpu-only-s0", "throughput_full_rps"] == pytest.approx(0.5)
    assert df.loc["gpu-only-s0", "throughput_full_vs_recompute"] == pytest.approx(1.125)
    assert df.loc["gpu-only-s0", "throughput_vs_recompute"] == pytest.approx((5 / 11) / (5 / 12))
