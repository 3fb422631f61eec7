"""The engine driver's store read path and its clock holds, its construction, ``submit`` and the
loop's death, on the virtual clock of test_engine.py. Test model (test_scheduler.py):

    RAM tier  lookup 1 ms, load_s(b) = 0.001 + 0.001 b;   disk tier  lookup 2 ms,
    load_s(b) = 0.002 + 0.004 b, its staging through the RAM store (0.001 b; none for direct
    disk) overlapping the slower disk read;   block 16 tokens;   time scale 10 (wall = t0 +
    model / 10).

A request is submitted and admitted at model time 0 without starting the driver's loop, so only
its read path runs; the holds it publishes are recorded in model seconds."""
from __future__ import annotations

import asyncio
import logging

import pytest

from adev.emulator.engine import SPIN_WALL_S, Engine
from adev.emulator.metrics import Metrics
from adev.emulator.pool import block_hashes
from adev.emulator.state import Request
from adev.emulator.store import LoadResult
from tests.emulator.test_engine import make_engine
from tests.emulator.test_scheduler import config, tokens, value
from tests.emulator.vclock import FakeStore, run_virtual

S = 10.0


class Holds:
    """Records the engine's holds as (key, model time or None)."""

    def __init__(self, eng: Engine) -> None:
        self.eng, self.log = eng, []

    def set(self, key, until):
        self.log.append((key, None if until is None else round((until - self.eng.t0) * S, 9)))


class Store(FakeStore):
    """FakeStore that records its calls; ``exists_none``: the lookup fails."""

    def __init__(self, *a, exists_none=False, lease_retries=0, **k) -> None:
        super().__init__(*a, **k)
        self.calls, self.exists_none, self.lease_retries = [], exists_none, lease_retries

    async def exists(self, keys, op="lookup"):
        self.calls.append(("exists", len(keys)))
        got = await super().exists(keys, op)
        return None if self.exists_none else got

    async def tiers(self, keys):
        self.calls.append(("tiers", len(keys)))
        return await super().tiers(keys)

    async def load(self, keys, granted_at=None):
        self.calls.append(("load", len(keys)))
        self.granted_at = granted_at
        res = await super().load(keys, granted_at)
        return LoadResult(loaded=res.loaded, error=res.error, lease_retries=self.lease_retries)


def read(store: Store, prompt: list[int], tiers: dict[int, str], busy_until: float | None = None,
         **over):
    """Admit one request for ``prompt`` at model time 0 with block b held by tier ``tiers[b]``
    (by its chunk's key: the hash of the chunk's last block); run its read path to the end.
    ``busy_until``: the disk device is busy until this model time (other endpoints' reads)."""
    async def main(clock):
        hs = block_hashes(prompt)
        for b, tier in tiers.items():
            store.tier[store.keys([hs[b]])[0]] = tier
        eng = make_engine(clock, store, **over)
        if busy_until is not None:
            eng.device.reserve(eng.t0, eng.wall(busy_until) - eng.t0)
        holds = eng._holds = Holds(eng)
        r = Request(rid="a", prompt=prompt, out_ids=[7], finish_reason="stop")
        eng.submit(r)
        eng.sched.admit(0.0)
        await asyncio.gather(*eng._bg)
        # the request's own holds (the engine's event and plan holds are tested elsewhere)
        return eng, r, [(True, t) for k, t in holds.log if k == id(r)]
    return run_virtual(main)


P = tokens(5000, 100)     # 6 full blocks below the last token: the lookup covers blocks 0-5


def test_read_path_holds_the_clock_at_each_modelled_end():
    store = Store(io_s=0.001)            # each store call: 0.001 wall s = 0.01 model s
    eng, r, holds = read(store, P, {0: "ram", 1: "ram", 2: "disk", 3: "disk"})
    # lookup of 6 keys, 4 leading hits; tiers of and load of those 4
    assert store.calls == [("exists", 6), ("tiers", 4), ("load", 4)]
    # held at: the lookup's end 0.001; once the 4 hits are known the cheaper of all-RAM
    # 0.001 + (0.001 + 0.004) = 0.006 and all-disk 0.001 + (0.002 + 0.016) = 0.019 (staging
    # 0.004 overlapping); once the tiers are known 2 RAM + 2 disk: 0.001 + (0.001 + 0.002) +
    # (0.002 + 0.008) = 0.014; released
    assert holds == [(True, 0.001), (True, 0.006), (True, 0.014), (True, None)]
    assert (r.ram_blocks, r.disk_blocks, r.store_errors) == (2, 2, 0)
    assert r.t_ready == pytest.approx(0.014) and eng._events[-1] == pytest.approx(0.014)
    # the real read: lookup 0.001 wall, then tier query and load side by side 0.001: x 10
    assert r.read_host_s == pytest.approx(0.02)
    assert value(eng.sched, "adev_emulator_store_hit_blocks_total", tier="ram") == 2
    assert value(eng.sched, "adev_emulator_store_hit_blocks_total", tier="disk") == 2
    assert value(eng.sched, "vllm:external_prefix_cache_hits_total") == 4 * 16
    assert value(eng.sched, "adev_emulator_store_lease_retries_total") == 0
    # the load's lease clock starts when the read was granted, before the lookup
    assert store.granted_at == eng.t0


