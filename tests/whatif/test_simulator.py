"""The simulator on hand-made workloads (4-token blocks; figures worked out by hand)."""
import math

import numpy as np
import pytest

from adev.analysis.figures import gross_saving
from adev.whatif.simulator import Params, figures, simulate, whole_prompt_lookup
from adev.whatif.store import StoreModel, StoreRules
from adev.whatif.workload import Workload

BS = 4


def workload(calls):
    """calls: (endpoint, t_admit, t_save, t_end, prompt_tokens, output_tokens, ids)"""
    ids = [np.array(c[6], dtype=np.int64) for c in calls]
    off = np.zeros(len(calls) + 1, dtype=np.int64)
    np.cumsum([len(x) for x in ids], out=off[1:])
    flat = np.concatenate(ids)
    eps = sorted({c[0] for c in calls})
    return Workload("test", BS, eps, np.array([eps.index(c[0]) for c in calls], dtype=np.int32),
                    np.array([c[1] for c in calls], float), np.array([c[2] for c in calls], float),
                    np.array([c[3] for c in calls], float),
                    np.array([c[4] for c in calls], dtype=np.int64),
                    np.array([c[5] for c in calls], dtype=np.int64), off, flat,
                    int(flat.max()) + 1, [str(i) for i in range(len(calls))])


def params(**kw):
    base = {"gpu_pool_tokens": 400, "ram_gb": 0.0, "lease_s": 5.0, "disk": False,
            "bytes_per_block": 1, "tick_s": 0.1, "prefill_tokens_per_s": 4.0}
    base.update(kw)
    return Params(**base)


# one session, two turns: 16 tokens (blocks 0..3), then 20 tokens (blocks 0..4)
TWO_TURNS = [("a", 0.0, 0.5, 1.0, 16, 0, [0, 1, 2, 3]),
             ("a", 2.0, 2.5, 3.0, 20, 0, [0, 1, 2, 3, 4])]


def test_gpu_hits_are_capped_at_prompt_length_minus_one():
    w = workload(TWO_TURNS)
    r = simulate(w, params())
    # turn 1: nothing cached. turn 2: 4 blocks cached, cap = (20 - 1) // 4 = 4 -> 16 tokens
    assert r.per_call["gpu_hit_blocks"].tolist() == [0, 4]
    assert r.total.gpu_hit_share == pytest.approx(16 / 36)
    assert r.total.store_hit_share == 0.0


def test_store_serves_what_the_gpu_pool_lost():
    w = workload(TWO_TURNS)
    r = simulate(w, params(gpu_pool_tokens=0, ram_capacity_blocks=100, ram_gb=1.0))
    # no GPU pool: turn 1 puts 4 blocks; turn 2 looks up blocks 0..3 (cap 4): all present
    assert r.per_call["store_hit_blocks"].tolist() == [0, 4]
    # turn 2 saves the blocks it did not load: block 4
    assert r.per_call["put_blocks"].tolist() == [4, 1]
    assert r.total.store_hit_share == pytest.approx(16 / 36)
    assert r.total.offered_blocks == 5 and r.total.refused_blocks == 0


def test_store_objects_of_whole_chunks():
    """chunk_blocks = 2 (objects of 8 tokens). Turn 1 (blocks 0..4, 20 tokens) puts chunks 0
    (blocks 0-1) and 1 (2-3): 4 blocks; block 4 is no complete chunk. Turn 2 (blocks 0..6, 28
    tokens, cap (28 - 1) // 4 = 6): chunks 0, 1 hit (4 blocks), chunk 2 (4-5) misses; it puts
    chunk 2 (blocks 4-5, not served by the store); chunk 3 would end past block 7."""
    w = workload([("a", 0.0, 0.5, 1.0, 20, 0, [0, 1, 2, 3, 4]),
                  ("a", 2.0, 2.5, 3.0, 28, 0, [0, 1, 2, 3, 4, 5, 6])])
    r = simulate(w, params(gpu_pool_tokens=0, ram_capacity_blocks=100, ram_gb=1.0, chunk_blocks=2))
    assert r.per_call["store_hit_blocks"].tolist() == [0, 4]
    assert r.per_call["put_blocks"].tolist() == [4, 2]
    assert r.total.store_hit_share == pytest.approx(16 / 48)


