"""Run directory: records round-trip, appends survive, torn lines are skipped and counted."""
from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import re
import signal
import time

import pytest

from adev import records
from adev.records import (
    RECORD_TYPES,
    CallRecord,
    EventRecord,
    GateRecord,
    RunDir,
    ScrapeRecord,
    SessionRecord,
    ToolEvent,
    WindowRecord,
    create_run_path,
    new_run_id,
)
from adev.records import TestResult as GateTest


def samples():
    return [
        CallRecord(run_id="r", session_id="s1", call_id="c1", endpoint="coder", role="architect",
                   t_scheduled=1.0, t_sent=1.5, t_first_byte=2.0, t_first_content=2.1, t_end=3.0,
                   prompt_tokens=100, completion_tokens=5, cached_tokens=96,
                   server={"read_path_s": 0.01, "tokens": {"gpu": 96, "store_ram": 0,
                                                           "store_disk": 0, "computed": 4}}),
        ToolEvent(run_id="r", session_id="s1", call_id="c1", t=3.0, tool="write_file", ok=False,
                  error="path escapes workspace"),
        GateRecord(run_id="r", session_id="s1", round=1, executor="local", t_start=4.0, t_end=9.0,
                   verdict="fail", passed=3, failed=1,
                   tests=[GateTest("t.py::a", "passed", 0.1), GateTest("t.py::b", "failed")]),
        SessionRecord(run_id="r", session_id="s1", task="kv", t=0.0, status="started"),
        ScrapeRecord(run_id="r", target="master", url="http://x/metrics", t=1.0, ok=True,
                     samples={'vllm:prefix_cache_hits_total{engine="0"}': 96.0}),
        WindowRecord(run_id="r", index=0, t0=0.0, t1=900.0),
        EventRecord(run_id="r", t=5.0, event="master_killed", detail={"pid": 1}),
    ]


def test_every_record_kind_round_trips(tmp_path):
    rd = RunDir.create("run-test", base=tmp_path)
    recs = samples()
    assert {r.kind for r in recs} == set(RECORD_TYPES)
    with rd:
        for r in recs:
            rd.append(r)
    for r in recs:
        (got,) = rd.read(r.kind)
        assert got == json.loads(json.dumps(dataclasses.asdict(r)))
        assert dataclasses.asdict(type(r)(**got)) == got  # loads back into its type
        assert rd.torn_lines(r.kind) == 0
    gate = rd.read("gates")[0]
    assert gate["tests"][1] == {"nodeid": "t.py::b", "outcome": "failed", "duration_s": 0.0,
                                "message": ""}


def test_appends_are_flushed_per_line(tmp_path):
    rd = RunDir(tmp_path)
    rd.append(samples()[0])
    # visible to a reader before close
    assert len(RunDir(tmp_path).read("calls")) == 1
    rd.append(samples()[0])
    assert len(RunDir(tmp_path).read("calls")) == 2
    rd.close()


def test_torn_trailing_line_is_skipped_and_counted(tmp_path):
    rd = RunDir(tmp_path)
    with rd:
        rd.append(samples()[-1])
        rd.append(samples()[-1])
    p = tmp_path / "events.jsonl"
    with p.open("a") as fh:
        fh.write('{"run_id": "r", "t": 6.0, "ev')  # crash mid-write
    assert len(rd.read("events")) == 2
    assert rd.torn_lines("events") == 1
    # a writer resuming after the crash closes the torn line: its record stays whole
    with RunDir(tmp_path) as rd2:
        rd2.append(samples()[-1])
    got = RunDir(tmp_path).read("events")
    assert len(got) == 3 and all(g["event"] == "master_killed" for g in got)
    assert RunDir(tmp_path).torn_lines("events") == 1


