"""The fleet engine end to end against fakes (stack, sessions): protocols, records, resume."""
import contextlib
import json
from collections import Counter

import pytest

from adev.fleet.config import fleet_from_dict
from adev.fleet.runner import FleetRun, resume_fleet, run_fleet
from adev.records import RunDir

from .fakes import fake_deps

S = 2000.0  # time scale: 2000 model seconds per wall second


def cfg(tmp_path, **over):
    data = {"width": 4, "protocol": "steady", "stagger_s": 10.0, "scrape_interval_s": 5.0,
            "windows": {"count": 3, "length_s": 200.0},
            "warmup": {"kv_usage": 0.0, "pool_turnover": 1.0, "max_s": 5000.0},
            "results_dir": str(tmp_path), "live": "off", "report": False,
            "stack": {"time_scale": S, "state_dir": str(tmp_path / "stack")}}
    data.update(over)
    return fleet_from_dict(data)


def no_dupes(rd: RunDir):
    calls = rd.read("calls")
    ids = Counter((c["call_id"], c["attempt"]) for c in calls)
    assert all(v == 1 for v in ids.values())
    starts = Counter(s["session_id"] for s in rd.read("sessions") if s["status"] == "started")
    ends = Counter(s["session_id"] for s in rd.read("sessions") if s["status"] != "started")
    assert all(v == 1 for v in starts.values()) and all(v == 1 for v in ends.values())
    assert set(ends) == set(starts)  # every session that started has exactly one end record


def test_steady_cuts_windows_after_regime(tmp_path):
    S = 200.0  # slower clock than the other tests: boundary timing is checked (in wall 0.3 s)
    c = cfg(tmp_path, stack={"time_scale": S, "state_dir": str(tmp_path / "stack")})
    out = run_fleet(c, deps=fake_deps(S, session_model_s=(100.0, 200.0)))
    assert out.exit_code == 0, out.summary
    rd = RunDir(out.run_dir)
    ws = rd.read("windows")
    assert [w["index"] for w in ws] == [1, 2, 3] and all(w["valid"] for w in ws)
    assert ws[1]["t0"] == ws[0]["t1"] and ws[2]["t0"] == ws[1]["t1"]
    # the stack's CPU over the run is measured (the fake stack's pid is this process)
    cpu = [e["detail"] for e in rd.read("events") if e["event"] == "stack_cpu"]
    assert len(cpu) == 1 and cpu[0]["cores"] > 0 and set(cpu[0]["per_process"]) == {"stack"}
    assert "stack CPU:" in out.summary
    # a boundary lies at its scrapes: nominal length give or take the scrape latency
    tol = 0.3 * S  # 0.3 s wall: scrape latency on a loaded machine
    assert all(abs(w["t1"] - w["t0"] - 200.0) < tol for w in ws)
    assert abs(ws[2]["t1"] - (ws[0]["t0"] + 600.0)) < tol  # no drift from the grid
    ev = {e["event"]: e for e in rd.read("events")}
    regime = ev["regime"]
    assert regime["t"] <= ws[0]["t0"] + 1.0
    # the window opened only with all 4 sessions running: the last slot starts at 30 s
    assert ws[0]["t0"] >= 30.0
    sc = rd.read("scrapes")
    assert {s["target"] for s in sc} == {"coder", "reasoner", "master"}
    assert all(not s["ok"] and s["error"] for s in sc if s["target"] == "master")
    # a scrape of every target at each boundary
    for w in ws:
        for b in (w["t0"], w["t1"]):
            near = [s for s in sc if s["target"] == "coder" and abs(s["t"] - b) < tol]
            assert near, f"no scrape near boundary {b}"
    no_dupes(rd)
    # the last window's calls were allowed to finish: none sent inside it was cancelled
    calls = rd.read("calls")
    assert any(c["status"] == "cancelled" for c in calls)
    assert all(c["status"] == "ok" for c in calls if c["t_sent"] < ws[-1]["t1"])
    man = json.loads((out.run_dir / "manifest.json").read_text())
    assert man["config"]["fleet"]["width"] == 4
    seeds = [s["seed"] for s in rd.read("sessions") if s["status"] == "started"]
    assert len(seeds) == len(set(seeds))
    # a slot's sessions take their seeds by slot and generation, whatever order the other slots'
    # sessions end in (so a small timing difference cannot change what a slot runs next)
    started = [s for s in rd.read("sessions") if s["status"] == "started"]
    assert max(int(s["session_id"][9:12]) for s in started) >= 1
    for s in started:
        slot, gen = int(s["session_id"][4:7]), int(s["session_id"][9:12])
        assert s["seed"] == c.seed + gen * 4 + slot, s


