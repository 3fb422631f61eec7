"""Typed config: errors name the field and the allowed values; profiles and stack files load."""
from __future__ import annotations

import dataclasses
import typing

import pytest

import adev.config as config_mod
from adev.config import (
    ConfigError,
    ModelProfile,
    PrefillTime,
    StackConfig,
    StoreSpec,
    check_cpus,
    from_dict,
    load,
    load_model_profile,
    load_stack,
    load_tier_profile,
    parse_cpu_list,
    resolve,
    to_dict,
)
from adev.emulator.metrics import Metrics
from adev.emulator.scheduler import Scheduler
from adev.emulator.state import EngineConfig, device_read_rate


def test_unknown_key_names_field_and_allowed_keys():
    with pytest.raises(ConfigError) as e:
        from_dict(StackConfig, {"store": {"ram_gib": 4}}, "stack")
    msg = str(e.value)
    assert "stack.store.ram_gib" in msg
    assert "allowed keys:" in msg and "ram_gb" in msg and "lease_ttl_s" in msg


def test_bad_literal_names_allowed_values():
    with pytest.raises(ConfigError) as e:
        from_dict(StackConfig, {"configuration": "ram"}, "stack")
    msg = str(e.value)
    assert msg.startswith("stack.configuration: 'ram' is not allowed")
    for v in ("recompute", "gpu-only", "store-ram", "store-ram+disk", "disk-only"):
        assert repr(v) in msg


@pytest.mark.parametrize("data,field_name,needle", [
    ({"store": {"ram_gb": -1.0}}, "stack.store.ram_gb", "below the minimum 0"),
    ({"time_scale": 0}, "stack.time_scale", "must be greater than 0"),
    ({"time_scale": -10.0}, "stack.time_scale", "must be greater than 0"),
    ({"store": {"lease_ttl_s": -5}}, "stack.store.lease_ttl_s", "must be greater than 0"),
    ({"endpoints": [{"name": "coder", "port": 70000}]}, "stack.endpoints[0].port",
     "above the maximum 65535"),
])
def test_bounds_name_the_field(data, field_name, needle):
    with pytest.raises(ConfigError) as e:
        from_dict(StackConfig, data, "stack")
    assert field_name in str(e.value) and needle in str(e.value)


@pytest.mark.parametrize("data,needle", [
    ({"time_scale": "fast"}, "stack.time_scale: expected a number"),
    ({"payload_scale": 1.5}, "stack.payload_scale: expected an integer"),
    ({"payload_scale": True}, "stack.payload_scale: expected an integer"),
    ({"endpoints": "coder"}, "stack.endpoints: expected list"),
    ({"store": 3}, "stack.store: expected a table"),
])
def test_wrong_types_name_the_field(data, needle):
    with pytest.raises(ConfigError, match=needle.replace("[", r"\[")):
        from_dict(StackConfig, data, "stack")


def test_duplicate_or_no_endpoints_rejected():
    with pytest.raises(ConfigError, match="stack.endpoints: endpoint names must be unique"):
        from_dict(StackConfig, {"endpoints": [{"name": "a"}, {"name": "a"}]}, "stack")
    with pytest.raises(ConfigError, match="at least one endpoint"):
        from_dict(StackConfig, {"endpoints": []}, "stack")


def test_required_key_missing():
    with pytest.raises(ConfigError, match="stack.endpoints\\[0\\].name: required key is missing"):
        from_dict(StackConfig, {"endpoints": [{"port": 1}]}, "stack")


def test_roundtrip_through_dict_is_identity():
    cfg = from_dict(StackConfig, {"configuration": "disk-only", "time_scale": 3,
                                  "endpoints": [{"name": "x", "port": 5}]}, "stack")
    assert cfg.time_scale == 3.0 and isinstance(cfg.time_scale, float)
    again = from_dict(StackConfig, to_dict(cfg), "stack")
    assert again == cfg


