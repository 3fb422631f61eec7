"""Store leases that last their TTL in model time (adev.emulator.leases): the split of the
master's lease, the renewal rule, and, on the real master, a key kept from eviction while model
time stands still."""
from __future__ import annotations

import asyncio
import shutil

import pytest

from adev.emulator.leases import ModelLeases, lease_split
from adev.stack.commands import master_lease_ms
from adev.stack.configs import small_config
from tests.emulator.helpers import Master, tmpdir

MODEL = "Qwen3-Coder-30B-A3B-Instruct"


@pytest.mark.parametrize("lease,scale,k", [
    (300.0, 10.0, 30),   # 30 s real: thirty leases of 1 s
    (300.0, 2.0, 30),    # 150 s real: thirty of 5 s
    (300.0, 100.0, 30),  # 3 s real: thirty of 0.1 s
    (5.0, 10.0, 5),      # the default lease at the default scale: 0.5 s real, five of 0.1 s
    (5.0, 2.0, 25),      # 2.5 s real: 25 of 0.1 s
    (5.0, 20.0, 1),      # 0.25 s real: two of 0.1 s would overshoot by half: no split
    (2.0, 10.0, 1),
])
def test_lease_split(lease, scale, k):
    assert lease_split(lease, scale) == k
    assert lease_split(lease, scale, "free") == 1   # model time is wall time x scale: exact


def test_the_master_gets_the_split_lease():
    cfg = small_config("/tmp/x", time_scale=10.0, store={"lease_ttl_s": 300.0})
    assert master_lease_ms(cfg) == 1000
    cfg = small_config("/tmp/x", time_scale=10.0, store={"lease_ttl_s": 5.0})
    assert master_lease_ms(cfg) == 100
    cfg = small_config("/tmp/x", time_scale=20.0, store={"lease_ttl_s": 5.0})
    assert master_lease_ms(cfg) == 250
    cfg = small_config("/tmp/x", time_scale=10.0, model_clock="free", store={"lease_ttl_s": 300.0})
    assert master_lease_ms(cfg) == 30_000


async def test_live_leases_are_renewed_and_ended_or_absent_ones_forgotten():
    now, wall = [100.0], [0.0]          # model time runs at 10 model s per wall s
    present = {"a": 1, "b": 1, "c": 0}
    calls: list[list[str]] = []

    async def renew(keys):
        calls.append(list(keys))
        return [present[k] for k in keys]
    leases = ModelLeases(30.0, 1.0, lambda: now[0], renew)
    leases.wall = lambda: wall[0]
    assert leases.period_s == 0.5
    leases.granted(["a", "b", "c", "x"], [1, 1, 1, 0])     # no lease on a miss
    assert leases.until == {"a": 130.0, "b": 130.0, "c": 130.0}
    now[0], wall[0] = 120.0, 2.0
    leases.granted(["b"], [1])                             # a later grant: 150
    assert await leases.renew_once() == 2                  # c is gone from the store
    assert sorted(calls[-1]) == ["a", "b", "c"] and set(leases.until) == {"a", "b"}
    assert leases.ends == {"a": 3.0, "b": 3.0}
    now[0], wall[0] = 130.0, 3.0                           # a's model lease has ended
    assert await leases.renew_once() == 1 and calls[-1] == ["b"]   # 150 > 130 + 10 x 1 / 2
    now[0], wall[0] = 150.0, 5.0
    assert await leases.renew_once() == 0 and len(calls) == 2 and leases.until == {}
    assert leases.renewed == 3 and leases.ends == {}


async def _rounds(model_at, until_s: float = 30.0) -> list[float]:
    """One key granted at wall 0 (real lease 1 s, rounds every 0.5 s), model time ``model_at(w)``
    at wall time w: the wall times of the rounds that renew it, up to wall 5 s."""
    wall = [0.0]
    leases = ModelLeases(until_s, 1.0, lambda: model_at(wall[0]), None)
    leases.wall = lambda: wall[0]
    renewed: list[float] = []

    async def renew(keys):
        renewed.append(wall[0])
        return [1] * len(keys)
    leases._renew = renew
    leases.granted(["k"], [1])
    for i in range(1, 11):
        wall[0] = 0.5 * i
        await leases.renew_once()
    return renewed


