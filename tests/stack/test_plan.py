"""``adev stack plan vllm`` for disaggregated prefill (2 prefill x 2 decode)."""
from __future__ import annotations

import dataclasses
import json

from adev.config import ROOT, load_stack
from adev.stack.plan import kv_transfer_config, render, vllm_plan


def _transfer(cmd: list[str]) -> dict:
    return json.loads(cmd[cmd.index("--kv-transfer-config") + 1])


def test_2p2d_plan_connectors_per_role():
    cfg = load_stack(ROOT / "stacks" / "disagg-2p2d.toml")
    plan = vllm_plan(cfg)
    pre, dec = plan.serve_cmds["prefill-0"], plan.serve_cmds["decode-1"]
    multi = _transfer(pre)
    assert multi["kv_connector"] == "MultiConnector"
    assert [c["kv_connector"] for c in multi["kv_connector_extra_config"]["connectors"]] == \
        ["NixlConnector", "MooncakeStoreConnector"]
    assert _transfer(dec) == {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
    # one NIXL side channel per instance
    ports = [c[1] for c in plan.serve_cmds.values()]
    assert ports == [f"VLLM_NIXL_SIDE_CHANNEL_PORT={5600 + i}" for i in range(4)]
    text = render(plan)
    assert "2 prefill x 2 decode" in text and 'kv_role = "consumer"' in text
    assert plan.master_cmd is not None               # the prefill replicas share one store
    # the replay study's disk tier is written at put: no --offload_on_evict
    assert "--enable_offload=true" in plan.master_cmd
    assert "--offload_on_evict=true" not in plan.master_cmd


def test_load_threads_reach_vllm_as_its_receiving_threads():
    cfg = load_stack(ROOT / "stacks" / "disagg-2p2d.toml")
    assert vllm_plan(cfg).env["VLLM_MOONCAKE_LOAD_RECV_THREADS"] == "1"     # the default: vLLM's
    unlimited = dataclasses.replace(cfg, store=dataclasses.replace(cfg.store, load_threads=0))
    assert "VLLM_MOONCAKE_LOAD_RECV_THREADS" not in vllm_plan(unlimited).env  # vLLM has no "no limit"
    two = dataclasses.replace(cfg, store=dataclasses.replace(cfg.store, load_threads=2))
    plan = vllm_plan(two)
    assert plan.env["VLLM_MOONCAKE_LOAD_RECV_THREADS"] == "2"
    assert "VLLM_MOONCAKE_LOAD_RECV_THREADS=2" in render(plan)


def test_kv_transfer_config_rules():
    assert kv_transfer_config("both", True) == {"kv_connector": "MooncakeStoreConnector",
                                                "kv_role": "kv_both"}
    assert kv_transfer_config("both", False) is None
    assert kv_transfer_config("producer", False)["kv_connector"] == "NixlConnector"
    assert kv_transfer_config("consumer", True)["kv_connector"] == "NixlConnector"
