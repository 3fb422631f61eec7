"""Loading a run directory: manifest shapes, missing constants with reasons, flattened calls,
the clock origin and admission times, whole-run windows."""
from __future__ import annotations

import json
import math

import pytest

from adev.analysis.run import add_admission, load_run
from adev.records import CallRecord, RunDir, ScrapeRecord, WindowRecord


def _call(cid, t_sent, t_end, srv=None, ep="coder"):
    return CallRecord(run_id="r", session_id="s", call_id=cid, endpoint=ep, t_scheduled=t_sent,
                      t_sent=t_sent, t_first_byte=t_sent, t_first_content=t_sent + 0.5,
                      t_end=t_end, prompt_tokens=100, server=srv)


def _rundir(tmp_path, manifest, calls=(), scrapes=(), windows=()):
    rd = RunDir(tmp_path / "run")
    rd.path.mkdir()
    if manifest is not None:
        rd.write_json("manifest.json", manifest)
    for c in calls:
        rd.append(c)
    for target, t in scrapes:
        rd.append(ScrapeRecord(run_id="r", target=target, url="u", t=t, ok=True, samples={"x": t}))
    for i, t0, t1 in windows:
        rd.append(WindowRecord(run_id="r", index=i, t0=t0, t1=t1))
    rd.close()
    return rd.path


def test_fleet_manifest_gives_every_constant(tmp_path):
    m = {"run_id": "fleet-1", "time_scale": 10.0, "protocol": "steady",
         "config": {"fleet": {"name": "night-w4", "width": 4, "pause_s": 30},
                    "stack": {"profile": "qwen3-coder-30b-a3b", "payload_scale": 64,
                              "time_scale": 99.0, "configuration": "store-ram+disk",
                              "store": {"lease_ttl_s": 7.5, "disk_tier": "local-raid0"}}}}
    p = _rundir(tmp_path, m, [_call("a", 3.0, 5.0, ep="reasoner"), _call("b", 1.0, 2.0)],
                [("master", 5.0), ("coder", 9.0), ("coder", 4.0), ("planner", 1.0)],
                [(2, 10.0, 20.0), (1, 0.0, 10.0), (3, 10.0, 15.0)])
    with open(p / "calls.jsonl", "a") as f:
        f.write('{"torn": ')                          # a crash mid-line
    r = load_run(p)
    assert (r.run_id, r.label, r.width, r.pause_s, r.protocol) == ("fleet-1", "night-w4", 4, 30.0,
                                                                  "steady")
    assert (r.time_scale, r.payload_scale, r.lease_ttl_s) == (10.0, 64.0, 7.5)
    assert (r.configuration, r.disk_tier) == ("store-ram+disk", "local-raid0")
    assert r.prefill_tokens_per_s == 14850.0 and r.bytes_per_token == 96 * 1024
    assert r.block_size == 16 and r.missing == {}
    assert r.endpoints == ["coder", "planner", "reasoner"]            # calls and scrapes, no master
    assert [s.t for s in r.scrapes["coder"]] == [4.0, 9.0]            # sorted by time
    assert r.torn == {"calls": 1} and len(r.calls) == 2
    assert [(w["index"], w["t0"]) for w in r.measurement_windows()] == [(1, 0.0), (2, 10.0),
                                                                        (3, 10.0)]
    assert r.ledger is None and "ledger" in r.missing


