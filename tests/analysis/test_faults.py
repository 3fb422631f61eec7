"""Faults found in a run's records mark the windows they touch, and the report says so."""
from __future__ import annotations

from adev.analysis.faults import FaultTracker, verdict
from adev.analysis.report import build_report, load_all, summarise_run
from adev.analysis.run import load_run
from adev.analysis.windows import window_table
from adev.records import CallRecord, RunDir, ScrapeRecord, SessionRecord

from .synth import make_run


def test_tracker_begins_and_ends_faults_and_ignores_never_up_targets():
    events = []
    tr = FaultTracker(on_event=lambda n, t, d: events.append((n, t, d["state"])))
    tr.feed("scrapes", {"target": "master", "t": 1.0, "ok": False, "error": "refused"})
    assert tr.touching(0, 10) == {}  # never answered: a missing source, not a fault
    tr.feed("scrapes", {"target": "coder", "t": 2.0, "ok": True})
    tr.feed("scrapes", {"target": "coder", "t": 5.0, "ok": False, "error": "refused"})
    tr.feed("scrapes", {"target": "coder", "t": 7.0, "ok": False, "error": "refused"})
    tr.feed("scrapes", {"target": "coder", "t": 9.0, "ok": True})
    assert tr.touching(0, 4.9) == {} and tr.touching(6, 6) == {"endpoint_down:coder": 1}
    assert tr.touching(9.5, 20) == {}
    tr.feed("calls", {"endpoint": "coder", "t_sent": 11.0, "t_end": 12.0, "status": "error",
                      "error": "connection refused"})
    tr.feed("calls", {"endpoint": "coder", "t_sent": 11.5, "t_end": 13.0, "status": "ok",
                      "server": {"store_errors": 3}})
    assert tr.touching(12.5, 20) == {"store_errors:coder": 1}
    assert tr.touching(10, 20) == {"call_errors:coder": 1, "store_errors:coder": 1}
    assert events[:2] == [("endpoint_down:coder", 5.0, "begin"),
                          ("endpoint_down:coder", 9.0, "end")]
    assert ("call_errors:coder", 12.0, "begin") in events
    assert verdict({"store_errors:coder": 4, "sessions_llm_error": 1}) == (
        False, "fault: store_errors:coder (4)", ["sessions_llm_error", "store_errors:coder"])
    assert verdict({"sessions_llm_error": 2}) == (True, None, ["sessions_llm_error"])
    # with the window's call count: 4 store-error calls of 100 (4% <= 5%) leave it valid, named;
    # 6 of 100 (6%) invalidate it; a scrape outage invalidates at any count
    assert verdict({"store_errors:coder": 4}, calls=100) == (True, None, ["store_errors:coder"])
    assert verdict({"store_errors:coder": 6}, calls=100)[:2] == (
        False, "fault: store_errors:coder (6)")
    assert verdict({"master_down": 1}, calls=1000)[0] is False
    assert tr.calls_sent(10, 20) == 2 and tr.calls_sent(12, 20) == 0


