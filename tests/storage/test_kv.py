"""KV bytes per token / block from config.json (values worked out by hand in each test)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from adev.config import ConfigError, load_model_profile
from adev.storage.kv import kv_profile, kv_profile_file, load_hf_config

DATA = Path(__file__).parent / "data"
QWEN = DATA / "Qwen3-Coder-30B-A3B-Instruct.config.json"
LLAMA = DATA / "Llama-3.1-70B.config.json"
DSV2 = DATA / "DeepSeek-V2-Lite.config.json"


def test_qwen3_coder_bf16_uses_head_dim_not_hidden_over_heads():
    p = kv_profile_file(QWEN, kv_dtype="bf16")
    # 2 * 48 layers * 4 KV heads * 128 head_dim * 2 bytes; hidden/heads would give 2048/32 = 64
    assert p.head_dim == 128 and p.head_dim_source == "head_dim"
    assert p.bytes_per_token == 98_304
    assert p.bytes_per_block == 98_304 * 16 == 1_572_864


def test_llama_70b_bf16_tp1_five_mib_block():
    p = kv_profile_file(LLAMA, kv_dtype="bf16", tp=1)
    # no head_dim field: 8192 / 64 = 128; 2 * 80 * 8 * 128 * 2 = 327,680
    assert p.head_dim_source == "hidden_size/num_attention_heads"
    assert p.bytes_per_token == 327_680
    assert p.bytes_per_block == 5 * 1024 * 1024


@pytest.mark.parametrize("path", [QWEN, LLAMA, DSV2])
def test_fp8_halves_bf16(path):
    bf, f8 = kv_profile_file(path, kv_dtype="bf16"), kv_profile_file(path, kv_dtype="fp8")
    assert f8.bytes_per_token * 2 == bf.bytes_per_token
    assert f8.bytes_per_block * 2 == bf.bytes_per_block


def test_llama_fp8_values():
    p = kv_profile_file(LLAMA, kv_dtype="fp8")
    assert (p.bytes_per_token, p.bytes_per_block) == (163_840, 2_621_440)


def test_auto_dtype_reads_torch_dtype():
    assert kv_profile_file(LLAMA, kv_dtype="auto").kv_dtype_bytes == 2  # bfloat16
    cfg = {**load_hf_config(LLAMA), "torch_dtype": "float32"}
    assert kv_profile(cfg, kv_dtype="auto").bytes_per_token == 2 * 80 * 8 * 128 * 4


def test_tp_splits_kv_heads_and_replicates_past_them():
    assert kv_profile_file(LLAMA, kv_dtype="bf16", tp=2).bytes_per_token == 327_680 // 2
    assert kv_profile_file(LLAMA, kv_dtype="bf16", tp=8).bytes_per_token == 2 * 80 * 1 * 128 * 2
    # TP 16 > 8 KV heads: one replicated head per rank, same as TP 8
    assert kv_profile_file(LLAMA, kv_dtype="bf16", tp=16).bytes_per_token == 40_960
    with pytest.raises(ConfigError, match="--tp: 3 must divide num_key_value_heads=8"):
        kv_profile_file(LLAMA, tp=3)


def test_mla_one_latent_not_split_by_tp():
    p = kv_profile_file(DSV2, kv_dtype="bf16", tp=1)
    # 27 layers * (512 + 64) * 2 bytes = 31,104 (16 heads * 2 * 128 would give 221,184)
    assert p.layout == "mla" and p.latent_dim == 576
    assert p.bytes_per_token == 31_104 and p.bytes_per_block == 497_664
    assert kv_profile_file(DSV2, kv_dtype="bf16", tp=4).bytes_per_token == 31_104


def test_matches_the_stack_model_profile():
    """The single formula: the config.json route and stacks' model profile agree."""
    mp = load_model_profile("qwen3-coder-30b-a3b")
    p = kv_profile_file(QWEN, kv_dtype="bf16")
    assert (p.bytes_per_token, p.bytes_per_block) == (mp.bytes_per_token, mp.bytes_per_block)


def test_nested_text_config(tmp_path):
    outer = {"architectures": ["SomeForConditionalGeneration"], "torch_dtype": "bfloat16",
             "vision_config": {"hidden_size": 1152},
             "text_config": {k: v for k, v in load_hf_config(LLAMA).items()
                             if k in ("num_hidden_layers", "num_attention_heads",
                                      "num_key_value_heads", "hidden_size")}}
    f = tmp_path / "config.json"
    f.write_text(json.dumps(outer))
    assert kv_profile_file(f).bytes_per_token == 327_680
    del outer["text_config"]["num_key_value_heads"], outer["text_config"]["num_attention_heads"]
    f.write_text(json.dumps(outer))
    with pytest.raises(ConfigError, match=r"text_config\.num_attention_heads is missing"):
        kv_profile_file(f)


@pytest.mark.parametrize("field", ["num_hidden_layers", "num_attention_heads"])
def test_missing_field_is_named(tmp_path, field):
    cfg = load_hf_config(LLAMA)
    del cfg[field]
    f = tmp_path / "c.json"
    f.write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match=rf"{f}: required field {field} is missing"):
        kv_profile_file(f, kv_dtype="bf16")


def test_missing_mla_field_is_named():
    cfg = load_hf_config(DSV2)
    del cfg["qk_rope_head_dim"]
    with pytest.raises(ConfigError, match="qk_rope_head_dim is missing"):
        kv_profile(cfg)


def test_refuses_other_layouts():
    cfg = load_hf_config(QWEN)
    with pytest.raises(ConfigError, match="use_sliding_window"):
        kv_profile({**cfg, "use_sliding_window": True})
    with pytest.raises(ConfigError, match="sliding_attention"):
        kv_profile({**cfg, "layer_types": ["full_attention", "sliding_attention"]})
    assert kv_profile({**cfg, "layer_types": ["full_attention"] * 48},
                      kv_dtype="bf16").bytes_per_token == 98_304


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        kv_profile_file(tmp_path / "nope.json")
    f = tmp_path / "bad.json"
    f.write_text('{"a": 1,\n oops}')
    with pytest.raises(ConfigError, match=rf"{f}:2: invalid JSON"):
        kv_profile_file(f)
