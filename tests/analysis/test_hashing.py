"""Block hashing: vLLM's sha256_cbor definition, the fast chain's prefix dependence."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from adev.analysis import hashing as H
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


# -- the fast chain, written out with Python integers (mod 2**64) from the module's docstring --

M64 = (1 << 64) - 1
GOLDEN, M1, M2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
K_POS, K_KEY, SEED = 0xD6E8FEB86659FD93, 0xA0761D6478BD642F, 0xE7037ED1A0B428DB


def mix_ref(x):
    """splitmix64: state x -> x + golden, then its finaliser."""
    z = (x + GOLDEN) & M64
    z = ((z ^ (z >> 30)) * M1) & M64
    z = ((z ^ (z >> 27)) * M2) & M64
    return z ^ (z >> 31)


def fast_ref(tokens, bs, first_block=0, s_prev=0):
    """Keys and states of blocks first_block.. : content hash folds the block's 64-bit words
    (two tokens, little endian, for an even block size; one token each for an odd one)."""
    keys, states, s = [], [], s_prev
    for j in range(first_block, len(tokens) // bs):
        blk = [int(t) for t in tokens[j * bs:(j + 1) * bs]]
        words = [blk[i] | blk[i + 1] << 32 for i in range(0, bs, 2)] if bs % 2 == 0 else blk
        h = SEED
        for w in words:
            h = mix_ref(h ^ w)
        s = (s + mix_ref(h ^ (j * K_POS & M64))) & M64
        states.append(s)
        keys.append(mix_ref(s ^ (j * K_KEY & M64)))
    return keys, states


def test_mix_is_splitmix64():
    # splitmix64's first output from state 0 (the published reference value)
    assert mix_ref(0) == 0xE220A8397B1DCDAF
    x = np.array([0, 1, 2**63, M64, 0x0123456789ABCDEF], dtype=np.uint64)
    assert H._mix(x.copy()).tolist() == [mix_ref(int(v)) for v in x]


@pytest.mark.parametrize("bs", [16, 4, 3, 1])
def test_fast_chain_matches_the_formula(bs):
    toks = np.random.default_rng(bs).integers(0, 2**32, 5 * bs + bs - 1, dtype=np.uint32)
    keys, states = H.fast_chain(toks, bs)
    rk, rs = fast_ref(toks, bs)
    assert keys.dtype == np.uint64 and states.dtype == np.uint64 and len(keys) == 5
    assert keys.tolist() == rk and states.tolist() == rs
    assert H.block_keys(toks.tolist(), bs).tolist() == rk
    # continuing from block 2 with block 1's state gives the same keys and states
    k2, s2 = H.fast_chain(toks, bs, first_block=2, s_prev=rs[1])
    assert k2.tolist() == rk[2:] and s2.tolist() == rs[2:]
    assert fast_ref(toks, bs, 2, rs[1]) == (rk[2:], rs[2:])


def test_fast_chain_without_new_blocks():
    toks = np.arange(40, dtype=np.uint32)
    for first in (2, 3):        # 2 full blocks of 16: none from block 2 on
        keys, states = H.fast_chain(toks, 16, first_block=first, s_prev=7)
        assert keys.dtype == np.uint64 and keys.tolist() == [] and states.tolist() == []
    k, s = H.fast_chain(toks, 16, first_block=1, s_prev=0)
    assert len(k) == 1 and k.tolist() == fast_ref(toks, 16, 1, 0)[0]


def test_digest_keys_are_the_first_8_bytes_little_endian():
    d1 = bytes(range(32))
    d2 = bytes(range(100, 132))
    keys = H.digest_keys([d1, d2])
    assert keys.dtype == np.uint64
    assert keys.tolist() == [int.from_bytes(d1[:8], "little"), int.from_bytes(d2[:8], "little")]
    e = H.digest_keys([])
    assert e.dtype == np.uint64 and e.shape == (0,)


def test_block_keys_sha256_cbor_and_unknown_algo():
    toks = list(range(100, 140))
    want = [int.from_bytes(d[:8], "little") for d in vllm_sha256_cbor_reference(toks, 16, "0")]
    assert H.block_keys(toks, 16, "sha256_cbor").tolist() == want
    assert H.block_keys(toks, 16, algo="sha256_cbor", hash_seed="7").tolist() == \
        [int.from_bytes(d[:8], "little") for d in vllm_sha256_cbor_reference(toks, 16, "7")]
    with pytest.raises(ValueError, match="algo: 'md5' is not allowed; allowed values: "
                                         "fast, sha256_cbor"):
        H.block_keys(toks, 16, "md5")


def test_as_tokens_from_lists_and_arrays():
    for src in ([1, 2, 2**32 - 1], np.array([1, 2, 2**32 - 1], dtype=np.int64), (1, 2, 2**32 - 1)):
        t = H.as_tokens(src)
        assert t.dtype == np.uint32 and t.tolist() == [1, 2, 2**32 - 1]


@pytest.mark.parametrize("bs", [255, 256, 300])
def test_sha256_cbor_block_sizes_with_one_and_two_byte_array_headers(bs):
    # CBOR array header: 0x98 + 1 byte below 256, 0x99 + 2 bytes (big endian) from 256 on
    toks = np.arange(2 * bs + 5, dtype=np.uint32)
    assert sha256_cbor_chain(toks, bs, 0, none_hash_sha256_cbor("0")) == \
        vllm_sha256_cbor_reference(toks, bs)
    assert H._cbor_array_header(bs) == (bytes([0x98, bs]) if bs < 256
                                        else bytes([0x99]) + bs.to_bytes(2, "big"))


def test_cbor_table_edge_and_a_fresh_table(monkeypatch):
    # ids up to 2**18 - 1 come from the lookup table, 2**18 is computed
    toks = np.array([2**18 - 1, 2**18] + list(range(14)), dtype=np.uint32)
    want = vllm_sha256_cbor_reference(toks)
    assert sha256_cbor_chain(toks, 16, 0, none_hash_sha256_cbor("0")) == want
    monkeypatch.setattr(H, "_enc_table", None)
    monkeypatch.setattr(H, "_len_table", None)
    small = np.array([0, 23, 24, 255, 256, 65535, 65536, 2**18 - 1] * 2, dtype=np.uint32)
    assert sha256_cbor_chain(small, 16, 0, none_hash_sha256_cbor("0")) == \
        vllm_sha256_cbor_reference(small)
    assert H._enc_table.shape == (2**18, 5) and H._len_table[[0, 24, 256, 65536]].tolist() == \
        [1, 2, 3, 5]