def test_master_killed_in_window_2_invalidates_it_and_the_report_counts_failures(tmp_path):
    path = make_run(tmp_path, width=4, windows=3, ledger=False)
    rd = RunDir(path)
    ws = rd.read("windows")
    w2, w3 = ws[1], ws[2]
    t = w2["t0"] + 50.0
    rd.append(ScrapeRecord(run_id="x", target="master", url="u", t=t, ok=False,
                           error="connection refused"))
    rd.append(ScrapeRecord(run_id="x", target="master", url="u", t=t + 20, ok=True))
    for k in range(3):  # 3 calls with store errors, 2 failed calls, all sent in window 2
        rd.append(CallRecord(run_id="x", session_id="sX", call_id=f"se{k}", endpoint="coder",
                             t_sent=t + k, t_end=t + k + 1, status="ok",
                             server={"store_errors": 2}))
    for k in range(2):
        rd.append(CallRecord(run_id="x", session_id="sX", call_id=f"fail{k}", endpoint="coder",
                             t_sent=t + k, t_end=t + k + 0.5, status="error", error="refused"))
    # window 3: one session ended by an LLM error, nothing else
    rd.append(SessionRecord(run_id="x", session_id="sY", task="t", t=w3["t0"] + 10,
                            status="error", reason="llm_error: sY/r1/architect/s0: refused"))
    rd.close()
    run = load_run(path)
    marked = {w["index"]: w for w in run.measurement_windows()}
    assert marked[1]["valid"] and marked[1]["faults"] == []
    assert not marked[2]["valid"]
    # the master outage invalidates; the 3 store-error calls are over 5% of the window's calls,
    # the 2 failed calls are not (named, not invalidating)
    n2 = sum(1 for c in run.calls.itertuples() if w2["t0"] <= c.t_sent < w2["t1"])
    assert 2 <= 0.05 * n2 < 3
    assert marked[2]["reason"] == "fault: master_down (1), store_errors:coder (3)"
    assert "call_errors:coder" in marked[2]["faults"]
    assert marked[3]["valid"] and marked[3]["faults"] == ["sessions_llm_error"]
    tab = window_table(run)
    allrow = tab[tab["endpoint"] == "ALL"].set_index("window")
    assert not allrow.loc[2, "valid"] and allrow.loc[3, "faults"] == "sessions_llm_error"
    doc = build_report(load_all([path], with_reuse=False)).md()
    sec = doc[doc.index("## Faults and failures"):doc.index("## Per-window figures")]
    assert ("2 failed calls, 3 calls with store errors, 1 sessions ended with llm_error, "
            "1 failed scrapes of targets that had answered") in sec
    assert "| 2 | " in sec and "master_down" in sec
    text = summarise_run(path)
    assert "window 2: INVALID, faults: call_errors:coder, master_down, store_errors:coder; " \
           "2 failed calls, 3 calls with store errors" in text
    # figures pooled over window 3 carry its fault's name
    assert "gross saving: " in text and "[across faults: sessions_llm_error]" in text


def test_clean_run_says_no_faults(tmp_path):
    path = make_run(tmp_path, width=2, windows=2, ledger=False)
    doc = build_report(load_all([path], with_reuse=False)).md()
    assert "No faults: no call failed" in doc
    assert "across faults" not in summarise_run(path)


def _hand_run():
    """A hand-made run for fault_rows / faults_md: windows [10, 20), [20, 30), [30, 40)."""
    import math
    from types import SimpleNamespace

    import pandas as pd

    from adev.analysis.run import Scrape

    calls = pd.DataFrame({
        "t_sent": [5.0, 10.0, 15.0, 20.0, 35.0, 45.0],
        "status": ["error", "ok", "error", "ok", "ok", "error"],
        "srv_store_errors": [0.0, 2.0, 1.0, 0.0, math.nan, 0.0]})
    sessions = pd.DataFrame({"t": [12.0, 20.0, 25.0, 26.0],
                             "status": ["started", "error", "done", "done"],
                             "reason": [None, "llm_error: refused", None, None]})
    windows = [{"index": 1, "t0": 10.0, "t1": 20.0, "valid": True, "reason": None,
                "faults": ["call_errors:coder", "store_errors:coder"]},
               {"index": 2, "t0": 20.0, "t1": 30.0, "valid": False,
                "reason": "fault: master_down (1)", "faults": ["master_down"]},
               {"index": 3, "t0": 30.0, "t1": 40.0}]

    class Faults:
        def touching(self, a, b):
            return ({"session_error": 1} if (a, b) == (-math.inf, 10.0)
                    else {"endpoint_down:coder": 1} if (a, b) == (40.0, math.inf) else {})

    def sc(t, ok):
        return Scrape(t, ok, {})
    scrapes = {"master": [sc(1, False), sc(2, True), sc(12, False), sc(20, False), sc(28, False),
                          sc(30, True)],
               "reasoner": [sc(15, False), sc(16, False)]}   # never answered: not counted
    return SimpleNamespace(calls=calls, sessions=sessions, scrapes=scrapes, faults=Faults(),
                           measurement_windows=lambda: windows, events=pd.DataFrame())


