"""The replay runner against scripted vLLM-like servers: the disaggregated request flow
(prefill with do_remote_decode, decode with the returned kv_transfer_params), recorded prompts
and lengths, session selection, and a whole run in external mode with its summary."""
from __future__ import annotations

import asyncio
import json

import pytest

from adev.client.llm import Endpoint, LLMClient
from adev.clock import RunClock
from adev.config import StackConfig, from_dict
from adev.records import RunDir
from adev.replay.experiment import PREFILL_PARAMS, Replayer, ReplayOptions, Topology, run_one, select_sessions
from adev.replay.format import Call, Trace, prompt_ids
from adev.replay.schedules import run_long_gap
from tests.replay.fake_vllm import FakeVLLM


def _trace():
    calls = []
    for s in range(3):
        for k in range(3):
            calls.append(Call(f"s{s}", k, prompt_tokens=64 * (k + 1), output_tokens=3 + k,
                              blocks=[100 * s + j for j in range(k + 1)]))
    return Trace(block_tokens=64, calls=calls)


def test_select_sessions():
    t = _trace()
    t.calls.append(Call("short", 0, 10, 1))
    t.calls.append(Call("long", 0, 10, 1))
    t.calls.append(Call("long", 1, 1000, 1))
    got = select_sessions(t, min_turns=2, max_context=195)
    # s0..s2 keep turns 0 and 1 (192 + 5 > 195 cuts turn 2); "long" is cut to 1 turn
    assert [[c.turn for c in cs] for cs in got] == [[0, 1]] * 3
    assert [cs[0].session for cs in select_sessions(t, sessions=2, skip=1)] == ["s1", "s2"]


def test_select_sessions_longest_first():
    t = _trace()                                  # s0..s2: prompts 64, 128, 192 (mean 128 each)
    t.calls += [Call("big", 0, 300, 1), Call("big", 1, 500, 1),       # mean 400
                Call("mid", 0, 150, 1), Call("mid", 1, 160, 1)]       # mean 155
    # ranked by mean prompt tokens, longest first ("big", "mid", then the three 128-token
    # sessions in trace order): the two longest, replayed in trace order
    got = select_sessions(t, min_turns=2, order="longest", sessions=2)
    assert [cs[0].session for cs in got] == ["big", "mid"]
    got = select_sessions(t, min_turns=2, order="longest", sessions=3)
    assert [cs[0].session for cs in got] == ["s0", "big", "mid"]
    assert [cs[0].session for cs in select_sessions(t, min_turns=2, order="longest")] == [
        "s0", "s1", "s2", "big", "mid"]
    # the mean is taken after the cut: at 195 "big" keeps no turn (300 + 1 > 195); "mid" (155)
    # leads the sessions cut to turns 0-1 (mean (64 + 128) / 2 = 96), which keep trace order;
    # skipping "mid", the next two are s0 and s1
    got = select_sessions(t, min_turns=2, max_context=195, order="longest", skip=1, sessions=2)
    assert [cs[0].session for cs in got] == ["s0", "s1"]
    got = select_sessions(t, min_turns=2, max_context=195, order="longest", sessions=2)
    assert [cs[0].session for cs in got] == ["s0", "mid"]
    with pytest.raises(ValueError, match="order: 'random' not allowed; allowed values: trace, "
                                         "longest"):
        select_sessions(t, order="random")


