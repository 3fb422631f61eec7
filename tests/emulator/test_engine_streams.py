"""The engine driver's stream hand-off, one function at a time (no event loop needed): what
``_send``, ``_finished``, ``_next_delivery`` and ``_deliver`` put on a request's stream, and
``_spin_until``'s wait. The same test model as test_engine.py (time scale 10); every expected
event is worked out in the comments."""
from __future__ import annotations

import asyncio

import pytest

from adev.emulator import engine as engine_mod
from adev.emulator.state import DECODE, DONE, Plan, Request
from tests.emulator.test_engine import make_engine
from tests.emulator.test_scheduler import tokens


def req(n_gen: int, n_sent: int, n_out: int, state: str = DECODE, rid: str = "a") -> Request:
    r = Request(rid=rid, prompt=tokens(0, 32), out_ids=[7] * n_out, finish_reason="stop")
    r.n_gen, r.n_sent, r.state = n_gen, n_sent, state
    return r


def drain(r: Request) -> list[tuple]:
    out = []
    while not r.queue.empty():
        out.append(r.queue.get_nowait())
    return out


# ------------------------------------------------------------------ _send (a plan's commit)
@pytest.mark.parametrize("every,n_gen,n_sent,n_out,sent", [
    (4, 3, 1, 10, None),   # 2 pending < 4, not the last token, not the first: held back
    (4, 5, 1, 10, 4),      # exactly 4 pending: sent
    (4, 1, 0, 10, 1),      # the first token leaves at once
    (4, 10, 8, 10, 2),     # the last tokens leave at once (n_gen = n_out)
    (2, 3, 2, 10, None),   # 1 pending < 2
    (1, 3, 2, 10, 1),      # every token
    (0, 3, 1, 10, 2),      # 0: everything pending at each commit
    (1, 3, 3, 10, None),   # nothing pending: no event (an empty one would end the stream)
    (0, 0, 0, 10, None),
])
def test_send_hands_over_pending_tokens_by_stream_interval(every, n_gen, n_sent, n_out, sent):
    eng = make_engine(lambda: 0.0, stream_interval=every)
    r = req(n_gen, n_sent, n_out)
    eng._send(r, 0.25)
    if sent is None:
        assert drain(r) == [] and r.n_sent == n_sent
    else:
        assert drain(r) == [(sent, 0.25)] and r.n_sent == n_gen


# ------------------------------------------------------------------ _finished
@pytest.mark.parametrize("n_gen,n_sent,events", [
    (7, 4, [(3, 0.5), (0, None)]),   # 3 tokens held back by the interval leave with the end
    (7, 6, [(1, 0.5), (0, None)]),
    (7, 7, [(0, None)]),             # nothing held back: only the end of the stream
])
def test_finished_flushes_held_tokens_then_ends_the_stream(n_gen, n_sent, events):
    eng = make_engine(lambda: 0.0, stream_interval=4)
    done = []
    eng.on_finish = done.append
    r = req(n_gen, n_sent, 7, state=DONE)
    r.t_last_token = 0.5
    eng._finished(r)
    assert drain(r) == events and r.n_sent == 7 and done == [r]


def test_finished_without_a_finish_hook():
    eng = make_engine(lambda: 0.0)
    r = req(2, 2, 2, state=DONE)
    eng._finished(r)
    assert drain(r) == [(0, None)]


# ------------------------------------------------------------------ _next_delivery
def plan(n_steps: int, decode: list[Request], delivered: int = 0) -> Plan:
    """A macro step of ``n_steps`` steps ending at model times 1, 2, ..., n_steps."""
    return Plan(start=0.0, ends=[float(k) for k in range(1, n_steps + 1)], prefill=[],
                decode=decode, delivered=delivered)


def test_next_delivery_every_step_with_interval_1():
    eng = make_engine(lambda: 0.0, stream_interval=1)
    a = req(2, 2, 10)
    # the next step after the delivered ones, while one is left before the last
    assert [eng._next_delivery(plan(5, [a], d)) for d in range(5)] == [1, 2, 3, 4, None]
    assert eng._next_delivery(plan(2, [a])) == 1
    assert eng._next_delivery(plan(1, [a])) is None          # a single step leaves at the commit


def test_next_delivery_waits_for_interval_tokens():
    eng = make_engine(lambda: 0.0, stream_interval=4)
    a = req(3, 2, 50)        # 1 pending: 4 due after 2 + 4 - 3 = 3 more steps
    b = req(5, 5, 50)        # 0 pending: after 4 steps
    assert eng._next_delivery(plan(6, [a, b])) == 3           # the earlier of the two
    assert eng._next_delivery(plan(6, [a, b], delivered=3)) == 4
    assert eng._next_delivery(plan(4, [a, b], delivered=3)) is None   # step 4 is the last
    assert eng._next_delivery(plan(3, [a, b])) is None
    c = req(9, 5, 50)        # 4 pending already (held back): due now, i.e. after step 1
    assert eng._next_delivery(plan(6, [c])) == 1
    assert eng._next_delivery(plan(6, [c], delivered=2)) == 3