def test_failed_load_charges_the_blocks_that_arrived():
    store = Store(lease_retries=2)
    store.fail_load_after = 3            # blocks 0-2 arrive, block 3 (disk) fails
    eng, r, holds = read(store, P, {0: "ram", 1: "ram", 2: "disk", 3: "disk"})
    # charged: 2 RAM + 1 disk: 0.001 + 0.003 + (0.002 + 0.004) = 0.010
    assert (r.ram_blocks, r.disk_blocks, r.store_errors) == (2, 1, 1)
    assert r.t_ready == pytest.approx(0.010)
    assert holds[-2:] == [(True, 0.014), (True, None)]
    assert value(eng.sched, "adev_emulator_store_load_failed_blocks_total", tier="disk") == 1
    assert value(eng.sched, "adev_emulator_store_lease_retries_total") == 2
    assert r.read_host_s == 0.0          # instant store: no wall time passed


def test_chunk_loads_count_the_blocks_of_the_objects_that_arrived():
    store = Store(chunk_blocks=2)
    store.fail_load_after = 1            # chunk 0 (blocks 0-1) arrives, chunk 1 fails
    # chunks: 0 = blocks 0-1 (key of block 1), 1 = blocks 2-3 (key of block 3), 2 = blocks 4-5
    eng, r, holds = read(store, P, {1: "ram", 3: "disk"})
    assert store.calls == [("exists", 3), ("tiers", 2), ("load", 2)]
    assert (r.store_hit_blocks, r.ram_blocks, r.disk_blocks, r.store_errors) == (4, 2, 0, 1)
    # held as in the first test (2 RAM + 2 disk blocks hit); charged 2 RAM: 0.001 + 0.003
    assert holds == [(True, 0.001), (True, 0.006), (True, 0.014), (True, None)]
    assert r.t_ready == pytest.approx(0.004)


def test_read_path_hold_takes_the_cheaper_tier_bound():
    """A disk tier with no lookup latency and 1e10 B/s (load_s(b) = 0.0001 b; staged, the
    slower RAM hop's 0.001 b): reading every hit from disk is cheaper than from RAM (whose
    lookup costs 1 ms), so the hold once the hits are known is the all-disk bound."""
    from adev.emulator.state import TierCost
    store = Store()
    eng, r, holds = read(store, P, {0: "ram", 1: "ram", 2: "disk", 3: "disk"},
                         disk_tier=TierCost("disk", 0.0, 1e10))
    # all RAM 0.001 + (0.001 + 0.004) = 0.006; all disk 0.001 + max(0.0004, staging 0.004) =
    # 0.005; then 2 RAM + 2 disk: 0.001 + (0.001 + 0.002) + max(0.0002, staging 0.002) = 0.006
    assert holds == [(True, 0.001), (True, 0.005), (True, 0.006), (True, None)]
    assert r.t_ready == pytest.approx(0.006)


def test_disk_only_charges_every_hit_at_the_disk_tier_without_a_tier_query():
    store = Store()
    eng, r, holds = read(store, P, {b: "ram" for b in range(4)}, disk_only=True)
    assert store.calls == [("exists", 6), ("load", 4)]
    # disk lookup 0.002; the cheaper bound: all RAM 0.002 + 0.005 = 0.007 (all disk: 0.020);
    # then 4 disk blocks: 0.002 + 0.002 + 0.016 = 0.020
    assert holds == [(True, 0.002), (True, 0.007), (True, 0.020), (True, None)]
    assert (r.ram_blocks, r.disk_blocks) == (0, 4) and r.t_ready == pytest.approx(0.020)


