"""A run's own configuration as simulator parameters (segment sizes worked out by hand), the
end-of-call time on the endpoint's clock, and the lease-ranking check."""
import math

import pandas as pd
import pytest

from adev.whatif.validate import Validation, lease_ranking, stack_params, with_overrides
from adev.whatif.workload import _engine_end


def stack(**kw):
    base = {"profile": "qwen3-coder-30b-a3b", "configuration": "store-ram+disk",
            "payload_scale": 256, "time_scale": 10.0,
            "endpoints": [{"name": "coder"}, {"name": "reasoner"}],
            "store": {"ram_gb": 32.0, "lease_ttl_s": 5.0, "ram_tier": "ram",
                      "disk_tier": "local-raid0"}}
    store = kw.pop("store", {})
    base.update(kw)
    base["store"].update(store)
    return base


def test_default_stack_segments():
    p = stack_params(stack())
    # 32e9 / 256 / 2 = 62,500,000 bytes per segment; 1,572,864 / 256 = 6,144 bytes per block
    assert p.ram_capacity_blocks == 2 * (62_500_000 // 6144) == 20344
    assert p.lease_s == 5.0 and p.disk
    assert p.tick_s == pytest.approx(0.1) and p.offload_delay_s == pytest.approx(10.0)
    assert p.gpu_pool_tokens == 166512 and p.bytes_per_block == 1572864
    # saves in batches of one prefill step's worth: max_num_batched_tokens 8192 / 16 = 512 blocks
    assert p.batch_keys == 512


def test_small_segments_are_raised_to_mooncakes_minimum():
    # 2e9 / 64 / 2 = 15.6 MB < 16 MiB: each segment is 16,777,216 bytes of 24,576-byte blocks
    p = stack_params(stack(payload_scale=64, store={"ram_gb": 2.0}))
    assert p.ram_capacity_blocks == 2 * (16_777_216 // 24_576) == 1364
    p = stack_params(stack(payload_scale=64, store={"ram_gb": 4.0, "lease_ttl_s": 300.0}))
    assert p.ram_capacity_blocks == 2 * (31_250_000 // 24_576) == 2542
    assert p.lease_s == 300.0


def test_configurations():
    assert not stack_params(stack(configuration="store-ram")).disk
    assert stack_params(stack(configuration="gpu-only")).ram_gb == 0.0
    r = stack_params(stack(configuration="recompute"))
    assert r.ram_gb == 0.0 and r.gpu_pool_tokens == 0
    d = stack_params(stack(configuration="disk-only"))
    # a staging segment of the RAM store's size, written through at put, hits charged at disk
    assert (d.disk, d.disk_only, d.disk_writes, d.ram_capacity_blocks) == (True, True, "put", 20344)
    assert not stack_params(stack()).disk_only


def test_promotion_on_hit_from_the_stack_for_a_ram_and_disk_tier_only():
    assert stack_params(stack()).promotion_threshold == 0
    on = {"promotion_on_hit": True, "promotion_threshold": 3, "promotion_per_heartbeat": 8}
    p = stack_params(stack(store=on))
    assert (p.promotion_threshold, p.promotion_per_heartbeat) == (3, 8)
    assert stack_params(stack(store={"promotion_on_hit": True})).promotion_threshold == 2
    assert stack_params(stack(configuration="store-ram", store=on)).promotion_threshold == 0
    assert stack_params(stack()).disk_writes == "evict"
    assert stack_params(stack(store={"disk_writes": "put"})).disk_writes == "put"
    # the run's staging reaches the read time; a manifest without it ran overlapping hops
    assert stack_params(stack(store={"staging": "serial"})).staging == "serial"
    # one staging buffer is serial staging plus a device queue the simulator does not have
    assert stack_params(stack(store={"staging": "shared"})).staging == "serial"
    assert stack_params(stack()).staging == "overlap"


def test_trace_blocks_and_swept_ram():
    p = stack_params(stack(), block_size=512)
    assert p.bytes_per_block == 98304 * 512 and p.ram_capacity_blocks is None
    q = with_overrides(stack_params(stack()), ram_gb=8.0)
    assert q.ram_capacity_blocks is None
    assert q.ram_blocks() == int(8e9 // 1572864) == 5086


def test_end_on_the_endpoints_clock():
    r = {"srv_ttft_s": 2.0, "srv_queue_s": 1.0, "srv_t_first_token_mono": 100.0,
         "srv_t_end_mono": 101.5, "t_end": 99.0}
    # admitted at 10 after 1 s of queue: arrival 9, first token 11, decode 1.5 s wall x 10
    assert _engine_end(pd.Series(r), 10.0, 10.0) == pytest.approx(26.0)
    r["srv_t_end_mono"] = math.nan
    assert _engine_end(pd.Series(r), 10.0, 10.0) == 99.0


def test_lease_ranking():
    def v(width, lease, pred, meas):
        t = pd.DataFrame({"store_hit_share_pred": pred, "store_hit_share_meas": meas})
        return Validation("r", width, lease, t, None, 32.0)
    rank = lease_ranking([v(6, 5.0, [0.2, 0.4], [0.3, 0.3]), v(6, 300.0, [0.1, 0.1], [0.2, 0.2]),
                          v(12, 5.0, [0.2], [0.2]), v(12, 300.0, [0.3], [0.1]),
                          v(18, 5.0, [0.2], [0.2])])
    assert rank["width"].tolist() == [6, 12]
    assert rank["ranking_kept"].tolist() == [True, False]


def test_lease_ranking_leaves_out_runs_without_a_recorded_lease():
    def v(lease, pred, meas):
        t = pd.DataFrame({"store_hit_share_pred": [pred], "store_hit_share_meas": [meas]})
        return Validation("r", 6, lease, t, None, 32.0)
    rank = lease_ranking([v(300.0, 0.1, 0.2), v(None, 0.9, 0.9), v(5.0, 0.2, 0.3)])
    assert rank["leases"].tolist() == [[5.0, 300.0]]
    assert rank["ranking_kept"].tolist() == [True]
    assert lease_ranking([v(None, 0.1, 0.2), v(5.0, 0.2, 0.3)]).empty


@pytest.mark.parametrize("time_scale,heartbeat,delay", [
    (10.0, None, 10.0),   # a run recorded before the field: 1 s real, x 10
    (2.0, None, 2.0),     # ... x 2
    (2.0, 10.0, 10.0),    # 10 model s: 5 s real at time scale 2
    (10.0, 10.0, 10.0),   # 1 s real
    (50.0, 10.0, 50.0),   # never under 1 s real: 50 model s at time scale 50
])
def test_the_offload_heartbeat_is_the_one_the_stack_gave_the_run(time_scale, heartbeat, delay):
    store = {} if heartbeat is None else {"offload_heartbeat_s": heartbeat}
    p = stack_params(stack(time_scale=time_scale, store=store))
    assert p.offload_delay_s == pytest.approx(delay)