def test_batch_runs_restart_the_stack(tmp_path):
    counters = {}
    c = cfg(tmp_path, protocol="batch", runs=3, width=3)
    out = run_fleet(c, deps=fake_deps(S, counters=counters))
    assert out.exit_code == 0, out.summary
    rd = RunDir(out.run_dir)
    ws = rd.read("windows")
    assert [(w["index"], w["protocol"], w["valid"]) for w in ws] == \
        [(1, "batch", True), (2, "batch", True), (3, "batch", True)]
    assert counters["stacks"] == 3
    ss = [s for s in rd.read("sessions") if s["status"] == "started"]
    assert len(ss) == 9
    # every session of run k lies inside window k
    for w in ws:
        mine = [s for s in ss if s["session_id"].startswith(f"e0-r{w['index']:02d}-")]
        assert len(mine) == 3 and all(w["t0"] <= s["t"] <= w["t1"] for s in mine)
    no_dupes(rd)


def test_failing_sessions_abort_the_fleet(tmp_path):
    out = run_fleet(cfg(tmp_path, max_session_failures=3), deps=fake_deps(S, fail=True))
    assert out.exit_code == 1 and "consecutive sessions failed" in out.aborted
    rd = RunDir(out.run_dir)
    assert sum(e["event"] == "session_error" for e in rd.read("events")) >= 3


@pytest.mark.parametrize("max_s,length_s", [(5000.0, 200.0), (2000.0, 2400.0)])
def test_resume_after_crash_inside_window_2(tmp_path, max_s, length_s):
    """Run until window 2 is open, then simulate kill -9 (records cut, torn line), resume.
    With ``warmup.max_s`` shorter than the time of the crash, the resumed fleet still warms up
    afresh: the limit counts from the resume."""
    import asyncio
    c = cfg(tmp_path, warmup={"kv_usage": 0.0, "pool_turnover": 1.0, "max_s": max_s},
            windows={"count": 3, "length_s": length_s})
    deps = fake_deps(S)
    run = FleetRun(c, c.stack_config(), deps)

    async def crash_in_window_2():
        task = asyncio.create_task(run.run())
        while True:
            await asyncio.sleep(0.01)
            evs = RunDir(run.path).read("events")
            if any(e["event"] == "window_open" and e["detail"]["index"] == 2 for e in evs):
                break
        await asyncio.sleep(0.02)
        task.cancel()  # the process dies; nothing below runs in a real kill -9
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(crash_in_window_2())
    path = run.path
    # undo what a clean stop writes (a kill -9 writes nothing): drop the last window and the
    # records after window 2 opened, then add a torn line
    def cut(kind, keep):
        p = path / f"{kind}.jsonl"
        lines = [line for line in p.read_text().splitlines(keepends=True) if keep(json.loads(line))]
        p.write_text("".join(lines))
    t_open2 = next(e["t"] for e in RunDir(path).read("events")
                   if e["event"] == "window_open" and e["detail"]["index"] == 2)
    cut("windows", lambda w: w["index"] == 1)
    cut("events", lambda e: e["t"] <= t_open2 + 0.5 and e["event"] != "fleet_end")
    cut("sessions", lambda s: s["t"] <= t_open2 + 0.5)
    with open(path / "calls.jsonl", "a") as fh:
        fh.write('{"run_id": "x", "session_id": "torn')
    before = RunDir(path)
    n_calls_before = len(before.read("calls"))
    out = resume_fleet(path, deps=deps, live="off")
    assert out.exit_code == 0, out.summary
    rd = RunDir(path)
    ws = rd.read("windows")
    assert [(w["index"], w["valid"]) for w in ws] == [(1, True), (2, False), (3, True), (4, True)]
    assert "interrupted" in ws[1]["reason"]
    assert rd.torn_lines("calls") == 1
    assert len(rd.read("calls")) >= n_calls_before  # nothing written before was lost
    no_dupes(rd)
    sids = {s["session_id"] for s in rd.read("sessions")}
    assert any(s.startswith("e1-") for s in sids) and any(s.startswith("e0-") for s in sids)
    seeds = [s["seed"] for s in rd.read("sessions") if s["status"] == "started"]
    assert len(seeds) == len(set(seeds))  # the resumed slots continue after the largest seed
    ev = [e for e in rd.read("events") if e["event"] == "resume"]
    assert ev and ev[0]["detail"]["interrupted"] == [2]
    # the resumed timeline continues after the crash
    assert ws[2]["t0"] > ws[1]["t1"]
    # ... and warms up afresh: all 4 slots (staggered 10 s) run before its first window
    t_resume = ev[0]["t"]
    after = [e for e in rd.read("events") if e["t"] >= t_resume]
    assert not any(e["event"] == "regime_timeout" for e in after)
    regime = next(e for e in after if e["event"] == "regime")
    assert regime["t"] >= t_resume + 30.0 and ws[2]["t0"] >= regime["t"]


