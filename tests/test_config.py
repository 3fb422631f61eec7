"""Typed config: errors name the field and the allowed values; profiles and stack files load."""
from __future__ import annotations

import pytest

from adev.config import (
    ConfigError,
    ModelProfile,
    StackConfig,
    StoreSpec,
    from_dict,
    load,
    load_model_profile,
    load_stack,
    load_tier_profile,
    to_dict,
)


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


def test_tier_profiles_load_and_unknown_profile_lists_available():
    for name in ("ram", "local-raid0", "remote-nvmeof"):
        t = load_tier_profile(name)
        assert t.name == name and t.read_bytes_per_s > 0
    with pytest.raises(ConfigError) as e:
        load_model_profile("no-such-model")
    assert "available:" in str(e.value) and "qwen3-coder-30b-a3b" in str(e.value)


def test_load_section(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text('[store]\nram_gb = 4\nbogus = 1\n')
    with pytest.raises(ConfigError) as e:
        load(StoreSpec, f, "store")
    assert "store.bogus" in str(e.value) and str(f) in str(e.value)
