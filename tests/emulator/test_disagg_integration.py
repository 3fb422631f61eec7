"""2 prefill x 2 decode on a real embedded stack (Mooncake master + four endpoint processes):
prefill replicas share the store, decode replicas take the KV over the modelled link."""
from __future__ import annotations

import time

import httpx
import pytest

pytestmark = pytest.mark.integration


def test_two_prefill_two_decode(embedded_stack):
    info = embedded_stack(policy="replay", endpoints=[
        {"name": "prefill-0", "kv_role": "producer"}, {"name": "prefill-1", "kv_role": "producer"},
        {"name": "decode-0", "kv_role": "consumer"}, {"name": "decode-1", "kv_role": "consumer"}])
    url = {n: u.removesuffix("/v1") for n, u in info.endpoints.items()}
    prompt = list(range(7000, 7000 + 3000))
    body = {"model": info.profile.name, "prompt": prompt, "max_tokens": 64, "ignore_eos": True}
    pre = {**body, "max_tokens": 1, "kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False}}
    with httpx.Client(timeout=60) as c:
        p0 = c.post(url["prefill-0"] + "/v1/completions", json=pre).json()
        d0 = c.post(url["decode-0"] + "/v1/completions",
                    json={**body, "kv_transfer_params": p0["kv_transfer_params"]}).json()
        time.sleep(1.0)  # prefill-0's asynchronous save to the store
        # the same prompt on the other prefill replica: loaded from the shared store
        p1 = c.post(url["prefill-1"] + "/v1/completions", json=pre).json()
        d1 = c.post(url["decode-1"] + "/v1/completions",
                    json={**body, "kv_transfer_params": p1["kv_transfer_params"]}).json()
    assert p0["adev"]["tokens"]["computed"] == 3000 and p0["usage"]["completion_tokens"] == 1
    assert p0["kv_transfer_params"]["remote_engine_id"] == "prefill-0"
    for d in (d0, d1):
        a = d["adev"]
        assert d["usage"]["completion_tokens"] == 64 and a["transfer"] == "consume"
        assert a["tokens"] == {"gpu": 0, "store_ram": 0, "store_disk": 0, "kv_transfer": 2999, "computed": 1}
        assert a["transfer_s"] == pytest.approx(2e-5 + 3000 * info.profile.bytes_per_token / 45e9)
        assert a["store_keys_looked_up"] == 0           # the decode side reads no store
    # prefill-1 found prefill-0's blocks in the store: the complete 256-token chunks (the default
    # 16 blocks per store object) below the last prompt token: 11 chunks of (3000 - 1) // 16 = 187
    # blocks, 2,816 tokens; counted per block
    assert p1["adev"]["tokens"]["store_ram"] == (3000 - 1) // 256 * 256 == 2816
    assert p1["adev"]["store_hit_blocks"] == 176
