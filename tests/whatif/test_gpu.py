"""GPU prefix pool model: LRU of free blocks, reverse-order frees, blocks cached once computed,
shared references (values worked out by hand), and agreement with the emulator's own pool."""
import numpy as np

from adev.emulator.pool import PrefixPool
from adev.whatif.gpu import GpuPool


def a(*x):
    return np.array(x, dtype=np.int64)


def run(p, ids, hit=0, anon=0):
    """Admit and compute: the whole request up to its prefill."""
    ids = a(*ids)
    p.admit(ids, hit, anon)
    p.register(ids[hit:])
    return ids


def test_reverse_order_free_evicts_tail_first():
    p = GpuPool(4, 10)
    run(p, [0, 1, 2])
    assert (p.n_cached, p.used) == (3, 3)
    p.release(a(0, 1, 2))
    assert (p.used, p.n_free) == (0, 3)
    # 2 new blocks, 1 empty: one eviction, the tail block 2 (freed first)
    run(p, [3, 4])
    assert p.evicted_blocks == 1
    assert p.lookup(a(0, 1, 2), 3) == 2
    # LRU order now 1, 0 (from the first release), then 4, 3: one more block evicts block 1
    p.release(a(3, 4))
    run(p, [5])
    assert p.evicted_blocks == 2
    assert p.lookup(a(0, 1), 2) == 1
    assert p.lookup(a(4, 3), 2) == 2


def test_referenced_blocks_are_never_evicted():
    p = GpuPool(4, 10)
    run(p, [0, 1])                   # held
    run(p, [2, 3, 4])                # 2 empty, nothing free: one block over
    assert p.overflow_blocks == 1
    assert p.evicted_blocks == 0
    assert p.lookup(a(0, 1), 2) == 2
    # the block over capacity is taken back from the next frees: the LRU's first, block 1
    p.release(a(0, 1))
    assert p.evicted_blocks == 1 and p.debt == 0
    assert p.lookup(a(0, 1), 2) == 1


def test_hit_on_free_block_takes_it_out_of_the_lru():
    p = GpuPool(4, 10)
    run(p, [0, 1])
    p.release(a(0, 1))               # LRU: 1, 0
    run(p, [0], hit=1)               # hit on 0: referenced again
    run(p, [5, 6, 7])                # 2 empty + 1 free (block 1) -> evicts 1 only
    assert p.evicted_blocks == 1
    assert p.lookup(a(0), 1) == 1
    assert p.lookup(a(1), 1) == 0


def test_lookup_stops_at_first_miss_and_cap():
    p = GpuPool(8, 10)
    run(p, [0, 1, 3])
    assert p.lookup(a(0, 1, 2, 3), 4) == 2
    assert p.lookup(a(0, 1, 2, 3), 1) == 1
    assert p.lookup(a(0, 1), 0) == 0


def test_blocks_are_hits_only_once_computed():
    p = GpuPool(8, 10)
    ids = a(0, 1, 2)
    p.admit(ids, 0)                  # prefill running: blocks held, not yet cached
    assert p.used == 3 and p.lookup(ids, 3) == 0
    p.admit(ids, 0)                  # a concurrent request computes the same blocks
    assert p.used == 6
    p.register(ids)
    assert p.lookup(ids, 3) == 3
    p.register(ids)                  # computed twice: shared, the duplicates given back
    assert (p.n_cached, p.used) == (3, 3)
    p.release(ids)
    assert p.n_free == 0             # still referenced by the second request
    p.release(ids)
    assert p.n_free == 3


def test_anonymous_tail_blocks_take_capacity():
    p = GpuPool(3, 10)
    run(p, [0, 1], anon=1)
    assert p.used == 3
    p.release(a(0, 1), anon=1)
    run(p, [2, 3])                   # 1 empty, 1 eviction (block 1)
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
        run(ours, ids, h, anon=1)
        emu.release(held, emu.anon)
        ours.release(np.array(ids), anon=1)
        if len(ids) > cap // 2:
            sessions[s] = []