def test_other_manifest_shapes(tmp_path):
    # a session run: the stack config at the top of config, width and pause on the manifest
    m = {"run_id": "sess", "width": 2.0, "pause_s": 5,
         "config": {"profile": "qwen3-coder-30b-a3b", "store": {"lease_ttl_s": 3},
                    "payload_scale": 8, "time_scale": 4}}
    r = load_run(_rundir(tmp_path, m))
    assert (r.width, r.pause_s, r.time_scale, r.lease_ttl_s, r.label) == (2, 5.0, 4.0, 3.0, "sess")
    # the stack inside the fleet's config; the profile recorded in the manifest wins
    m = {"run_id": "f", "profile": {"name": "tiny", "num_layers": 2, "num_kv_heads": 2,
                                    "head_dim": 4, "prefill_tokens_per_s": 100.0, "block_size": 4},
         "config": {"fleet": {"width": True, "stack": {"profile": "nope", "payload_scale": 2,
                                                      "store": {"lease_ttl_s": 1}}}}}
    (tmp_path / "b").mkdir()
    r = load_run(_rundir(tmp_path / "b", m))
    assert r.profile.name == "tiny" and r.prefill_tokens_per_s == 100.0 and r.block_size == 4
    assert r.bytes_per_token == 2 * 2 * 2 * 4 * 2 and r.payload_scale == 2.0
    assert r.width is None and r.missing["width"] == "config.fleet.width not in the manifest"
    assert r.label == "f" and r.time_scale is None
    m["profile"]["num_layers"] = 0
    (tmp_path / "c").mkdir()
    r = load_run(_rundir(tmp_path / "c", m))
    assert r.profile is None and r.missing["profile"].startswith(
        "model profile unreadable: manifest.profile.num_layers: 0 must be greater than 0")


def test_no_manifest_every_constant_missing_and_one_whole_run_window(tmp_path):
    p = _rundir(tmp_path, None, [_call("a", 3.0, 8.0), _call("b", 1.0, 6.0), _call("c", 2.0, None)])
    r = load_run(p)
    assert r.run_id == "run" and r.label == "run" and r.profile is None
    assert r.prefill_tokens_per_s is None and r.bytes_per_token is None and r.block_size == 16
    assert set(r.missing) == {"manifest", "profile", "payload_scale", "lease_ttl_s", "width", "windows"}
    assert r.missing["lease_ttl_s"] == "config.stack.store.lease_ttl_s not in the manifest"
    [w] = r.measurement_windows()
    assert (w["t0"], w["t1"], w["protocol"], w["valid"]) == (1.0, 8.0, "whole-run", True)
    (tmp_path / "e").mkdir()
    assert load_run(_rundir(tmp_path / "e", None)).measurement_windows() == []
    with pytest.raises(FileNotFoundError, match="run directory not found"):
        load_run(tmp_path / "nope")


def test_calls_flattened_with_the_servers_fields(tmp_path):
    srv = {"queue_s": 0.25, "read_path_s": True, "lookup_s": "x", "ttft_s": 2,
           "tokens": {"gpu": 16, "store_ram": 32, "store_disk": None, "computed": 52}}
    p = _rundir(tmp_path, {"run_id": "r"}, [_call("a", 1.0, 3.0, srv), _call("b", 2.0, 4.0)])
    c = load_run(p).calls.set_index("call_id")
    a, b = c.loc["a"], c.loc["b"]
    assert a.has_server and not b.has_server
    assert a.srv_queue_s == 0.25 and a.srv_ttft_s == 2.0
    assert math.isnan(a.srv_read_path_s) and math.isnan(a.srv_lookup_s)   # bool, str: not numbers
    assert (a.srv_tok_gpu, a.srv_tok_store_ram, a.srv_tok_computed) == (16.0, 32.0, 52.0)
    assert math.isnan(a.srv_tok_store_disk) and math.isnan(b.srv_tok_gpu)
    assert a.t_admit == 1.25 and math.isnan(b.t_admit)                    # no clock: t_sent + queue