def test_disk_read_queues_behind_the_busy_disk_device():
    """The device is busy with another endpoint's read until model 0.1. 2 RAM + 2 disk hits:
    the disk part arrives after the lookup 0.001, the RAM load 0.003 and the disk lookup 0.002,
    at 0.006; it waits until 0.1 and transfers 2 x 0.004 = 0.008 (its staging, 0.002,
    overlapping): ready at 0.108, of which 0.094 is the wait."""
    store = Store()
    eng, r, holds = read(store, P, {0: "ram", 1: "ram", 2: "disk", 3: "disk"}, busy_until=0.1)
    assert r.disk_wait_s == pytest.approx(0.094)
    assert r.load_s == pytest.approx(0.003 + 0.002 + 0.094 + 0.008)
    assert r.t_ready == pytest.approx(0.108)
    # the clock is held at the ready time including the wait
    assert holds[-2:] == [(True, pytest.approx(0.108)), (True, None)]
    assert value(eng.sched, "adev_emulator_disk_queue_seconds_total") == pytest.approx(0.094)
    # the device is now busy until the end of this read's transfer, model 0.108
    assert (eng.device.reserve(eng.t0, 0.0) == eng.t0
            and eng.device.reserve(eng.t0, 1e-9) == pytest.approx(eng.wall(0.108) + 1e-9))


def test_ram_hits_and_an_idle_device_do_not_wait():
    store = Store()
    eng, r, holds = read(store, P, {0: "ram", 1: "ram"}, busy_until=0.1)   # no disk block
    assert r.disk_wait_s == 0.0 and r.t_ready == pytest.approx(0.001 + 0.003)
    eng, r, holds = read(Store(), P, {0: "ram", 1: "ram", 2: "disk", 3: "disk"},
                         busy_until=0.006)  # free exactly when the disk part arrives
    assert r.disk_wait_s == 0.0 and r.t_ready == pytest.approx(0.014)


def test_failed_lookup_and_no_hit_read_nothing():
    store = Store(exists_none=True)
    eng, r, holds = read(store, P, {0: "ram"})
    assert store.calls == [("exists", 6)]
    assert holds == [(True, 0.001), (True, None)]
    assert (r.store_hit_blocks, r.ram_blocks, r.store_errors) == (0, 0, 1)
    assert r.t_ready == pytest.approx(0.001)
    store = Store()
    eng, r, holds = read(store, P, {1: "ram"})       # block 0 missing: no leading hit
    assert store.calls == [("exists", 6)] and holds == [(True, 0.001), (True, None)]
    assert r.store_errors == 0 and r.t_ready == pytest.approx(0.001)
    assert value(eng.sched, "vllm:external_prefix_cache_queries_total") == 100


def test_prompt_without_a_full_block_to_look_up():
    store = Store()
    eng, r, holds = read(store, tokens(0, 16), {})   # 16 tokens: no whole block below the last
    assert store.calls == [] and r.store_keys_looked_up == 0
    assert holds == [(True, 0.001), (True, None)]


# ------------------------------------------------------------------ holds on a shared clock
def test_hold_and_preparing_publish_wall_times(tmp_path):
    from adev.clock import HeldClock
    src = [100.0]
    clock = HeldClock(HeldClock.create(tmp_path / "clock").path, source=lambda: src[0])
    cfg = config()
    eng = Engine(cfg, Metrics("m", 16, cfg.capacity_blocks, True, 65536), clock=clock, slot=2)
    assert eng.held is clock and eng.real is clock.source and eng._holds.slot == 2
    t0 = eng.t0
    eng._hold("k", 0.5)                  # model 0.5 = wall t0 + 0.05
    src[0] += 1.0
    assert clock() == pytest.approx(t0 + 0.05)
    eng._hold("k", None)                 # released: the clock runs again (held 0.95 s)
    assert clock() == pytest.approx(t0 + 0.05)
    src[0] += 0.5
    assert clock() == pytest.approx(t0 + 0.55)
    with eng.preparing("req"):           # held where it is while the block runs
        src[0] += 2.0
        assert clock() == pytest.approx(t0 + 0.55)
    assert clock() == pytest.approx(t0 + 0.55)
    src[0] += 0.25
    assert clock() == pytest.approx(t0 + 0.8)


def test_plain_clock_has_no_holds():
    eng = make_engine(lambda: 3.0)
    assert eng.held is None and eng._holds is None and eng.real() == 3.0
    eng._hold("k", 1.0)                  # no-op
    with eng.preparing("req"):
        pass