def test_default_stack_file_and_overrides(tmp_path):
    cfg = load_stack()
    assert [e.name for e in cfg.endpoints] == ["coder", "reasoner"]
    assert cfg.mode == "embedded" and cfg.store.lease_ttl_s == 5.0
    cfg = load_stack(None, time_scale=2.0, configuration=None)
    assert cfg.time_scale == 2.0 and cfg.configuration == "store-ram+disk"
    bad = tmp_path / "bad.toml"
    bad.write_text('[stack]\nconfiguration = "nope"\n')
    with pytest.raises(ConfigError) as e:
        load_stack(bad)
    assert str(bad) in str(e.value) and "stack.configuration" in str(e.value)
    broken = tmp_path / "broken.toml"
    broken.write_text("[stack\n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_stack(broken)
    with pytest.raises(ConfigError, match="not found"):
        load_stack(tmp_path / "missing.toml")


def test_model_profile_bytes_per_token():
    p = load_model_profile("qwen3-coder-30b-a3b")
    # 2 * 48 layers * 4 KV heads * 128 * 2 bytes = 96 KiB per token, 1.5 MiB per block
    assert p.bytes_per_token == 96 * 1024
    assert p.bytes_per_block == 1.5 * 1024 * 1024
    assert p.prefill_tokens_per_s == 14850.0 and p.gpu_pool_tokens == 166512
    assert p.max_model_len == 65536 and p.gpu_pool_blocks == 166512 // 16
    with pytest.raises(ConfigError, match="tp: 3 must divide num_kv_heads=4"):
        from_dict(ModelProfile, {"name": "m", "num_layers": 1, "num_kv_heads": 4,
                                 "head_dim": 8, "tp": 3}, "profile")


def test_prefill_time_by_position_hand_worked():
    p = load_model_profile("qwen3-coder-30b-a3b")
    # F(p) = 2 * 2.730491904e9 + 4 * 48 * 32 * 128 * p = 5.460983808e9 + 786,432 p FLOPs.
    # Attention at 7.4e14 FLOP/s: 786432 / 7.4e14 = 1.062746e-9 s per earlier token. A 19,200-token
    # prompt from 0 has 19200 * 19199 / 2 = 184,310,400 pairs: 0.195875 s of attention in
    # 19200 / 14850 = 1.292929 s, so the weights take 1.097054 s: 5.713824e-5 s per token.
    t = p.prefill_time
    assert t.per_token_s == pytest.approx(5.713824e-5, rel=1e-6)
    assert t.per_token_pos_s == pytest.approx(1.062746e-9, rel=1e-6)
    assert t.chunk_s(19200) == pytest.approx(19200 / 14850)
    # 8,192 tokens after 24,000 cached: 8192 * 5.713824e-5 + 1.062746e-9 * (8192 * 24000
    # + 8192 * 8191 / 2) = 0.468076 + 0.244600 = 0.712676 s
    assert t.chunk_s(8192, 24000) == pytest.approx(0.712676, rel=1e-5)
    # chunks add up to the whole prompt
    assert t.chunk_s(5000) + t.chunk_s(7000, 5000) == pytest.approx(t.chunk_s(12000))
    assert t.chunk_s(0, 100) == 0.0
    # one effective FLOP rate for both (attention_flops_per_s = 0): 19200 * 5.460983808e9
    # + 786432 * 184,310,400 = 2.497984856e14 FLOPs in 1.292929 s, R = 1.932035e14 FLOP/s:
    # 2.826545e-5 s per token, 4.070485e-9 s per earlier token
    one = dataclasses.replace(p, attention_flops_per_s=0.0).prefill_time
    assert one.per_token_s == pytest.approx(2.826545e-5, rel=1e-6)
    assert one.per_token_pos_s == pytest.approx(4.070485e-9, rel=1e-6)
    assert one.chunk_s(19200) == pytest.approx(19200 / 14850)
    # any of the three unset: the flat measured rate
    flat = dataclasses.replace(p, prefill_reference_tokens=0).prefill_time
    assert flat == PrefillTime(1 / 14850) and flat.chunk_s(30000, 9000) == pytest.approx(30000 / 14850)


def test_prefill_time_weights_rate_factor_speeds_the_weights_only():
    # the replay profile: FP8 weights at twice the measured BF16 weights' rate, attention as it was
    base, fp8 = load_model_profile("qwen3-coder-30b-a3b"), load_model_profile("qwen3-coder-30b-a3b-128k")
    assert fp8.name == "Qwen3-Coder-30B-A3B-Instruct-FP8" and base.name == "Qwen3-Coder-30B-A3B-Instruct"
    t = fp8.prefill_time
    assert t.per_token_s == pytest.approx(5.713824e-5 / 2, rel=1e-6)
    assert t.per_token_pos_s == base.prefill_time.per_token_pos_s
    # 8,192 tokens after 24,000: 0.468076 / 2 + 0.244600 = 0.478638 s
    assert t.chunk_s(8192, 24000) == pytest.approx(0.478638, rel=1e-5)
    flat = dataclasses.replace(fp8, prefill_reference_tokens=0).prefill_time
    assert flat == PrefillTime(1 / 14850 / 2)


def test_fp8_profile_halves_decodes_weight_bound_terms_only():
    # decode reads the weights once a step: FP8's half the bytes halves base and per-sequence,
    # the BF16 KV's per-context term stays
    base, fp8 = load_model_profile("qwen3-coder-30b-a3b"), load_model_profile("qwen3-coder-30b-a3b-128k")
    assert (base.decode_step_base_s, base.decode_step_per_seq_s) == (0.012, 0.0004)
    assert (fp8.decode_step_base_s, fp8.decode_step_per_seq_s) == (0.006, 0.0002)
    assert fp8.decode_step_per_ktoken_s == base.decode_step_per_ktoken_s == 0.00002
    # the engine's step for one stream at 60,000 context tokens: 6 + 0.2 + 1.2 ms against
    # 12 + 0.4 + 1.2 ms
    def step(p: ModelProfile) -> float:
        cfg = EngineConfig(block_size=p.block_size, capacity_blocks=16,
                           prefill_tokens_per_s=p.prefill_tokens_per_s,
                           decode_step_base_s=p.decode_step_base_s,
                           decode_step_per_seq_s=p.decode_step_per_seq_s,
                           decode_step_per_ktoken_s=p.decode_step_per_ktoken_s,
                           max_num_seqs=p.max_num_seqs, max_num_batched_tokens=p.max_num_batched_tokens,
                           time_scale=1.0, bytes_per_block=p.bytes_per_block)
        return Scheduler(cfg, Metrics("m", p.block_size, 16, True, p.max_model_len)).decode_step_s(1, 60000)
    assert step(fp8) == pytest.approx(0.0074) and step(base) == pytest.approx(0.0136)


def test_attention_rate_that_leaves_the_weights_no_time_is_refused():
    # attention alone at the reference: 786432 * 184,310,400 / R >= 1.292929 s for R <= 1.121079e14
    data = {"name": "m", "num_layers": 48, "num_kv_heads": 4, "head_dim": 128,
            "num_attention_heads": 32, "active_params": 2.730491904e9,
            "prefill_reference_tokens": 19200, "attention_flops_per_s": 1.1e14}
    with pytest.raises(ConfigError, match=r"profile.attention_flops_per_s: 1.1e\+14 leaves no time for "
                                          r"the weights.*allowed values: above 1.121e\+14, or 0"):
        from_dict(ModelProfile, data, "profile")
    assert from_dict(ModelProfile, {**data, "attention_flops_per_s": 1.2e14}, "profile").prefill_time.per_token_s > 0


def test_tier_profiles_load_and_unknown_profile_lists_available():
    for name in ("ram", "local-raid0", "remote-nvmeof"):
        t = load_tier_profile(name)
        assert t.name == name and t.read_bytes_per_s > 0
    with pytest.raises(ConfigError) as e:
        load_model_profile("no-such-model")
    assert "available:" in str(e.value) and "qwen3-coder-30b-a3b" in str(e.value)


def test_disk_tiers_staged_through_ram_load_at_the_measured_effective_rates():
    # a staged disk load takes the slower of its disk read and its copy through RAM (they
    # overlap): the source's fleet study measured 5.45 GB/s (local RAID0) and 5.78 GB/s (remote
    # NVMe-oF) for those loads, and the RAM hop (20 GB/s) is the faster one
    ram = load_tier_profile("ram").read_bytes_per_s
    assert ram == 20e9
    for name, measured in (("local-raid0", 5.45e9), ("remote-nvmeof", 5.78e9)):
        disk = load_tier_profile(name).read_bytes_per_s
        assert min(disk, ram) == pytest.approx(measured, rel=1e-3)


def test_serial_staging_keeps_a_lone_staged_load_at_the_measured_rate():
    # serial hops: 1 / staged = 1 / device + 1 / hop, so the device reads faster than a staged
    # load: 1 / (1 / 5.45 - 1 / 20) = 7.4914 GB/s for local RAID0, 8.1294 for remote NVMe-oF
    assert device_read_rate(5.45e9, 20e9, "serial") == pytest.approx(7.4914e9, rel=1e-4)
    assert device_read_rate(5.78e9, 20e9, "serial") == pytest.approx(8.1294e9, rel=1e-4)
    assert device_read_rate(5.45e9, 20e9, "overlap") == 5.45e9
    d = device_read_rate(5.45e9, 20e9, "serial")
    assert 1 / (1 / d + 1 / 20e9) == pytest.approx(5.45e9)
    with pytest.raises(ValueError, match="below the staging hop"):
        device_read_rate(20e9, 20e9, "serial")


def test_store_staging_and_load_threads_are_checked(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text('[store]\nstaging = "pipelined"\n')
    with pytest.raises(ConfigError) as e:
        load(StoreSpec, f, "store")
    assert "store.staging" in str(e.value) and "overlap" in str(e.value) and "serial" in str(e.value)
    assert "shared" in str(e.value)
    f.write_text('[store]\nload_threads = -1\n')
    with pytest.raises(ConfigError, match="store.load_threads"):
        load(StoreSpec, f, "store")
    f.write_text('[store]\nload_threads = 1\nstaging = "serial"\n')
    assert load(StoreSpec, f, "store") == StoreSpec(load_threads=1, staging="serial")
    f.write_text('[store]\npressure_skip = "off"\n')
    with pytest.raises(ConfigError, match="store.pressure_skip: expected true or false"):
        load(StoreSpec, f, "store")
    f.write_text('[store]\npressure_skip = false\n')
    assert load(StoreSpec, f, "store").pressure_skip is False and StoreSpec().pressure_skip
    # serial staging needs a staged rate below the hop's: a disk tier as fast as RAM is refused
    fast = tmp_path / "fast.toml"
    fast.write_text('name = "fast"\nlookup_latency_s = 0.0001\nread_bytes_per_s = 30e9\n'
                    'write_bytes_per_s = 30e9\nsource = "test"\n')
    bad = StackConfig(store=StoreSpec(staging="serial", disk_tier=str(fast)))
    with pytest.raises(ConfigError, match="stack.store.staging: 'serial' needs the disk tier"):
        bad.validate("stack")
    StackConfig(store=StoreSpec(staging="serial")).validate("stack")
    bad = StackConfig(store=StoreSpec(staging="shared", disk_tier=str(fast)))
    with pytest.raises(ConfigError, match="stack.store.staging: 'shared' needs the disk tier"):
        bad.validate("stack")


def test_load_section(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text('[store]\nram_gb = 4\nbogus = 1\n')
    with pytest.raises(ConfigError) as e:
        load(StoreSpec, f, "store")
    assert "store.bogus" in str(e.value) and str(f) in str(e.value)


# -- every rule once, at its boundary --------------------------------------------------------

PROFILE = {"name": "m", "num_layers": 1, "num_kv_heads": 4, "head_dim": 8}


def test_model_profile_gpu_pool_must_hold_one_block():
    with pytest.raises(ConfigError, match=r"^profile.gpu_pool_tokens: must hold at least one block"):
        from_dict(ModelProfile, {**PROFILE, "gpu_pool_tokens": 15, "block_size": 16}, "profile")
    p = from_dict(ModelProfile, {**PROFILE, "gpu_pool_tokens": 16, "block_size": 16}, "profile")
    assert p.gpu_pool_blocks == 1
    assert from_dict(ModelProfile, {**PROFILE, "tp": 2}, "profile").bytes_per_token == 2 * 1 * 2 * 8 * 2
    with pytest.raises(ConfigError, match=r"^profile.block_size: 0 must be greater than 0"):
        from_dict(ModelProfile, {**PROFILE, "block_size": 0}, "profile")
    # validate() is named after the class when no prefix is given
    with pytest.raises(ConfigError, match=r"^ModelProfile.tp: 3 must divide"):
        from_dict(ModelProfile, {**PROFILE, "tp": 3})


def test_a_stacks_gpu_pool_replaces_its_profiles():
    base = load_model_profile("qwen3-coder-30b-a3b")
    assert StackConfig().model_profile() == base                 # 0: the profile's own pool
    own = StackConfig(gpu_pool_tokens=262_283).model_profile()
    assert (own.gpu_pool_tokens, own.gpu_pool_blocks) == (262_283, 16_392)
    assert dataclasses.replace(own, gpu_pool_tokens=base.gpu_pool_tokens) == base
    cfg = from_dict(StackConfig, {"gpu_pool_tokens": 70_000}, "stack")
    assert to_dict(cfg)["gpu_pool_tokens"] == 70_000
    with pytest.raises(ConfigError, match=r"^stack.gpu_pool_tokens: -1 is below the minimum 0"):
        from_dict(StackConfig, {"gpu_pool_tokens": -1}, "stack")
    with pytest.raises(ConfigError, match=r"^stack.gpu_pool_tokens: must hold at least one block"):
        from_dict(StackConfig, {"gpu_pool_tokens": 15}, "stack")


def test_bounds_are_inclusive():
    s = from_dict(StackConfig, {"store": {"ram_gb": 0, "master_port": 65535},
                                "endpoints": [{"name": "a", "port": 0}]}, "stack")
    assert s.store.ram_gb == 0.0 and s.store.master_port == 65535 and s.endpoints[0].port == 0
    with pytest.raises(ConfigError, match=r"^stack.endpoints\[0\].port: -1 is below the minimum 0"):
        from_dict(StackConfig, {"endpoints": [{"name": "a", "port": -1}]}, "stack")
    with pytest.raises(ConfigError, match=r"^stack.store.master_port: 65536 is above the maximum"):
        from_dict(StackConfig, {"store": {"master_port": 65536}}, "stack")
    assert from_dict(StackConfig, {"time_scale": 0.001}, "stack").time_scale == 0.001


def test_external_mode_needs_base_url_for_each_endpoint():
    with pytest.raises(ConfigError, match=r"^stack.endpoints: mode 'external' needs base_url for \['b'\]"):
        from_dict(StackConfig, {"mode": "external", "endpoints": [
            {"name": "a", "base_url": "http://h:1/v1"}, {"name": "b"}]}, "stack")
    s = from_dict(StackConfig, {"mode": "external", "endpoints": [
        {"name": "a", "base_url": "http://h:1/v1"}]}, "stack")
    assert s.endpoints[0].base_url == "http://h:1/v1"


def test_cpu_lists(monkeypatch):
    monkeypatch.setattr(config_mod, "HOST_CPUS", [0, 1, 2, 3])
    check_cpus([], "x.cpus")
    check_cpus([3, 1], "x.cpus")
    for bad in ([4], [1, 1], [True], ["0"]):
        with pytest.raises(ConfigError, match=r"^x.cpus: .* is not allowed; allowed values: distinct "
                                              r"cores among \[0, 1, 2, 3\]"):
            check_cpus(bad, "x.cpus")
    s = from_dict(StackConfig, {"cpus": [0, 2]}, "stack")
    assert s.cpus == [0, 2]
    with pytest.raises(ConfigError, match=r"^stack.cpus: \[7\] is not allowed"):
        from_dict(StackConfig, {"cpus": [7]}, "stack")
    monkeypatch.setattr(config_mod, "HOST_CPUS", [])
    check_cpus([], "x.cpus")
    with pytest.raises(ConfigError, match=r"^x.cpus: CPU affinity is not supported"):
        check_cpus([0], "x.cpus")
    assert parse_cpu_list("0,2-3", "--cpus") == [0, 2, 3]
    assert parse_cpu_list(" 5 ", "--cpus") == [5]
    for bad in ("a", "1-x", ""):
        with pytest.raises(ConfigError, match=r"^--cpus: .* is not a CPU list; allowed values"):
            parse_cpu_list(bad, "--cpus")


@dataclasses.dataclass(frozen=True)
class _AllTypes:
    flag: bool = False
    n: float = 0.0
    name: str = ""
    table: dict[str, int] = dataclasses.field(default_factory=dict)
    pair: tuple[int, ...] = ()
    maybe: str | None = None
    either: int | str = 0
    inner: StoreSpec | None = None
    anything: typing.Any = None


def test_every_type_rule_names_the_field():
    ok = from_dict(_AllTypes, {"flag": True, "n": 3, "name": "x", "table": {"a": 1},
                               "pair": [1, 2], "maybe": None, "either": "s",
                               "inner": {"ram_gb": 2}, "anything": [object]}, "t")
    assert ok.flag is True and ok.n == 3.0 and isinstance(ok.n, float) and ok.pair == (1, 2)
    assert ok.table == {"a": 1} and ok.maybe is None and ok.either == "s"
    assert ok.inner == StoreSpec(ram_gb=2.0) and ok.anything == [object]
    for data, msg in [
        ({"flag": "yes"}, "t.flag: expected true or false, got 'yes'"),
        ({"flag": 1}, "t.flag: expected true or false, got 1"),
        ({"n": True}, "t.n: expected a number, got True"),
        ({"name": 5}, "t.name: expected a string, got 5"),
        ({"table": [1]}, "t.table: expected table of int, got [1]"),
        ({"table": {"a": "b"}}, "t.table.a: expected an integer, got 'b'"),
        ({"pair": 1}, "t.pair: expected list of int, got 1"),
        ({"pair": [1, "z"]}, "t.pair[1]: expected an integer, got 'z'"),
        ({"maybe": 5}, "t.maybe: expected a string, got 5"),
        ({"either": 1.5}, "t.either: expected int or str, got 1.5"),
        ({"inner": {"bogus": 1}}, "unknown key(s) t.inner.bogus; allowed keys: "),
        ({"inner": 3}, "t.inner: expected a table, got 3"),
    ]:
        with pytest.raises(ConfigError) as e:
            from_dict(_AllTypes, data, "t")
        assert str(e.value).startswith(msg), (data, str(e.value))
    with pytest.raises(ConfigError, match=r"^_AllTypes: expected a table, got \[\]"):
        from_dict(_AllTypes, [])


def test_resolve_profile_by_name_or_path(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text('name = "mine"\nnum_layers = 2\nnum_kv_heads = 2\nhead_dim = 4\n')
    assert resolve(str(f), "stacks/profiles/models") == f
    assert load_model_profile(str(f)).bytes_per_token == 2 * 2 * 2 * 4 * 2
    assert resolve("ram", "stacks/profiles/tiers").name == "ram.toml"
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "bad"\nnum_layers = 0\nnum_kv_heads = 2\nhead_dim = 4\n')
    with pytest.raises(ConfigError) as e:
        load_model_profile(str(bad))
    assert str(e.value) == f"{bad}: num_layers: 0 must be greater than 0"


def test_a_model_profile_extends_another(tmp_path):
    long = load_model_profile("qwen3-coder-30b-a3b-128k")
    base = load_model_profile("qwen3-coder-30b-a3b")
    assert long.max_model_len == 131072 and base.max_model_len == 65536
    assert long.name == "Qwen3-Coder-30B-A3B-Instruct-FP8" and long.weights_rate_factor == 2.0
    assert dataclasses.replace(long, name=base.name, max_model_len=65536, weights_rate_factor=1.0,
                               decode_step_base_s=0.012, decode_step_per_seq_s=0.0004,
                               source=base.source) == base
    mine = tmp_path / "mine.toml"
    mine.write_text(f'extends = "{tmp_path / "base.toml"}"\nhead_dim = 8\n')
    (tmp_path / "base.toml").write_text(
        'name = "b"\nnum_layers = 2\nnum_kv_heads = 2\nhead_dim = 4\n')
    assert load_model_profile(str(mine)).bytes_per_token == 2 * 2 * 2 * 8 * 2
    (tmp_path / "base.toml").write_text('extends = "qwen3-coder-30b-a3b"\n')
    with pytest.raises(ConfigError, match="field 'extends': .* extends another profile"):
        load_model_profile(str(mine))
    (tmp_path / "base.toml").write_text('name = "b"\nnum_layers = 0\nnum_kv_heads = 2\n'
                                        'head_dim = 4\n')
    with pytest.raises(ConfigError, match=f"^{mine}: num_layers: 0 must be greater than 0"):
        load_model_profile(str(mine))
