"""The engine's asyncio driver on a virtual clock (no sleeping): streaming per decode step, events
that cut a macro step, store reads that end early or late. Same test model as test_scheduler.py:

    prefill 1 ms per token (batch budget 1000 here); decode step 0.010 + 0.001 n + 0.00001 ctx;
    RAM lookup 1 ms, 1 ms per block; disk load_s(b) = 0.002 + 0.004 b, and a disk block read
    through the RAM store is staged at the RAM tier's 1 ms per block; time scale 10.

Times are model seconds: a client's receipt time is (virtual wall - t0) x 10.
"""
from __future__ import annotations

import asyncio
import functools
import math
import re

import pytest

from adev.emulator.engine import Engine
from adev.emulator.metrics import Metrics
from adev.emulator.pool import block_hashes
from adev.emulator.state import Request
from tests.emulator.test_scheduler import config, tokens, value
from tests.emulator.vclock import FakeStore, run_virtual

S = 10.0


def held_clock(tmp_path, loop_clock):
    """A fresh held clock in ``tmp_path`` on the virtual loop's time."""
    from adev.clock import HeldClock
    return HeldClock(HeldClock.create(tmp_path / "clock").path, source=loop_clock)


def make_engine(clock, store=None, **over) -> Engine:
    over.setdefault("max_num_batched_tokens", 1000)
    cfg = config(**over)
    eng = Engine(cfg, Metrics("m", 16, cfg.capacity_blocks, True, 65536), store, clock=clock)
    eng.spin_wall_s = 0.0   # virtual time does not pass while the loop spins
    return eng


async def client(eng: Engine, clock, rid: str, prompt: list[int], n_out: int, at: float):
    """Submit at model time ``at``; returns the request and its stream: (tokens, model time)."""
    await asyncio.sleep(max(0.0, eng.wall(at) - clock()))
    r = Request(rid=rid, prompt=prompt, out_ids=[7] * n_out, finish_reason="stop")
    eng.submit(r)
    got = []
    while True:
        n, _ = await r.queue.get()
        if n == 0:
            return r, got
        got.append((n, (clock() - eng.t0) * S))


async def held_client(eng: Engine, clock, rid: str, prompt: list[int], n_out: int, at: float):
    """:func:`client` on a held clock: sleeps until model time ``at`` on it (it stops while
    held), then submits."""
    while clock() < eng.wall(at):
        await asyncio.sleep(eng.wall(at) - clock())
    return await client(eng, clock, rid, prompt, n_out, at)


def one_stream(n_out: int, **over):
    async def main(clock):
        eng = make_engine(clock, **over)
        eng.start()
        r, got = await client(eng, clock, "a", tokens(1000, 30), n_out, 0.0)
        return eng, r, got
    return run_virtual(main)


def token_times(n: int) -> list[float]:
    """Model end of token k = 1..n of a lone 30-token prompt: prefill 0.030, then one decode
    step per token, the step making token k+1 over ctx 30 + k: 0.011 + 0.00001 (30 + k)."""
    t, out = 0.030, []
    for k in range(n):
        t += 0.011 + 0.00001 * (30 + k)
        out.append(t)
    return out


def test_each_token_leaves_at_its_own_decode_step():
    eng, r, got = one_stream(200)
    # 200 events of one token; the first at 0.030 + 0.0113 = 0.0413, then 0.05261, 0.06393, ...
    assert [n for n, _ in got] == [1] * 200
    assert [t for _, t in got] == pytest.approx(token_times(200), abs=1e-9)
    assert got[0][1] == pytest.approx(0.0413) and got[1][1] == pytest.approx(0.05261)
    # the client's inter-token times are the model's (engine's ITL histogram: 199 of them)
    assert value(eng.sched, "vllm:inter_token_latency_seconds_sum") == pytest.approx(got[-1][1] - got[0][1])


def test_stream_interval_zero_sends_one_event_per_macro_step():
    _, r, got = one_stream(200, stream_interval=0)
    # first token (its own step), then 199 decode steps in one macro step (horizon: 265 steps)
    assert [n for n, _ in got] == [1, 199]
    assert got[1][1] == pytest.approx(token_times(200)[-1])


def test_stream_interval_n_sends_n_tokens_per_event():
    _, r, got = one_stream(200, stream_interval=4)
    # the first token at once, then 4 at a time (49 x 4 = 196), the last 3 when the request ends
    assert [n for n, _ in got] == [1] + [4] * 49 + [3]
    times = token_times(200)
    assert [t for _, t in got] == pytest.approx([times[0]] + [times[4 * m] for m in range(1, 50)] + [times[199]],
                                                abs=1e-9)