def test_clock_origin_sources_and_admission(tmp_path):
    t0, scale = 500.0, 10.0
    sa = {"queue_s": 0.5, "t_arrival_mono": t0 + 1.2 / scale, "t_end_mono": t0 + 4.0 / scale}
    sb = {"queue_s": 0.0, "t_arrival_mono": 0, "t_end_mono": t0 + 7.5 / scale}
    calls = [_call("a", 1.0, 4.5, sa), _call("b", 2.0, 8.0, sb)]
    p = _rundir(tmp_path, {"run_id": "r", "time_scale": scale}, calls)
    r = load_run(p)
    # bound from the calls: max(t_end_mono - t_end / S) = max(t0 - 0.05, t0 - 0.05)
    assert r.clock_source.startswith("estimated from calls")
    assert r.clock_t0_mono == pytest.approx(t0 - 0.05)
    m = {"run_id": "r", "time_scale": scale, "clock": {"t0_mono": t0}}
    (p / "manifest.json").write_text(json.dumps(m))
    r = load_run(p)
    assert (r.clock_t0_mono, r.clock_source) == (t0, "manifest.json clock.t0_mono")
    c = r.calls.set_index("call_id")
    assert c.loc["a"].t_admit == pytest.approx(1.2 + 0.5)    # (arrival - t0) x S + queue
    assert c.loc["b"].t_admit == 2.0                         # no arrival stamp: t_sent + queue
    (p / "fleet.json").write_text(json.dumps({"clock": {"t0_mono": t0 - 1.0}}))
    r = load_run(p)
    assert (r.clock_t0_mono, r.clock_source) == (t0 - 1.0, "fleet.json clock.t0_mono")
    # read on that origin, a's admission, 1.2 + 10.0 + 0.5 = 11.7, lies past its call's end
    # (4.5) by more than ADMIT_TOL_S: a stamp on another clock (a batch run's restarted stack),
    # so t_sent + queue
    assert r.calls.set_index("call_id").loc["a"].t_admit == pytest.approx(1.0 + 0.5)
    (p / "fleet.json").write_text(json.dumps({"clock": {"t0_mono": t0 - 0.3 / scale}}))
    r = load_run(p)                                          # 0.3 s later: inside the call
    assert r.calls.set_index("call_id").loc["a"].t_admit == pytest.approx(1.2 + 0.3 + 0.5)
    (p / "fleet.json").write_text("{not json")
    (p / "manifest.json").write_text(json.dumps({"run_id": "r"}))
    r = load_run(p)                                          # no time scale: no estimate
    assert (r.clock_t0_mono, r.clock_source) == (None, "unknown")
    empty = r.calls.iloc[0:0].copy()
    add_admission(empty, t0, scale)
    assert list(empty["t_admit"]) == []


def _lines(path, kind, recs, tail=""):
    with open(path / f"{kind}.jsonl", "a") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
        f.write(tail)


def test_load_run_reads_every_record_kind(tmp_path):
    from adev.analysis.run import Scrape
    cfg = {"fleet": {"width": 2, "protocol": "batch", "name": "n"},
           "stack": {"profile": "qwen3-coder-30b-a3b", "payload_scale": 1,
                     "store": {"lease_ttl_s": 5}},
           "store": {"lease_ttl_s": 9}}                       # a stray top-level store: ignored
    p = _rundir(tmp_path, {"run_id": "x", "kind": "fleet", "config": cfg},
                [_call("a", 1.0, 2.0, srv={"tokens": [1, 2], "queue_s": None})])
    _lines(p, "scrapes", [{"run_id": "x", "target": "master", "url": "u", "t": 1.0, "ok": True,
                           "samples": {"m": 2.0}},
                          {"run_id": "x", "target": "master", "url": "u", "t": 3.0, "ok": False,
                           "error": "refused"}], tail='{"torn')
    _lines(p, "calls", [{"run_id": "x", "session_id": "s", "call_id": "b", "endpoint": "coder",
                         "t_sent": 1.5, "t_end": 1.6, "status": "error"}])
    _lines(p, "sessions", [{"run_id": "x", "session_id": "s", "task": "t", "t": 4.0,
                            "status": "error", "reason": "llm_error: 500"}], tail='{"torn')
    _lines(p, "events", [{"run_id": "x", "event": "session_error", "t": 6.0},
                         {"run_id": "x", "event": "other", "t": 7.0}], tail='{"torn')
    _lines(p, "gates", [{"run_id": "x", "session_id": "s", "round": 1, "executor": "e",
                         "verdict": "pass", "t_start": 1.0, "t_end": 2.0}], tail='{"torn')
    _lines(p, "windows", [], tail='{"torn')
    r = load_run(p)
    assert r.scrapes == {"master": [Scrape(1.0, True, {"m": 2.0}, None),
                                    Scrape(3.0, False, {}, "refused")]}
    assert r.stack == cfg["stack"] and r.fleet == cfg["fleet"] and r.lease_ttl_s == 5.0
    assert r.protocol == "batch" and r.label == "n"
    assert r.torn == {k: 1 for k in ("scrapes", "windows", "sessions", "gates", "events")}
    assert (len(r.sessions), len(r.gates), len(r.events)) == (1, 1, 2)
    assert list(r.events["event"]) == ["session_error", "other"] and r.gates["verdict"][0] == "pass"
    assert r.sessions["reason"][0] == "llm_error: 500"
    # the tracker saw the failed call, the session, the event and the master going down at 3
    assert r.faults.intervals == [("call_errors:coder", 1.5, 1.6), ("master_down", 3.0, None),
                                  ("sessions_llm_error", 4.0, 4.0), ("session_error", 6.0, 6.0)]
    assert r.calls["srv_tok_store_ram"].isna().all()          # tokens not an object: no split
    assert r.calls["t_admit"][0] == 1.0                       # no queue time: admitted at send
    w = "windows.jsonl missing or empty: the whole run is treated as one window, invalid (a " \
        "fleet run without windows: stopped before its first window, or the file is lost)"
    assert r.missing == {"windows": f"{p}/{w}"}
    [win] = r.measurement_windows()
    assert win == {"run_id": "x", "index": 0, "t0": 1.0, "t1": 2.0, "valid": False,
                   "protocol": "whole-run", "faults": ["call_errors:coder"],
                   "reason": "no windows.jsonl: the whole run is one window (a fleet run without "
                             "windows: stopped before its first window, or the file is lost)"}


