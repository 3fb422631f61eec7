"""The replay's time scale chosen from pilots (:mod:`adev.replay.pace`), worked by hand."""
from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from adev.config import ConfigError
from adev.replay import experiment
from adev.replay.cli import default_stack
from adev.replay.experiment import CONFIGURATIONS, ReplayOptions
from adev.replay.format import Call, Trace
from adev.replay.pace import (
    MIN_LOADED,
    PILOT_TURNS,
    Pilot,
    choose_time_scales,
    decide,
    next_scale,
    pilot_sessions,
)


@pytest.mark.parametrize("scale, ratio, want", [
    (10.0, 0.9, 10.0),    # keeps pace: stays
    (10.0, 1.0, 10.0),    # at the target: stays
    (10.0, 2.18, 4.5),    # 10 / 2.18 = 4.59 -> 4.5
    (10.0, 2.0, 5.0),     # exactly 5
    (4.5, 1.3, 3.0),      # 3.46 -> 3.0
    (10.0, 5.0, 2.0),     # 2.0: the lowest allowed by default
    (10.0, 5.5, None),    # 1.82: below it
    (10.0, 25.0, None),   # 0.4: not even in real time
])
def test_next_scale(scale, ratio, want):
    assert next_scale(scale, ratio) == want


def test_next_scale_with_a_lower_floor():
    assert next_scale(10.0, 8.0, min_scale=1.0) == 1.0       # 1.25 -> 1.0, real time
    assert next_scale(10.0, 25.0, min_scale=1.0) is None
    assert next_scale(10.0, 10 / 2.3, min_scale=2.2) == 2.2    # 2.3 rounds to 2.0, below 2.2


def _p(scale, ratio, loaded=20):
    return Pilot(scale, 64, loaded, ratio, None if ratio is None else 2 * ratio, f"pilot-S{scale:g}")


def test_decide_steps_down_until_a_pilot_keeps_pace():
    assert decide(10.0, [_p(10.0, 2.18)], 3) == (4.5, None)
    nxt, c = decide(10.0, [_p(10.0, 2.18), _p(4.5, 0.8)], 3)
    assert nxt is None and (c.time_scale, c.verified, c.start_scale) == (4.5, True, 10.0)
    assert "0.80 x the profile" in c.reason and len(c.pilots) == 2


def test_decide_after_the_last_pilot_takes_the_next_step_unchecked():
    nxt, c = decide(10.0, [_p(10.0, 3.0), _p(3.0, 1.3)], 2, min_scale=1.0)
    assert nxt is None and (c.time_scale, c.verified) == (2.0, False)   # 3 / 1.3 = 2.31
    assert "not checked" in c.reason


def test_decide_keeps_the_scale_without_enough_reads_or_below_the_floor():
    nxt, c = decide(10.0, [_p(10.0, 3.0, loaded=MIN_LOADED - 1)], 3)
    assert nxt is None and (c.time_scale, c.verified) == (10.0, False) and "too few" in c.reason
    nxt, c = decide(10.0, [_p(10.0, None, loaded=0)], 3)
    assert nxt is None and c.time_scale == 10.0
    nxt, c = decide(10.0, [_p(10.0, 25.0)], 3)
    assert nxt is None and (c.time_scale, c.verified) == (10.0, False)
    assert "only at S = 0.40, below the lowest allowed 2" in c.reason
    # a later pilot that finds the reads cannot keep pace: back to the stack's scale
    nxt, c = decide(10.0, [_p(10.0, 2.0), _p(5.0, 6.0)], 3)
    assert nxt is None and (c.time_scale, c.verified) == (10.0, False)