def test_fault_rows_by_hand():
    """fault_rows over a hand-made run: the three windows and the rows before and after them
    (kept only when something went wrong there)."""
    import math

    from adev.analysis.faults import fault_rows
    run = _hand_run()
    calls = run.calls
    rows = fault_rows(run)
    z = dict(failed_calls=0, store_error_calls=0, sessions_ended_llm_error=0,
             sessions_ended_error=0, failed_scrapes=0)
    assert rows == [
        # the call at 5 failed; the master's failure at 1 came before it ever answered
        {"window": "before", "t0": -math.inf, "t1": 10.0, "valid": "outside", "reason": "",
         "faults": "session_error", "calls": 1, **z, "failed_calls": 1},
        # calls at 10 and 15 (store errors 2 and 1; the one at 15 failed); failed scrapes at 12
        # and 20 (both ends inclusive); the session ending at 20 belongs to the next window
        {"window": 1, "t0": 10.0, "t1": 20.0, "valid": True, "reason": "",
         "faults": "call_errors:coder, store_errors:coder", "calls": 2, **z, "failed_calls": 1,
         "store_error_calls": 2, "failed_scrapes": 2},
        {"window": 2, "t0": 20.0, "t1": 30.0, "valid": False, "reason": "fault: master_down (1)",
         "faults": "master_down", "calls": 1, **z, "sessions_ended_llm_error": 1,
         "sessions_ended_error": 1, "failed_scrapes": 2},
        # nothing went wrong in window 3: its row stays (only outside rows are dropped)
        {"window": 3, "t0": 30.0, "t1": 40.0, "valid": True, "reason": "", "faults": "none",
         "calls": 1, **z},
        {"window": "after", "t0": 40.0, "t1": math.inf, "valid": "outside", "reason": "",
         "faults": "endpoint_down:coder", "calls": 1, **z, "failed_calls": 1}]
    # nothing wrong after the windows: no "after" row; no tracker: no fault names
    run.calls = calls.iloc[:5]
    run.faults = None
    rows = fault_rows(run)
    assert [r["window"] for r in rows] == ["before", 1, 2, 3] and rows[0]["faults"] == "none"


def test_fault_kind_of_a_target_with_colons():
    from adev.analysis.faults import invalidating, kind_of
    assert kind_of("endpoint_down:127.0.0.1:8000") == "endpoint_down"
    assert kind_of("master_down") == "master_down"
    assert invalidating(["sessions_llm_error", "endpoint_down:h:1", "call_errors:c"]) == \
        ["endpoint_down:h:1", "call_errors:c"]


def test_fault_events_and_faults_md_by_hand():
    import pandas as pd

    from adev.analysis.faults import fault_events, faults_md
    run = _hand_run()
    assert fault_events(run) == []
    run.events = pd.DataFrame({"t": [3.0], "kind": ["x"]})          # no "event" column
    assert fault_events(run) == []
    run.events = pd.DataFrame({
        "t": [12.0, 14.5, 16.0],
        "event": ["fault", "window_close", "fault"],
        "detail": [{"fault": "master_down", "state": "begin", "target": "master",
                    "error": "e" * 130}, {},
                   {"fault": "master_down", "state": "end", "failed_scrapes": 3}]})
    ev = fault_events(run)
    assert [e["t"] for e in ev] == [12.0, 16.0] and ev[0]["detail"]["state"] == "begin"
    assert faults_md(run.__class__(**{**vars(run), "events": pd.DataFrame()}), "hand") \
        .split("\n\n")[1].startswith("3 failed calls")            # failures, no events
    md = faults_md(run, "hand")
    assert "|\n\nFault events:\n\n- t=12.0" in md
    head, _, rest = md.partition("\n\n")
    assert head == "## Faults and failures: hand"
    # totals over every row: failed calls 1 + 1 + 1 (before, window 1, after); store-error calls
    # 2 (window 1); llm_error sessions 1 (window 2); failed scrapes 2 + 2
    assert rest.startswith(
        "3 failed calls, 2 calls with store errors, 1 sessions ended with llm_error, 4 failed "
        "scrapes of targets that had answered, over the whole run (rows before and after: "
        "outside the windows). A window touched by master_down or endpoint_down is invalid, and "
        "so is one where a call_errors or store_errors fault touches more than 5% of its calls; "
        "otherwise it stays valid with the faults named, and every figure over it carries "
        "them.\n\n| Window | ")
    lines = md.splitlines()
    assert sum(line.startswith("| ") for line in lines) == 6        # heading + 5 rows
    assert md.endswith("Fault events:\n\n"
                       "- t=12.0 s: `master_down` begin, target master, error " + "e" * 120
                       + "\n"
                       "- t=16.0 s: `master_down` end, failed_scrapes 3\n")