def test_load_run_missing_texts_and_odd_manifest_values(tmp_path):
    p = _rundir(tmp_path, None, [_call("a", 1.0, None), _call("b", 3.0, None)])
    r = load_run(p)
    assert r.missing == {
        "manifest": f"{p}/manifest.json missing or empty",
        "profile": "manifest names no model profile (config.stack.profile)",
        "payload_scale": "config.stack.payload_scale not in the manifest",
        "lease_ttl_s": "config.stack.store.lease_ttl_s not in the manifest",
        "width": "config.fleet.width not in the manifest",
        "windows": f"{p}/windows.jsonl missing or empty: the whole run is treated as one window"}
    [win] = r.measurement_windows()                 # no call ended: the window ends at 1.0
    assert (win["t0"], win["t1"], win["valid"]) == (1.0, 1.0, True)
    assert win["reason"] == "no windows.jsonl: the whole run is one window"
    assert r.stack is None and r.fleet is None
    (tmp_path / "b").mkdir()
    m = {"run_id": "b", "profile": "qwen3-coder-30b-a3b", "config": {"stack": "junk",
                                                                      "fleet": "junk"}}
    r = load_run(_rundir(tmp_path / "b", m))
    assert r.stack is None and r.fleet is None and r.profile is None
    assert r.missing["profile"] == "manifest names no model profile (config.stack.profile)"
    # no calls at all: the flattened table still has every column, t_admit included
    assert "has_server" in r.calls and "server" not in r.calls and "srv_ttft_s" in r.calls
    assert "srv_tok_store_ram" in r.calls and r.calls["t_admit"].dtype == float
    assert len(r.calls) == 0


@pytest.mark.parametrize("kind", ["calls", "scrapes", "windows", "sessions", "events", "gates"])
def test_load_run_refuses_a_line_adev_cannot_have_written(tmp_path, kind):
    from adev.records import RecordError
    p = _rundir(tmp_path, {"run_id": "x"})
    _lines(p, kind, [[1, 2]])
    with pytest.raises(RecordError, match=rf"{kind}\.jsonl: line 1: a JSON array"):
        load_run(p)


def test_flattened_calls_coerce_non_numbers():
    from adev.analysis.run import _flatten_calls
    row = dataclasses_asdict(_call("a", 1.0, 2.0))
    row["prompt_tokens"] = "many"
    df = _flatten_calls([row])
    assert math.isnan(df["prompt_tokens"][0]) and df["t_end"][0] == 2.0


def dataclasses_asdict(rec):
    import dataclasses
    return dataclasses.asdict(rec)