def test_next_delivery_with_interval_2():
    eng = make_engine(lambda: 0.0, stream_interval=2)
    # nothing pending: 2 tokens after 2 + 2 - 2 = 2 steps (not after the next one)
    assert eng._next_delivery(plan(6, [req(2, 2, 50)])) == 2
    assert eng._next_delivery(plan(6, [req(3, 2, 50)])) == 1        # 1 pending: after 1 step


def test_next_delivery_none_with_interval_0():
    eng = make_engine(lambda: 0.0, stream_interval=0)
    assert eng._next_delivery(plan(6, [req(3, 2, 50)])) is None


# ------------------------------------------------------------------ _deliver
def test_deliver_streams_the_steps_already_ended():
    eng = make_engine(lambda: 0.0, stream_interval=2)
    a = req(2, 2, 10)                    # steps make tokens 3, 4, 5, ...
    b = req(4, 4, 5)                     # one token left: its last
    c = req(2, 3, 10)                    # one token already streamed ahead of the model
    d = req(2, 2, 10)
    d.aborted = True                     # aborted: skipped
    e = req(2, 2, 10, state=DONE)        # finished: skipped
    p = plan(5, [d, a, b, c, e])         # a skipped request does not end the loop
    eng._deliver(p, 3)
    assert p.delivered == 3
    # a: tokens 3..5 (upto 5), 3 >= 2: (3, end of step 3 = 3.0)
    assert drain(a) == [(3, 3.0)] and a.n_sent == 5
    # b: upto min(4 + 3, 5) = 5, its last token: (1, end of step 1)
    assert drain(b) == [(1, 1.0)] and b.n_sent == 5
    # c: upto 5, 5 - 3 = 2 = the interval: (2, 3.0)
    assert drain(c) == [(2, 3.0)] and c.n_sent == 5
    assert drain(d) == [] and drain(e) == [] and d.n_sent == e.n_sent == 2
    eng._deliver(p, 4)
    # a: upto 6, 1 pending < 2 and not its last: held back
    assert p.delivered == 4 and drain(a) == [] and a.n_sent == 5
    eng._deliver(p, 2)                   # already delivered: nothing
    eng._deliver(p, 9)                   # capped at the step before the last (4): nothing new
    assert p.delivered == 4 and [drain(x) for x in (a, b, c)] == [[], [], []]


def test_deliver_never_streams_the_last_step():
    eng = make_engine(lambda: 0.0, stream_interval=1)
    a = req(0, 0, 10)
    p = plan(3, [a])
    eng._deliver(p, 3)                   # step 3 is the plan's last: its token leaves at the commit
    assert p.delivered == 2 and drain(a) == [(2, 2.0)] and a.n_sent == 2


# ------------------------------------------------------------------ _spin_until
class Ticks:
    """A clock that reads ``t`` (advanced only by the patched sleep) and a wall clock that moves
    one unit per read."""

    def __init__(self) -> None:
        self.t, self.reads, self.sleeps = 0.0, 0, []

    def clock(self) -> float:
        return self.t

    def real(self) -> float:
        self.reads += 1
        return float(self.reads)

    async def sleep(self, d):
        self.sleeps.append(d)
        self.t += d


def spin(monkeypatch, deadline, ticks, *args):
    monkeypatch.setattr(asyncio, "sleep", ticks.sleep)
    coro = engine_mod._spin_until(deadline, ticks.clock, ticks.real, *args)
    with pytest.raises(StopIteration):
        coro.send(None)                  # the patched sleep never suspends: one send runs it


def test_spin_until_yields_then_polls_every_half_millisecond(monkeypatch):
    ticks = Ticks()
    # real() reads 1 (start), 2, 3, ...: reads 2 and 3 are under spin_s = 2 after the start
    # (1 < 2 only for read 2): one plain yield, then 0.0005 s polls until t >= 0.0014 (3 polls)
    spin(monkeypatch, 0.0014, ticks, 2)
    assert ticks.sleeps == [0, 0.0005, 0.0005, 0.0005]
    assert ticks.t == pytest.approx(0.0015)


def test_spin_until_default_spin_and_a_deadline_already_reached(monkeypatch):
    ticks = Ticks()
    spin(monkeypatch, 0.0, ticks)        # clock() = 0 is not before 0: no wait at all
    assert ticks.sleeps == [] and ticks.reads == 1
    ticks = Ticks()
    ticks.real = lambda: 0.001 * len(ticks.sleeps)        # 1 ms of wall per yield
    # default spin_s 0.003: yields while 0, 0.001, 0.002 ms after the start, then polls
    spin(monkeypatch, 0.001, ticks)
    assert ticks.sleeps == [0, 0, 0, 0.0005, 0.0005]


