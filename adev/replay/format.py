"""The adev trace format (version 1): sessions of ordered calls, kept as one JSONL file.

A trace file is UTF-8 JSON lines. The first line is the header::

    {"format": "adev-trace", "version": 1, "block_tokens": 512, "source": {...}}

``block_tokens`` is the number of tokens per block id (512 for Mooncake traces, 16 for adev run
exports, 512 for tokenised conversations); ``source`` says where the trace came from (free form).
Every further line is one of:

``call``
    ``{"session": "s1", "turn": 0, "t": 12.5, "blocks": [0, 7, 9], "tail": [..],
    "prompt_tokens": 1300, "output_tokens": 340, "output": "..."}``: one LLM call. ``t``
    (seconds from the trace's start, or null) is the recorded arrival time; ``blocks`` the
    prompt's block ids in order; ``tail`` (optional) token ids that follow the blocks;
    ``prompt_tokens`` the prompt's length; ``output_tokens`` the recorded output length;
    ``output`` (optional) the recorded output text. ``turn`` numbers a session's calls from 0
    upwards; a session's calls are replayed in turn order.
``block``
    ``{"block": 7, "tokens": [...]}``: explicit content of a block id (tokenised traces). It
    must come before the first call that uses it.

The prompt of a call is ``concat(content(b) for b in blocks) + tail``, cut to ``prompt_tokens``
tokens; when that is shorter than ``prompt_tokens`` (an adev export records only whole blocks),
the rest is filler tokens derived from the session id and turn. A block id without a ``block``
line has synthetic content: ``block_tokens`` token ids that depend only on the id
(:func:`synth_block`), so the same id always yields the same tokens and an engine with smaller
blocks sees the same sharing structure. Each later turn's prompt already holds the *recorded*
response of the turns before it, so a replay never feeds live output back.
"""
from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

FORMAT = "adev-trace"
VERSION = 1
NUM_PLAIN = 151643  # token ids are drawn from [0, NUM_PLAIN): the emulator's plain-piece range

_U = np.uint64
_M1, _M2 = _U(0xBF58476D1CE4E5B9), _U(0x94D049BB133111EB)
_K_ID, _K_POS = _U(0x9E3779B97F4A7C15), _U(0xD6E8FEB86659FD93)


class TraceError(ValueError):
    """Bad trace input; the message names the file, line and field."""


@dataclass
class Call:
    session: str
    turn: int
    prompt_tokens: int
    output_tokens: int
    blocks: list[int] = field(default_factory=list)
    tail: list[int] = field(default_factory=list)
    t: float | None = None
    output: str | None = None


@dataclass
class Trace:
    block_tokens: int
    calls: list[Call]
    source: dict[str, Any] = field(default_factory=dict)
    contents: dict[int, list[int]] = field(default_factory=dict)  # explicit block content

    def sessions(self) -> dict[str, list[Call]]:
        """Session id -> its calls in turn order (sessions in order of first appearance)."""
        out: dict[str, list[Call]] = {}
        for c in self.calls:
            out.setdefault(c.session, []).append(c)
        for cs in out.values():
            cs.sort(key=lambda c: c.turn)
        return out


