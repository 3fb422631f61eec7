"""The reuse ledger (contract 5): chained block hashes of every prompt, stored as a touch stream.

Every full ``block_size``-token block of every prompt is a **touch**. A block is named by a chained
hash, so a block's key names its whole prefix (as vLLM's prefix cache does). Two algorithms:

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
    endian) and the full digests are kept in ``hashes.bin`` so keys can be matched against a real
    store.

Incremental: the writer keeps, per session, the last prompt's token ids and chain state; a prompt
that extends it (same leading tokens) hashes only its new blocks.

On disk (``<run>/ledger/``), append-only, flushed after every call, so a crash loses at most the
call in flight (a torn tail record is ignored by the reader and cut off by a resuming writer):

- ``meta.json``: block size, algorithm, hash seed, NONE_HASH, record layouts;
- ``calls.jsonl``: one line per ``add`` (call index, t, session id/index, call id, token and block
  counts, blocks hashed, hashing CPU seconds), written before its touches;
- ``touches.bin``: fixed 28-byte records :data:`TOUCH_DTYPE` ``(t, call, session, pos, key)``;
- ``hashes.bin`` (sha256_cbor only): 40-byte records :data:`HASH_DTYPE` ``(key, digest)`` for every
  block the writer hashed (duplicates possible; dedupe on read).

A fleet runs the writer in its own process (:class:`adev.analysis.ledger_worker.LedgerProcess`,
same files), so parsing and hashing never hold up the sessions' event loop.

The reader (:func:`read_ledger`, :func:`classify`, :func:`reuse_profile`) classifies every touch
as new, same-session reuse or cross-session reuse with its reuse distance (model seconds since the
last touch of that block, by anyone) and flags aged reuse (distance > lease TTL). Reuse is
classified in two named views (:class:`Classified`):

- *last toucher*: same-session when the block's previous touch (by anyone) was by this session,
  cross-session otherwise. It says how often the cache serves a block last used by someone else.
- *ownership*: same-session when this session had touched the block before (its own earlier
  context), cross-session when it had not and another session had (content sessions share).
  This is the view in which the source study reports its 4-5% cross-session reuse ("how much
  content sessions share with each other") and about 60% reuse of each session's own context.

"""
from __future__ import annotations

import array as _array
import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Literal, Sequence

import numpy as np

Algo = Literal["fast", "sha256_cbor"]
ALGOS = ("fast", "sha256_cbor")
LEDGER_DIRNAME = "ledger"
FORMAT_VERSION = 1

TOUCH_DTYPE = np.dtype([("t", "<f8"), ("call", "<u4"), ("session", "<u4"), ("pos", "<u4"),
                        ("key", "<u8")])
"""One touch: model time, call index, session index, block position in the prompt, block key."""
HASH_DTYPE = np.dtype([("key", "<u8"), ("digest", "V32")])
"""A full 32-byte digest and the 64-bit key derived from it (sha256_cbor only)."""

NEW, SAME_SESSION, CROSS_SESSION = 0, 1, 2
CLASS_NAMES = {NEW: "new", SAME_SESSION: "same_session", CROSS_SESSION: "cross_session"}

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
    if _enc_table is None:
        _enc_table, _len_table = _cbor_encode_direct(np.arange(_TABLE_MAX, dtype=np.uint32))
    return _enc_table, _len_table


def _cbor_tokens(tokens: np.ndarray) -> tuple[bytes, np.ndarray]:
    """CBOR encodings of unsigned ints, concatenated; returns (bytes, byte offset per token + end).

    Minimal-length CBOR major type 0: v < 24 -> 1 byte; < 2**8 -> 0x18 + 1; < 2**16 -> 0x19 + 2;
    < 2**32 -> 0x1a + 4 (big endian). Ids below 2**18 come from a lookup table.
    """
    v = tokens.astype(np.uint32, copy=False)
    n = len(v)
    if n and int(v.max()) < _TABLE_MAX:
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
    suffixes = [arr + enc[a:b] + tail for a, b in zip(bo, bo[1:])]
    h = parent
    out = []
    append = out.append
    for suf in suffixes:
        x = base.copy()
        x.update(h)
        x.update(suf)
        h = x.digest()
        append(h)
    return out


