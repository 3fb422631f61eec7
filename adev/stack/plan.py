"""``adev stack plan vllm``: the commands a user runs on GPU nodes for a real deployment.

The plan mirrors the embedded stack on real hardware: one ``mooncake_master`` (lease TTL in real
milliseconds; on GPU nodes time runs at scale 1), a ``MOONCAKE_CONFIG_PATH`` JSON per vLLM
instance, and ``vllm serve`` with the MooncakeStoreConnector, prompt-token details (so
``cached_tokens`` is reported), 16-token blocks and the profile's context length. Every instance
that shares the store gets the same ``PYTHONHASHSEED`` (vLLM's NONE_HASH depends on it, so the
block keys would differ otherwise). Flag names follow vLLM's and Mooncake's documentation
(``docs/features/mooncake_store_connector_usage.md``, ``docs/features/nixl_connector_usage.md``,
``mooncake_master --help``).

Disaggregated prefill (endpoints with ``kv_role`` producer / consumer, e.g.
``stacks/disagg-2p2d.toml``): a producer (prefill replica) runs vLLM's MultiConnector over the
NixlConnector (its prompt's KV to the decode replica) and the MooncakeStoreConnector (the shared
store; MultiConnector loads from the first connector that has the tokens and saves to all); a
consumer (decode replica) runs the NixlConnector alone and never touches the store. adev's replay
gateway plays the role of vLLM's disaggregated proxy: it sends each request to a prefill replica
with ``kv_transfer_params.do_remote_decode`` and ``max_tokens`` 1, then to a decode replica with
the ``kv_transfer_params`` the prefill replica answered.
"""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field

from ..config import STORELESS, ModelProfile, StackConfig
from .commands import master_flags


@dataclass
class VllmPlan:
    master_cmd: list[str] | None
    mooncake_config: dict | None
    env: dict[str, str]
    serve_cmds: dict[str, list[str]]
    notes: list[str] = field(default_factory=list)
    external_toml: str = ""


def _gb(x: float) -> str:
    return f"{x:g}GB"


