"""Mooncake RAM tier model: capacity, leases, watermark eviction, refusals, disk tier (values
worked out by hand from master_service.cpp's rules)."""
import numpy as np

from adev.whatif.store import StoreModel, StoreRules


def ids(*x):
    return np.array(x, dtype=np.int64)


def rng(a, b):
    return np.arange(a, b, dtype=np.int64)


def test_watermark_eviction_takes_never_read_objects_first():
    s = StoreModel(StoreRules(capacity_blocks=10, lease_s=5.0, tick_s=0.1), 100)
    assert s.save(rng(0, 10), 0.0) == (10, 0)
    s.lookup(ids(5), 0.05)            # 5 is read: leased until 5.05, and no longer "never read"
    s.advance(0.1)                     # used 1.0 > 0.9: ceil(10 * (1.0 - 0.9 + 0.05)) = 2
    assert s.evicted_blocks == 2
    assert s.lookup(ids(0), 0.2) == (0, 0)
    assert s.lookup(ids(1), 0.2) == (0, 0)
    assert s.lookup(rng(2, 10), 0.2) == (8, 0)
    s.advance(0.25)                    # 8/10 = 0.8 <= 0.9 and no refused put: nothing
    assert s.evicted_blocks == 2


def test_evictions_count_the_objects_no_lookup_touched_since_their_put():
    s = StoreModel(StoreRules(capacity_blocks=10, lease_s=1.0, tick_s=0.1), 100)
    s.save(rng(0, 10), 0.0)
    s.lookup(rng(2, 10), 0.05)        # 2..9 looked up (leased until 1.05); 0 and 1 never
    s.advance(0.1)                     # ceil(10 * 0.15) = 2: the two never looked up
    assert (s.evicted_blocks, s.evicted_unread_blocks) == (2, 2)
    s.save(ids(10, 11), 0.2)           # 10, 11 put: 10/10 = 1.0 > 0.9
    s.lookup(ids(10), 0.3)             # 10 looked up (leased until 1.3)
    s.advance(1.1)                     # expired: 2..9 (1.05) and 11 (put at 0.2); oldest two:
    #                                    11 (lease timeout 0.2), then 2 (1.05, first in order)
    assert (s.evicted_blocks, s.evicted_unread_blocks) == (4, 3)
    assert s.lookup(ids(11), 1.2) == (0, 0) and s.lookup(ids(2), 1.2) == (0, 0)
    # a key put again after its eviction is unread again until a lookup touches it
    s.save(ids(2), 1.2)
    assert not s.looked_up[2]


def test_eviction_below_the_ratio_floor_uses_the_ratio():
    s = StoreModel(StoreRules(capacity_blocks=100, lease_s=5.0, tick_s=0.1), 200)
    s.save(rng(0, 91), 0.0)           # 0.91 > 0.9: max(0.05, 0.91 - 0.9 + 0.05) = 0.06
    s.advance(0.1)
    assert s.evicted_blocks == 6       # ceil(91 * 0.06) = ceil(5.46)


def test_leased_objects_block_eviction_and_puts_are_refused():
    s = StoreModel(StoreRules(capacity_blocks=10, lease_s=5.0, tick_s=0.1), 100)
    s.save(rng(0, 10), 0.0)
    assert s.lookup(rng(0, 10), 0.05) == (10, 0)   # every object leased until 5.05
    s.advance(0.1)
    assert s.evicted_blocks == 0
    assert s.save(ids(10), 0.2) == (0, 1)           # full of leased objects: refused
    assert s.need_eviction
    s.advance(5.1)                                   # leases expired: the two oldest lookups go
    assert s.evicted_blocks == 2
    assert s.lookup(ids(0, 1), 5.2) == (0, 0)
    assert s.save(ids(10), 5.2) == (1, 0)


def test_lookup_order_decides_which_leased_out_object_goes_first():
    s = StoreModel(StoreRules(capacity_blocks=10, lease_s=1.0, tick_s=0.1), 100)
    s.save(rng(0, 10), 0.0)
    s.lookup(rng(0, 10), 0.0)
    s.lookup(ids(0, 1, 2), 0.5)       # 0,1,2 read again later
    s.advance(1.2)                     # 3..9 expired at 1.0; 0..2 leased until 1.5
    assert s.evicted_blocks == 2
    assert s.lookup(ids(3), 1.3) == (0, 0)
    assert s.lookup(ids(4), 1.3) == (0, 0)
    assert s.lookup(ids(0, 1, 2, 5), 1.3) == (4, 0)