def test_disaggregated_flow(tmp_path):
    trace = _trace()
    sessions = list(trace.sessions().values())

    async def go():
        srv = {n: await FakeVLLM(n).start() for n in ("p0", "p1", "d0", "d1")}
        rd = RunDir.create("r", base=tmp_path)
        clock = RunClock(time_scale=1000.0)
        try:
            async with LLMClient([Endpoint(n, s.url, model="m") for n, s in srv.items()],
                                 clock=clock, run_dir=rd) as c:
                rep = Replayer(trace, c, clock, rd, Topology(["p0", "p1"], ["d0", "d1"]),
                               ReplayOptions(experiment="long"))
                rep.prefetch(sessions)

                async def dispatch(s, call):
                    await rep.dispatch(s, call, sessions)
                await run_long_gap(sessions, dispatch, clock, gap=1, max_in_flight=2)
        finally:
            for s in srv.values():
                await s.stop()
            rd.close()
        return srv, rd
    srv, rd = asyncio.run(go())
    pre = srv["p0"].bodies + srv["p1"].bodies
    dec = srv["d0"].bodies + srv["d1"].bodies
    assert len(pre) == len(dec) == 9
    for b in pre:
        assert b["max_tokens"] == 1 and b["stream"] is False
        assert b["kv_transfer_params"] == PREFILL_PARAMS
    by_prompt = {}
    for b in dec:
        assert b["kv_transfer_params"]["do_remote_prefill"] is True
        assert b["kv_transfer_params"]["remote_engine_id"] in ("p0", "p1")
        assert b["min_tokens"] == b["max_tokens"] and b["ignore_eos"] is True
        by_prompt[tuple(b["prompt"])] = b["max_tokens"]
    # every prompt is the trace's (recorded) prompt, asked for its recorded output length
    for c in trace.calls:
        assert by_prompt[tuple(prompt_ids(trace, c).tolist())] == c.output_tokens
    recs = rd.read("replay")
    assert len(recs) == 9 and all(r["status"] == "ok" for r in recs)
    assert all(r["live_output_tokens"] == r["recorded_output_tokens"] for r in recs)
    assert all(r["ttft_s"] > 0 and r["decode"] in ("d0", "d1") for r in recs)
    assert sum(r["initial"] for r in recs) == 3


def test_run_one_external(tmp_path):
    trace = _trace()
    sessions = list(trace.sessions().values())

    async def go():
        srv = [await FakeVLLM(n).start() for n in ("a", "b")]
        try:
            stack = from_dict(StackConfig, {
                "mode": "external", "configuration": "store-ram",
                "endpoints": [{"name": "a", "base_url": srv[0].url},
                              {"name": "b", "base_url": srv[1].url}]}, "stack")
            return await run_one(trace, sessions, stack,
                                 ReplayOptions(experiment="long", gap=1, max_in_flight=2),
                                 tmp_path, "store-ram-s0", log=lambda *a, **k: None), srv
        finally:
            for s in srv:
                await s.stop()
    path, srv = asyncio.run(go())
    s = json.loads((path / "summary.json").read_text())
    assert s["ok_calls"] == 9 and s["errors"] == 0
    assert s["exact_output_share"] == 1.0
    assert s["throughput_rps"] > 0 and s["ttft_p50_s"] > 0
    assert sum(s["traffic"].values()) == 9 and set(s["traffic"]) <= {"a>colocated",
                                                                     "b>colocated"}
    assert s["stickiness"] is not None
    assert s["evictions"] is None and "evictions" in s["missing"]
    # one warm-up request per replica before the schedule (not recorded), then the 9 calls
    from adev.replay.experiment import WARMUP_PROMPT
    warm = [[b for b in x.bodies if b["prompt"] == WARMUP_PROMPT] for x in srv]
    assert [len(w) for w in warm] == [1, 1] and warm[0][0]["max_tokens"] == 2
    assert srv[0].bodies[0]["prompt"] == WARMUP_PROMPT == srv[1].bodies[0]["prompt"]
    assert len(srv[0].bodies) + len(srv[1].bodies) == 9 + 2
    from adev.replay.report import write
    html = write([path], tmp_path / "report", "t")
    md = (tmp_path / "report.md").read_text()
    assert html.exists() and "## Configurations" in md and "store-ram-s0" in md
    # one run cannot judge a shape: every long-gap shape sets two configurations
    assert "## Shapes of the source" in md and "0 of 0 judged shape(s) hold" in md
    assert s["experiment"] == "long" and s["configuration"] == "store-ram"