def _mix(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        x = (x ^ (x >> _U(30))) * _M1
        x = (x ^ (x >> _U(27))) * _M2
        return x ^ (x >> _U(31))


def synth_block(block_id: int, n: int) -> np.ndarray:
    """The ``n`` synthetic token ids of a block id: ``splitmix64(id * K1 + pos * K2) mod
    NUM_PLAIN`` for pos in 0..n-1 (same in every process and run)."""
    pos = np.arange(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = _U(block_id & 0xFFFFFFFFFFFFFFFF) * _K_ID + pos * _K_POS
    return (_mix(x) % _U(NUM_PLAIN)).astype(np.int64)


def filler(session: str, turn: int, n: int) -> np.ndarray:
    """``n`` filler tokens of a call whose blocks and tail are shorter than its prompt."""
    seed = zlib.crc32(f"{session}\x00{turn}".encode()) | (1 << 40)
    return synth_block(seed, n)


def synth_blocks(block_ids: list[int] | np.ndarray, n: int) -> np.ndarray:
    """:func:`synth_block` of many ids at once, concatenated (one numpy pass)."""
    ids = np.asarray(block_ids, dtype=np.uint64)[:, None]
    pos = np.arange(n, dtype=np.uint64)[None, :]
    with np.errstate(over="ignore"):
        x = ids * _K_ID + pos * _K_POS
    return (_mix(x) % _U(NUM_PLAIN)).astype(np.int64).ravel()


def prompt_ids(trace: Trace, call: Call) -> np.ndarray:
    """The token ids of ``call``'s prompt (see the module docstring)."""
    bt = trace.block_tokens
    n = call.prompt_tokens
    nb = min(len(call.blocks), -(-n // bt))  # blocks past the prompt's length are not needed
    blocks = call.blocks[:nb]
    if not trace.contents or not any(b in trace.contents for b in blocks):
        parts = [synth_blocks(blocks, bt)] if blocks else []
    else:
        parts = [np.asarray(trace.contents[b], dtype=np.int64) if b in trace.contents
                 else synth_block(b, bt) for b in blocks]
    if call.tail:
        parts.append(np.asarray(call.tail, dtype=np.int64))
    ids = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    if len(ids) >= n:
        return ids[:n]
    return np.concatenate([ids, filler(call.session, call.turn, n - len(ids))])


# ---------------------------------------------------------------------------------------------
# Writing and reading


def write_trace(trace: Trace, path: str | Path) -> Path:
    """Write ``trace`` to ``path`` (atomically: a temporary file renamed into place)."""
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    seen: set[int] = set()
    with open(tmp, "wb") as fh:
        fh.write(orjson.dumps({"format": FORMAT, "version": VERSION,
                               "block_tokens": trace.block_tokens, "source": trace.source}) + b"\n")
        for c in trace.calls:
            for b in c.blocks:
                if b in trace.contents and b not in seen:
                    seen.add(b)
                    fh.write(orjson.dumps({"block": b, "tokens": trace.contents[b]}) + b"\n")
            rec: dict[str, Any] = {"session": c.session, "turn": c.turn, "t": c.t,
                                   "blocks": c.blocks, "prompt_tokens": c.prompt_tokens,
                                   "output_tokens": c.output_tokens}
            if c.tail:
                rec["tail"] = c.tail
            if c.output is not None:
                rec["output"] = c.output
            fh.write(orjson.dumps(rec) + b"\n")
    tmp.replace(p)
    return p


def _int_list(v: Any, where: str) -> list[int]:
    if not isinstance(v, list) or not all(type(x) is int and x >= 0 for x in v):
        raise TraceError(f"{where}: expected a list of non-negative integers")
    return v


def _nonneg_int(v: Any, where: str) -> int:
    if type(v) is not int or v < 0:
        raise TraceError(f"{where}: expected a non-negative integer, got {v!r}")
    return v


def read_trace(path: str | Path) -> Trace:
    """Read and validate a trace file; a bad line raises :class:`TraceError` naming it."""
    p = Path(path)
    try:
        fh = open(p, "rb")
    except OSError as e:
        raise TraceError(f"{p}: cannot read: {e.strerror}") from None
    with fh:
        lines: Iterable[bytes] = fh
        trace: Trace | None = None
        last_turn: dict[str, int] = {}
        for no, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                d = orjson.loads(line)
            except orjson.JSONDecodeError as e:
                raise TraceError(f"{p}:{no}: not JSON ({e})") from None
            if not isinstance(d, dict):
                raise TraceError(f"{p}:{no}: expected a JSON object")
            if trace is None:
                if d.get("format") != FORMAT:
                    raise TraceError(f"{p}:{no}: field 'format': expected {FORMAT!r} (is this "
                                     "an adev trace? import it with `adev trace import`)")
                if d.get("version") != VERSION:
                    raise TraceError(f"{p}:{no}: field 'version': {d.get('version')!r} is not "
                                     f"supported; allowed values: {VERSION}")
                bt = d.get("block_tokens")
                if type(bt) is not int or bt < 1:
                    raise TraceError(f"{p}:{no}: field 'block_tokens': expected a positive "
                                     f"integer, got {bt!r}")
                trace = Trace(block_tokens=bt, calls=[], source=d.get("source") or {})
                continue
            w = f"{p}:{no}: field"
            if "block" in d:
                b = _nonneg_int(d["block"], f"{w} 'block'")
                trace.contents[b] = _int_list(d.get("tokens"), f"{w} 'tokens'")
                continue
            for k in ("session", "turn", "prompt_tokens", "output_tokens"):
                if k not in d:
                    raise TraceError(f"{w} '{k}': required")
            s = d["session"]
            if not isinstance(s, str) or not s:
                raise TraceError(f"{w} 'session': expected a non-empty string, got {s!r}")
            turn = _nonneg_int(d["turn"], f"{w} 'turn'")
            if turn <= last_turn.get(s, -1):
                raise TraceError(f"{w} 'turn': {turn} does not follow turn {last_turn[s]} of "
                                 f"session {s!r} (turns must increase)")
            last_turn[s] = turn
            t = d.get("t")
            if t is not None and (isinstance(t, bool) or not isinstance(t, int | float) or t < 0):
                raise TraceError(f"{w} 't': expected seconds >= 0 or null, got {t!r}")
            out = d.get("output")
            if out is not None and not isinstance(out, str):
                raise TraceError(f"{w} 'output': expected a string or null")
            trace.calls.append(Call(
                session=s, turn=turn, t=None if t is None else float(t),
                prompt_tokens=_nonneg_int(d["prompt_tokens"], f"{w} 'prompt_tokens'"),
                output_tokens=_nonneg_int(d["output_tokens"], f"{w} 'output_tokens'"),
                blocks=_int_list(d.get("blocks", []), f"{w} 'blocks'"),
                tail=_int_list(d.get("tail", []), f"{w} 'tail'"), output=out))
    if trace is None:
        raise TraceError(f"{p}: empty file (no header line)")
    return trace