def test_corrupt_middle_line_is_skipped(tmp_path):
    p = tmp_path / "windows.jsonl"
    good = json.dumps(dataclasses.asdict(WindowRecord(run_id="r", index=0, t0=0, t1=1)))
    p.write_text(good + "\n" + "garbage\n" + good + "\n")
    rd = RunDir(tmp_path)
    assert len(rd.read("windows")) == 2 and rd.torn_lines("windows") == 1


def test_missing_kind_reads_empty_and_frame_has_columns(tmp_path):
    rd = RunDir(tmp_path)
    assert rd.read("calls") == [] and rd.torn_lines("calls") == 0
    df = rd.frame("calls")
    assert len(df) == 0 and "t_first_content" in df.columns
    rd.append(samples()[0])
    df = rd.frame("calls")
    assert len(df) == 1 and df.loc[0, "cached_tokens"] == 96


def _writer(path: str) -> None:
    rd = RunDir(path)
    i = 0
    while True:
        rd.append(EventRecord(run_id="r", t=float(i), event="tick", detail={"pad": "x" * 500}))
        i += 1


def test_killed_writer_leaves_readable_records(tmp_path):
    ctx = multiprocessing.get_context("spawn")  # the test process has threads (no fork)
    p = ctx.Process(target=_writer, args=(str(tmp_path),))
    p.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        f = tmp_path / "events.jsonl"
        if f.exists() and f.stat().st_size > 50_000:
            break
        time.sleep(0.01)
    os.kill(p.pid, signal.SIGKILL)
    p.join()
    rd = RunDir(tmp_path)
    recs = rd.read("events")
    assert len(recs) > 10
    assert [r["t"] for r in recs] == [float(i) for i in range(len(recs))]
    assert rd.torn_lines("events") <= 1


def test_create_refuses_existing_and_ids_are_unique(tmp_path, monkeypatch):
    RunDir.create("same", base=tmp_path)
    with pytest.raises(FileExistsError):
        RunDir.create("same", base=tmp_path)
    assert re.fullmatch(r"fleet-\d{8}-\d{6}-[0-9a-f]{12}", new_run_id("fleet"))
    # the random part clashes (forced): creation draws a new id instead of sharing a folder
    draws = iter(["aaaaaaaaaaaa", "aaaaaaaaaaaa", "aaaaaaaaaaaa", "bbbbbbbbbbbb"])
    monkeypatch.setattr(records, "new_run_id", lambda prefix="run": f"{prefix}-t-{next(draws)}")
    a = RunDir.create(base=tmp_path)
    b = RunDir.create(base=tmp_path, prefix="run")
    assert (a.run_id, b.run_id) == ("run-t-aaaaaaaaaaaa", "run-t-bbbbbbbbbbbb")
    assert sorted(p.name for p in tmp_path.iterdir()) == [a.run_id, b.run_id, "same"]
    # every draw taken: a clear error, nothing overwritten
    monkeypatch.setattr(records, "new_run_id", lambda prefix="run": "run-t-aaaaaaaaaaaa")
    with pytest.raises(FileExistsError, match="no free run id after 3 tries"):
        create_run_path(tmp_path, tries=3)


def test_write_json_is_atomic_and_manifest_reads_back(tmp_path):
    rd = RunDir(tmp_path)
    rd.write_json("manifest.json", {"run_id": "x", "seeds": {"fleet": 1}})
    assert rd.manifest() == {"run_id": "x", "seeds": {"fleet": 1}}
    assert not list(tmp_path.glob("*.tmp"))


def test_read_jsonl_skips_a_torn_tail_and_closed_fragments(tmp_path):
    from adev.records import complete_lines, read_jsonl
    p = tmp_path / "x.jsonl"
    p.write_bytes(b'{"a": 1}\n{"a": 2, "b\n[1, 2]\n{"a": 3}\n{"a": 4')
    assert [n for n, _ in complete_lines(p)] == [1, 2, 3, 4]      # line 5 is torn
    assert list(read_jsonl(p)) == [{"a": 1}, {"a": 3}]             # fragment and array skipped
    assert list(read_jsonl(tmp_path / "missing.jsonl")) == []