def vllm_plan(config: StackConfig, *, master_host: str = "MASTER_HOST", master_port: int = 50051,
              metrics_port: int = 9003, protocol: str = "rdma", device_name: str = "",
              local_buffer_gb: float = 4.0, port: int = 8000, model: str | None = None,
              config_path: str = "/etc/adev/mooncake_config.json",
              disk_path: str = "/mnt/kvcache/mooncake", hash_seed: int | None = None,
              tool_call_parser: str | None = "auto") -> VllmPlan:
    profile: ModelProfile = config.model_profile()
    store = config.configuration not in STORELESS
    disk = config.configuration in ("store-ram+disk", "disk-only")
    n = len(config.endpoints)
    seed = config.seed if hash_seed is None else hash_seed
    notes: list[str] = [
        f"configuration {config.configuration!r}, profile {profile.name} "
        f"({profile.bytes_per_token} B/token, {profile.bytes_per_block} B per "
        f"{profile.block_size}-token block)",
    ]
    master_cmd = mooncake = None
    env = {"PYTHONHASHSEED": str(seed)}
    if store:
        lease_ms = max(1, round(config.store.lease_ttl_s * 1000))
        notes.append(f"lease TTL {config.store.lease_ttl_s:g} s = {lease_ms} ms real (GPU nodes run "
                     "at time scale 1; the lease must exceed the slowest store read batch)")
        master_cmd = ["mooncake_master", *master_flags(config, rpc_port=master_port,
                                                       metrics_port=metrics_port, host="0.0.0.0",
                                                       lease_ms=lease_ms)]
        if config.configuration == "disk-only":
            seg_gb = 1.0
            notes.append("disk-only: Mooncake has no RAM-less mode; each instance contributes a "
                         "1 GB staging segment and writes every object through to disk")
        else:
            seg_gb = config.store.ram_gb / n
            notes.append(f"RAM tier {config.store.ram_gb:g} GB split over {n} instance(s): "
                         f"global_segment_size {_gb(seg_gb)} each")
        mooncake = {
            "mode": "embedded",
            "metadata_server": "P2PHANDSHAKE",
            "master_server_address": f"{master_host}:{master_port}",
            "global_segment_size": _gb(seg_gb),
            "local_buffer_size": _gb(local_buffer_gb),
            "protocol": protocol,
            "device_name": device_name,
            "enable_offload": disk,
        }
        env["MOONCAKE_CONFIG_PATH"] = config_path
        if config.store.load_threads:
            # vLLM's Mooncake store connector: receiving threads that load requests' KV (1 by
            # default); the emulator's store.load_threads models the same limit (its 0, no
            # limit, has no vLLM setting: vLLM then keeps its own default)
            env["VLLM_MOONCAKE_LOAD_RECV_THREADS"] = str(config.store.load_threads)
        if disk:
            env.update({
                "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH": disk_path,
                "MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR": "file_per_key_storage_backend",
            })
            if config.configuration == "store-ram+disk" and config.store.disk_writes == "put":
                notes.append("disk writes at put: every object is written to disk after its put "
                             "(no --offload_on_evict), so a RAM eviction frees memory at once")
            if config.configuration == "store-ram+disk" and config.store.promotion_on_hit:
                notes.append("promotion on hit: a key held only on disk is copied back to RAM "
                             f"after {config.store.promotion_threshold} read(s), on the holding "
                             "instance's offload heartbeat")
            notes.append(f"disk tier: {disk_path} on the local RAID0 or NVMe-oF namespace "
                         "(adev storage plans it); file_per_key_storage_backend because the "
                         "default bucket backend only flushes full 256 MiB buckets")
    parser = tool_call_parser
    if parser == "auto":
        parser = "qwen3_coder" if profile.name.lower().startswith("qwen3-coder") else None
    serve: dict[str, list[str]] = {}
    ext_lines = ["[stack]", 'mode = "external"', "time_scale = 1.0", f'profile = "{config.profile}"',
                 f'configuration = "{config.configuration}"', ""]
    for i, e in enumerate(config.endpoints):
        repo = model or (f"Qwen/{profile.name}" if profile.name.startswith("Qwen")
                         else profile.name)
        p = e.port or port
        cmd = ["vllm", "serve", repo, "--served-model-name", e.model or profile.name,
               "--host", "0.0.0.0", "--port", str(p),
               "--tensor-parallel-size", str(profile.tp),
               "--block-size", str(profile.block_size),
               "--max-model-len", str(profile.max_model_len),
               "--max-num-seqs", str(profile.max_num_seqs),
               "--max-num-batched-tokens", str(profile.max_num_batched_tokens),
               "--enable-prompt-tokens-details"]
        if config.configuration == "recompute":
            cmd += ["--no-enable-prefix-caching"]
        else:
            cmd += ["--enable-prefix-caching", "--prefix-caching-hash-algo", "sha256"]
        if profile.kv_dtype_bytes == 1:
            cmd += ["--kv-cache-dtype", "fp8"]
        if parser:
            cmd += ["--enable-auto-tool-choice", "--tool-call-parser", parser]
        transfer = kv_transfer_config(e.kv_role, store)
        if transfer is not None:
            cmd += ["--kv-transfer-config", json.dumps(transfer, separators=(",", ":"))]
        if e.kv_role != "both":
            cmd = ["env", f"VLLM_NIXL_SIDE_CHANNEL_PORT={5600 + i}", *cmd]
        serve[e.name] = cmd
        ext_lines += ["[[stack.endpoints]]", f'name = "{e.name}"',
                      f'base_url = "http://{e.name.upper()}_HOST:{p}/v1"']
        ext_lines += [f'kv_role = "{e.kv_role}"', ""] if e.kv_role != "both" else [""]
    if store:
        ext_lines += ["[stack.store]", f"ram_gb = {config.store.ram_gb:g}",
                      f"lease_ttl_s = {config.store.lease_ttl_s:g}",
                      f'metrics_url = "http://{master_host}:{metrics_port}/metrics"']
    roles = {e.kv_role for e in config.endpoints}
    if roles & {"producer", "consumer"}:
        n_p = sum(e.kv_role == "producer" for e in config.endpoints)
        n_d = sum(e.kv_role == "consumer" for e in config.endpoints)
        notes.append(f"disaggregated prefill: {n_p} prefill x {n_d} decode replica(s), KV over "
                     "NIXL (UCX; set UCX_NET_DEVICES to the RDMA NICs); `adev replay` is the "
                     "proxy (prefill with do_remote_decode and max_tokens 1, then decode)")
    notes.append(f"GPU pool: vLLM sizes it from --gpu-memory-utilization; to match the stack's "
                 f"{profile.gpu_pool_tokens} tokens add --num-gpu-blocks-override "
                 f"{profile.gpu_pool_blocks}")
    return VllmPlan(master_cmd=master_cmd, mooncake_config=mooncake, env=env, serve_cmds=serve,
                    notes=notes, external_toml="\n".join(ext_lines) + "\n")


def kv_transfer_config(kv_role: str, store: bool) -> dict | None:
    """vLLM's ``--kv-transfer-config`` for an endpoint of ``kv_role`` (producer | consumer |
    both), with or without the shared Mooncake store."""
    mooncake = {"kv_connector": "MooncakeStoreConnector", "kv_role": "kv_both"}
    nixl = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
    if kv_role == "consumer":
        return nixl
    if kv_role == "producer":
        if not store:
            return nixl
        return {"kv_connector": "MultiConnector", "kv_role": "kv_both",
                "kv_connector_extra_config": {"connectors": [nixl, mooncake]}}
    return mooncake if store else None


def render(plan: VllmPlan) -> str:
    q = shlex.join
    out: list[str] = ["# adev stack plan vllm"]
    out += [f"# {n}" for n in plan.notes]
    step = 1
    if plan.master_cmd:
        out += ["", f"## {step}. Mooncake master (one, on a host every GPU node reaches; "
                    "metrics on --metrics_port)", q(plan.master_cmd)]
        step += 1
    if plan.mooncake_config is not None:
        path = plan.env.get("MOONCAKE_CONFIG_PATH", "mooncake_config.json")
        out += ["", f"## {step}. On every GPU node: the Mooncake client config ({path})",
                f"cat > {shlex.quote(path)} <<'EOF'",
                json.dumps(plan.mooncake_config, indent=2), "EOF"]
        step += 1
    out += ["", f"## {step}. vLLM, one instance per endpoint (same PYTHONHASHSEED everywhere)"]
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in plan.env.items())
    for name, cmd in plan.serve_cmds.items():
        out += [f"# endpoint {name}", f"{exports} \\", "  " + q(cmd)]
    step += 1
    out += ["", f"## {step}. adev stack config for these endpoints (adev ... --config FILE)",
            plan.external_toml.rstrip()]
    return "\n".join(out) + "\n"