def test_faults_md_of_a_clean_run_lists_the_invalid_windows():
    from types import SimpleNamespace

    import pandas as pd

    from adev.analysis.faults import faults_md
    windows = [{"index": 1, "t0": 0.0, "t1": 10.0, "valid": True},
               {"index": 2, "t0": 10.0, "t1": 20.0, "valid": False, "reason": "stack restarted"}]
    run = SimpleNamespace(calls=pd.DataFrame({"t_sent": [1.0], "status": ["ok"],
                                              "srv_store_errors": [0.0]}),
                          sessions=pd.DataFrame(), scrapes={}, faults=None, events=pd.DataFrame(),
                          measurement_windows=lambda: windows)
    assert faults_md(run, "clean") == (
        "## Faults and failures: clean\n\nNo faults: no call failed, no store error, no session "
        "ended with llm_error, every target that answered kept answering.\n"
        "\nInvalid windows:\n\n- window 2: stack restarted\n")
    run.measurement_windows = lambda: windows[:1]
    assert faults_md(run, "clean").endswith("kept answering.\n")
    # no call and no session recorded at all (frames without columns)
    run.calls = pd.DataFrame()
    from adev.analysis.faults import fault_rows
    assert fault_rows(run) == [{"window": 1, "t0": 0.0, "t1": 10.0, "valid": True, "reason": "",
                                "faults": "none", "calls": 0, "failed_calls": 0,
                                "store_error_calls": 0, "sessions_ended_llm_error": 0,
                                "sessions_ended_error": 0, "failed_scrapes": 0}]


def _tracker_records():
    bad = "y" * 400
    scrapes = [{"target": "reasoner", "ok": True},                      # no time: sorted at 0
               {"target": "reasoner", "t": 0.5, "ok": False, "error": "reset"},
               {"target": "reasoner", "t": 0.8, "ok": True},
               {"target": "master", "t": 1.0, "ok": True},
               {"target": "coder", "t": 2.0, "ok": True},
               {"target": "master", "t": 5.0, "ok": False, "error": "refused"},
               {"target": "master", "t": 6.0, "ok": False},
               {"target": "master", "t": 7.0, "ok": False},
               {"target": "master", "t": 9.0, "ok": True},
               {"target": "coder", "t": 20.0, "ok": False, "error": bad}]
    calls = [{"endpoint": "coder", "call_id": "c1", "t_sent": 10.0, "t_end": 11.0,
              "status": "error", "error": "refused"},
             {"endpoint": "coder", "call_id": "c2", "t_sent": 10.5, "t_end": 12.0,
              "status": "error"},
             {"endpoint": "coder", "call_id": "c3", "t_sent": 12.5, "t_end": 13.0, "status": "ok",
              "server": {"store_errors": 2}},
             {"endpoint": "coder", "call_id": "c0", "t_sent": 9.5, "t_end": 13.5,
              "status": "error", "error": "late"},                   # sent first, ends later
             {"endpoint": "coder", "call_id": "c4", "t_sent": 14.0, "t_end": None,
              "status": "ok"}]                                      # no end: placed at its send
    # 19 plain calls and one with a store error in [50, 60): 1 of 20 is exactly 5%
    calls += [{"endpoint": "coder", "call_id": f"p{k}", "t_sent": 50.0 + 0.4 * k,
               "t_end": 50.1 + 0.4 * k, "status": "ok"} for k in range(19)]
    calls.append({"endpoint": "coder", "call_id": "s20", "t_sent": 59.5, "t_end": 59.6,
                  "status": "ok", "server": {"store_errors": 1}})
    sessions = [{"t": 15.0, "status": "error", "reason": "llm_error: " + "x" * 400,
                 "session_id": "s1"},
                {"t": 16.0, "status": "started", "reason": "llm_error"},
                {"t": 17.0, "status": "done", "reason": None}]
    events = [{"t": 18.0, "event": "session_error"}, {"t": 19.0, "event": "window_close"}]
    return {"scrapes": scrapes, "calls": calls, "sessions": sessions, "events": events}