def test_arrival_cuts_a_macro_step_and_streams_keep_their_times():
    async def main(clock):
        eng = make_engine(clock)
        eng.start()
        a = asyncio.create_task(client(eng, clock, "a", tokens(1000, 30), 20, 0.0))
        b = asyncio.create_task(client(eng, clock, "b", tokens(5000, 50), 1, 0.1))
        return await a, await b
    (ra, ga), (rb, gb) = run_virtual(main)
    # a's tokens 1..7 at 0.0413, 0.05261, 0.06393, 0.07526, 0.0866, 0.09795, 0.10931: b arrives
    # at 0.1 inside the 7th step, which ends the macro step
    assert [t for _, t in ga[:7]] == pytest.approx(token_times(7), abs=1e-9)
    # then b's 50 tokens prefill beside a's 8th token: 0.050 + decode(1, 37) 0.01137 -> 0.17068
    assert ga[7][1] == pytest.approx(0.17068)
    # b's first token: decode(2, 38 + 50) = 0.010 + 0.002 + 0.00088 -> 0.18356; TTFT 0.08356
    assert gb == [(1, pytest.approx(0.18356))]
    assert rb.t_first - rb.t_arrival == pytest.approx(0.08356)
    assert sum(n for n, _ in ga) == 20


def store_run(io_wall_s: float):
    """a (100 tokens, nothing stored) at 0, b (100 tokens, 6 blocks on disk) at 0.06."""
    async def main(clock):
        store = FakeStore(io_s=io_wall_s)
        pb = tokens(5000, 100)
        for k in store.keys(block_hashes(pb)):
            store.tier[k] = "disk"
        eng = make_engine(clock, store)
        eng.start()
        a = asyncio.create_task(client(eng, clock, "a", tokens(1000, 100), 50, 0.0))
        b = asyncio.create_task(client(eng, clock, "b", pb, 1, 0.06))
        (ra, ga), (rb, gb) = await a, await b
        return eng, ra, ga, rb, gb
    return run_virtual(main)


def test_store_read_ending_before_the_next_macro_step_joins_it_in_time():
    # store calls take 0.00001 wall s = 0.0001 model s: every read ends long before the model's
    eng, ra, ga, rb, gb = store_run(0.00001)
    # a: lookup 0.001 (no hits), prefill 0.100, first token decode(1, 100) 0.012 -> 0.113
    assert ra.t_first == pytest.approx(0.113)
    # b arrives during a's prefill, is admitted at 0.101; its read (real I/O done by 0.1012)
    # is ready at 0.101 + 0.001 + (0.002 + 6 x 0.004) = 0.128 (the staging, 6 x 0.001, overlaps
    # the slower disk read), after a's first-token step (0.101 - 0.113) but inside a's next macro
    # step: 0.12501, 0.13703 (ctx 101, 102) -> cut there
    assert rb.t_ready == pytest.approx(0.128)
    # 0.13703: b's 4 uncached tokens + a's 4th token: 0.004 + decode(1, 103) 0.01103 -> 0.15306
    assert ga[3][1] == pytest.approx(0.15306)
    # b's first token: decode(2, 104 + 100) = 0.01404 -> 0.1671; TTFT 0.1671 - 0.06 = 0.1071
    assert rb.t_first == pytest.approx(0.1671) and gb[0][1] == pytest.approx(0.1671)
    assert rb.tokens_split(16) == {"gpu": 0, "store_ram": 0, "store_disk": 96, "kv_transfer": 0,
                                  "computed": 4}
    assert value(eng.sched, "adev_emulator_read_path_overrun_seconds_total") == 0


def test_late_store_read_keeps_the_model_and_sends_no_token_twice():
    # store calls take 0.005 wall s = 0.05 model s: a's lookup ends at 0.05 (modelled 0.001),
    # b's read (lookup, then tier query and load together) at 0.101 + 0.1 = 0.201 (modelled 0.128)
    eng, ra, ga, rb, gb = store_run(0.005)
    # the model is the one of the previous test
    assert ra.t_first == pytest.approx(0.113) and rb.t_first == pytest.approx(0.1671)
    # a's stream ran ahead of the cut at 0.13703 while b's read was late: no token is sent
    # twice, none is lost, and b's first token reaches its client once the read has ended
    assert sum(n for n, _ in ga) == 50 and [t for _, t in ga] == sorted(t for _, t in ga)
    assert gb[0][1] >= 0.201 - 1e-9
    # overrun = (0.05 - 0.001) + (0.201 - 0.128) = 0.122
    assert value(eng.sched, "adev_emulator_read_path_overrun_seconds_total") == pytest.approx(0.122)


