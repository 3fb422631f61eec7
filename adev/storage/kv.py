"""KV-cache bytes per token and per block from a Hugging Face ``config.json``.

Two layouts are understood; anything else is refused with a message naming what was found.

- **Multi-head / grouped-query attention** (Llama, Qwen, Mistral...): K and V per layer per KV
  head, the heads split over tensor-parallel ranks. The formula is the one of
  :attr:`adev.config.ModelProfile.bytes_per_token` (the single definition, reused here):

      bytes_per_token = 2 * L * (H_kv / TP) * d_head * b_kv

  with ``L = num_hidden_layers``, ``H_kv = num_key_value_heads`` (``num_attention_heads`` when the
  config has no KV-head count, i.e. plain multi-head attention), ``d_head = head_dim`` when the
  config gives it, else ``hidden_size / num_attention_heads``. With TP larger than ``H_kv``,
  vLLM replicates KV heads so that every rank holds one (TP must then be a multiple of ``H_kv``);
  a TP that neither divides nor is a multiple of ``H_kv`` is refused, as vLLM refuses it.
- **Multi-head latent attention** (DeepSeek V2/V3, Kimi K2: the config has ``kv_lora_rank``):
  vLLM caches one compressed latent per token per layer, not K and V, of
  ``kv_lora_rank + qk_rope_head_dim`` elements, and every tensor-parallel rank holds the whole
  latent (it is not split by TP):

      bytes_per_token = L * (kv_lora_rank + qk_rope_head_dim) * b_kv

Both are bytes held by one tensor-parallel rank (what one rank's connector stores per token).
``b_kv``: 2 for ``bf16``, 1 for ``fp8``; ``auto`` (vLLM's default) is the model's own dtype
(``torch_dtype``: bfloat16/float16 2 bytes, float32 4). bytes per block = bytes per token x
block size (vLLM's default 16 tokens).

Layouts refused: per-layer attention types other than full attention (``layer_types`` with
sliding-window or linear-attention layers; ``use_sliding_window: true``), and state-space models
(``ssm_cfg``/``mamba`` fields): their cache per token differs by layer or is not a per-token KV at
all. Multimodal configs keep the language model under ``text_config``; its fields are read there.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..config import ConfigError, ModelProfile

KvDtype = Literal["bf16", "fp8", "auto"]
DTYPE_BYTES = {"bf16": 2, "fp8": 1}
TORCH_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}


@dataclass(frozen=True)
class KVProfile:
    """KV footprint of one model at one TP degree and KV dtype (bytes per tensor-parallel rank)."""

    model: str
    layout: Literal["gqa", "mla"]
    num_layers: int
    kv_heads: int | None          # None for MLA
    head_dim: int | None          # None for MLA
    latent_dim: int | None        # MLA: kv_lora_rank + qk_rope_head_dim; None otherwise
    tp: int
    kv_dtype: str
    kv_dtype_bytes: int
    block_size: int
    bytes_per_token: int
    head_dim_source: str          # "head_dim" or "hidden_size/num_attention_heads" or "" (MLA)
    rule: str                     # the formula used, with the numbers filled in

    @property
    def bytes_per_block(self) -> int:
        """KV bytes per block: ``bytes_per_token * block_size``."""
        return self.bytes_per_token * self.block_size


def load_hf_config(path: str | Path) -> dict[str, Any]:
    """Read a ``config.json``; a missing or malformed file is a :class:`ConfigError`."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{p}: file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{p}: cannot read: {e}") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{p}:{e.lineno}: invalid JSON: {e.msg}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a JSON object, got {type(data).__name__}")
    return data