def test_batch_resume_after_crash_inside_run_2(tmp_path):
    import asyncio
    c = cfg(tmp_path, protocol="batch", runs=3, width=2)
    deps = fake_deps(S)
    run = FleetRun(c, c.stack_config(), deps)

    async def crash_in_run_2():
        task = asyncio.create_task(run.run())
        while True:
            await asyncio.sleep(0.005)
            evs = RunDir(run.path).read("events")
            if any(e["event"] == "window_open" and e["detail"]["index"] == 2 for e in evs):
                break
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(crash_in_run_2())
    path = run.path
    p = path / "windows.jsonl"
    p.write_text("".join(line for line in p.read_text().splitlines(keepends=True)
                         if json.loads(line)["index"] == 1))
    out = resume_fleet(path, deps=deps, live="off")
    assert out.exit_code == 0, out.summary
    rd = RunDir(path)
    got = [(w["index"], w["valid"], w["protocol"]) for w in rd.read("windows")]
    assert got == [(1, True, "batch"), (2, False, "batch"), (3, True, "batch"),
                   (4, True, "batch")]
    no_dupes(rd)


def test_unknown_task_is_a_config_error_and_leaves_no_run_dir(tmp_path):
    from adev.config import ConfigError
    with pytest.raises(ConfigError, match="fleet.tasks: unknown task"):
        run_fleet(cfg(tmp_path, tasks=["nope"]), deps=fake_deps(S))
    assert not list(tmp_path.glob("fleet-*"))


def test_resume_of_a_complete_run_does_nothing(tmp_path):
    out = run_fleet(cfg(tmp_path, windows={"count": 1, "length_s": 50.0}), deps=fake_deps(S))
    n = len(RunDir(out.run_dir).read("sessions"))
    again = resume_fleet(out.run_dir, deps=fake_deps(S), live="off")
    assert again.exit_code == 0
    rd = RunDir(out.run_dir)
    assert len(rd.read("sessions")) == n and len(rd.read("windows")) == 1
    assert any(e["event"] == "resume_nothing_left" for e in rd.read("events"))