def test_store_objects_of_whole_chunks_end_hits_on_a_chunk_boundary():
    """chunk_blocks = 4: b's 100 tokens have 6 full blocks below the last token, one complete
    chunk (blocks 0-3) the store can serve; a's save puts its one complete chunk."""
    async def main(clock):
        store = FakeStore(io_s=0.00001, chunk_blocks=4)
        pb = tokens(5000, 100)
        hb = block_hashes(pb)
        store.tier[store.keys([hb[3]])[0]] = "disk"       # chunk 0 of b's prompt (blocks 0-3)
        store.tier[store.keys([hb[5]])[0]] = "disk"       # never a key: blocks 4-5 are no chunk
        eng = make_engine(clock, store)
        eng.start()
        a = asyncio.create_task(client(eng, clock, "a", tokens(1000, 100), 50, 0.0))
        b = asyncio.create_task(client(eng, clock, "b", pb, 1, 0.06))
        (ra, _), (rb, _) = await a, await b
        await asyncio.sleep(0.01)                         # the background saves
        return store, ra, rb, block_hashes(tokens(1000, 100))
    store, ra, rb, ha = run_virtual(main)
    # b: admitted at 0.101 (as in the test above); ready = 0.101 + 0.001 + (0.002 + 4 x 0.004),
    # the staging (4 x 0.001) overlapping the slower disk read
    assert rb.t_ready == pytest.approx(0.120)
    assert rb.store_keys_looked_up == 4 and rb.store_hit_blocks == 4
    assert rb.tokens_split(16) == {"gpu": 0, "store_ram": 0, "store_disk": 64, "kv_transfer": 0,
                                  "computed": 36}
    # a puts chunk 0 (4 blocks, counted per block); b has no complete chunk left to put
    assert (ra.put_blocks, rb.put_blocks) == (4, 0)
    assert store.saved == store.keys([ha[3]])


def held_store_run(tmp_path, io_wall_s: float):
    """store_run on the stack's held clock (the clock file in ``tmp_path``): the clients too."""
    async def main(loop_clock):
        clock = held_clock(tmp_path, loop_clock)
        store = FakeStore(io_s=io_wall_s, save_s=0.0)  # the saves' hold: its own test
        pb = tokens(5000, 100)
        for k in store.keys(block_hashes(pb)):
            store.tier[k] = "disk"
        eng = make_engine(clock, store)
        eng.start()
        a = asyncio.create_task(held_client(eng, clock, "a", tokens(1000, 100), 50, 0.0))
        b = asyncio.create_task(held_client(eng, clock, "b", pb, 1, 0.06))
        (ra, ga), (rb, gb) = await a, await b
        return eng, clock, ra, ga, rb, gb
    return run_virtual(main)


def test_held_clock_waits_for_a_late_store_read_so_clients_see_the_model(tmp_path):
    # the reads of the previous test (0.005 wall s each = 0.05 model s, modelled 0.001 and 0.027)
    eng, clock, ra, ga, rb, gb = held_store_run(tmp_path, 0.005)
    # the model is the one of the fast store ...
    assert ra.t_first == pytest.approx(0.113) and rb.t_first == pytest.approx(0.1671)
    assert rb.t_ready == pytest.approx(0.128)
    # ... and so is what the clients see on the shared clock: no host lag in their stamps
    assert ga[0][1] == pytest.approx(0.113) and ga[3][1] == pytest.approx(0.15306)
    assert gb == [(1, pytest.approx(0.1671))]
    assert value(eng.sched, "adev_emulator_read_path_overrun_seconds_total") == 0
    # the real reads still say how slow they were: a's lookup 0.005 wall = 0.05 model s; b's
    # lookup then tier query beside the load: 0.010 wall = 0.1 model s (modelled 0.027)
    assert ra.read_host_s == pytest.approx(0.05) and rb.read_host_s == pytest.approx(0.1)
    # the clock was held: at a's lookup end (model 0.001) until it ended, 0.005 - 0.0001 wall
    # seconds; at b's lookup end (0.102) until it ended, 0.0049; b then had 6 hits, at least a
    # RAM read of them (0.001 + 6 x 0.001 load): held at 0.109 from wall 0.0007 after the lookup
    # until the tier query ended (0.005): 0.0043; then b's ready time 0.128 was still ahead
    assert clock.held_s() == pytest.approx(0.0049 + 0.0049 + 0.0043)


def test_held_clock_keeps_a_saves_objects_in_the_store_from_the_prefills_end(tmp_path):
    """Two engines on one held clock share a store whose puts take 0.005 wall s (0.05 model s;
    every other call 0.00001). Engine 1 prefills a (100 tokens: lookup 0.001, prefill 0.100) and
    starts its save at 0.101; c, a's prompt, reaches engine 2 at 0.102. The put costs no model
    time, so model time stands at 0.101 until it has ended (held 0.005 wall s) and c's lookup
    finds a's 6 full blocks: 96 tokens from the store, 4 computed. Without the hold c would be
    looked up at 0.102, before the put ended at 0.151, and computed whole. c's own prefill step
    saves too (its existence check finds all 6 blocks there): held another 0.005 wall s."""
    async def main(loop_clock):
        clock = held_clock(tmp_path, loop_clock)
        store = FakeStore(io_s=0.00001, save_s=0.005)
        e1 = make_engine(clock, store)
        e2 = Engine(e1.cfg, Metrics("m2", 16, e1.cfg.capacity_blocks, True, 65536), store,
                    clock=clock, slot=1)
        e2.spin_wall_s = 0.0
        e1.start()
        e2.start()
        pa = tokens(1000, 100)
        a = asyncio.create_task(held_client(e1, clock, "a", pa, 3, 0.0))
        c = asyncio.create_task(held_client(e2, clock, "c", pa, 1, 0.102))
        (ra, _), (rc, _) = await a, await c
        return clock, ra, rc
    clock, ra, rc = run_virtual(main)
    assert ra.t_first == pytest.approx(0.113)
    assert rc.t_arrival == pytest.approx(0.102)
    assert rc.tokens_split(16) == {"gpu": 0, "store_ram": 96, "store_disk": 0, "kv_transfer": 0,
                                  "computed": 4}
    assert clock.held_s() == pytest.approx(0.010, abs=1e-4)


