"""Disaggregated prefill: which requests transfer, what a producer answers, and the consumer's
modelled transfer on the engine (figures worked out by hand)."""
from __future__ import annotations

import pytest

from adev.emulator.disagg import load_link_profile, producer_params, transfer_kind
from adev.emulator.engine import Engine, EngineConfig, Request, TierCost
from adev.emulator.metrics import Metrics


def test_transfer_kind_by_role():
    dec = {"kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False}}
    pre = {"kv_transfer_params": {"do_remote_prefill": True, "do_remote_decode": False}}
    assert [transfer_kind(dec, r) for r in ("producer", "consumer", "both")] == ["produce", "none", "produce"]
    assert [transfer_kind(pre, r) for r in ("producer", "consumer", "both")] == ["none", "consume", "consume"]
    assert transfer_kind({}, "both") == transfer_kind({"kv_transfer_params": None}, "both") == "none"


def test_producer_params_and_link_profile():
    p = producer_params("prefill-0", "127.0.0.1", 8100, 33, 16)
    assert p == {"do_remote_prefill": True, "do_remote_decode": False, "remote_block_ids": [0, 1, 2],
                 "remote_engine_id": "prefill-0", "remote_host": "127.0.0.1", "remote_port": 8100,
                 "tp_size": 1}
    link = load_link_profile("rdma-400g")
    assert link.bytes_per_s == 45e9 and link.latency_s == 2e-5


def engine() -> Engine:
    cfg = EngineConfig(block_size=16, capacity_blocks=1000, prefill_tokens_per_s=10000.0,
                       decode_step_base_s=0.01, decode_step_per_seq_s=0.001, decode_step_per_ktoken_s=0.002,
                       max_num_seqs=8, max_num_batched_tokens=8192, time_scale=50.0,
                       bytes_per_block=16 * 1000, kv_link=TierCost("link", 0.001, 1e9))
    return Engine(cfg, Metrics("m", 16, 1000, True, 65536))


async def run(e: Engine, r: Request) -> Request:
    e.submit(r)
    while (await r.queue.get())[0] != 0:
        pass
    return r


async def test_consumer_waits_the_transfer_then_computes_one_token():
    e = engine()
    e.start()
    r = await run(e, Request("a", list(range(1600)), [1, 2, 3], "stop", remote_prefill=True))
    # 1600 tokens x 1000 bytes over 1 GB/s + 1 ms; then 1 token of prefill; then one decode step
    # over a context of 1600 tokens: 0.01 + 0.001 + 0.002 x 1.6
    transfer = 0.001 + 1600 * 1000 / 1e9
    assert r.transfer_s == pytest.approx(transfer)
    assert r.t_first - r.t_arrival == pytest.approx(transfer + 1 / 10000 + 0.0142, abs=1e-9)
    assert r.tokens_split(16) == {"gpu": 0, "store_ram": 0, "store_disk": 0, "kv_transfer": 1599,
                                  "computed": 1}
    # a plain request of the same length prefills all of it
    p = await run(e, Request("b", list(range(5000, 6600)), [1], "stop"))
    assert p.t_first - p.t_arrival == pytest.approx(1600 / 10000 + 0.0142, abs=1e-9)
    assert p.transfer_s == 0 and p.tokens_split(16)["kv_transfer"] == 0


async def test_consumer_transfers_only_what_its_prefix_cache_lacks():
    e = engine()
    e.start()
    await run(e, Request("warm", list(range(800)), [1], "stop"))        # caches 50 blocks
    r = await run(e, Request("a", list(range(1600)), [1], "stop", remote_prefill=True))
    assert r.gpu_hit_tokens == 800
    assert r.transfer_s == pytest.approx(0.001 + 800 * 1000 / 1e9)
    assert r.tokens_split(16) == {"gpu": 800, "store_ram": 0, "store_disk": 0, "kv_transfer": 799,
                                  "computed": 1}
