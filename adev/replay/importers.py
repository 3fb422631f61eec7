"""Importers into the adev trace format (:mod:`adev.replay.format`).

Each importer validates its input and raises :class:`~adev.replay.format.TraceError` naming the
file, the line (or item) and the field.

- :func:`import_mooncake`: Mooncake ``hash_ids`` traces (512-token blocks). The file has no
  session ids; **sessions are inferred from shared prefixes**: a call continues the session of
  the earlier call whose *complete* block list (all its blocks, or all but a partial last block)
  is the longest prefix of this call's block list, provided that prefix is longer than one block
  (every call of the public traces starts with the same block, a shared system prompt, which
  alone does not make a conversation). Otherwise the call opens a new session. Turns are
  numbered in file order.
- :func:`import_adev_run`: an adev run directory (``calls.jsonl`` + reuse ledger ``ledger/``):
  per ledger call its session, block keys (the ledger's block size), prompt tokens and time;
  output length from the call's OK record. Calls without an OK record are left out (counted in
  the trace's ``source.skipped_calls``).
- :func:`import_openai` (JSONL, one conversation a line: ``{"messages": [...]}`` or a bare list
  of messages) and :func:`import_sharegpt` (a JSON array or JSONL of
  ``{"id", "conversations": [{"from": "human"|"gpt"|"system", "value": ...}]}``): every assistant
  message is one call whose prompt is the conversation before it, rendered with the emulator's
  chat template and tokenised once; the token ids are cut into ``block_tokens`` blocks named by
  their chained hash (:func:`adev.analysis.ledger.block_keys`), stored once as ``block`` lines.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from .format import Call, Trace, TraceError

MOONCAKE_BLOCK_TOKENS = 512
CHAT_BLOCK_TOKENS = 512


def _lines(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        fh = open(path, "rb")
    except OSError as e:
        raise TraceError(f"{path}: cannot read: {e.strerror}") from None
    with fh:
        for no, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield no, orjson.loads(line)
            except orjson.JSONDecodeError as e:
                raise TraceError(f"{path}:{no}: not JSON ({e})") from None


def _int_field(d: dict, key: str, where: str, minimum: int = 0) -> int:
    v = d.get(key)
    if type(v) is not int or v < minimum:
        raise TraceError(f"{where}: field {key!r}: expected an integer >= {minimum}, got {v!r}")
    return v


# ---------------------------------------------------------------------------------------------
# Mooncake


def import_mooncake(path: str | Path, block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> Trace:
    """A Mooncake FAST'25 trace (``timestamp`` ms, ``input_length``, ``output_length``,
    ``hash_ids``) -> a trace with sessions inferred from shared prefixes (module docstring)."""
    p = Path(path)
    calls: list[Call] = []
    trie: dict[tuple[int, int], int] = {}   # (parent node, block id) -> node
    ends: dict[int, int] = {}               # node -> index of the latest call ending there
    turns: list[int] = []                   # per session: next turn number
    sess_of: list[int] = []                 # per call: session index
    for no, d in _lines(p):
        w = f"{p}:{no}"
        if not isinstance(d, dict):
            raise TraceError(f"{w}: expected a JSON object")
        ts = d.get("timestamp")
        if isinstance(ts, bool) or not isinstance(ts, int | float) or ts < 0:
            raise TraceError(f"{w}: field 'timestamp': expected milliseconds >= 0, got {ts!r}")
        n_in = _int_field(d, "input_length", w, 1)
        n_out = _int_field(d, "output_length", w, 0)
        ids = d.get("hash_ids")
        if not isinstance(ids, list) or not ids or not all(type(x) is int and x >= 0
                                                           for x in ids):
            raise TraceError(f"{w}: field 'hash_ids': expected a non-empty list of "
                             "non-negative integers")
        need = math.ceil(n_in / block_tokens)
        if len(ids) != need:
            raise TraceError(f"{w}: field 'hash_ids': {len(ids)} ids for input_length {n_in}; "
                             f"expected ceil({n_in}/{block_tokens}) = {need}")
        # walk the trie: the deepest node (> 1 block deep) where an earlier call ended
        node, best = 0, None
        nodes: list[int] = []  # the trie nodes of this request's blocks
        for k, b in enumerate(ids):
            nxt = trie.get((node, b))
            if nxt is None:
                break
            node = nxt
            nodes.append(node)
            if k >= 1 and node in ends:
                best = ends[node]
        if best is not None:
            s = sess_of[best]
        else:
            s = len(turns)
            turns.append(0)
        # insert the rest of the path
        for b in ids[len(nodes):]:
            nxt = len(trie) + 1
            trie[(node, b)] = nxt
            node = nxt
            nodes.append(node)
        ends[nodes[-1]] = len(calls)
        if n_in % block_tokens and len(nodes) > 1:
            ends[nodes[-2]] = len(calls)  # the complete blocks (a partial last block changes)
        sess_of.append(s)
        calls.append(Call(session=f"s{s:05d}", turn=turns[s], t=ts / 1000.0, blocks=ids,
                          prompt_tokens=n_in, output_tokens=n_out))
        turns[s] += 1
    if not calls:
        raise TraceError(f"{p}: no requests in the file")
    return Trace(block_tokens=block_tokens, calls=calls,
                 source={"kind": "mooncake", "file": p.name, "sessions_rule": "longest complete "
                         "earlier prefix, more than one block"})


# ---------------------------------------------------------------------------------------------
# adev runs


def import_adev_run(run: str | Path) -> Trace:
    """An adev run directory -> a trace (block ids = the ledger's keys, block size = its)."""
    from ..analysis.ledger import read_ledger
    from ..records import RunDir
    rd = RunDir(run)
    if not (rd.path / "calls.jsonl").exists():
        raise TraceError(f"{rd.path}: not a run directory (calls.jsonl missing)")
    try:
        led = read_ledger(rd.path)
    except FileNotFoundError as e:
        raise TraceError(f"{rd.path}: {e}; the run was made without a reuse ledger") from None
    out_len: dict[tuple[Any, Any], int] = {}  # (session_id, call_id) -> completion tokens
    for no, r in enumerate(rd.iter_records("calls"), 1):
        if r.get("status") == "ok":
            ct = r.get("completion_tokens")
            if type(ct) is not int or ct < 0:
                raise TraceError(f"{rd.path / 'calls.jsonl'}:{no}: field 'completion_tokens': "
                                 f"expected an integer >= 0 in an OK call, got {ct!r}")
            out_len[(r.get("session_id"), r.get("call_id"))] = ct
    tch = led.touches
    order = np.lexsort((tch["pos"], tch["call"]))
    tch = tch[order]
    bounds = np.searchsorted(tch["call"], np.arange(len(led.calls) + 1)) if len(tch) else None
    bs = int(led.meta.get("block_size", 16))
    per_session: dict[str, list[Call]] = {}
    skipped = 0
    for lc in sorted(led.calls, key=lambda c: (c["t"], c["call"])):
        key = (lc.get("session_id"), lc.get("call_id"))
        if key not in out_len:
            skipped += 1
            continue
        ci = int(lc["call"])
        keys = (tch["key"][bounds[ci]:bounds[ci + 1]].tolist()
                if bounds is not None and ci + 1 < len(bounds) else [])
        cs = per_session.setdefault(str(lc["session_id"]), [])
        cs.append(Call(session=str(lc["session_id"]), turn=len(cs), t=float(lc["t"]),
                       blocks=keys, prompt_tokens=int(lc["n_tokens"]),
                       output_tokens=out_len[key]))
    calls = sorted((c for cs in per_session.values() for c in cs), key=lambda c: c.t or 0.0)
    if not calls:
        raise TraceError(f"{rd.path}: no OK calls with ledger entries to export")
    t0 = calls[0].t or 0.0
    for c in calls:
        c.t = max(0.0, (c.t or 0.0) - t0)
    return Trace(block_tokens=bs, calls=calls,
                 source={"kind": "adev-run", "run": rd.path.name,
                         "algo": led.meta.get("algo"), "skipped_calls": skipped,
                         "time": "model seconds since the run's first exported call"})


# ---------------------------------------------------------------------------------------------
# Conversations (OpenAI messages, ShareGPT)

_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                   "chatgpt": "assistant", "system": "system", "tool": "tool"}