def test_pilot_sessions_take_the_middle_turns():
    sessions = [[Call(f"s{i}", k, 10, 1) for k in range(10 + i % 3)] for i in range(20)]
    sessions[5] = sessions[5][:3]
    cut = pilot_sessions(sessions, 16)
    assert len(cut) == 16 and cut[3][0].session == "s3"
    assert [c.turn for c in cut[0]] == [3, 4, 5, 6]      # 10 turns: (10 - 4) // 2 = 3
    assert [c.turn for c in cut[1]] == [3, 4, 5, 6]      # 11 turns: 3
    assert [c.turn for c in cut[2]] == [4, 5, 6, 7]      # 12 turns: 4
    assert [c.turn for c in cut[5]] == [0, 1, 2]         # shorter than PILOT_TURNS: all of it
    assert PILOT_TURNS == 4


def test_each_configuration_with_a_store_gets_its_own_pilots(tmp_path, monkeypatch):
    """A fake host whose RAM reads run at 0.3 x S of the profile and disk-only's at 0.6 x S.
    store-ram: the pilot at S = 10 reads at 3.0, so the next runs at floor(10 / 3 / 0.5) x 0.5
    = 3.0, reads at 0.9 and is chosen. disk-only: 6.0 at S = 10 would need S = 1.67, below the
    lowest allowed 2: it stays at 10. recompute reads nothing: no pilot, S = 10."""
    seen = []

    async def fake_run_one(trace, sessions, stack, opts, out_dir, label, *, log=print, pace=None,
                           configuration=None):
        seen.append((stack.configuration, stack.time_scale, opts.routing, opts.experiment,
                     sum(map(len, sessions)), label))
        run = out_dir / label
        run.mkdir(parents=True)
        r = (0.6 if stack.configuration == "disk-only" else 0.3) * stack.time_scale
        (run / "summary.json").write_text(json.dumps({
            "ok_calls": 64, "store_read_calls": 30, "store_read_over_profile_p50": r,
            "store_read_over_profile_p99": 3 * r}))
        return run
    monkeypatch.setattr(experiment, "run_one", fake_run_one)
    sessions = [[Call(f"s{i}", k, 10, 1) for k in range(6)] for i in range(20)]
    opts = ReplayOptions(experiment="long", active=16)
    got = asyncio.run(choose_time_scales(Trace(16, []), sessions, default_stack(time_scale=10.0),
                                         ["recompute", "store-ram", "disk-only"], opts, tmp_path,
                                         log=lambda *a: None))
    assert [(s[0], s[1]) for s in seen] == [("store-ram", 10.0), ("store-ram", 3.0),
                                            ("disk-only", 10.0)]
    assert {(s[2], s[3], s[4]) for s in seen} == {("round-robin", "short", 64)}
    assert {k: (v.time_scale, v.verified) for k, v in got.items()} == {
        "recompute": (10.0, False), "store-ram": (3.0, True), "disk-only": (10.0, False)}
    assert got["recompute"].pilots == () and "no store reads" in got["recompute"].reason
    assert "below the lowest allowed 2" in got["disk-only"].reason
    kept = json.loads((tmp_path / "pace.json").read_text())
    assert [p["time_scale"] for p in kept["store-ram"]["pilots"]] == [10.0, 3.0]
    assert kept["store-ram"]["pilots"][0]["read_over_profile_p50"] == pytest.approx(3.0)
    assert kept["store-ram"]["pilots"][0]["run"] == ".pace/pilot-store-ram-S10"
    assert (tmp_path / ".pace" / "pilot-store-ram-S10").is_dir()
    assert not (tmp_path / ".pace" / ".stacks").exists()


def test_an_external_stack_keeps_its_scale(tmp_path, monkeypatch):
    async def no_run(*a, **k):
        raise AssertionError("no pilot against an external stack")
    monkeypatch.setattr(experiment, "run_one", no_run)
    ext = default_stack(mode="external", time_scale=1.0)
    got = asyncio.run(choose_time_scales(Trace(16, []), [[Call("s", 0, 10, 1)]], ext,
                                         ["store-ram"], ReplayOptions(), tmp_path,
                                         log=lambda *a: None))
    assert (got["store-ram"].time_scale, got["store-ram"].pilots) == (1.0, ())