# ------------------------------------------------------------------ construction, submit, death
def test_engine_defaults_and_stream_interval_check():
    cfg = config()
    m = Metrics("m", 16, cfg.capacity_blocks, True, 65536)
    eng = Engine(cfg, m, clock=lambda: 7.0)
    assert (eng.t0, eng._t_free, eng.slot, eng.spin_wall_s) == (7.0, 0.0, 0, SPIN_WALL_S)
    assert SPIN_WALL_S == 0.0015
    assert eng.dead is None and eng.on_finish is None and eng._task is None and not eng._bg
    assert eng.sched.has_store is False and Engine(cfg, m, store=FakeStore()).sched.has_store
    assert eng.sched.on_tokens == eng._send and eng.sched.on_finish == eng._finished
    assert eng.sched.on_load == eng._start_read and eng.sched.on_event == eng._event
    assert Engine(config(stream_interval=0), m).cfg.stream_interval == 0
    with pytest.raises(ValueError) as e:
        Engine(config(stream_interval=-1), m)
    assert str(e.value) == ("stream_interval: expected an integer >= 0 (tokens per stream event, "
                            "0 = one event per macro step), got -1")


def test_submit_counts_model_time_from_the_arrival():
    eng = make_engine(lambda: 5.0)
    r = Request(rid="a", prompt=tokens(0, 32), out_ids=[7], finish_reason="stop")
    eng.submit(r, arrival_mono=5.025)                # 0.025 wall s after t0: model 0.25
    assert r.arrival_mono == 5.025 and r.t_arrival == pytest.approx(0.25)
    assert eng._events == [pytest.approx(0.25)] and eng._wake.is_set()
    r2 = Request(rid="b", prompt=tokens(0, 32), out_ids=[7], finish_reason="stop")
    eng.submit(r2)                                   # arrives now: model 0
    # queued in the order of arrival in model time, not of submission
    assert r2.arrival_mono == 5.0 and r2.t_arrival == 0.0 and list(eng.waiting) == [r2, r]


def test_engine_death_is_recorded_and_cancellation_is_not(caplog):
    async def main():
        eng = make_engine(lambda: 0.0)

        def boom(t):
            raise RuntimeError("boom")
        eng.sched.admit = boom
        with caplog.at_level(logging.ERROR, logger="adev.emulator.engine"):
            with pytest.raises(RuntimeError):
                await eng._run()
        quiet = make_engine(lambda: 0.0)
        quiet.start()
        await asyncio.sleep(0)           # the loop runs until it waits for work
        await quiet.stop()
        return eng, quiet
    eng, quiet = asyncio.run(main())
    assert isinstance(eng.dead, RuntimeError) and str(eng.dead) == "boom"
    assert [r.getMessage() for r in caplog.records] == ["engine died"]
    assert quiet.dead is None and quiet._task.cancelled()


def test_save_of_chunk_objects_counts_blocks():
    """One save of objects of 4 blocks: 3 put, 2 refused, 1 already there -> 12, 8 and 4 blocks
    (refused bytes: 8 blocks x 1 MB)."""
    from adev.emulator.store import SaveResult

    class Store:
        async def save(self, keys):
            return SaveResult(put=3, refused=2, skipped=1)

    eng = make_engine(lambda: 0.0, store=Store())
    r = Request(rid="a", prompt=tokens(0, 32), out_ids=[7], finish_reason="stop")
    asyncio.run(eng._save(r, ["k1"], 4))
    assert (r.put_blocks, r.put_refused_blocks, r.store_errors) == (12, 8, 0)
    assert value(eng.sched, "adev_emulator_store_put_blocks_total") == 12
    assert value(eng.sched, "adev_emulator_store_put_refused_blocks_total") == 8
    assert value(eng.sched, "adev_emulator_store_put_refused_bytes_total") == 8_000_000
    assert value(eng.sched, "adev_emulator_store_put_skipped_blocks_total") == 4