def test_refused_puts_end_the_save_at_the_batch():
    s = StoreModel(StoreRules(capacity_blocks=5, lease_s=5.0, batch_keys=2, tick_s=100.0), 100)
    # batches [0,1] [2,3] [4,5] [6,7] [8]: 0..4 fit, 5 is refused in batch 3, 6..8 never offered
    assert s.save(rng(0, 9), 0.0) == (5, 1)
    assert (s.put_blocks, s.refused_blocks) == (5, 1)


def test_one_put_of_every_missing_block_counts_each_that_finds_no_room():
    s = StoreModel(StoreRules(capacity_blocks=5, lease_s=5.0, tick_s=100.0), 100)
    # one batch (vLLM's connector): 0..4 fit, 5..8 are all offered and refused
    assert s.save(rng(0, 9), 0.0) == (5, 4)
    assert (s.put_blocks, s.refused_blocks) == (5, 4)


def test_save_existence_check_grants_leases():
    s = StoreModel(StoreRules(capacity_blocks=10, lease_s=5.0, tick_s=0.1), 100)
    s.save(rng(0, 10), 0.0)
    assert s.save(rng(0, 10), 1.0) == (0, 0)        # all present: leases until 6.0, no puts
    s.advance(1.1)
    assert s.evicted_blocks == 0
    s.advance(6.1)
    assert s.evicted_blocks == 2


def disk_store(**kw):
    s = StoreModel(StoreRules(capacity_blocks=10, lease_s=5.0, tick_s=1.0, disk=True,
                              offload_delay_s=0.5, **kw), 100)
    s.save(ids(0, 1), 0.0)
    s.save(rng(2, 10), 0.05)
    s.advance(0.1)          # full: ceil(10 x 0.15) = 2, the oldest puts 0, 1, queued for offload
    return s


def test_disk_tier_offloads_after_the_heartbeat_and_serves_hits():
    s = disk_store()
    assert s.lookup(ids(0), 0.2) == (1, 0)          # still in RAM while queued; leased to 5.2
    assert (s.n_ram, s.n_pinned) == (10, 2)
    s.advance(0.7)                                   # written to disk, memory kept (no wake-up)
    assert (s.n_ram, s.n_disk, s.evicted_blocks) == (10, 2, 0)
    # next wake-up: oldest lease timeouts first -- 1 (put at 0, on disk: memory freed at once),
    # then 2 (put at 0.05, queued); 0 is leased
    s.advance(1.1)
    assert (s.n_ram, s.evicted_blocks, s.n_pinned) == (9, 1, 1)
    assert s.lookup(ids(1), 1.2) == (1, 1)           # from disk
    assert s.lookup(ids(0, 1, 2), 1.2) == (3, 1)
    assert s.save(ids(1), 1.3) == (0, 0)             # on disk: present, not put again


def test_disk_capacity_drops_the_oldest_offloads():
    s = disk_store(disk_capacity_blocks=1)
    s.advance(0.7)          # two offloads, room for one: the newest (1) is kept
    assert s.n_disk == 1
    s.advance(1.1)          # 0 (no disk copy) queued again, 1 (disk copy) freed
    assert s.lookup(ids(1), 1.2) == (1, 1)
    s.advance(1.7)          # 0 written: the disk drops 1
    assert s.n_disk == 1
    assert s.lookup(ids(1), 1.8) == (0, 0)
    assert s.lookup(ids(0), 1.8) == (1, 0)           # 0 keeps its memory copy (lease)


def test_leading_run_counts_only_until_the_first_miss():
    s = StoreModel(StoreRules(capacity_blocks=10, lease_s=5.0), 100)
    s.save(ids(0, 1, 3), 0.0)
    assert s.lookup(ids(0, 1, 2, 3), 0.1) == (2, 0)
    # the miss does not stop the leases: 3 was leased too
    assert s.lease_to[3] == 5.1


def test_lookup_weights_count_blocks_per_object():
    # objects 0..3 of 1, 2, 2 and 2 blocks; objects 0-2 present, 1 only on disk after an offload
    s = StoreModel(StoreRules(capacity_blocks=10, lease_s=5.0, tick_s=0.1), 100)
    s.save(ids(0, 1, 2), 0.0)
    s.in_ram[1], s.on_disk[1] = False, True
    w = np.array([1, 2, 2, 2], dtype=np.int64)
    # leading run: objects 0, 1, 2 -> 1 + 2 + 2 = 5 blocks, of which object 1's 2 on disk
    assert s.lookup(ids(0, 1, 2, 3), 1.0, w) == (5, 2)
    assert s.lookup(ids(0, 1, 2, 3), 1.0) == (3, 1)