def test_the_matrix_runs_each_configuration_at_its_chosen_scale(tmp_path, monkeypatch):
    from adev.replay.experiment import run_matrix
    from adev.replay.pace import PaceChoice
    seen = []

    async def fake_run_one(trace, sessions, stack, opts, out_dir, label, *, log=print, pace=None,
                           configuration=None):
        seen.append((label, stack.time_scale, (pace or {}).get("time_scale")))
        return out_dir / label
    monkeypatch.setattr(experiment, "run_one", fake_run_one)
    pace = {"recompute": PaceChoice(10.0, 10.0, False, "no store"),
            "store-ram": PaceChoice(10.0, 3.5, True, "pilot")}
    asyncio.run(run_matrix(Trace(16, []), [[Call("s", 0, 10, 1)]], default_stack(time_scale=10.0),
                           ["recompute", "store-ram"], [0, 1], ReplayOptions(), tmp_path,
                           log=lambda *a: None, pace=pace))
    assert seen == [("recompute-s0", 10.0, 10.0), ("store-ram-s0", 3.5, 3.5),
                    ("recompute-s1", 10.0, 10.0), ("store-ram-s1", 3.5, 3.5)]


def test_a_disk_tier_runs_at_most_at_the_offload_heartbeats_scale(tmp_path, monkeypatch):
    """Mooncake's heartbeat is whole seconds, at least 1: with the default 10 model s heartbeat
    a configuration with a disk tier runs at S <= 10 (at S = 40 the heartbeat would be 40 model
    s); the others keep the given scale. Pilots of a disk tier start at that scale too."""
    from adev.replay.experiment import run_matrix, scale_for
    from adev.stack.commands import heartbeat_max_scale
    assert heartbeat_max_scale(10.0) == 10.0 and heartbeat_max_scale(25.0) == 25.0
    at40 = default_stack(time_scale=40.0)
    assert [scale_for(at40, n) for n in CONFIGURATIONS] == [40.0, 40.0, 40.0, 10.0, 10.0, 10.0]
    slow = dataclasses.replace(at40, store=dataclasses.replace(at40.store, offload_heartbeat_s=20.0))
    assert scale_for(slow, "disk-only") == 20.0
    assert scale_for(default_stack(time_scale=4.0), "disk-only") == 4.0
    seen, lines = [], []

    async def fake_run_one(trace, sessions, stack, opts, out_dir, label, *, log=print, pace=None,
                           configuration=None):
        seen.append((label, stack.time_scale))
        return out_dir / label
    monkeypatch.setattr(experiment, "run_one", fake_run_one)
    asyncio.run(run_matrix(Trace(16, []), [[Call("s", 0, 10, 1)]], at40,
                           ["store-ram", "store-ram+raid0", "disk-only"], [0], ReplayOptions(),
                           tmp_path, log=lines.append))
    assert seen == [("store-ram-s0", 40.0), ("store-ram+raid0-s0", 10.0), ("disk-only-s0", 10.0)]
    assert ("replay store-ram+raid0-s0: time scale 10, not 40: Mooncake's offload heartbeat "
            "(whole seconds, at least 1) keeps its 10 model s only up to that scale") in lines


def test_pilots_of_a_disk_tier_start_at_the_heartbeats_scale(tmp_path, monkeypatch):
    seen = []

    async def fake_run_one(trace, sessions, stack, opts, out_dir, label, *, log=print, pace=None,
                           configuration=None):
        seen.append((stack.configuration, stack.time_scale))
        run = out_dir / label
        run.mkdir(parents=True)
        (run / "summary.json").write_text(json.dumps({
            "ok_calls": 64, "store_read_calls": 30, "store_read_over_profile_p50": 0.5,
            "store_read_over_profile_p99": 1.5}))
        return run
    monkeypatch.setattr(experiment, "run_one", fake_run_one)
    sessions = [[Call(f"s{i}", k, 10, 1) for k in range(6)] for i in range(20)]
    got = asyncio.run(choose_time_scales(Trace(16, []), sessions, default_stack(time_scale=40.0),
                                         ["store-ram", "store-ram+nvmeof"], ReplayOptions(),
                                         tmp_path, log=lambda *a: None))
    assert seen == [("store-ram", 40.0), ("store-ram+disk", 10.0)]
    assert {k: (v.start_scale, v.time_scale) for k, v in got.items()} == {
        "store-ram": (40.0, 40.0), "store-ram+nvmeof": (10.0, 10.0)}


