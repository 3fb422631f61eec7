"""Block hashing of prompts: chained 64-bit keys of every full ``block_size``-token block.

A block is named by a chained hash, so a block's key names its whole prefix (as vLLM's prefix cache
does). Two algorithms:

``fast`` (default)
    Vectorised 64-bit chain. Per block ``j`` (tokens ``x``), a content hash
    ``c_j = mix(fold_mix(x) ^ j * K)``; the chain state is the running sum
    ``S_j = S_{j-1} + c_j (mod 2**64)`` and the key is ``key_j = mix(S_j ^ j * K')``. ``S_j``
    depends on every block up to ``j`` and on their positions, so equal keys mean equal prefixes
    (up to a 2**-64 collision chance). ``mix`` is splitmix64's finaliser. Computed with numpy over
    the whole prompt at once.
``sha256_cbor``
    vLLM's definition (``vllm/utils/hashing.py`` + ``vllm/v1/core/kv_cache_utils.py``):
    ``H_j = sha256(cbor2.dumps((H_{j-1}, tuple(tokens_j), None), canonical=True))`` with
    ``H_{-1} = NONE_HASH = sha256(cbor2.dumps(PYTHONHASHSEED, canonical=True))`` (extra keys None:
    no LoRA, multimodal input or cache salt). The CBOR bytes are produced here directly with numpy
    (checked against ``cbor2`` in the tests); the key is the digest's first 8 bytes (little
    endian); the reuse ledger keeps the full digests too, so keys can be matched against a real
    store.

:func:`block_keys` hashes one prompt from scratch; :func:`fast_chain` and
:func:`sha256_cbor_chain` continue a chain from a given block (the reuse ledger's incremental
writer, :mod:`adev.analysis.ledger`).
"""
from __future__ import annotations

import array as _array
import hashlib
import itertools
from collections.abc import Sequence
from typing import Literal

import numpy as np

Algo = Literal["fast", "sha256_cbor"]
ALGOS = ("fast", "sha256_cbor")

# -----------------------------------------------------------------------------------------------
# The fast vectorised chain