def test_tracker_from_records_intervals_and_events_by_hand():
    from adev.analysis.faults import tracker_from_records
    tr = tracker_from_records(_tracker_records())
    got_events = []
    tr2 = tracker_from_records({})
    assert tr2.intervals == [] and tr2.sent == []
    # records are fed by time (calls by their end, else their send; no time: 0)
    assert tr.intervals == [("endpoint_down:reasoner", 0.5, 0.8), ("master_down", 5.0, 9.0),
                            ("call_errors:coder", 10.0, 11.0), ("call_errors:coder", 10.5, 12.0),
                            ("store_errors:coder", 12.5, 13.0), ("call_errors:coder", 9.5, 13.5),
                            ("sessions_llm_error", 15.0, 15.0), ("session_error", 18.0, 18.0),
                            ("endpoint_down:coder", 20.0, None),
                            ("store_errors:coder", 59.5, 59.6)]
    assert tr.sent[:5] == [10.0, 10.5, 12.5, 9.5, 14.0] and len(tr.sent) == 25
    # the same records fed one by one, watching the events
    tr3 = type(tr)(on_event=lambda n, t, d: got_events.append((n, t, d)))
    recs = _tracker_records()
    items = sorted(((r.get("t", 0.0) if k != "calls" else (r["t_end"] or r["t_sent"]), k, r)
                    for k in ("scrapes", "calls", "sessions", "events") for r in recs[k]),
                   key=lambda x: x[0])
    for _, k, r in items:
        tr3.feed(k, r)
    assert tr3.intervals == tr.intervals
    assert got_events == [
        ("endpoint_down:reasoner", 0.5, {"state": "begin", "target": "reasoner", "error": "reset"}),
        ("endpoint_down:reasoner", 0.8, {"state": "end", "failed_scrapes": 1, "down_since": 0.5}),
        ("master_down", 5.0, {"state": "begin", "target": "master", "error": "refused"}),
        ("master_down", 9.0, {"state": "end", "failed_scrapes": 3, "down_since": 5.0}),
        ("call_errors:coder", 11.0, {"state": "begin", "call_id": "c1", "error": "refused"}),
        ("store_errors:coder", 13.0, {"state": "begin", "call_id": "c3", "error": "2 store errors"}),
        ("call_errors:coder", 13.0, {"state": "end", "calls": 2, "since": 10.0}),
        ("call_errors:coder", 13.5, {"state": "begin", "call_id": "c0", "error": "late"}),
        ("call_errors:coder", 14.0, {"state": "end", "calls": 1, "since": 9.5}),
        ("store_errors:coder", 14.0, {"state": "end", "calls": 1, "since": 12.5}),
        ("sessions_llm_error", 15.0, {"state": "occurred", "session_id": "s1",
                                      "reason": "llm_error: " + "x" * 289}),
        ("endpoint_down:coder", 20.0, {"state": "begin", "target": "coder", "error": "y" * 300}),
        ("store_errors:coder", 59.6, {"state": "begin", "call_id": "s20",
                                      "error": "1 store errors"})]
    # touching: closed intervals, both ends inclusive; one count per interval
    assert tr.touching(9.0, 9.0) == {"master_down": 1}
    assert tr.touching(11.0, 11.5) == {"call_errors:coder": 3}
    assert tr.touching(0.0, 0.5) == {"endpoint_down:reasoner": 1}
    assert tr.calls_sent(10.0, 12.5) == 2                       # 10 and 10.5; 12.5 is out