def test_jobs_run_in_processes_at_once_lowest_time_scale_first(tmp_path, monkeypatch):
    """--jobs 2: two runs at once (never three), each through run_in_process (a process of its
    own); the disk tiers (S = 10, the longest on the wall) start first; the runs come back in
    matrix order. One job runs in this process, in matrix order."""
    from adev.replay.experiment import run_matrix
    started, live, peak = [], [0], [0]

    async def fake_in_process(job):
        started.append(job["label"])
        live[0] += 1
        peak[0] = max(peak[0], live[0])
        await asyncio.sleep(0.01)
        live[0] -= 1
        return job["out_dir"] / job["label"]

    async def not_here(*a, **kw):
        raise AssertionError("with --jobs 2 no run is made in this process")
    monkeypatch.setattr(experiment, "run_in_process", fake_in_process)
    monkeypatch.setattr(experiment, "run_one", not_here)
    names = ["recompute", "store-ram", "store-ram+raid0", "disk-only"]
    got = asyncio.run(run_matrix(Trace(16, []), [[Call("s", 0, 10, 1)]],
                                 default_stack(time_scale=40.0), names, [0, 1], ReplayOptions(),
                                 tmp_path, log=lambda *a: None, jobs=2))
    assert peak[0] == 2
    assert started == ["store-ram+raid0-s0", "disk-only-s0", "store-ram+raid0-s1", "disk-only-s1",
                       "recompute-s0", "store-ram-s0", "recompute-s1", "store-ram-s1"]
    assert [p.name for p in got] == [f"{n}-s{s}" for s in (0, 1) for n in names]


def test_a_failed_job_stops_the_others_and_raises_its_own_error(tmp_path, monkeypatch):
    from adev.replay.experiment import run_matrix
    stopped = []

    async def fake_in_process(job):
        if job["label"] == "store-ram-s0":
            await asyncio.sleep(0.01)
            raise experiment.RunFailed("replay store-ram-s0: its process exited with status 1")
        try:
            await asyncio.sleep(30)
        finally:
            stopped.append(job["label"])
        return job["out_dir"] / job["label"]
    monkeypatch.setattr(experiment, "run_in_process", fake_in_process)
    with pytest.raises(experiment.RunFailed, match="store-ram-s0: its process exited"):
        asyncio.run(run_matrix(Trace(16, []), [[Call("s", 0, 10, 1)]],
                               default_stack(time_scale=10.0), ["recompute", "store-ram"], [0],
                               ReplayOptions(), tmp_path, log=lambda *a: None, jobs=2))
    assert stopped == ["recompute-s0"]
    with pytest.raises(ConfigError, match="--jobs: 0 is not allowed"):
        asyncio.run(run_matrix(Trace(16, []), [], default_stack(time_scale=10.0), ["recompute"],
                               [0], ReplayOptions(), tmp_path, jobs=0))


def test_a_run_in_a_process_of_its_own_reports_its_failure(tmp_path):
    """The worker process really runs: a stack it cannot start (a state directory that is a
    file) ends it with an error status, which comes back as RunFailed naming the run; its job
    file is removed."""
    from adev.replay.experiment import run_in_process
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    stack = dataclasses.replace(default_stack(time_scale=10.0), state_dir=str(blocker / "x"))
    job = dict(trace=Trace(16, [Call("s", 0, 10, 1)]), sessions=[[Call("s", 0, 10, 1)]],
               stack=stack, opts=ReplayOptions(), out_dir=tmp_path, label="recompute-s0",
               pace=None, configuration="recompute")
    with pytest.raises(experiment.RunFailed, match="replay recompute-s0: its process exited"):
        asyncio.run(run_in_process(job))
    assert not list(tmp_path.glob(".*.job.pkl"))