def test_window_touched_by_failed_calls_is_invalid_and_the_fault_is_an_event(tmp_path):
    """Calls failing inside window 2 (an endpoint gone): the fleet records the fault as events
    (begin, then end when calls succeed again) and closes window 2 as invalid, naming it."""
    import asyncio
    c = cfg(tmp_path, windows={"count": 3, "length_s": 400.0})
    bad = [float("inf"), float("inf")]  # set once window 1 has opened
    run = FleetRun(c, c.stack_config(), fake_deps(S, errors_between=bad))

    async def go():
        task = asyncio.create_task(run.run())
        while True:
            await asyncio.sleep(0.005)
            ev = [e for e in RunDir(run.path).read("events") if e["event"] == "window_open"]
            if ev:
                t0 = ev[0]["detail"]["t0"]
                bad[:] = [t0 + 500.0, t0 + 650.0]  # inside window 2 = [t0 + 400, t0 + 800)
                break
        return await task

    out = asyncio.run(go())
    assert out.exit_code == 0, out.summary
    rd = RunDir(out.run_dir)
    ws = rd.read("windows")
    assert [(w["index"], w["valid"]) for w in ws] == [(1, True), (2, False), (3, True)], ws
    assert ws[1]["reason"].startswith("fault: call_errors:coder (") and \
        ws[1]["faults"] == ["call_errors:coder"]
    assert ws[0]["faults"] == [] and ws[2]["faults"] == []
    faults = [e["detail"] for e in rd.read("events") if e["event"] == "fault"]
    # begin, end (an ok call on coder), begin, end...: ok calls sent before the failing span
    # may end inside it
    assert {f["fault"] for f in faults} == {"call_errors:coder"} and len(faults) % 2 == 0
    assert [f["state"] for f in faults] == ["begin", "end"] * (len(faults) // 2)
    n_failed = sum(c["status"] == "error" for c in rd.read("calls"))
    assert n_failed > 0 and sum(f["calls"] for f in faults if f["state"] == "end") == n_failed
    assert "window 2: [" in out.summary and "INVALID: fault: call_errors:coder" in out.summary
    no_dupes(rd)


def test_a_slots_session_starts_at_the_slots_start_however_late_the_host_launches_it(tmp_path):
    """On the stack's held clock a slot holds model time at its start until its session's first
    step has run: a launcher that spends 20 wall ms (40 model s) before it reads the clock still
    starts its session exactly at the slot's start (the fleet's start + slot x stagger). A
    launcher that takes nothing over (this one) does not stop the clock: the fleet runs on."""
    import time

    from adev import clock as clk

    (tmp_path / "stack").mkdir()
    clk.HeldClock.create(tmp_path / "stack" / clk.CLOCK_FILE)
    deps = fake_deps(S)
    make = deps.make_sessions

    @contextlib.asynccontextmanager
    async def slow_sessions(*a):
        async with make(*a) as launch:
            async def slow(task, seed, sid):
                time.sleep(0.02)
                return await launch(task, seed, sid)
            yield slow
    deps.make_sessions = slow_sessions
    try:
        out = run_fleet(cfg(tmp_path, windows={"count": 1, "length_s": 200.0}), deps=deps)
    finally:
        clk.use_held_clock(None)
    assert out.exit_code == 0, out.summary
    rd = RunDir(out.run_dir)
    t_start = next(e["t"] for e in rd.read("events") if e["event"] == "fleet_start")
    starts = {s["session_id"]: s["t"] for s in rd.read("sessions") if s["status"] == "started"}
    for slot in range(4):   # width 4, stagger 10 model s
        assert abs(starts[f"e0-s{slot:03d}-g000"] - (t_start + 10.0 * slot)) < 1e-6, starts


def test_a_steady_fleets_start_up_takes_no_model_time_on_the_held_clock(tmp_path, monkeypatch):
    """On the stack's held clock a steady fleet holds model time at its start from the moment it
    reads it: however long its own start-up takes (here the fleet_start record's write blocks for
    20 wall ms, 40 model s), the first slot's session starts at the fleet's start."""
    import time

    from adev import clock as clk
    from adev.fleet.protocols import Fleet

    (tmp_path / "stack").mkdir()
    clk.HeldClock.create(tmp_path / "stack" / clk.CLOCK_FILE)
    event = Fleet.event

    def slow_event(self, name, **detail):
        event(self, name, **detail)
        if name == "fleet_start":
            time.sleep(0.02)
    monkeypatch.setattr(Fleet, "event", slow_event)
    try:
        out = run_fleet(cfg(tmp_path, windows={"count": 1, "length_s": 200.0}),
                        deps=fake_deps(S))
    finally:
        clk.use_held_clock(None)
    assert out.exit_code == 0, out.summary
    rd = RunDir(out.run_dir)
    t_start = next(e["t"] for e in rd.read("events") if e["event"] == "fleet_start")
    first = min(s["t"] for s in rd.read("sessions") if s["status"] == "started")
    assert first - t_start < 1.0   # 40 model s when the hold comes after the start-up