def _check_messages(msgs: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(msgs, list) or not msgs:
        raise TraceError(f"{where}: field 'messages': expected a non-empty list of messages")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise TraceError(f"{where}: field 'messages[{i}]': expected an object")
        if m.get("role") not in ("system", "user", "assistant", "tool"):
            raise TraceError(f"{where}: field 'messages[{i}].role': {m.get('role')!r} is not "
                             "allowed; allowed values: system, user, assistant, tool")
        c = m.get("content")
        if c is not None and not isinstance(c, str | list):
            raise TraceError(f"{where}: field 'messages[{i}].content': expected text")
    return msgs


class _Tokenised:
    """Builds a trace from conversations: each assistant message is one call."""

    def __init__(self, block_tokens: int, kind: str, name: str):
        from ..emulator.tokenizer import Tokenizer
        self.tok = Tokenizer()
        self.bt = block_tokens
        self.trace = Trace(block_tokens=block_tokens, calls=[],
                           source={"kind": kind, "file": name,
                                   "tokenizer": "adev emulator (Qwen3-style chat template)"})

    def add(self, sid: str, msgs: list[dict[str, Any]]) -> None:
        from ..analysis.ledger import block_keys
        turn = 0
        for i, m in enumerate(msgs):
            if m["role"] != "assistant" or i == 0:
                continue
            ids = self.tok.apply_chat_template(msgs[:i], None, True)
            content = m.get("content")
            text = content if isinstance(content, str) else ""
            keys = block_keys(ids, self.bt).tolist()
            nfull = len(keys) * self.bt
            for j, k in enumerate(keys):
                if k not in self.trace.contents:
                    self.trace.contents[k] = ids[j * self.bt:(j + 1) * self.bt]
            self.trace.calls.append(Call(session=sid, turn=turn, blocks=keys, tail=ids[nfull:],
                                         prompt_tokens=len(ids),
                                         output_tokens=len(self.tok.encode(text)) + 1,
                                         output=text))
            turn += 1


def import_openai(path: str | Path, block_tokens: int = CHAT_BLOCK_TOKENS) -> Trace:
    """OpenAI-message conversations, one JSON a line (``{"id"?, "messages": [...]}`` or a list)."""
    p = Path(path)
    b = _Tokenised(block_tokens, "openai-messages", p.name)
    for no, d in _lines(p):
        w = f"{p}:{no}"
        msgs = d if isinstance(d, list) else (d.get("messages") if isinstance(d, dict) else None)
        sid = str(d.get("id", f"c{no}")) if isinstance(d, dict) else f"c{no}"
        b.add(sid, _check_messages(msgs, w))
    if not b.trace.calls:
        raise TraceError(f"{p}: no assistant messages after a prompt; nothing to replay")
    return b.trace


def import_sharegpt(path: str | Path, block_tokens: int = CHAT_BLOCK_TOKENS) -> Trace:
    """ShareGPT conversations: a JSON array, or JSONL, of ``{"id", "conversations": [...]}``."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise TraceError(f"{p}: cannot read: {e.strerror}") from None
    if raw.lstrip().startswith(b"["):
        try:
            items = list(enumerate(orjson.loads(raw)))
        except orjson.JSONDecodeError as e:
            raise TraceError(f"{p}: not JSON ({e})") from None
        label = "item"
    else:
        items = list(_lines(p))
        label = "line"
    b = _Tokenised(block_tokens, "sharegpt", p.name)
    for no, d in items:
        w = f"{p}: {label} {no}" if label == "item" else f"{p}:{no}"
        conv = d.get("conversations") if isinstance(d, dict) else None
        if not isinstance(conv, list) or not conv:
            raise TraceError(f"{w}: field 'conversations': expected a non-empty list")
        msgs = []
        for i, m in enumerate(conv):
            got = m.get("from") if isinstance(m, dict) else m
            role = _SHAREGPT_ROLES.get(got) if isinstance(got, str) else None  # untrusted: any JSON
            if role is None:
                raise TraceError(f"{w}: field 'conversations[{i}].from': {got!r} is not allowed; "
                                 "allowed values: human, gpt, system, tool")
            v = m.get("value")
            if not isinstance(v, str):
                raise TraceError(f"{w}: field 'conversations[{i}].value': expected text")
            msgs.append({"role": role, "content": v})
        b.add(str(d.get("id", f"c{no}")), msgs)
    if not b.trace.calls:
        raise TraceError(f"{p}: no assistant turns after a prompt; nothing to replay")
    return b.trace


IMPORTERS = {"mooncake": import_mooncake, "openai": import_openai, "sharegpt": import_sharegpt}