def test_free_clock_shows_the_late_read_to_the_client():
    # the same reads on a wall clock: b's first token reaches its client late (see above)
    eng, ra, ga, rb, gb = store_run(0.005)
    assert gb[0][1] - rb.t_first > 0.03


def random_run(interval: int, seed: int = 5):
    """60 requests over 6 growing sessions (shared prefixes), some aborted, a 700-block pool
    (preemptions), a store holding part of the prefixes on both tiers, store calls slower than
    the model for half the seeds (late reads); returns the requests and the /metrics text."""
    import random
    rng = random.Random(seed)
    sessions = [tokens(1000 * (i + 1), rng.randint(100, 3000)) for i in range(6)]
    work, t = [], 0.0
    for i in range(60):
        t += rng.expovariate(1 / 0.4)
        k = rng.randrange(6)
        sessions[k] = sessions[k] + [rng.randrange(1000) for _ in range(rng.randint(10, 800))]
        work.append((t, f"r{i}", list(sessions[k]), rng.randint(1, 300), rng.random() < 0.05))

    async def main(clock):
        store = FakeStore(io_s=0.005 if seed % 2 else 0.0002)
        for _, _, p, _, _ in work[:20]:
            for h in block_hashes(p)[:rng.randint(0, 200)]:
                store.tier[store.keys([h])[0]] = rng.choice(["ram", "disk"])
        eng = make_engine(clock, store, capacity_blocks=700, max_num_batched_tokens=2048,
                          stream_interval=interval)
        eng.start()

        async def one(at, rid, prompt, n_out, abort):
            await asyncio.sleep(max(0.0, eng.wall(at) - clock()))
            r = Request(rid=rid, prompt=prompt, out_ids=[7] * n_out, finish_reason="stop")
            eng.submit(r)
            got = 0
            while True:
                n, _ = await r.queue.get()
                if n == 0:
                    return r, got
                got += n
                if abort:
                    eng.abort(r)
                    abort = False
        done = await asyncio.gather(*(one(*w) for w in work))
        return done, eng.m.render()
    return run_virtual(main)


@pytest.mark.parametrize("seed", [5, 6])
def test_stream_interval_changes_no_modelled_figure(seed):
    fields = ("t_arrival", "t_admit", "t_ready", "t_prefill_done", "t_first", "t_last_token", "t_end", "n_gen",
              "finish_reason", "gpu_hit_tokens", "ram_blocks", "disk_blocks", "store_hit_blocks", "preemptions",
              "lookup_s", "load_s")
    base, text = random_run(0, seed)
    assert sum(r.preemptions for r, _ in base) > 0 and sum(r.disk_blocks for r, _ in base) > 0
    for interval in (1, 4):
        other, other_text = random_run(interval, seed)
        for (r0, n0), (r1, n1) in zip(base, other, strict=True):
            assert [getattr(r0, f) for f in fields] == [getattr(r1, f) for f in fields], r0.rid
            assert n0 == n1 == r0.n_gen   # every generated token streamed exactly once
        assert _rounded(other_text) == _rounded(text)


def _rounded(text: bytes) -> str:
    """A metrics page with every float at 12 significant digits: sums of the same observations
    added in another order differ in their last bits."""
    return re.sub(r"\d+\.\d+(e[-+]\d+)?", lambda m: f"{float(m.group(0)):.12g}", text.decode())


@pytest.mark.parametrize("refused,skipped,error", [(2, 1, True), (0, 0, False)])
def test_save_counts_accepted_refused_and_skipped_blocks(refused, skipped, error):
    """A save of 2 objects of 2 blocks: 3 accepted, ``refused`` refused, ``skipped`` not offered.
    The request's counters add them once, the endpoint's counters once per save (refused bytes =
    blocks x 1 MB); a second request's save is offered whatever the first's refusals."""
    from adev.emulator.store import SaveResult
    saved = []

    class Store:
        async def save(self, keys):
            saved.append(keys)
            return SaveResult(put=3, refused=refused, skipped=skipped, error=error)

    eng = make_engine(lambda: 0.0, store=Store())
    r = Request(rid="a", prompt=tokens(0, 32), out_ids=[7], finish_reason="stop")
    q = Request(rid="b", prompt=tokens(0, 32), out_ids=[7], finish_reason="stop")
    r.put_blocks, r.put_refused_blocks, r.store_errors = 1, 1, 1
    asyncio.run(eng._save(r, ["k1", "k2"], 2))
    asyncio.run(eng._save(q, ["k1", "k2"], 2))
    assert saved == [["k1", "k2"]] * 2
    assert (r.put_blocks, r.put_refused_blocks, r.store_errors) == (
        1 + 6, 1 + 2 * refused, 1 + (1 if error else 0))
    sched = eng.sched
    assert value(sched, "adev_emulator_store_put_blocks_total") == 12
    assert value(sched, "adev_emulator_store_put_refused_blocks_total") == 4 * refused
    assert value(sched, "adev_emulator_store_put_refused_bytes_total") == 4 * refused * 1_000_000
    assert value(sched, "adev_emulator_store_put_skipped_blocks_total") == 4 * skipped


