"""GPU prefix pool model: LRU of free blocks, reverse-order frees, shared references (values
worked out by hand), and agreement with the emulator's own pool."""
import numpy as np

from adev.emulator.pool import PrefixPool
from adev.whatif.gpu import GpuPool


def a(*x):
    return np.array(x, dtype=np.int64)


def test_reverse_order_free_evicts_tail_first():
    p = GpuPool(4, 10)
    p.admit(a(0, 1, 2), 0)
    assert (p.n_cached, p.used) == (3, 3)
    p.release(a(0, 1, 2))
    assert (p.used, p.n_free) == (0, 3)
    # 2 new blocks, 1 empty: one eviction, the tail block 2 (freed first)
    p.admit(a(3, 4), 0)
    assert p.evicted_blocks == 1
    assert p.lookup(a(0, 1, 2), 3) == 2
    # LRU order now 1, 0 (from the first release), then 4, 3: one more block evicts block 1
    p.release(a(3, 4))
    p.admit(a(5), 0)
    assert p.evicted_blocks == 2
    assert p.lookup(a(0, 1), 2) == 1
    assert p.lookup(a(4, 3), 2) == 2


def test_referenced_blocks_are_never_evicted():
    p = GpuPool(4, 10)
    p.admit(a(0, 1), 0)              # held
    p.admit(a(2, 3, 4), 0)           # 2 empty, nothing free: one block over
    assert p.overflow_blocks == 1
    assert p.evicted_blocks == 0
    assert p.lookup(a(0, 1), 2) == 2


def test_hit_on_free_block_takes_it_out_of_the_lru():
    p = GpuPool(4, 10)
    p.admit(a(0, 1), 0)
    p.release(a(0, 1))               # LRU: 1, 0
    p.admit(a(0), 1)                 # hit on 0: referenced again
    p.admit(a(5, 6, 7), 0)           # 2 empty + 1 free (block 1) -> evicts 1 only
    assert p.evicted_blocks == 1
    assert p.lookup(a(0), 1) == 1
    assert p.lookup(a(1), 1) == 0


def test_lookup_stops_at_first_miss_and_cap():
    p = GpuPool(8, 10)
    p.admit(a(0, 1, 3), 0)
    assert p.lookup(a(0, 1, 2, 3), 4) == 2
    assert p.lookup(a(0, 1, 2, 3), 1) == 1
    assert p.lookup(a(0, 1), 0) == 0


def test_shared_blocks_beyond_the_hit_are_not_allocated_twice():
    p = GpuPool(4, 10)
    p.admit(a(0, 1, 2), 0)
    p.admit(a(0, 1, 2), 1)           # another request computing the same blocks concurrently
    assert (p.n_cached, p.used, p.overflow_blocks) == (3, 3, 0)
    p.release(a(0, 1, 2))
    assert p.n_free == 0             # still referenced by the second request
    p.release(a(0, 1, 2))
    assert p.n_free == 3


def test_anonymous_tail_blocks_take_capacity():
    p = GpuPool(3, 10)
    p.admit(a(0, 1), 0, anon=1)
    assert p.used == 3
    p.release(a(0, 1), anon=1)
    p.admit(a(2, 3), 0)              # 1 empty, 1 eviction (block 1)
    assert p.evicted_blocks == 1
    assert p.lookup(a(0, 1), 2) == 1


def test_agrees_with_the_emulator_pool_on_sequential_sessions():
    """Prefix-chained sessions, one request at a time: same hits as adev.emulator.pool."""
    rng = np.random.default_rng(3)
    cap = 40
    ours, emu = GpuPool(cap, 10_000), PrefixPool(cap)
    sessions = {s: [] for s in range(6)}
    next_id = 0
    for _ in range(300):
        s = int(rng.integers(0, 6))
        grow = int(rng.integers(1, 9))
        sessions[s] = sessions[s] + list(range(next_id, next_id + grow))
        next_id += grow
        ids = sessions[s]
        plen = len(ids) * 16 + 1        # whole blocks plus one token: no cap effect
        h_emu = emu.lookup(ids, plen)
        h = ours.lookup(np.array(ids), len(ids))
        assert h == h_emu
        emu.touch(ids[:h_emu])
        emu.allocate(len(ids) + 1 - h_emu)
        held = ids[:h_emu] + emu.register(ids[h_emu:])
        ours.admit(np.array(ids), h, anon=1)
        emu.release(held, emu.anon)
        ours.release(np.array(ids), anon=1)
        if len(ids) > cap // 2:
            sessions[s] = []