def test_endpoints_have_their_own_gpu_pools_and_share_the_store():
    calls = [("a", 0.0, 0.5, 1.0, 16, 0, [0, 1, 2, 3]),
             ("b", 2.0, 2.5, 3.0, 20, 0, [0, 1, 2, 3, 4])]
    r = simulate(workload(calls), params(ram_capacity_blocks=100, ram_gb=1.0))
    assert r.per_call["gpu_hit_blocks"].tolist() == [0, 0]
    assert r.per_call["store_hit_blocks"].tolist() == [0, 4]


def test_a_long_lease_refuses_more_writes():
    # RAM of 5 blocks, below the 0.9 watermark with 4. A puts 0..3; B reads them (leases);
    # C puts 10..13: one fits, the rest of its batch is refused; D reads 10 (lease); E puts
    # 20..23 after the eviction thread's next wake-up (needed: a put was refused).
    calls = [("a", 0.0, 0.5, 0.6, 16, 0, [0, 1, 2, 3]),
             ("b", 0.8, 0.85, 0.86, 17, 0, [0, 1, 2, 3]),
             ("c", 1.0, 1.5, 1.52, 16, 0, [10, 11, 12, 13]),
             ("d", 1.55, 1.56, 1.57, 5, 0, [10]),
             ("e", 2.0, 2.5, 2.6, 16, 0, [20, 21, 22, 23])]
    kw = {"gpu_pool_tokens": 0, "ram_gb": 1.0, "ram_capacity_blocks": 5}
    long = simulate(workload(calls), params(lease_s=100.0, **kw))
    short = simulate(workload(calls), params(lease_s=0.1, **kw))
    assert long.per_call["store_hit_blocks"].tolist() == [0, 4, 0, 1, 0]
    # long lease: every object is leased, nothing is evicted, E's four puts are refused
    assert long.per_call["put_blocks"].tolist() == [4, 0, 1, 0, 0]
    assert long.per_call["refused_blocks"].tolist() == [0, 0, 3, 0, 4]
    # short lease: B's leases ended at 0.9, so the wake-up at 1.6 evicts ceil(5 x 0.15) = 1
    # object, the oldest read (block 0), and E gets one block in
    assert short.per_call["put_blocks"].tolist() == [4, 0, 1, 0, 1]
    assert short.per_call["refused_blocks"].tolist() == [0, 0, 3, 0, 3]
    assert long.total.refused_share == pytest.approx(7 / 12)
    assert short.total.refused_share == pytest.approx(6 / 12)


def _store(present, disk_only=()):
    s = StoreModel(StoreRules(capacity_blocks=20, lease_s=5.0, tick_s=100.0), 100)
    s.save(np.array(present, dtype=np.int64), 0.0)          # put at 0: lease timeout 0
    for b in disk_only:
        s.in_ram[b], s.on_disk[b] = False, True
    return s


def test_a_whole_prompt_lookup_leases_what_the_gpu_holds_and_serves_the_run_past_it():
    """vLLM's connector, objects of one block: 0-3 and 5 in RAM, 4 on disk only, 6 absent. A
    prompt of blocks 0..7 (cap 7) with a GPU hit of 2 blocks: the lookup covers blocks 0..6 and
    leases the six present ones, 0 and 1 included (until 1 + 5 = 6); the run from block 0 is 6
    blocks, so the store serves blocks 2..5: 4, of which block 4 from disk. The emulator's rule
    looks up 2..6: the same hits, and blocks 0 and 1 keep the lease of their put (0)."""
    s = _store(range(6), disk_only=[4])
    assert whole_prompt_lookup(s, np.arange(8), 2, 7, 1, 1.0) == (4, 1)
    assert s.lease_to[:6].tolist() == [6.0] * 6
    s = _store(range(6), disk_only=[4])
    assert s.lookup(np.arange(2, 7), 1.0) == (4, 1)
    assert s.lease_to[:6].tolist() == [0.0, 0.0] + [6.0] * 4