def test_promotion_on_hit_copies_a_disk_only_key_back_after_the_heartbeat():
    s = disk_store(promotion_threshold=2)
    s.advance(0.7)
    s.advance(1.1)                                   # 0 and 1 freed (on disk only); 8 in RAM
    assert s.lookup(ids(1), 1.2) == (1, 1)           # first read from disk: counted, not queued
    assert s.lookup(ids(1), 1.3) == (1, 1)           # second: 8/10 <= 0.9, queued for 1.8
    s.advance(1.7)
    assert s.lookup(ids(1), 1.75) == (1, 1)          # the heartbeat has not come yet
    s.advance(1.8)                                   # copied back as a put at 1.8
    assert (s.promoted_blocks, s.n_ram) == (1, 9)
    assert s.lookup(ids(1), 1.9) == (1, 0)           # a RAM read now, still on disk too
    assert s.on_disk[1]


def test_promotion_needs_room_and_ram_below_the_watermark():
    s = disk_store(promotion_threshold=1)
    s.advance(0.7)
    s.advance(1.1)
    assert s.lookup(ids(1), 1.2) == (1, 1)           # queued for 1.7
    assert s.save(ids(10, 11), 1.3) == (2, 0)        # the last two free objects: RAM full
    s.advance(1.7)                                   # no room at the heartbeat: dropped
    assert (s.promoted_blocks, s.in_ram[1]) == (0, False)
    assert s.lookup(ids(1), 1.8) == (1, 1)           # 10/10 > 0.9: not queued again
    s.advance(5.0)
    assert s.promoted_blocks == 0


def test_promotion_per_heartbeat_cap_leaves_the_rest_for_the_next_heartbeat():
    s = StoreModel(StoreRules(capacity_blocks=10, lease_s=0.1, tick_s=0.1, disk=True,
                              offload_delay_s=1.0, promotion_threshold=1,
                              promotion_per_heartbeat=2), 100)
    s.save(rng(0, 5), 0.0)
    s.on_disk[rng(0, 5)] = True                      # as if offloaded and evicted
    s.in_ram[rng(0, 5)] = False
    s.n_ram = 0
    assert s.lookup(rng(0, 5), 1.0) == (5, 5)        # five reads from disk, queued for 2.0
    s.advance(2.0)
    assert s.promoted_blocks == 2                    # 0, 1; 2..4 wait for 3.0
    s.advance(2.9)
    assert s.promoted_blocks == 2
    s.advance(3.0)
    assert s.promoted_blocks == 4                    # 2, 3; 4 at 4.0
    s.advance(4.0)
    assert s.promoted_blocks == 5 and s.in_ram[rng(0, 5)].all()


def test_no_promotion_by_default():
    s = disk_store()
    s.advance(0.7)
    s.advance(1.1)
    for t in (1.2, 1.3, 1.4):
        assert s.lookup(ids(1), t) == (1, 1)
    s.advance(20.0)
    assert s.promoted_blocks == 0 and not s.in_ram[1]


def test_disk_writes_at_put_pin_each_put_until_the_heartbeat_then_evict_at_once():
    s = StoreModel(StoreRules(capacity_blocks=10, lease_s=5.0, tick_s=1.0, disk=True,
                              offload_delay_s=0.5, disk_writes="put"), 100)
    s.save(ids(0, 1), 0.0)
    s.save(rng(2, 10), 0.05)                        # every put queued for offload, pinned
    assert (s.n_ram, s.n_pinned) == (10, 10)
    s.advance(0.1)                                  # full, but nothing evictable: no victim
    assert (s.evicted_blocks, s.n_disk) == (0, 0)
    assert s.save(ids(10), 0.2) == (0, 1)           # refused: RAM full of pinned objects
    s.advance(0.5)                                  # 0, 1 written (due 0.5); 2..9 due 0.55
    assert (s.n_disk, s.n_pinned) == (2, 8)
    s.advance(1.2)                                  # 2..9 written; the wake-up at 1.2 (full,
    assert (s.n_disk, s.n_pinned) == (10, 0)        # a refused put): ceil(10 x 0.15) = 2,
    assert (s.evicted_blocks, s.n_ram) == (2, 8)    # the oldest puts 0, 1, freed at once
    assert s.lookup(ids(0, 1, 2), 1.3) == (3, 2)    # 0, 1 from disk, 2 from RAM
