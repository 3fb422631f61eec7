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

MODEL = "Qwen3-Coder-30B-A3B-Instruct-FP8"


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
    now = [100.0]
    present = {"a": 1, "b": 1, "c": 0}
    calls: list[list[str]] = []

    async def renew(keys):
        calls.append(list(keys))
        return [present[k] for k in keys]
    leases = ModelLeases(30.0, 1.0, lambda: now[0], renew)
    assert leases.period_s == 0.5
    leases.granted(["a", "b", "c", "x"], [1, 1, 1, 0])     # no lease on a miss
    assert leases.until == {"a": 130.0, "b": 130.0, "c": 130.0}
    now[0] = 120.0
    leases.granted(["b"], [1])                             # a later grant: 150
    assert await leases.renew_once() == 2                  # c is gone from the store
    assert sorted(calls[-1]) == ["a", "b", "c"] and set(leases.until) == {"a", "b"}
    now[0] = 130.0                                         # a's model lease has ended
    assert await leases.renew_once() == 1 and calls[-1] == ["b"]
    now[0] = 150.0
    assert await leases.renew_once() == 0 and len(calls) == 2 and leases.until == {}
    assert leases.renewed == 3


def test_a_round_of_renewals_over_one_real_lease_after_the_last_is_a_lapse():
    """Real lease 1 s, renewals every 0.5 s: a round that starts more than 1 s after the one
    before came after the master's lease could have ended."""
    wall = [10.0]
    seen: list[int] = []
    leases = ModelLeases(30.0, 1.0, lambda: 0.0, None)
    leases.wall = lambda: wall[0]
    leases.on_lapse = lambda: seen.append(leases.lapses)
    last = 10.0
    for gap, lapses in ((0.5, 0), (1.0, 0), (1.01, 1), (0.6, 1), (3.0, 2)):
        wall[0] = last + gap
        assert leases._round_at(last) == wall[0]
        last = wall[0]
        assert leases.lapses == lapses
    assert seen == [1, 2]


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