def test_a_whole_prompt_lookup_counts_disk_reads_towards_promotion():
    """Blocks 0 and 4 on disk only; the GPU holds 0 and 1, so the store serves 2..5, block 4 from
    disk: with a threshold of 1 the heartbeat 1 s later copies 4 to RAM, and not 0 (not
    served, so not read)."""
    s = StoreModel(StoreRules(capacity_blocks=20, lease_s=5.0, tick_s=100.0, disk=True,
                              offload_delay_s=1.0, promotion_threshold=1), 100)
    s.save(np.arange(6, dtype=np.int64), 0.0)
    for b in (0, 4):
        s.in_ram[b], s.on_disk[b] = False, True
    s.n_ram -= 2
    assert whole_prompt_lookup(s, np.arange(8), 2, 7, 1, 1.0) == (4, 1)
    s.advance(2.0)
    assert s.promoted_blocks == 1 and s.in_ram[4] and not s.in_ram[0]
    assert whole_prompt_lookup(s, np.arange(8), 2, 7, 1, 2.5) == (4, 0)


def test_promotion_reaches_the_simulated_store():
    """A 4-block RAM tier (eviction thread every 1 s, ratio 1: every expired object). Call 0
    puts blocks 0..3 at 0.5; the wake-up at 1.0 queues them for offload (written at 1.2), the
    one at 3.0 frees them, so call 2 reads them from disk. With a threshold of 1 that read
    queues them, the heartbeat at 3.2 copies them back, and call 3 (3.7, before the next
    wake-up) reads them from RAM; without promotion it reads them from disk again."""
    calls = [("a", 0.0, 0.5, 0.6, 16, 0, [0, 1, 2, 3]),
             ("a", 1.0, 1.5, 1.6, 4, 0, [10]),
             ("a", 3.0, 3.5, 3.6, 17, 0, [0, 1, 2, 3, 5]),
             ("a", 3.7, 3.8, 3.9, 17, 0, [0, 1, 2, 3, 6])]
    kw = dict(gpu_pool_tokens=0, ram_gb=1.0, ram_capacity_blocks=4, disk=True, lease_s=0.1,
              offload_delay_s=0.2, tick_s=1.0, eviction_ratio=1.0)
    off = simulate(workload(calls), params(**kw))
    on = simulate(workload(calls), params(**kw, promotion_threshold=1))
    assert off.per_call["store_hit_blocks"].tolist() == [0, 0, 4, 4]
    assert off.per_call["store_disk_blocks"].tolist() == [0, 0, 4, 4]
    assert on.per_call["store_hit_blocks"].tolist() == [0, 0, 4, 4]
    assert on.per_call["store_disk_blocks"].tolist() == [0, 0, 4, 0]
    assert (on.counters["store_promoted_blocks"], off.counters["store_promoted_blocks"]) == (4, 0)
    # promotion needs the disk tier
    nodisk = simulate(workload(calls), params(**{**kw, "disk": False}, promotion_threshold=1))
    assert nodisk.counters["store_promoted_blocks"] == 0


def test_disk_only_charges_every_store_hit_at_the_disk_tier():
    w = workload(TWO_TURNS)
    kw = dict(gpu_pool_tokens=0, ram_capacity_blocks=100, ram_gb=1.0, disk=True,
              disk_writes="put")
    ram = simulate(w, params(**kw))
    direct = simulate(w, params(**kw, disk_only=True))
    # turn 2 finds blocks 0..3 in the staging RAM: a RAM hit with a RAM + disk store, a disk hit
    # on the direct path
    assert ram.per_call["store_disk_blocks"].tolist() == [0, 0]
    assert direct.per_call["store_hit_blocks"].tolist() == [0, 4]
    assert direct.per_call["store_disk_blocks"].tolist() == [0, 4]


def test_a_whole_prompt_lookup_serves_nothing_when_the_run_ends_before_the_gpu_hit():
    """Block 1 absent: the run from block 0 is 1 block, short of the GPU hit of 2, so the
    connector loads nothing (need_to_allocate <= 0), where a lookup from the GPU hit on finds
    blocks 2..5."""
    s = _store([0, 2, 3, 4, 5])
    assert whole_prompt_lookup(s, np.arange(8), 2, 7, 1, 1.0) == (0, 0)
    assert s.lookup(np.arange(2, 7), 1.0) == (4, 0)


def test_a_whole_prompt_lookup_of_chunks_counts_blocks_past_the_gpu_hit():
    """Objects of 2 blocks keyed by their last block: a prompt of blocks 0..9 with cap 9 has 4
    complete chunks, keys 1, 3, 5, 7. Keys 1 and 3 in RAM, 5 on disk only, 7 absent: the run is
    3 chunks = blocks 0..5. With a GPU hit of 3 blocks the store serves block 3 (chunk 1) and
    blocks 4-5 (chunk 2, from disk): 3 blocks, 2 of them from disk."""
    s = _store([1, 3, 5], disk_only=[5])
    assert whole_prompt_lookup(s, np.arange(10), 3, 9, 2, 1.0) == (3, 2)
    assert whole_prompt_lookup(s, np.arange(10), 6, 9, 2, 1.0) == (0, 0)