def test_a_refused_put_skips_the_requests_later_saves_until_a_put_stores_everything():
    """vLLM's connector under store pressure: a's save is refused in part (-200): the store is
    under pressure and a's next save is not offered (its 2 blocks counted as skipped), nor does
    either move a's last successful save. b's save stores everything it offers: the pressure is
    cleared, and a's next save offers its range again; stored in full, it moves a's last save."""
    from adev.emulator.store import SaveResult
    saved = []
    answers = iter([SaveResult(put=1, refused=1), SaveResult(put=2), SaveResult(put=2)])

    class Store:
        async def save(self, keys):
            saved.append(keys)
            return next(answers)

    eng = make_engine(lambda: 0.0, store=Store())
    a = Request(rid="a", prompt=tokens(0, 64), out_ids=[7], finish_reason="stop")
    b = Request(rid="b", prompt=tokens(0, 64), out_ids=[7], finish_reason="stop")

    async def main():
        await eng._save(a, ["a0", "a1"], upto=2)
        assert eng._pressure and a.saved_blocks == 0
        await eng._save(a, ["a0", "a1", "a2"], upto=3)      # skipped: nothing offered
        assert saved == [["a0", "a1"]] and a.saved_blocks == 0
        await eng._save(b, ["b0", "b1"], upto=2)
        assert not eng._pressure and b.saved_blocks == 2
        await eng._save(a, ["a0", "a1", "a2", "a3"], upto=4)
    asyncio.run(main())
    assert saved[1:] == [["b0", "b1"], ["a0", "a1", "a2", "a3"]] and a.saved_blocks == 4
    assert (a.put_blocks, a.put_refused_blocks) == (3, 1)
    assert value(eng.sched, "adev_emulator_store_put_skipped_blocks_total") == 3


def test_without_the_pressure_rule_a_refused_requests_next_save_is_offered_again():
    """The connector as first merged (``pressure_skip = False``): a's save is refused in part, and
    its next save offers the whole range from its last successful save again (refused again in
    part: counted again), nothing skipped; a save that stores everything moves its last save."""
    from adev.emulator.store import SaveResult
    saved = []
    answers = iter([SaveResult(put=1, refused=1), SaveResult(put=1, refused=2),
                    SaveResult(put=4)])

    class Store:
        async def save(self, keys):
            saved.append(keys)
            return next(answers)

    eng = make_engine(lambda: 0.0, store=Store(), pressure_skip=False)
    a = Request(rid="a", prompt=tokens(0, 64), out_ids=[7], finish_reason="stop")

    async def main():
        await eng._save(a, ["a0", "a1"], upto=2)
        assert not eng._pressure and a.saved_blocks == 0
        await eng._save(a, ["a0", "a1", "a2"], upto=3)
        assert a.saved_blocks == 0
        await eng._save(a, ["a0", "a1", "a2", "a3"], upto=4)
    asyncio.run(main())
    assert saved == [["a0", "a1"], ["a0", "a1", "a2"], ["a0", "a1", "a2", "a3"]]
    assert a.saved_blocks == 4 and (a.put_blocks, a.put_refused_blocks) == (6, 3)
    assert value(eng.sched, "adev_emulator_store_put_skipped_blocks_total") == 0
    assert value(eng.sched, "adev_emulator_store_put_refused_blocks_total") == 3


def test_engine_decode_step_and_abort_of_a_finished_request():
    eng = make_engine(lambda: 0.0)
    # 0.010 + 0.001 x 3 + 0.00001 x 2000 = 0.033 s
    assert eng.decode_step_s(3, 2000) == pytest.approx(0.033)
    r = Request(rid="a", prompt=tokens(0, 32), out_ids=[7], finish_reason="stop")
    eng.submit(r)
    r.aborted = True                         # already aborted: a second abort does nothing
    eng.abort(r)
    assert r in eng.waiting
    r.aborted = False
    eng.abort(r)
    assert r.aborted and r not in eng.waiting