def test_spin_until_on_the_monotonic_clock():
    import time
    asyncio.run(engine_mod._spin_until(time.monotonic() - 1.0))   # already past: returns at once


# ------------------------------------------------------------------ the first-token margin
@pytest.mark.parametrize("spin_wall_s", [0.0015, 0.0005])
def test_first_token_plans_end_with_a_spin_and_others_on_a_timer(monkeypatch, spin_wall_s):
    """A lone 30-token prompt, 3 tokens: prefill step 0 -> 0.030 (no first token in it: timer),
    first-token step 0.030 -> 0.0413 (0.00113 wall s: spun for its last ``spin_wall_s``), then
    one macro step of 2 decode steps (timers). The spin ends the plan at its end, never sooner."""
    from tests.emulator.test_engine import client, token_times
    from tests.emulator.vclock import run_virtual
    spins = []

    async def main(clock):
        eng = make_engine(clock)
        eng.spin_wall_s = spin_wall_s

        async def fake_spin(deadline, clk, real, spin_s, stop=None):
            spins.append((round((deadline - eng.t0) * 10, 9), spin_s, clk is eng.clock,
                          real is eng.real, stop is not None and not stop()))
            await asyncio.sleep(deadline - clock())
            return False
        monkeypatch.setattr(engine_mod, "_spin_until", fake_spin)
        eng.start()
        return await client(eng, clock, "a", tokens(1000, 30), 3, 0.0)
    r, got = run_virtual(main)
    # 0.00113 wall s > 0.0005: a timer to 0.0413 - 0.005 first, then the spin; < 0.0015: the
    # spin at once. Either way one spin per request, to the first token's end, of 2 x the margin
    # (and with no event inside the plan to end it early)
    assert spins == [(0.0413, 2 * spin_wall_s, True, True, True)]
    assert got == [(1, pytest.approx(t, abs=1e-9)) for t in token_times(3)]


# ------------------------------------------------------------------ the loop's idle and re-plan
def test_loop_idles_until_the_next_ready_time():
    """A request made ready for model time 0.5 with no event: the loop moves to 0.5 by itself,
    prefills 30 tokens (0.030) and decodes its first token (0.0113): first token at 0.5413."""
    from tests.emulator.vclock import run_virtual

    async def main(clock):
        eng = make_engine(clock)
        r = Request(rid="a", prompt=tokens(1000, 30), out_ids=[7], finish_reason="stop")
        eng.submit(r)
        eng.sched.admit(0.0)
        r.ready_time = 0.5
        eng.start()
        while (await r.queue.get())[0]:
            pass
        return r
    r = run_virtual(main)
    assert r.t_first == pytest.approx(0.5413)


def test_event_at_the_start_of_a_plan_in_progress_replans_it():
    """a (30 tokens, 50 out) is in its first macro step when b is queued with an arrival stamped
    exactly at that step's start, a's first token time 0.0413 (a request that reached the server
    then and was handed over late): the step is planned again from 0.0413 with b admitted in it,
    not cut after its first step (b would then wait until 0.05261)."""
    from tests.emulator.vclock import run_virtual

    async def main(clock):
        eng = make_engine(clock)
        eng.start()
        a = Request(rid="a", prompt=tokens(1000, 30), out_ids=[7] * 50, finish_reason="stop")
        eng.submit(a)
        await a.queue.get()                          # a's first token: its macro step is planned
        b = Request(rid="b", prompt=tokens(5000, 50), out_ids=[7], finish_reason="stop")
        b.t_arrival = a.t_first
        eng.sched.add(b)
        eng._event(b.t_arrival)
        while (await b.queue.get())[0]:
            pass
        return a, b
    a, b = run_virtual(main)
    assert a.t_first == pytest.approx(0.0413) and b.t_admit == a.t_first
    # b's 50 tokens beside a's 2nd token: 0.050 + decode(1, 31) 0.01131 -> 0.10261; b's first
    # token: decode(2, 32 + 50) = 0.010 + 0.002 + 0.00082 -> 0.11543
    assert b.t_first == pytest.approx(0.11543)


def test_virtual_loop_stops_a_test_that_would_run_forever():
    from tests.emulator.vclock import VIRTUAL_LIMIT_S, run_virtual

    async def forever(clock):
        while True:
            await asyncio.sleep(10.0)
    with pytest.raises(RuntimeError, match="virtual seconds"):
        run_virtual(forever)
    assert VIRTUAL_LIMIT_S == 3600.0