def test_the_lookup_rule_reaches_the_leases_of_blocks_the_gpu_holds():
    """A RAM tier of 4 objects (eviction above 0.9 x 4, or after a refused put), a 5 s lease.
    A puts blocks 0-2 at 0.5 (their lease timeout: the put time). A comes back at 1.0 with the
    same prompt (13 tokens: cap 3); its GPU holds all three, and its prefill runs until 3.0.
    C puts blocks 10-11 at 2.1: one fits, one is refused, so the eviction thread's next wake-up
    (at E's admission, 2.5) evicts ceil(4 x 0.15) = 1 lease-expired object, the oldest lease
    timeout first. Looked up past the GPU hit, A's second call looks up nothing: blocks 0-2
    keep the timeout of their put (0.5), block 0 is evicted and E, on an endpoint of its own,
    finds no run from block 0. With vLLM's whole-prompt lookup A's second call leased 0-2 until
    6.0: block 10 (put at 2.1) is evicted instead and E loads all three."""
    calls = [("a", 0.0, 0.5, 0.55, 12, 0, [0, 1, 2]),
             ("a", 1.0, 3.0, 3.05, 13, 0, [0, 1, 2]),
             ("c", 2.0, 2.1, 2.15, 8, 0, [10, 11]),
             ("e", 2.5, 2.6, 2.65, 13, 0, [0, 1, 2])]
    kw = {"ram_gb": 1.0, "ram_capacity_blocks": 4, "lease_s": 5.0, "gpu_pool_tokens": 400}
    past = simulate(workload(calls), params(**kw))
    whole = simulate(workload(calls), params(lookup="whole", **kw))
    for r in (past, whole):
        assert r.per_call["gpu_hit_blocks"].tolist() == [0, 3, 0, 0]
        assert r.per_call["put_blocks"][:3].tolist() == [3, 0, 1]
        assert r.per_call["refused_blocks"][:3].tolist() == [0, 0, 1]
    assert past.per_call["store_hit_blocks"].tolist() == [0, 0, 0, 0]
    assert whole.per_call["store_hit_blocks"].tolist() == [0, 0, 0, 3]


def test_window_figures_and_gross_saving_reuse_the_analysis_formula():
    w = workload(TWO_TURNS)
    r = figures(w, simulate(w, params(gpu_pool_tokens=0, ram_gb=1.0, ram_capacity_blocks=100)),
                [(1, 0.0, 1.5), (2, 1.5, 4.0)])
    w1, w2 = r.windows
    assert (w1.calls, w2.calls) == (1, 1)
    assert w1.store_hit_share == 0.0
    assert w2.store_hit_share == pytest.approx(16 / 20)
    # busy time of window 2: call 2 from 2.0 to 3.0 = 1 s; 16 store tokens at 4 tokens/s
    assert w2.busy_s == pytest.approx(1.0)
    assert w2.gross_saving == pytest.approx(gross_saving(16, 4.0, 1.0)) == pytest.approx(4.0)
    assert r.total.busy_s == pytest.approx(2.0)