def test_stop_cancels_the_loop_and_the_store_io_in_flight():
    import time

    async def main():
        gate, saved = asyncio.Event(), []

        class Store:
            chunk_blocks = 1

            def keys(self, hashes):
                return [f"k{h}" for h in hashes]

            async def save(self, keys):
                saved.append(keys)
                await gate.wait()             # never set: the save is still running at stop()

        eng = make_engine(time.monotonic, store=Store())
        eng.start()
        r = Request(rid="a", prompt=tokens(0, 32), out_ids=[7], finish_reason="stop",
                    hashes=[1, 2])
        eng._start_save(r, 2)
        await asyncio.sleep(0)
        [bg] = list(eng._bg)
        await eng.stop()
        assert saved == [["k1", "k2"]]
        assert eng._task.cancelled() and bg.cancelled()
        await asyncio.sleep(0)
        assert not eng._bg                    # finished tasks leave the set
    asyncio.run(main())


def test_start_save_accounts_to_its_request_and_stop_before_start():
    """Objects of 2 blocks; the request's last successful save reached block 2: a step that has
    completed 7 blocks saves the complete chunks from there, blocks 2-5 (objects keyed by blocks
    4 and 6), and moves the last save to block 6; a step that completes no further chunk saves
    nothing."""
    import time

    from adev.emulator.store import SaveResult

    async def main():
        saved = []

        class Store:
            chunk_blocks = 2

            def keys(self, hashes):
                return [f"k{h}" for h in hashes]

            async def save(self, keys):
                saved.append(keys)
                return SaveResult(put=len(keys))

        eng = make_engine(time.monotonic, store=Store())
        await eng.stop()                      # never started: nothing to cancel
        r = Request(rid="a", prompt=tokens(0, 120), out_ids=[7], finish_reason="stop",
                    hashes=[1, 2, 3, 4, 5, 6, 7])
        r.saved_blocks = 2
        eng._start_save(r, 7)
        while eng._bg:
            await asyncio.sleep(0)
        eng._start_save(r, 7)
        assert not eng._bg
        return r, saved
    r, saved = asyncio.run(main())
    assert saved == [["k4", "k6"]] and r.put_blocks == 4 and r.saved_blocks == 6


def held_lag_run(tmp_path, *, hog_at: float = 0.0, hog_s: float = 0.0, writer_holds: bool = False,
                 handler_lag_s: float = 0.0):
    """A lone 30-token prompt with 3 output tokens on a held clock (on the virtual loop's time),
    while the host is slow: at wall ``hog_at`` after the start the loop is blocked for ``hog_s``
    (a busy host: no task runs, the wall moves on), and the client's handler wakes
    ``handler_lag_s`` late for the first tokens and for the end. Returns the engine, the clock,
    the stream as the client stamped it and the end the client saw."""
    async def main(loop_clock):
        clock = held_clock(tmp_path, loop_clock)
        eng = make_engine(clock)
        eng.start()
        loop = asyncio.get_running_loop()

        async def hog():
            await asyncio.sleep(hog_at)
            loop.vt += hog_s
        h = asyncio.create_task(hog())
        r = Request(rid="a", prompt=tokens(1000, 30), out_ids=[7] * 3, finish_reason="stop",
                    writer_holds=writer_holds)
        eng.submit(r)
        got = []
        while True:
            n, _ = await r.queue.get()
            if (n and not got) or n == 0:
                loop.vt += handler_lag_s
            if n == 0:
                break
            got.append((n, (clock() - eng.t0) * S))
            eng.written(r, end=False)
        t_end = (clock() - eng.t0) * S
        eng.written(r)
        await h
        return eng, clock, got, t_end
    return run_virtual(main)


def test_held_clock_does_not_pass_a_plan_boundary_the_loop_has_not_handled(tmp_path):
    # the first token's decode step ends at model 0.0413 (wall 0.00413); at wall 0.003 the loop
    # is blocked for 0.005 wall s (to 0.008): the engine's hold at the step's end stops model
    # time there, so the client stamps the token at the model's 0.0413, not at 0.080
    eng, clock, got, _ = held_lag_run(tmp_path, hog_at=0.003, hog_s=0.005)
    assert got[0][1] == pytest.approx(0.0413)
    assert [t for _, t in got] == pytest.approx(token_times(3))
    # held from wall 0.00413 to 0.008
    assert clock.held_s() == pytest.approx(0.00387)


def test_held_clock_waits_for_a_loop_descheduled_between_an_event_and_its_plan(tmp_path):
    """The loop takes the arrival event at model 0 and works out its plan; the host deschedules
    the engine's process right there (0.005 wall s, 0.05 model s, with no task running). The loop's
    hold at its own time keeps model time at 0 meanwhile, so the first token leaves at the model's
    0.0413, not at 0.05 + (the part of the prefill and step not yet run)."""
    async def main(loop_clock):
        clock = held_clock(tmp_path, loop_clock)
        eng = make_engine(clock)
        loop = asyncio.get_running_loop()
        plan = eng.sched.plan
        hogged = []

        def descheduled_plan(t):   # the process loses the CPU while it plans the arrival
            if eng.sched.active and not hogged:
                hogged.append(t)
                loop.vt += 0.005
            return plan(t)
        eng.sched.plan = descheduled_plan
        eng.start()
        await asyncio.sleep(0)
        r = Request(rid="a", prompt=tokens(1000, 30), out_ids=[7] * 3, finish_reason="stop")
        eng.submit(r)
        got = []
        while True:
            n, _ = await r.queue.get()
            if n == 0:
                break
            got.append((clock() - eng.t0) * S)
        return got, hogged, clock
    got, hogged, clock = run_virtual(main)
    assert hogged == [0.0]
    assert got == pytest.approx(token_times(3))
    assert clock.held_s() == pytest.approx(0.005)   # the whole deschedule was held