async def test_a_lease_is_renewed_only_where_that_ends_it_nearer_its_model_end():
    """Model time at 10 model s per wall s, a 30 model s lease: the rounds at 0.5, 1.0, 1.5 and
    2.0 renew it (at 2.0: 30 > 20 + 10 x (1 + 0.5) / 2 = 27.5), the round at 2.5 does not
    (30 > 25 + 10 x (1 + 0.5) / 2 = 32.5 is false): the master's lease ends at wall 3.0, model
    30, exactly the model lease's end. Renewing every round with until > now would also renew
    at 2.5 and end it at model 35."""
    assert await _rounds(lambda w: 10.0 * w) == [0.5, 1.0, 1.5, 2.0]
    # at 2 model s per wall s (a scale of 2, or a held clock) the lease is 15 wall s: every
    # round up to wall 5 renews it
    assert await _rounds(lambda w: 2.0 * w) == [0.5 * i for i in range(1, 11)]


async def test_while_model_time_stands_still_every_live_key_is_renewed():
    """Model time held at 10 from wall 0.7 on (a held clock): the rate falls towards 0 and the
    key, whose model lease ends at 30, is renewed at every round however long the hold."""
    assert await _rounds(lambda w: min(10.0 * w, 10.0)) == [0.5 * i for i in range(1, 11)]


def test_a_round_that_ends_over_one_real_lease_after_the_last_began_is_a_lapse():
    """Real lease 1 s, rounds every 0.5 s. A round's leases are granted between its start and
    its end, so a round that ends more than 1 s after the round before started may come after
    the master ended one. The wall clock here is the loop's virtual clock: a round that starts
    on time but whose renewal takes 0.7 s (0.5 + 0.7 > 1) is a lapse; one of 0.4 s is not."""
    from tests.emulator.vclock import run_virtual
    took = [0.0, 0.4, 0.7, 0.0]                 # how long each round's renewal call takes

    async def main(clock):
        loop = asyncio.get_running_loop()

        async def renew(keys):
            await asyncio.sleep(took.pop(0) if took else 0.0)
            return [1] * len(keys)
        leases = ModelLeases(30.0, 1.0, lambda: 0.0, renew)
        leases.wall = loop.time
        leases.granted(["k"], [1])
        seen: list[float] = []
        t0 = loop.time()
        leases.on_lapse = lambda: seen.append(round(loop.time() - t0, 6))
        leases.start()
        await asyncio.sleep(3.5)
        await leases.close()
        return leases.lapses, seen
    lapses, seen = run_virtual(main)
    # rounds start at 0.5, 1.0, 1.9, 3.1 and end at 0.5, 1.4, 2.6, 3.1: the third ends 1.6 s after
    # the second began (a lapse); the fourth ends 1.2 s after the third began (a lapse too)
    assert (lapses, seen) == (2, [2.6, 3.1])


async def _evicted_after_a_held_stretch(w, keep: bool) -> int:
    """Keys leased at model time 0, then 2.5 wall s with model time standing still (a held clock)
    under a 1 s real lease, then a flood of puts twice the store's size: how many of the keys
    the flood evicted. ``keep``: renew the model leases (ModelLeases) or not."""
    from adev.emulator.store import MooncakeTier, StoreSettings
    m = Master(lease_ms=1000, offload=False, workdir=w).start()
    st = MooncakeTier(StoreSettings(master=m.addr, model_name=MODEL, payload_bytes=1572864 // 64,
                                    segment_bytes=int(1.1e9 / 64), lease_s=1.0))  # ~700 blocks
    leases = ModelLeases(300.0, 1.0, lambda: 0.0, st.renew)
    if keep:
        st.leases = leases
    try:
        await st.start()
        kept = st.keys(list(range(20)))
        assert (await st.save(kept)).put == 20
        assert await st.exists(kept) == [1] * 20           # the lookup that leases them
        if keep:
            leases.start()
        await asyncio.sleep(2.5)                           # model time stands still
        for i in range(1, 71):                             # 1,400 blocks into ~700
            await st.save(st.keys([i * 1000 + j for j in range(20)]))
            await asyncio.sleep(0.02)
        await leases.close()
        left = await st.renew(kept)
        assert left is not None
        return 20 - sum(left)
    finally:
        await st.close()
        m.kill()


@pytest.mark.integration
async def test_a_model_lease_outlives_the_masters_real_lease_while_model_time_stands_still():
    w = tmpdir()
    try:
        assert await _evicted_after_a_held_stretch(w, keep=False) > 0    # the real lease ran out
        assert await _evicted_after_a_held_stretch(w, keep=True) == 0
    finally:
        shutil.rmtree(w, ignore_errors=True)