def test_crossover_by_hand(tmp_path):
    from adev.records import RunDir
    from adev.replay.experiment import ReplayRecord
    from adev.replay.report import crossover

    def run(name, ttft_by_len):
        rd = RunDir.create(name, base=tmp_path)
        for i, (n, t) in enumerate(ttft_by_len):
            rd.append(ReplayRecord(run_id=name, session="s", turn=i, call_id=str(i),
                                   prompt_tokens=n, group="", recorded_output_tokens=1,
                                   prefill="p0", decode="d0", preferred=None, initial=True,
                                   sticky=None, t_ready=0.0, ttft_s=t))
        rd.close()
        return rd.path
    # bins of 8192 tokens: [1, 8192] -> 0, [8193, 16384] -> 1, ...
    rec = run("recompute-s0", [(1000, 1.0), (9000, 2.0), (20000, 4.0), (30000, 6.0)])
    ram = run("store-ram-s0", [(1000, 1.5), (9000, 1.0), (20000, 5.0), (30000, 2.0)])
    assert crossover(ram, rec) == 3 * 8192        # beats recompute only from bin 3 on
    fast = run("disk-only-s0", [(1000, 2.0), (9000, 1.0), (20000, 3.0), (30000, 2.0)])
    assert crossover(fast, rec) == 8192
    slow = run("gpu-only-s0", [(1000, 2.0), (30000, 9.0)])
    assert crossover(slow, rec) is None


def test_warm_up_sends_one_request_through_every_replica(tmp_path):
    from adev.replay.experiment import WARMUP_PROMPT, warm_up

    async def go():
        srv = {n: await FakeVLLM(n).start() for n in ("p0", "p1", "d0", "d1")}
        try:
            eps = [Endpoint(n, s.url, model="m") for n, s in srv.items()]
            await warm_up(eps, Topology(["p0", "p1"], ["d0", "d1"]), RunClock(time_scale=1000.0))
        finally:
            for s in srv.values():
                await s.stop()
        return srv
    srv = asyncio.run(go())
    assert {n: len(s.bodies) for n, s in srv.items()} == {"p0": 1, "p1": 1, "d0": 1, "d1": 1}
    for n in ("p0", "p1"):
        b = srv[n].bodies[0]
        assert b["prompt"] == WARMUP_PROMPT and b["max_tokens"] == 1 and b["stream"] is False
        assert b["kv_transfer_params"] == PREFILL_PARAMS
    for n, p in (("d0", "p0"), ("d1", "p1")):
        b = srv[n].bodies[0]
        assert b["prompt"] == WARMUP_PROMPT and b["max_tokens"] == 2
        assert b["kv_transfer_params"]["remote_engine_id"] == p   # the prefill's answer, handed on


def test_a_calls_release_is_stamped_where_its_slot_holds_the_clock(tmp_path, monkeypatch):
    """On a held clock the replay takes the call's request slot before it stamps the call's
    release (``t_ready``): host time spent taking the slot (here one wall second) is neither in
    the dispatch delay nor in the user TTFT."""
    import adev.clock as clock_mod
    from adev.clock import HeldClock, RequestHolds
    from tests.test_clock import Wall

    w = Wall()
    held = HeldClock.create(tmp_path / "clock")
    held.source = w
    monkeypatch.setattr(clock_mod, "_source", held)
    monkeypatch.setattr(clock_mod, "_request_holds", None)
    take = RequestHolds.take

    def slow_take(self):
        w.t += 1.0          # the host's time before the slot holds the clock
        return take(self)
    monkeypatch.setattr(RequestHolds, "take", slow_take)
    trace = _trace()
    sessions = [list(trace.sessions().values())[0][:1]]

    async def go():
        srv = {n: await FakeVLLM(n).start() for n in ("p0", "d0")}
        rd = RunDir.create("r", base=tmp_path)
        clock = RunClock()
        try:
            async with LLMClient([Endpoint(n, s.url, model="m") for n, s in srv.items()],
                                 clock=clock, run_dir=rd) as c:
                rep = Replayer(trace, c, clock, rd, Topology(["p0"], ["d0"]),
                               ReplayOptions(experiment="long"))
                await rep.dispatch(0, sessions[0][0], sessions)
        finally:
            for s in srv.values():
                await s.stop()
            rd.close()
        return rd
    rd = asyncio.run(go())
    (rec,) = rd.read("replay")
    pre = next(r for r in rd.read("calls") if r["call_id"].endswith("-prefill"))
    assert rec["t_ready"] == pytest.approx(1.0)      # where the slot holds the clock
    assert pre["t_sent"] == pytest.approx(1.0) and rec["ttft_s"] == pytest.approx(0.0)
