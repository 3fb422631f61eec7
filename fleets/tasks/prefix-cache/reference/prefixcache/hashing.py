"""Chained block hashes: a block's hash covers its tokens and every block before it."""
from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

ROOT_HASH = int.from_bytes(hashlib.sha256(b"prefixcache-root").digest()[:8], "little")
MAX_TOKEN = 2**32 - 1


def hash_block(parent: int, tokens: Sequence[int], extra: str | None = None) -> int:
    """64-bit hash of one block given its parent's hash (``ROOT_HASH`` for the first block)."""
    if not isinstance(parent, int) or not 0 <= parent < 2**64:
        raise ValueError(f"parent hash {parent!r} is not a 64-bit unsigned integer")
    for t in tokens:
        if not isinstance(t, int) or isinstance(t, bool):
            raise TypeError(f"token {t!r} is not an int")
        if not 0 <= t <= MAX_TOKEN:
            raise ValueError(f"token {t} outside 0..{MAX_TOKEN}")
    data = struct.pack("<QI", parent, len(tokens)) + struct.pack(f"<{len(tokens)}I", *tokens)
    data += b"\x00" if extra is None else b"\x01" + extra.encode("utf-8")
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "little")


def block_hashes(tokens: Sequence[int], block_size: int, extra: str | None = None,
                 parent: int = ROOT_HASH) -> list[int]:
    """Hashes of the full blocks of ``tokens`` (a trailing partial block has none)."""
    if not isinstance(block_size, int) or block_size <= 0:
        raise ValueError(f"block_size must be a positive integer, got {block_size!r}")
    out = []
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = hash_block(parent, tokens[start:start + block_size], extra)
        out.append(parent)
    return out