def _digest_keys(digests: Sequence[bytes]) -> np.ndarray:
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
        return _digest_keys(sha256_cbor_chain(tok, block_size, 0, none_hash_sha256_cbor(hash_seed)))
    raise ValueError(f"algo: {algo!r} is not allowed; allowed values: {', '.join(ALGOS)}")


# -----------------------------------------------------------------------------------------------
# The writer


@dataclass
class _SessionState:
    tokens: np.ndarray
    keys: np.ndarray
    chain: Any  # fast: uint64 states array; sha256_cbor: list of digests


def _ledger_dir(run_dir: Any) -> Path:
    base = Path(getattr(run_dir, "path", run_dir))
    return base / LEDGER_DIRNAME


class LedgerWriter:
    """Hashes every prompt into blocks and appends its touches to ``<run_dir>/ledger/``.

    ``LedgerWriter(run_dir, block_size=16, algo="fast")``; ``.add(t, session_id, call_id,
    token_ids)`` once per model call (t in model seconds); ``.close()``. Reopening a ledger
    resumes it (same block size and algorithm required). Thread-safe.
    """

    def __init__(self, run_dir: Any, block_size: int = 16, algo: Algo = "fast",
                 hash_seed: str | None = None):
        if algo not in ALGOS:
            raise ValueError(f"algo: {algo!r} is not allowed; allowed values: {', '.join(ALGOS)}")
        if not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size: must be a positive integer, got {block_size!r}")
        self.block_size = block_size
        self.algo = algo
        self.hash_seed = hash_seed if hash_seed is not None else os.environ.get("PYTHONHASHSEED", "0")
        self.dir = _ledger_dir(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._sessions: dict[str, int] = {}
        self._state: dict[str, _SessionState] = {}
        self._n_calls = 0
        self._none = none_hash_sha256_cbor(self.hash_seed) if algo == "sha256_cbor" else b""
        meta_p = self.dir / "meta.json"
        meta = {"format": FORMAT_VERSION, "block_size": block_size, "algo": algo,
                "hash_seed": self.hash_seed if algo == "sha256_cbor" else None,
                "none_hash": self._none.hex() if self._none else None,
                "touch_dtype": TOUCH_DTYPE.descr, "hash_dtype": HASH_DTYPE.descr}
        if meta_p.exists():
            old = json.loads(meta_p.read_text())
            for k in ("block_size", "algo", "hash_seed"):
                if old.get(k) != meta[k]:
                    raise ValueError(f"ledger at {self.dir}: {k} is {old.get(k)!r}, "
                                     f"this writer was asked for {meta[k]!r}")
            self._resume()
        else:
            tmp = meta_p.with_suffix(".tmp")
            tmp.write_text(json.dumps(meta, indent=2))
            os.replace(tmp, meta_p)
        for name, dt in (("touches.bin", TOUCH_DTYPE), ("hashes.bin", HASH_DTYPE)):
            _truncate_torn(self.dir / name, dt.itemsize)
        self._calls = open(self.dir / "calls.jsonl", "a", encoding="utf-8")
        self._touches = open(self.dir / "touches.bin", "ab")
        self._hashes = open(self.dir / "hashes.bin", "ab") if algo == "sha256_cbor" else None
        self.hash_seconds = 0.0
        self.blocks_hashed = 0
        self.blocks_touched = 0

    def _resume(self) -> None:
        for rec in _read_jsonl(self.dir / "calls.jsonl"):
            self._n_calls = max(self._n_calls, int(rec["call"]) + 1)
            self._sessions.setdefault(rec["session_id"], int(rec["session"]))

    def _hash(self, sid: str, tok: np.ndarray) -> tuple[np.ndarray, int]:
        """Keys of every full block of ``tok``; hashes only blocks not shared with the session's
        previous prompt. Returns (keys, number of blocks hashed)."""
        bs = self.block_size
        nb = len(tok) // bs
        prev = self._state.get(sid)
        k = 0
        if prev is not None and len(prev.keys):
            n = min(len(prev.tokens), len(tok), len(prev.keys) * bs)
            diff = np.flatnonzero(prev.tokens[:n] != tok[:n])
            same = int(diff[0]) if len(diff) else n
            k = min(same // bs, nb)
        if self.algo == "fast":
            s_prev = int(prev.chain[k - 1]) if k else 0
            new_keys, new_states = fast_chain(tok, bs, k, s_prev)
            keys = np.concatenate([prev.keys[:k], new_keys]) if k else new_keys
            chain = np.concatenate([prev.chain[:k], new_states]) if k else new_states
        else:
            parent = prev.chain[k - 1] if k else self._none
            digests = sha256_cbor_chain(tok, bs, k, parent)
            new_keys = _digest_keys(digests)
            keys = np.concatenate([prev.keys[:k], new_keys]) if k else new_keys
            chain = (prev.chain[:k] + digests) if k else digests
            if digests:
                rec = np.empty(len(digests), dtype=HASH_DTYPE)
                rec["key"] = new_keys
                rec["digest"] = np.frombuffer(b"".join(digests), dtype="V32")
                self._hashes.write(rec.tobytes())
                self._hashes.flush()
        self._state[sid] = _SessionState(tok, keys, chain)
        return keys, nb - k

    def add(self, t: float, session_id: str, call_id: str,
            token_ids: Sequence[int] | np.ndarray) -> int:
        """Record one prompt's touches at model time ``t``; returns the number of full blocks."""
        tok = _as_tokens(token_ids)
        if tok.ndim != 1:
            raise ValueError(f"token_ids: expected a flat sequence of ints, got shape {tok.shape}")
        with self._lock:
            if self._touches.closed:
                raise ValueError("ledger writer is closed")
            sid = str(session_id)
            sidx = self._sessions.setdefault(sid, len(self._sessions))
            cidx = self._n_calls
            self._n_calls += 1
            t0 = time.thread_time()
            keys, n_hashed = self._hash(sid, tok)
            dt = time.thread_time() - t0  # CPU seconds of this thread
            self.hash_seconds += dt
            self.blocks_hashed += n_hashed
            self.blocks_touched += len(keys)
            self._calls.write(json.dumps(
                {"call": cidx, "t": float(t), "session": sidx, "session_id": sid,
                 "call_id": str(call_id), "n_tokens": int(len(tok)), "n_blocks": int(len(keys)),
                 "n_hashed": int(n_hashed), "hash_s": round(dt, 6)},
                separators=(",", ":")) + "\n")
            self._calls.flush()
            if len(keys):
                rec = np.empty(len(keys), dtype=TOUCH_DTYPE)
                rec["t"] = t
                rec["call"] = cidx
                rec["session"] = sidx
                rec["pos"] = np.arange(len(keys), dtype=np.uint32)
                rec["key"] = keys
                self._touches.write(rec.tobytes())
                self._touches.flush()
            return int(len(keys))

    def forget(self, session_id: str) -> None:
        """Drop a finished session's incremental state (its touches stay on disk)."""
        with self._lock:
            self._state.pop(str(session_id), None)

    def close(self) -> None:
        with self._lock:
            for fh in (self._calls, self._touches, self._hashes):
                if fh is not None and not fh.closed:
                    fh.close()
            self._state.clear()

    def __enter__(self) -> "LedgerWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _as_tokens(token_ids: Sequence[int] | np.ndarray) -> np.ndarray:
    """Token ids as a uint32 array (a list goes through ``array.array``, ~2x faster)."""
    if isinstance(token_ids, list):
        try:
            return np.frombuffer(_array.array("I", token_ids), dtype=np.uint32) \
                if _array.array("I").itemsize == 4 else np.asarray(token_ids, dtype=np.uint32)
        except (TypeError, OverflowError):
            pass
    return np.asarray(token_ids, dtype=np.uint32)


def _truncate_torn(path: Path, itemsize: int) -> None:
    if path.exists():
        size = path.stat().st_size
        if size % itemsize:
            with path.open("r+b") as fh:
                fh.truncate(size - size % itemsize)


def _read_jsonl(path: Path) -> Iterable[dict[str, Any]]:
    if not path.exists():
        return
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if not line.endswith("\n"):
                break
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


# -----------------------------------------------------------------------------------------------
# The reader


@dataclass
class Ledger:
    """A ledger read back: touches sorted by (t, write order), the call index, the metadata."""

    path: Path
    meta: dict[str, Any]
    touches: np.ndarray  # TOUCH_DTYPE, sorted by t (stable)
    calls: list[dict[str, Any]]
    sessions: dict[int, str]  # session index -> session id
    torn_bytes: int = 0
    _classified: dict[Any, "Classified"] = field(default_factory=dict, repr=False)

    def classified(self, lease_ttl_s: float | None = None) -> "Classified":
        """:func:`classify` of the touches, cached per lease TTL."""
        c = self._classified.get(lease_ttl_s)
        if c is None:
            c = self._classified[lease_ttl_s] = classify(self.touches, lease_ttl_s)
        return c

    def digests(self) -> dict[int, bytes]:
        """key -> full 32-byte digest (sha256_cbor ledgers; empty otherwise)."""
        p = self.path / "hashes.bin"
        if not p.exists():
            return {}
        raw = p.read_bytes()
        raw = raw[: len(raw) - len(raw) % HASH_DTYPE.itemsize]
        rec = np.frombuffer(raw, dtype=HASH_DTYPE)
        return {int(k): bytes(d) for k, d in zip(rec["key"], rec["digest"])}


def has_ledger(run_dir: Any) -> bool:
    return (_ledger_dir(run_dir) / "meta.json").exists()


def read_ledger(run_dir: Any) -> Ledger:
    """Read ``<run_dir>/ledger``; raises FileNotFoundError when the run has none."""
    d = _ledger_dir(run_dir)
    meta_p = d / "meta.json"
    if not meta_p.exists():
        raise FileNotFoundError(f"no reuse ledger in {d.parent} (ledger/meta.json missing)")
    meta = json.loads(meta_p.read_text())
    raw = (d / "touches.bin").read_bytes() if (d / "touches.bin").exists() else b""
    torn = len(raw) % TOUCH_DTYPE.itemsize
    rec = np.frombuffer(raw[: len(raw) - torn], dtype=TOUCH_DTYPE)
    t = rec["t"]
    if len(t) > 1 and not bool(np.all(t[1:] >= t[:-1])):
        rec = rec[np.argsort(t, kind="stable")]
    calls = list(_read_jsonl(d / "calls.jsonl"))
    sessions = {int(c["session"]): c["session_id"] for c in calls}
    return Ledger(d, meta, rec, calls, sessions, torn)


@dataclass
class Classified:
    """Per-touch classification, aligned with ``Ledger.touches``.

    ``cls`` (last-toucher view): 0 new (first touch of that key), 1 same-session reuse (the
    previous touch of the key was by the same session), 2 cross-session reuse (it was by another
    session); ``owner_cls`` (ownership view): 0 new, 1 same-session reuse (this session touched the
    key before), 2 cross-session reuse (it had not, another session had); ``distance``: reuse
    distance in model seconds, ``t - t_prev_touch_of_key`` by anyone (NaN for new touches);
    ``aged``: reuse with distance > lease TTL (all False when no TTL is given).
    """

    cls: np.ndarray
    distance: np.ndarray
    aged: np.ndarray
    owner_cls: np.ndarray


def classify(touches: np.ndarray, lease_ttl_s: float | None = None) -> Classified:
    """Classify touches (sorted by time) as new / same-session / cross-session reuse, in both
    views (:class:`Classified`)."""
    n = len(touches)
    cls = np.zeros(n, dtype=np.int8)
    owner = np.zeros(n, dtype=np.int8)
    dist = np.full(n, np.nan)
    if n:
        # stable sort by key keeps time order (then write order) within each key
        key = np.ascontiguousarray(touches["key"])
        order = np.argsort(key, kind="stable")
        k = key[order]
        t = np.ascontiguousarray(touches["t"])[order]
        s = np.ascontiguousarray(touches["session"])[order]
        rep = np.zeros(n, dtype=bool)
        rep[1:] = k[1:] == k[:-1]
        same = np.zeros(n, dtype=bool)
        same[1:] = rep[1:] & (s[1:] == s[:-1])
        c = np.where(rep, np.where(same, SAME_SESSION, CROSS_SESSION), NEW).astype(np.int8)
        d = np.full(n, np.nan)
        d[1:] = np.where(rep[1:], t[1:] - t[:-1], np.nan)
        cls[order] = c
        dist[order] = d
        # ownership: sorted by (key, session), time order kept within each pair (lexsort is
        # stable); a touch whose pair occurred before is this session's own reuse
        order2 = np.lexsort((np.ascontiguousarray(touches["session"]), key))
        k2 = key[order2]
        s2 = np.ascontiguousarray(touches["session"])[order2]
        mine = np.zeros(n, dtype=bool)
        mine[1:] = (k2[1:] == k2[:-1]) & (s2[1:] == s2[:-1])
        seen_before = np.zeros(n, dtype=bool)
        seen_before[order] = rep
        own = np.zeros(n, dtype=bool)
        own[order2] = mine
        owner = np.where(own, SAME_SESSION, np.where(seen_before, CROSS_SESSION, NEW)).astype(np.int8)
    aged = (dist > lease_ttl_s) if lease_ttl_s is not None else np.zeros(n, dtype=bool)
    aged = np.asarray(aged & ~np.isnan(dist), dtype=bool)
    return Classified(cls, dist, aged, owner)


@dataclass
class ReuseProfile:
    """Shares of touches by class and reuse-distance percentiles (model seconds).

    share_X = touches of class X / all touches, in the last-toucher view
    (``share_same_session``, ``share_cross_session``) and the ownership view
    (``owner_share_same_session``, ``owner_share_cross_session``), see :class:`Classified`;
    aged_share = reuse touches with distance > lease TTL / all touches (None without a TTL);
    p50/p99/max over all reuse touches (None if none).
    """

    touches: int
    calls: int
    sessions: int
    unique_blocks: int
    share_new: float | None
    share_same_session: float | None
    share_cross_session: float | None
    aged_share: float | None
    lease_ttl_s: float | None
    distance_p50_s: float | None
    distance_p99_s: float | None
    distance_max_s: float | None
    by_class: dict[str, dict[str, float | None]] = field(default_factory=dict)
    owner_share_same_session: float | None = None
    owner_share_cross_session: float | None = None


def _pct(x: np.ndarray, q: float) -> float | None:
    return float(np.percentile(x, q)) if len(x) else None


def reuse_profile(ledger: Ledger, lease_ttl_s: float | None = None,
                  t0: float | None = None, t1: float | None = None) -> ReuseProfile:
    """Reuse profile of all touches, or of those with ``t0 <= t < t1`` (classification always
    uses the whole history, so a block first touched before ``t0`` is a reuse inside it)."""
    tc = ledger.touches
    c = ledger.classified(lease_ttl_s)
    whole = t0 is None and t1 is None
    sel = np.ones(len(tc), dtype=bool)
    if t0 is not None:
        sel &= tc["t"] >= t0
    if t1 is not None:
        sel &= tc["t"] < t1
    n = int(sel.sum())
    cls, dist, aged, owner = ((c.cls, c.distance, c.aged, c.owner_cls) if whole else
                              (c.cls[sel], c.distance[sel], c.aged[sel], c.owner_cls[sel]))
    reuse = dist[cls != NEW]

    def share(mask: np.ndarray) -> float | None:
        return float(mask.sum()) / n if n else None

    by_class = {}
    for code in (SAME_SESSION, CROSS_SESSION):
        dd = dist[cls == code]
        by_class[CLASS_NAMES[code]] = {"p50_s": _pct(dd, 50), "p99_s": _pct(dd, 99),
                                       "max_s": float(dd.max()) if len(dd) else None}
    if whole:
        n_calls = len({int(x["call"]) for x in ledger.calls if x.get("n_blocks")})
        n_sess = len(ledger.sessions)
        n_unique = int((cls == NEW).sum())
    else:
        n_calls = int(len(np.unique(tc["call"][sel]))) if n else 0
        n_sess = int(len(np.unique(tc["session"][sel]))) if n else 0
        n_unique = int(len(np.unique(tc["key"][sel]))) if n else 0
    return ReuseProfile(
        touches=n, calls=n_calls, sessions=n_sess, unique_blocks=n_unique,
        share_new=share(cls == NEW), share_same_session=share(cls == SAME_SESSION),
        share_cross_session=share(cls == CROSS_SESSION),
        aged_share=share(aged) if lease_ttl_s is not None else None, lease_ttl_s=lease_ttl_s,
        distance_p50_s=_pct(reuse, 50), distance_p99_s=_pct(reuse, 99),
        distance_max_s=float(reuse.max()) if len(reuse) else None, by_class=by_class,
        owner_share_same_session=share(owner == SAME_SESSION),
        owner_share_cross_session=share(owner == CROSS_SESSION))