def _text_config(cfg: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The language model's fields: ``text_config`` merged over the top level when present."""
    tc = cfg.get("text_config")
    if isinstance(tc, dict):
        return {**cfg, **tc}, "text_config."
    return cfg, ""


def _int(cfg: dict[str, Any], key: str, where: str, prefix: str) -> int:
    v = cfg.get(key)
    if v is None:
        raise ConfigError(f"{where}: required field {prefix}{key} is missing")
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ConfigError(f"{where}: field {prefix}{key} must be a positive integer, got {v!r}")
    return v


def dtype_bytes(kv_dtype: str, cfg: dict[str, Any], where: str) -> int:
    """Bytes per KV element for ``bf16`` / ``fp8`` / ``auto`` (the config's ``torch_dtype``)."""
    if kv_dtype in DTYPE_BYTES:
        return DTYPE_BYTES[kv_dtype]
    if kv_dtype != "auto":
        raise ConfigError(f"--kv-dtype: {kv_dtype!r} is not allowed; allowed values: bf16, fp8, "
                          "auto")
    td = cfg.get("torch_dtype", cfg.get("dtype"))
    if td is None:
        raise ConfigError(f"{where}: --kv-dtype auto needs field torch_dtype (or pass --kv-dtype "
                          "bf16|fp8)")
    if td not in TORCH_DTYPE_BYTES:
        raise ConfigError(f"{where}: field torch_dtype {td!r} is not understood; allowed values: "
                          + ", ".join(TORCH_DTYPE_BYTES) + " (or pass --kv-dtype bf16|fp8)")
    return TORCH_DTYPE_BYTES[td]


def _refuse_layouts(cfg: dict[str, Any], where: str, prefix: str) -> None:
    types = cfg.get("layer_types")
    if isinstance(types, list):
        other = sorted({str(t) for t in types if t != "full_attention"})
        if other:
            raise ConfigError(f"{where}: field {prefix}layer_types has {', '.join(other)} layers; "
                              "only full-attention layouts (GQA/MHA) and MLA are supported, "
                              "since the cache per token differs by layer")
    if cfg.get("use_sliding_window") is True:
        raise ConfigError(f"{where}: field {prefix}use_sliding_window is true; sliding-window "
                          "attention is not supported (the cache per token is bounded by the "
                          "window, not by the context)")
    for k in ("ssm_cfg", "mamba_d_state", "ssm_state_size"):
        if k in cfg:
            raise ConfigError(f"{where}: field {prefix}{k} marks a state-space model; its cache "
                              "is a per-sequence state, not a per-token KV; not supported")


def kv_profile(cfg: dict[str, Any], *, tp: int = 1, kv_dtype: str = "auto",
               block_size: int = 16, where: str = "config.json") -> KVProfile:
    """KV bytes per token and per block of the model described by ``cfg`` (see the module doc)."""
    if tp <= 0:
        raise ConfigError(f"--tp: {tp} must be a positive integer")
    if block_size <= 0:
        raise ConfigError(f"--block-size: {block_size} must be a positive integer")
    c, prefix = _text_config(cfg)
    _refuse_layouts(c, where, prefix)
    layers = _int(c, "num_hidden_layers", where, prefix)
    b = dtype_bytes(kv_dtype, c, where)
    w = Path(where)
    stem = w.name.removesuffix(".json").removesuffix(".config")
    name = str(c.get("_name_or_path")
               or (w.parent.name if w.name == "config.json" and w.parent.name else stem))
    if c.get("kv_lora_rank") is not None:  # multi-head latent attention
        rank = _int(c, "kv_lora_rank", where, prefix)
        rope = _int(c, "qk_rope_head_dim", where, prefix)
        latent = rank + rope
        bpt = layers * latent * b
        return KVProfile(model=name, layout="mla", num_layers=layers, kv_heads=None,
                         head_dim=None, latent_dim=latent, tp=tp, kv_dtype=kv_dtype,
                         kv_dtype_bytes=b, block_size=block_size, bytes_per_token=bpt,
                         head_dim_source="",
                         rule=f"MLA: L * (kv_lora_rank + qk_rope_head_dim) * b = {layers} * "
                              f"({rank} + {rope}) * {b} = {bpt} (one latent per token per layer, "
                              "not split by TP)")
    heads = _int(c, "num_attention_heads", where, prefix)
    kv_heads = _int(c, "num_key_value_heads", where, prefix) if "num_key_value_heads" in c \
        else heads
    if c.get("head_dim") is not None:
        head_dim, src = _int(c, "head_dim", where, prefix), "head_dim"
    else:
        hidden = _int(c, "hidden_size", where, prefix)
        if hidden % heads:
            raise ConfigError(f"{where}: field {prefix}hidden_size {hidden} is not a multiple of "
                              f"{prefix}num_attention_heads {heads}; give {prefix}head_dim")
        head_dim, src = hidden // heads, "hidden_size/num_attention_heads"
    if kv_heads % tp == 0:
        prof_heads = kv_heads
    elif tp % kv_heads == 0:
        prof_heads = tp  # replicated: one KV head per rank
    else:
        raise ConfigError(f"--tp: {tp} must divide {prefix}num_key_value_heads={kv_heads} or be a "
                          "multiple of it")
    mp = ModelProfile(name=name, num_layers=layers, num_kv_heads=prof_heads, head_dim=head_dim,
                      kv_dtype_bytes=b, tp=tp, block_size=block_size)
    per_rank = prof_heads // tp
    return KVProfile(model=name, layout="gqa", num_layers=layers, kv_heads=kv_heads,
                     head_dim=head_dim, latent_dim=None, tp=tp, kv_dtype=kv_dtype,
                     kv_dtype_bytes=b, block_size=block_size, bytes_per_token=mp.bytes_per_token,
                     head_dim_source=src,
                     rule=f"2 * L * (H_kv / TP) * d_head * b = 2 * {layers} * {per_rank} * "
                          f"{head_dim} * {b} = {mp.bytes_per_token}"
                          + (" (KV heads replicated: one per rank)"
                             if prof_heads != kv_heads else ""))


def kv_profile_file(path: str | Path, **kw: Any) -> KVProfile:
    """:func:`kv_profile` of a ``config.json`` file; errors name the file."""
    return kv_profile(load_hf_config(path), where=str(path), **kw)