def test_held_clock_stops_a_macro_steps_stream_while_a_read_is_behind(tmp_path):
    """a (30 tokens, 8 out) streams its macro steps token by token while b's lookup (0.005 wall s
    of real I/O, modelled 0.001) holds the shared clock: each of a's tokens still reaches its
    client at its model time. No store hits: each request's read is its lookup.

    a: lookup 0.001, prefill 0.030, first token decode(1, 30) 0.0113 -> 0.0423; its macro step
    is cut by b's arrival (0.05) after the step in progress: 0.0423 + 0.01131 -> 0.05361, where b
    is admitted; b's lookup holds the clock at 0.05461 while a's next step (ctx 32: 0.01132)
    streams -> 0.06493, cut there by b's ready time 0.05461; b's 40 tokens with a's 4th token:
    0.040 + 0.01133 -> 0.11626; b's first token with a's 5th: decode(2, 34 + 40) 0.01274 -> 0.129."""
    from adev.clock import HeldClock
    from tests.emulator.test_engine import held_client

    async def main(loop_clock):
        clock = HeldClock(HeldClock.create(tmp_path / "clock").path, source=loop_clock)
        eng = make_engine(clock, FakeStore(io_s=0.005))
        eng.start()
        a = asyncio.create_task(held_client(eng, clock, "a", tokens(1000, 30), 8, 0.0))
        b = asyncio.create_task(held_client(eng, clock, "b", tokens(5000, 40), 1, 0.05))
        return await a, await b
    (ra, ga), (rb, gb) = run_virtual(main)
    assert rb.t_admit == pytest.approx(0.05361) and rb.t_ready == pytest.approx(0.05461)
    assert [t for _, t in ga[:5]] == pytest.approx([0.0423, 0.05361, 0.06493, 0.11626, 0.129])
    assert gb == [(1, pytest.approx(0.129))] and sum(n for n, _ in ga) == 8


def test_the_lookup_is_held_from_the_admission_before_the_read_task_runs():
    """The read path's task first runs at a later turn of the loop; on a loaded host that turn
    can come after the lookup's modelled end. The hold at the lookup's end (0.001) is therefore
    taken at admission, or model time would pass it and run unheld through the real lookup."""
    async def main(clock):
        eng = make_engine(clock, Store(io_s=0.001))
        holds = eng._holds = Holds(eng)
        r = Request(rid="a", prompt=P, out_ids=[7], finish_reason="stop")
        eng.submit(r)
        eng.sched.admit(0.0)
        at_admission = [t for k, t in holds.log if k == id(r)]
        await asyncio.gather(*eng._bg)
        return at_admission, [t for k, t in holds.log if k == id(r)]
    at_admission, after = run_virtual(main)
    assert at_admission == [0.001]
    assert after == [0.001, None]                  # the lookup found nothing: released


def test_turns_follow_the_admission_order():
    from adev.emulator.engine import Turns

    async def main():
        t, order = Turns(), []
        a, b, c = t.ticket(), t.ticket(), t.ticket()

        async def take(n, delay):
            await asyncio.sleep(delay)
            await t.wait(n)
            order.append(n)
            t.done(n)
        # c's and b's answers come first; a finishes without a turn (no disk blocks)
        task_b, task_c = asyncio.create_task(take(b, 0.01)), asyncio.create_task(take(c, 0.0))
        await asyncio.sleep(0.02)
        assert order == []
        t.done(a)
        t.done(a)                       # idempotent
        await asyncio.gather(task_b, task_c)
        assert order == [b, c]
        d = t.ticket()
        await asyncio.wait_for(t.wait(d), 1)   # nothing before it: at once
    asyncio.run(main())


def test_serial_staging_adds_the_hop_after_the_disk_read():
    """``staging_serial``: a staged disk part is its disk read then its hop through CPU memory,
    not the slower of the two. 2 RAM + 2 disk hits: lookup 0.001, RAM load 0.001 + 0.002, disk
    part 0.002 + 2 x 0.004 + 2 x 0.001 = 0.012: ready at 0.016 (0.014 with the hops
    overlapping). The cheaper bound once the hits are known: all RAM 0.006 (all disk 0.001 +
    0.002 + 0.016 + 0.004 = 0.023)."""
    eng, r, holds = read(Store(), P, {0: "ram", 1: "ram", 2: "disk", 3: "disk"},
                         staging_serial=True)
    assert holds == [(True, 0.001), (True, 0.006), (True, 0.016), (True, None)]
    assert r.load_s == pytest.approx(0.003 + 0.012) and r.t_ready == pytest.approx(0.016)
    # behind a device busy until 0.1: the disk read arrives at 0.006, runs 0.1-0.108, and the
    # hop follows it: ready at 0.110, of which 0.094 is the wait
    eng, r, holds = read(Store(), P, {0: "ram", 1: "ram", 2: "disk", 3: "disk"}, busy_until=0.1,
                         staging_serial=True)
    assert r.disk_wait_s == pytest.approx(0.094) and r.t_ready == pytest.approx(0.110)
    # direct disk has no hop: serial or not, 4 disk blocks cost 0.002 + 0.002 + 0.016
    eng, r, holds = read(Store(), P, {b: "ram" for b in range(4)}, disk_only=True,
                         staging_serial=True)
    assert r.t_ready == pytest.approx(0.020)