def test_held_clock_admits_the_requests_of_one_model_instant_together(tmp_path):
    """Two requests stamped at one model instant reach an idle engine 2 wall ms apart (their client
    holds the clock at the stamp from the first send until both are in, as a session's parallel
    turns do), the longer prompt first; the pool fits only one of them. The engine decides at that
    instant once both are in, so the one the tie rule puts first (the shorter prompt, b) is
    admitted and a waits for its blocks, whatever order the host delivered them in.

    b: prefill 500 tokens 0.500, then its two tokens at 0.011 + 0.00001 x 500 and
    0.011 + 0.00001 x 501: it ends 0.53201 after the stamp, and a is admitted then."""
    async def main(loop_clock):
        from adev.clock import CLIENT_SLOT
        clock = held_clock(tmp_path, loop_clock)
        eng = make_engine(clock, capacity_blocks=50)   # a needs 38 blocks, b 32
        eng.start()
        await asyncio.sleep(0.001)
        stamp = clock()
        clock.set_hold(CLIENT_SLOT, stamp)
        ra = Request(rid="a", prompt=tokens(1000, 600), out_ids=[7] * 2, finish_reason="stop")
        rb = Request(rid="b", prompt=tokens(5000, 500), out_ids=[7] * 2, finish_reason="stop")
        eng.submit(ra, arrival_mono=stamp)
        await asyncio.sleep(0.002)
        eng.submit(rb, arrival_mono=stamp)
        clock.set_hold(CLIENT_SLOT, math.inf)
        for r in (ra, rb):
            while (await r.queue.get())[0]:
                pass
        return ra, rb
    ra, rb = run_virtual(main)
    t = ra.t_arrival
    assert rb.t_arrival == t == pytest.approx(0.01)
    assert rb.t_admit == pytest.approx(t)
    assert ra.t_admit == pytest.approx(t + 0.53201)


def test_writer_holds_keep_a_late_handlers_first_token_and_end_at_the_model(tmp_path):
    # the handler wakes 0.002 wall s (0.02 model s) late for the first token and for the end
    _, clock, got, t_end = held_lag_run(tmp_path, writer_holds=True, handler_lag_s=0.002)
    t = token_times(3)
    assert [x for _, x in got] == pytest.approx(t)       # 0.0413, 0.05261, 0.06393
    assert t_end == pytest.approx(t[-1])
    assert clock.held_s() == pytest.approx(0.004)        # two holds of 0.002 wall s


def test_without_writer_holds_a_late_handler_shows_in_the_clients_stamps(tmp_path):
    _, _, got, t_end = held_lag_run(tmp_path, handler_lag_s=0.002)
    t = token_times(3)
    # the first token is stamped late: 0.02 model s after it, capped by the engine's hold at its
    # next step's end (0.05261), which the blocked loop has not handled; the end, with the
    # engine idle (nothing held), 0.02 after the last token
    assert got[0][1] == pytest.approx(t[1])
    assert t_end == pytest.approx(t[-1] + 0.02)


def test_spin_until_ends_early_when_an_event_falls_inside_the_plan():
    from adev.emulator.engine import _spin_until
    seen = []

    def stop():          # an event inside the plan shows up at the third look
        seen.append(1)
        return len(seen) >= 3

    # a held clock stopped short of the deadline (at the event's hold): without ``stop`` this
    # would spin for ever; with it, the spin ends and says so
    assert asyncio.run(_spin_until(1.0, clock=lambda: 0.5, real=lambda: 0.0, spin_s=1.0,
                                   stop=stop)) is True
    assert len(seen) == 3
    assert asyncio.run(_spin_until(1.0, clock=lambda: 1.0)) is False   # deadline reached