def test_mark_windows_by_hand():
    from adev.analysis.faults import mark_windows, tracker_from_records
    tr = tracker_from_records(_tracker_records())
    windows = [{"index": 1, "t0": 10.0, "t1": 12.5, "valid": True, "faults": ["x"]},
               {"index": 2, "t0": 19.0, "t1": 25.0},
               {"index": 3, "t0": 30.0, "t1": 40.0, "valid": False, "reason": "stack restarted"},
               {"index": 4, "t0": 14.5, "t1": 15.5, "valid": True},
               {"index": 5, "t0": 50.0, "t1": 60.0, "valid": True}]
    out = mark_windows(windows, tr)
    assert out == [
        # calls sent in [10, 12.5): 10 and 10.5 (9.5 came before): 3 call errors (of c0, c1,
        # c2) and 1 store error of 2 calls, over 5%
        {"index": 1, "t0": 10.0, "t1": 12.5, "valid": False,
         "reason": "fault: call_errors:coder (3), store_errors:coder (1)",
         "faults": ["call_errors:coder", "store_errors:coder", "x"]},
        # an endpoint down from 20 on: invalid whatever the call count
        {"index": 2, "t0": 19.0, "t1": 25.0, "valid": False,
         "reason": "fault: endpoint_down:coder (1)", "faults": ["endpoint_down:coder"]},
        # already invalid: keeps its own reason
        {"index": 3, "t0": 30.0, "t1": 40.0, "valid": False, "reason": "stack restarted",
         "faults": ["endpoint_down:coder"]},
        # a session ended with llm_error: named, not invalidating
        {"index": 4, "t0": 14.5, "t1": 15.5, "valid": True, "faults": ["sessions_llm_error"]},
        # 1 store-error call of 20 sent (exactly 5%) does not invalidate it (named only); the
        # endpoint fault open since t=20 does
        {"index": 5, "t0": 50.0, "t1": 60.0, "valid": False,
         "reason": "fault: endpoint_down:coder (1)",
         "faults": ["endpoint_down:coder", "store_errors:coder"]}]
    assert windows[1] == {"index": 2, "t0": 19.0, "t1": 25.0}     # the input is not changed


def test_tracker_feed_without_times_targets_or_endpoints():
    from adev.analysis.faults import FaultTracker
    from adev.records import CallRecord
    ev = []
    tr = FaultTracker(on_event=lambda n, t, d: ev.append((n, d.get("error"))))
    tr.feed("scrapes", {"target": "z", "ok": True})
    tr.feed("scrapes", {"target": "z", "ok": False})
    tr.feed("scrapes", {"t": 1.0, "ok": True})
    tr.feed("scrapes", {"t": 2.0, "ok": False})
    tr.feed("calls", {"t_end": 3.0, "status": "error"})
    tr.feed("calls", {"t_sent": 4.0, "status": "ok", "server": "not a dict"})
    tr.feed("sessions", {"status": "error", "reason": "llm_error"})
    tr.feed("sessions", {"t": 5.0, "status": None, "reason": "llm_error"})
    tr.feed("events", {"event": "session_error"})
    tr.feed("other", {"t": 6.0, "event": "session_error"})
    tr.feed("calls", CallRecord(run_id="x", session_id="s", call_id="k", endpoint="e",
                                t_sent=7.0, t_end=8.0, status="error", error="b" * 400))
    assert ("call_errors:?", "") in ev and ("call_errors:e", "b" * 300) in ev
    assert tr.intervals == [("endpoint_down:z", 0.0, None), ("endpoint_down:?", 2.0, None), ("call_errors:?", 0.0, 3.0),
                            ("sessions_llm_error", 0.0, 0.0), ("session_error", 0.0, 0.0),
                            ("call_errors:e", 7.0, 8.0)]
    assert tr.sent == [0.0, 4.0, 7.0]


def test_faults_md_names_faults_without_failures_and_caps_the_events():
    from types import SimpleNamespace

    import pandas as pd

    from adev.analysis.faults import faults_md
    windows = [{"index": 1, "t0": 0.0, "t1": 10.0, "valid": True, "faults": ["sessions_llm_error"]},
               {"index": 2, "t0": 10.0, "t1": 20.0, "valid": False, "reason": "a"},
               {"index": 3, "t0": 20.0, "t1": 30.0, "valid": False, "reason": "b"}]
    run = SimpleNamespace(calls=pd.DataFrame({"t_sent": [1.0], "status": ["ok"],
                                              "srv_store_errors": [0.0]}),
                          sessions=pd.DataFrame(), scrapes={}, faults=None, events=pd.DataFrame(),
                          measurement_windows=lambda: windows)
    # a window names a fault though nothing failed: the table, not "No faults"
    assert faults_md(run, "r").split("\n\n")[1].startswith("0 failed calls, 0 calls with")
    run.measurement_windows = lambda: windows[1:]
    assert faults_md(run, "r").endswith("Invalid windows:\n\n- window 2: a\n- window 3: b\n")
    run.events = pd.DataFrame({"t": [float(k) for k in range(51)], "event": ["fault"] * 51,
                               "detail": [{"fault": "f", "state": "occurred"}] * 51})
    md = faults_md(run, "r")
    assert md.count("`f` occurred") == 50 and "- t=49.0 s:" in md and "- t=50.0 s:" not in md