Q = tokens(9000, 100)     # another prompt, 6 full blocks as well


def read_two(threads: int, tiers: dict[int, str], **over):
    """Admit a request for ``P`` and then one for ``Q`` at model time 0 on an engine with
    ``threads`` load threads (and the config's ``over``), both prompts' blocks held by
    ``tiers``; run both read paths."""
    store = Store()

    async def main(clock):
        for prompt in (P, Q):
            hs = block_hashes(prompt)
            for b, tier in tiers.items():
                store.tier[store.keys([hs[b]])[0]] = tier
        eng = make_engine(clock, store, load_threads=threads, **over)
        rs = [Request(rid=n, prompt=p, out_ids=[7], finish_reason="stop")
              for n, p in (("a", P), ("b", Q))]
        for r in rs:
            eng.submit(r)
        eng.sched.admit(0.0)
        await asyncio.gather(*eng._bg)
        return rs
    return run_virtual(main)


def test_one_load_thread_serves_the_loads_in_admission_order():
    """2 RAM hits each: lookup 0.001, load 0.001 + 0.002 = 0.003. One thread: the first load runs
    0.001-0.004, the second waits for it (0.003) and runs 0.004-0.007; two threads, or none
    (no limit), run both at once."""
    a, b = read_two(1, {0: "ram", 1: "ram"})
    assert (a.t_ready, a.load_wait_s) == (pytest.approx(0.004), 0.0)
    assert b.load_wait_s == pytest.approx(0.003)
    assert b.load_s == pytest.approx(0.006) and b.t_ready == pytest.approx(0.007)
    for threads in (2, 0):
        a, b = read_two(threads, {0: "ram", 1: "ram"})
        assert a.t_ready == b.t_ready == pytest.approx(0.004)
        assert a.load_wait_s == b.load_wait_s == 0.0


def test_a_load_thread_is_held_through_its_disk_wait():
    """2 RAM + 2 disk hits each (ready at 0.014 alone). One thread and one disk device: the
    first load holds the thread until 0.014; the second waits 0.013 for it, and its disk part
    (arriving at 0.014 + 0.005) finds the device free (the first's read ended at 0.014): ready
    at 0.027."""
    a, b = read_two(1, {0: "ram", 1: "ram", 2: "disk", 3: "disk"})
    assert a.t_ready == pytest.approx(0.014)
    assert (b.load_wait_s, b.disk_wait_s) == (pytest.approx(0.013), 0.0)
    assert b.t_ready == pytest.approx(0.027)


def test_shared_staging_keeps_the_device_through_the_hop():
    """``staging_shared``: the disk owner's one staging buffer holds a staged batch through its
    read and its hop, so the next staged load's disk part waits for both. 2 RAM + 2 disk hits
    each, no load-thread limit, both admitted at 0: alone, ready at 0.016 (lookup 0.001, RAM
    0.003, disk 0.002 + read 0.008 + hop 0.002); both disk parts arrive at 0.006. Serial, the
    device serves a's read 0.006-0.014 and b's 0.014-0.022 (wait 0.008, ready 0.024); shared,
    a keeps it until 0.016 and b reads 0.016-0.024 then hops (wait 0.010, ready 0.026).
    Direct disk has no hop: shared or not, b waits for a's read alone (0.016)."""
    tiers = {0: "ram", 1: "ram", 2: "disk", 3: "disk"}
    a, b = read_two(0, tiers, staging_serial=True)
    assert a.t_ready == pytest.approx(0.016)
    assert (b.disk_wait_s, b.t_ready) == (pytest.approx(0.008), pytest.approx(0.024))
    a, b = read_two(0, tiers, staging_serial=True, staging_shared=True)
    assert (a.t_ready, a.disk_wait_s) == (pytest.approx(0.016), 0.0)
    assert (b.disk_wait_s, b.t_ready) == (pytest.approx(0.010), pytest.approx(0.026))
    # direct disk: 4 disk hits each, lookup 0.002 + 0.002 + 4 x 0.004 = 0.020 alone; both
    # reads arrive at 0.004, b's waits 0.016 for a's
    for shared in (False, True):
        a, b = read_two(0, {b: "ram" for b in range(4)}, disk_only=True, staging_serial=True,
                        staging_shared=shared)
        assert a.t_ready == pytest.approx(0.020)
        assert (b.disk_wait_s, b.t_ready) == (pytest.approx(0.016), pytest.approx(0.036))