_U = np.uint64
_GOLDEN = _U(0x9E3779B97F4A7C15)
_M1 = _U(0xBF58476D1CE4E5B9)
_M2 = _U(0x94D049BB133111EB)
_K_POS = _U(0xD6E8FEB86659FD93)
_K_KEY = _U(0xA0761D6478BD642F)
_SEED = _U(0xE7037ED1A0B428DB)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser, vectorised (uint64 arithmetic wraps)."""
    x = x + _GOLDEN
    x ^= x >> _U(30)
    x *= _M1
    x ^= x >> _U(27)
    x *= _M2
    x ^= x >> _U(31)
    return x


def fast_chain(tokens: np.ndarray, block_size: int, first_block: int = 0,
               s_prev: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Keys and chain states of full blocks ``first_block..`` of ``tokens`` (uint32 array).

    ``s_prev`` is the chain state ``S`` of block ``first_block - 1`` (0 at the start).
    Returns ``(keys, states)``, both uint64 arrays of the new blocks.
    """
    nb = len(tokens) // block_size
    if nb <= first_block:
        e = np.empty(0, dtype=np.uint64)
        return e, e
    blk = tokens[first_block * block_size: nb * block_size]
    if block_size % 2 == 0:
        cols = np.ascontiguousarray(blk, dtype="<u4").view("<u8").reshape(-1, block_size // 2)
    else:
        cols = blk.astype(np.uint64).reshape(-1, block_size)
    h = np.full(cols.shape[0], _SEED, dtype=np.uint64)
    for j in range(cols.shape[1]):
        h ^= cols[:, j]
        h = _mix(h)
    pos = np.arange(first_block, nb, dtype=np.uint64)
    c = _mix(h ^ (pos * _K_POS))
    states = np.cumsum(c, dtype=np.uint64)
    states += _U(s_prev)
    keys = _mix(states ^ (pos * _K_KEY))
    return keys, states


# -----------------------------------------------------------------------------------------------
# vLLM's sha256_cbor chain


def none_hash_sha256_cbor(hash_seed: str) -> bytes:
    """vLLM's ``NONE_HASH`` for ``sha256_cbor``: ``sha256(cbor2.dumps(seed, canonical=True))``."""
    import cbor2
    return hashlib.sha256(cbor2.dumps(hash_seed, canonical=True)).digest()


_TABLE_MAX = 1 << 18  # token ids below this are encoded by table lookup
_LEN_MASK = np.arange(5)[None, :] < np.arange(6)[:, None]  # row n: the first n of 5 bytes
_enc_table: np.ndarray | None = None
_len_table: np.ndarray | None = None


def _cbor_encode_direct(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n, 5) uint8 CBOR encodings (left-aligned) and their lengths, computed."""
    v = v.astype(np.uint32, copy=False)
    n = len(v)
    b = v.astype(">u4").view(np.uint8).reshape(n, 4)
    five = v >= 65536
    three = (v >= 256) & ~five
    two = (v >= 24) & (v < 256)
    lens = np.where(five, 5, np.where(three, 3, np.where(two, 2, 1))).astype(np.uint8)
    out = np.empty((n, 5), dtype=np.uint8)
    b0, b1, b2, b3 = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
    out[:, 0] = np.where(five, 0x1A, np.where(three, 0x19, np.where(two, 0x18, b3)))
    out[:, 1] = np.where(five, b0, np.where(three, b2, b3))
    out[:, 2] = np.where(five, b1, b3)
    out[:, 3] = b2
    out[:, 4] = b3
    return out, lens


def _tables() -> tuple[np.ndarray, np.ndarray]:
    global _enc_table, _len_table
    if _enc_table is None or _len_table is None:
        _enc_table, _len_table = _cbor_encode_direct(np.arange(_TABLE_MAX, dtype=np.uint32))
    return _enc_table, _len_table


def _cbor_tokens(tokens: np.ndarray) -> tuple[bytes, np.ndarray]:
    """CBOR encodings of unsigned ints, concatenated; returns (bytes, byte offset per token + end).

    Minimal-length CBOR major type 0: v < 24 -> 1 byte; < 2**8 -> 0x18 + 1; < 2**16 -> 0x19 + 2;
    < 2**32 -> 0x1a + 4 (big endian). Ids below 2**18 come from a lookup table.
    """
    v = tokens.astype(np.uint32, copy=False)
    n = len(v)
    if n and int(np.max(v)) < _TABLE_MAX:
        enc, lt = _tables()
        out, lens = np.take(enc, v, axis=0), np.take(lt, v)   # np.take: ~3x fancy indexing
    else:
        out, lens = _cbor_encode_direct(v)
    mask = np.take(_LEN_MASK, lens, axis=0)
    offs = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=offs[1:])
    return np.compress(mask.reshape(-1), out.reshape(-1)).tobytes(), offs


def _cbor_array_header(n: int) -> bytes:
    if n < 24:
        return bytes([0x80 | n])
    if n < 256:
        return bytes([0x98, n])
    return bytes([0x99]) + n.to_bytes(2, "big")


def sha256_cbor_chain(tokens: np.ndarray, block_size: int, first_block: int,
                      parent: bytes) -> list[bytes]:
    """vLLM ``sha256_cbor`` digests of full blocks ``first_block..``; ``parent`` = digest of the
    block before (``NONE_HASH`` at the start)."""
    nb = len(tokens) // block_size
    if nb <= first_block:
        return []
    seg = tokens[first_block * block_size: nb * block_size]
    enc, offs = _cbor_tokens(seg)
    head = b"\x83\x58\x20"  # array(3), bytes(32)
    arr = _cbor_array_header(block_size)
    tail = b"\xf6"  # None (extra keys)
    base = hashlib.sha256(head)  # every message starts with the same 3 bytes: hash them once
    bo = offs[::block_size].tolist()
    suffixes = [arr + enc[a:b] + tail for a, b in itertools.pairwise(bo)]
    h = parent
    out: list[bytes] = []
    append = out.append
    for suf in suffixes:
        x = base.copy()
        x.update(h)
        x.update(suf)
        h = x.digest()
        append(h)
    return out


def digest_keys(digests: Sequence[bytes]) -> np.ndarray:
    """The 64-bit keys of sha256 digests: each digest's first 8 bytes, little endian."""
    if not digests:
        return np.empty(0, dtype=np.uint64)
    return np.frombuffer(b"".join(digests), dtype="<u8")[::4].copy()


def block_keys(token_ids: Sequence[int] | np.ndarray, block_size: int = 16, algo: Algo = "fast",
               hash_seed: str = "0") -> np.ndarray:
    """The 64-bit keys of all full blocks of one prompt, hashed from scratch (no session state)."""
    tok = np.asarray(token_ids, dtype=np.uint32)
    if algo == "fast":
        return fast_chain(tok, block_size)[0]
    if algo == "sha256_cbor":
        return digest_keys(sha256_cbor_chain(tok, block_size, 0, none_hash_sha256_cbor(hash_seed)))
    raise ValueError(f"algo: {algo!r} is not allowed; allowed values: {', '.join(ALGOS)}")


def as_tokens(token_ids: Sequence[int] | np.ndarray) -> np.ndarray:
    """Token ids as a uint32 array (a list goes through ``array.array``, ~2x faster)."""
    if isinstance(token_ids, list):
        try:
            return np.frombuffer(_array.array("I", token_ids), dtype=np.uint32) \
                if _array.array("I").itemsize == 4 else np.asarray(token_ids, dtype=np.uint32)
        except (TypeError, OverflowError):
            pass
    return np.asarray(token_ids, dtype=np.uint32)