def test_read_time_stages_disk_blocks_through_the_ram_path():
    from adev.whatif.simulator import _window
    w = workload(TWO_TURNS)
    pc = {"gpu_hit_blocks": np.array([0, 0]), "store_hit_blocks": np.array([0, 4]),
          "store_disk_blocks": np.array([0, 3]), "put_blocks": np.array([4, 1]),
          "refused_blocks": np.array([0, 0])}
    p = params(bytes_per_block=10, ram_read_bytes_per_s=20.0, disk_read_bytes_per_s=10.0)
    f = _window(w, p, pc, -1, -math.inf, math.inf)
    # 4 store blocks (1 RAM, 3 disk): the RAM block at the RAM rate (10 / 20 = 0.5 s) + the 3
    # disk blocks at the slower of the disk read and the staging hop they overlap with
    # (3 x 10 / min(10, 20) = 3 s) = 3.5 s
    assert (f.store_ram_tokens, f.store_disk_tokens) == (4.0, 12.0)
    assert f.read_s == pytest.approx(3.5)
    # a disk faster than the staging hop: the hop's rate bounds the staged blocks,
    # 0.5 + 3 x 10 / 20 = 2 s
    f = _window(w, params(bytes_per_block=10, ram_read_bytes_per_s=20.0, disk_read_bytes_per_s=40.0),
                pc, -1, -math.inf, math.inf)
    assert f.read_s == pytest.approx(2.0)
    # direct disk (every store hit from disk, no staging hop): 4 x 10 / 40 = 1 s, not 2
    pc = {**pc, "store_disk_blocks": np.array([0, 4])}
    f = _window(w, params(bytes_per_block=10, ram_read_bytes_per_s=20.0, disk_read_bytes_per_s=40.0,
                          disk_only=True), pc, -1, -math.inf, math.inf)
    assert f.read_s == pytest.approx(1.0)
    # serial staging (the default) behind a 20 B/s hop: a lone staged load runs at the disk tier's
    # 10 B/s, so the device itself reads at 1 / (1/10 - 1/20) = 20 B/s, the direct path's rate:
    # 4 x 10 / 20 = 2 s; the staged blocks keep the tier's rate (3 x 10 / 20 + 3 x 10 / 20 = 3 s)
    slow = dict(bytes_per_block=10, ram_read_bytes_per_s=20.0, disk_read_bytes_per_s=10.0)
    f = _window(w, params(**slow, disk_only=True), pc, -1, -math.inf, math.inf)
    assert f.read_s == pytest.approx(2.0)
    f = _window(w, params(**slow, disk_only=True, staging="overlap"), pc, -1, -math.inf, math.inf)
    assert f.read_s == pytest.approx(4.0)     # overlapping hops: the device's rate is the tier's


def test_empty_window_is_nan_with_a_reason():
    w = workload(TWO_TURNS)
    r = figures(w, simulate(w, params()), [(1, 10.0, 20.0)])
    f = r.windows[0]
    assert f.calls == 0 and math.isnan(f.store_hit_share)
    assert "hit_share" in f.missing


def test_output_blocks_take_gpu_capacity():
    # pool of 5 blocks. Call 1: 16 prompt + 8 output tokens = 4 prompt blocks, then 2 output
    # blocks while decoding: one block over capacity (admitted: the recorded run did), taken
    # back at the free by evicting the last output block; call 2 (same prefix + 1 block) evicts
    # the other output block and hits the whole prompt
    calls = [("a", 0.0, 0.5, 1.0, 16, 8, [0, 1, 2, 3]),
             ("a", 2.0, 2.5, 3.0, 20, 0, [0, 1, 2, 3, 4])]
    r = simulate(workload(calls), params(gpu_pool_tokens=20, decode_chunks=1))
    assert r.counters["gpu_overflow_blocks"] == 1
    assert r.counters["gpu_evicted_blocks"] == 2
    assert r.per_call["gpu_hit_blocks"].tolist() == [0, 4]


def test_recorded_preemption_frees_blocks_until_the_next_free():
    # pool of 8 blocks. A (blocks 0..3) is preempted during its decode at t=0.75 and waits;
    # B (10..13) is admitted at 0.8 and takes the 4 empty blocks; C (20..23) at 0.85 evicts A's
    # freed blocks (all 4). B ends at 0.9: A comes back with a new lookup (0 hits)
    # (evicting B's 4 freed blocks). D at 2.0 repeats A's prompt + 1 block: A's recomputed
    # blocks are hits; its new block does not fit (C and D hold all 8) and is taken back at the
    # frees at t=3.0: 4 + 4 + 1 evictions.
    calls = [("a", 0.0, 0.5, 1.0, 16, 0, [0, 1, 2, 3]),
             ("a", 0.8, 0.81, 0.9, 16, 0, [10, 11, 12, 13]),
             ("a", 0.85, 0.86, 3.0, 16, 0, [20, 21, 22, 23]),
             ("a", 2.0, 2.5, 3.0, 20, 0, [0, 1, 2, 3, 4])]
    w = workload(calls)
    w.preemptions = np.array([1, 0, 0, 0])
    r = simulate(w, params(gpu_pool_tokens=32))
    assert r.counters["gpu_evicted_blocks"] == 4 + 4 + 1
    assert r.counters["gpu_overflow_blocks"] == 1
    assert r.per_call["gpu_hit_blocks"].tolist() == [0, 0, 0, 4]