def test_a_handler_whose_client_went_away_releases_every_hold_of_its_answer(tmp_path):
    """``gave_up``: a client that goes away after the first tokens (0.0413) leaves holds behind:
    the request slot it lent (held at those tokens until it reads them, which it never will) and,
    for a request without a slot, the engine's own hold at them. The handler's ``abort`` +
    ``gave_up`` releases both, so model time moves on past 0.0413."""
    async def main(loop_clock):
        clock = held_clock(tmp_path, loop_clock)
        eng = make_engine(clock)
        eng.start()
        slot_at = functools.partial(clock.slot_hold, 40)
        out = []
        for rid, kw in (("a", {"hold_slot": 40}), ("b", {"writer_holds": True})):
            r = Request(rid=rid, prompt=tokens(1000 + len(out), 30), out_ids=[7] * 50,
                        finish_reason="stop", **kw)
            eng.submit(r)
            await r.queue.get()                      # the first tokens, never read by a client
            t_first = (clock() - eng.t0) * S
            held = slot_at()
            await asyncio.sleep(0.01)                # 0.1 model s: the hold keeps the clock there
            stuck = (clock() - eng.t0) * S
            eng.abort(r)
            eng.gave_up(r)
            await asyncio.sleep(0.01)
            out.append((t_first, held, stuck, (clock() - eng.t0) * S - stuck, slot_at()))
        return out
    (ta, held_a, stuck_a, moved_a, slot_a), (tb, held_b, stuck_b, moved_b, slot_b) = run_virtual(main)
    assert held_a != float("inf") and stuck_a == pytest.approx(ta)      # slot 40 held the clock
    assert slot_a == float("inf") and moved_a > 0.05                     # released, time moves
    assert held_b == float("inf") and stuck_b == pytest.approx(tb)      # the engine's own hold
    assert moved_b > 0.05


def test_a_request_slot_held_at_first_tokens_the_client_will_not_read_is_released(tmp_path):
    """A client lent request slot 40: the engine holds it at the first tokens (0.0413) and at the
    end. A handler that sends nothing the client reads as those tokens calls ``unread``, which
    releases the slot; without that the clock would stay at 0.0413 and the later tokens (which
    need model time) would never come. The end's hold stays until the client has read it."""
    async def main(loop_clock):
        clock = held_clock(tmp_path, loop_clock)
        eng = make_engine(clock)
        eng.start()
        slot_at = functools.partial(clock.slot_hold, 40)
        r = Request(rid="a", prompt=tokens(1000, 30), out_ids=[7] * 3, finish_reason="stop",
                    writer_holds=True, hold_slot=40)
        eng.submit(r)
        seen = []
        while True:
            n, _ = await r.queue.get()
            if n == 0:
                break
            seen.append((r.slot_hold, (slot_at() - eng.t0) * S))
            eng.unread(r)
        end = (r.slot_hold, (slot_at() - eng.t0) * S)
        eng.written(r)              # a handler's release leaves the client's slot alone
        still = slot_at() != float("inf")
        clock.set_hold(40, float("inf"))   # the client reads the end
        return seen, end, still
    seen, end, still = run_virtual(main)
    t = token_times(3)
    # first tokens: held at 0.0413; the second token leaves the slot alone (released by
    # unread); the last one's commit also finishes the request: held at its end, 0.06393
    assert seen == [("out", pytest.approx(t[0])), (None, float("inf")),
                    ("end", pytest.approx(t[-1]))]
    assert end == ("end", pytest.approx(t[-1])) and still


def test_settle_does_not_wait_for_its_own_event_just_after_the_boundary(tmp_path):
    """An event of the engine's own (an arrival, a read's ready time) that falls after a plan
    boundary ``t`` by less than the settle margin (here 0.5 model us; anything above the 1 ns
    tie) holds the engine's slot below ``t + SETTLE_S``. The settle at ``t`` waited for the
    clock to be free to ``t + SETTLE_S``, which the engine's own hold at the event never
    allowed: the engine, and every process on its held clock, stopped for good (seen in a
    replay on a loaded host). The settle waits for the clock to be free to its own earliest
    event instead; the event is the loop's next boundary."""
    from adev.emulator.engine import SETTLE_S

    async def main(loop_clock):
        clock = held_clock(tmp_path, loop_clock)
        eng = make_engine(clock)
        t = 0.1
        eng._event(t + SETTLE_S / 2)
        await asyncio.wait_for(eng._settle(t), 0.05)   # 0.5 model s of virtual wall time
        return eng
    eng = run_virtual(main)
    assert eng._events == [pytest.approx(0.1 + 5e-7)]   # still pending: the loop's next boundary


def test_an_event_before_the_boundary_the_loop_settles_at_is_decided_first(tmp_path):
    """The loop settles at a request's ready time the clock has not reached (its store read
    ended ahead of the model). A later request's read that is ready sooner reports its ready
    time meanwhile: that event is not this boundary's. The settle returns it, still pending, and
    the loop decides at it first; dropped as this boundary's, that request was admitted at the
    other's ready time, later by however much sooner the host finished the other read (a
    replay's two runs differed so: one request waited 0.132 model s in one of them)."""
    async def main(loop_clock):
        clock = held_clock(tmp_path, loop_clock)
        eng = make_engine(clock)
        eng._hold("read", 0.2)                # a store read in flight, modelled to end at 0.2
        task = asyncio.ensure_future(eng._settle(0.5))      # the clock is near 0
        await asyncio.sleep(eng.wall(0.1) - clock())
        eng._event(0.2)                       # the read ends: ready at 0.2
        eng._hold("read", None)
        return eng, await asyncio.wait_for(task, 0.1)        # 1 model s of virtual wall time
    eng, early = run_virtual(main)
    assert early == pytest.approx(0.2)
    assert eng._events == [pytest.approx(0.2)]               # pending: the loop's next boundary
