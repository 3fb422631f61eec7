"""The answer of one call: :class:`StreamState` parses a streamed (SSE) or whole answer event by
event (the hot path), :func:`call_result` turns it into the call's :class:`ChatResult` and fills
its :class:`~adev.records.CallRecord` (usage, token counts) and hands the prompt's token ids to the
:class:`LedgerHook`.

The SSE body is split on raw bytes and each event parsed with orjson. The first event carries
the prompt's token ids (tens of thousands of integers): their JSON array is cut out of the event
as raw bytes and, for a ledger with ``add_json``, handed over unparsed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol

from ..clock import mono
from ..records import CallRecord
from .jsoncodec import dumps, loads
from .retry import LLMError, RetryableError

BLOCK_SIZE = 16  # tokens per block for CallRecord.n_prompt_blocks (vLLM's default)
IDS_FIELD = re.compile(rb'"prompt_token_ids"\s*:\s*\[')


class LedgerHook(Protocol):
    """Receives each prompt's token ids (the reuse ledger). A hook that also has
    ``add_json(t, session_id, call_id, ids_json: bytes)`` (e.g.
    :class:`adev.analysis.ledger_worker.LedgerProcess`) gets the raw JSON array instead and
    parses it itself, so the ids are never parsed on the client's event loop."""

    def add(self, t: float, session_id: str, call_id: str, token_ids: list[int]) -> object: ...


@dataclass
class ToolCallOut:
    id: str
    name: str
    arguments: str  # raw JSON text as the model wrote it (may be malformed)


@dataclass
class ChatResult:
    """What a call answered (the text, reasoning and tool calls joined from the stream)."""

    content: str
    reasoning: str
    tool_calls: list[ToolCallOut]
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None
    record: CallRecord  # the successful attempt's record
    kv_transfer_params: dict[str, Any] | None = None  # completions: vLLM's P/D hand-over


class StreamState:
    """Accumulates one streamed chat completion, one SSE line at a time (hot path)."""

    __slots__ = ("content", "reasoning", "calls", "finish", "usage", "server", "prompt_ids",
                 "prompt_ids_json", "first_byte", "first_content", "done", "kv_transfer_params")

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, list] = {}  # index -> [id, name, [argument pieces]]
        self.finish = self.usage = self.server = self.prompt_ids = None
        self.prompt_ids_json: bytes | None = None  # the raw JSON array of prompt_token_ids
        self.first_byte: float | None = None      # time.monotonic() stamps
        self.first_content: float | None = None
        self.done = False
        self.kv_transfer_params: dict[str, Any] | None = None

    def whole(self, raw: bytes) -> None:
        """A non-streamed answer (chat or completion), parsed as one event."""
        try:
            d = loads(raw)
        except ValueError:
            raise LLMError(f"malformed response: {raw[:200]!r}") from None
        if isinstance(d, dict):
            for ch in d.get("choices") or ():
                if isinstance(ch, dict) and "message" in ch:
                    ch["delta"] = ch.pop("message") or {}
        self._event(dumps(d) if isinstance(d, dict) else raw)
        if self.first_content is None:  # the whole answer, even an empty one, arrived now
            self.first_content = mono()
        self.done = True

    def feed(self, line: bytes) -> bool:
        """Process one line; True once the stream is complete (``[DONE]``).

        The event carrying ``prompt_token_ids`` (tens of thousands of integers, the first event)
        is not parsed whole: the ids' JSON array is cut out as raw bytes (for the ledger, which
        parses it off the event loop) and the rest of the event is parsed as any other."""
        if not line.startswith(b"data:"):
            return False  # blank separators, comments, event: lines
        data = line[5:].strip()
        if data == b"[DONE]":
            self.done = True
            return True
        if self.prompt_ids_json is None and len(data) > 4096:
            m = IDS_FIELD.search(data)
            if m is not None:
                end = data.find(b"]", m.end())
                if end > 0:
                    self.prompt_ids_json = data[m.end() - 1:end + 1]
                    data = data[:m.end() - 1] + b"null" + data[end + 1:]
        return self._event(data)

    def _event(self, data: bytes) -> bool:
        try:
            chunk = loads(data)
        except ValueError:
            raise LLMError(f"malformed stream event: {data[:200]!r}") from None
        if not isinstance(chunk, dict):
            raise LLMError(f"malformed stream event: {data[:200]!r}")
        if "error" in chunk and not chunk.get("choices"):
            err = chunk["error"]
            msg = err.get("message", str(err)) if isinstance(err, dict) else str(err)
            code = err.get("code") if isinstance(err, dict) else None
            if isinstance(code, int) and code >= 500:
                raise RetryableError(f"stream error {code}: {msg}", code)
            raise LLMError(f"stream error: {msg}", status=code if isinstance(code, int) else None)
        ids = chunk.get("prompt_token_ids")
        if ids and self.prompt_ids is None:
            self.prompt_ids = ids
        for ch in chunk.get("choices") or ():
            d = ch.get("delta") or {}
            c = d.get("content") or ch.get("text")  # chat delta, or a completion's text
            r = d.get("reasoning_content") or d.get("reasoning")
            tcs = d.get("tool_calls")
            if self.first_content is None and (c or r or tcs):
                self.first_content = mono()
            if c:
                self.content.append(c)
            if r:
                self.reasoning.append(r)
            if tcs:
                for tc in tcs:
                    slot = self.calls.setdefault(tc.get("index", len(self.calls)), ["", "", []])
                    if tc.get("id"):
                        slot[0] = tc["id"]
                    fn = tc.get("function") or {}
                    if fn.get("name"):
                        slot[1] += fn["name"]
                    if fn.get("arguments"):
                        slot[2].append(fn["arguments"])
            if ch.get("finish_reason"):
                self.finish = ch["finish_reason"]
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        if "adev" in chunk:
            self.server = chunk["adev"]
        if isinstance(chunk.get("kv_transfer_params"), dict):
            self.kv_transfer_params = chunk["kv_transfer_params"]
        return False


def call_result(st: StreamState, rec: CallRecord, ledger: LedgerHook | None) -> ChatResult:
    """The result of a completed answer ``st``; fills ``rec`` (server extension, finish reason,
    usage, prompt blocks) and hands the prompt's token ids to ``ledger``."""
    rec.server = st.server
    rec.finish_reason = st.finish
    usage = st.usage
    pt = ct = cached = None
    if usage:
        pt, ct = usage.get("prompt_tokens"), usage.get("completion_tokens")
        det = usage.get("prompt_tokens_details")
        if isinstance(det, dict):
            cached = det.get("cached_tokens") or 0
        elif "prompt_tokens_details" in usage:
            cached = 0
    rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens = pt, ct, cached
    ids, raw = st.prompt_ids, st.prompt_ids_json
    add_json = getattr(ledger, "add_json", None)
    if raw is not None and ids is None and add_json is not None:
        # the ledger parses the ids itself, off this loop; a JSON int array's length is
        # its commas + 1
        n = raw.count(b",") + 1 if raw.strip(b"[] \t\r\n") else 0
        rec.n_prompt_blocks = n // BLOCK_SIZE
        if rec.prompt_tokens is None:
            rec.prompt_tokens = n
        if n:
            add_json(rec.t_sent, rec.session_id, rec.call_id, raw)
    else:
        if raw is not None and ids is None:
            try:
                ids = loads(raw)
            except ValueError:
                raise LLMError(f"malformed prompt_token_ids: {raw[:200]!r}") from None
        if ids:
            rec.n_prompt_blocks = len(ids) // BLOCK_SIZE
            if rec.prompt_tokens is None:
                rec.prompt_tokens = len(ids)
            if ledger is not None:
                ledger.add(rec.t_sent, rec.session_id, rec.call_id, ids)
    tool_calls = [ToolCallOut(id=c[0] or f"call_{i}", name=c[1], arguments="".join(c[2]))
                  for i, c in sorted(st.calls.items())]
    rec.n_tool_calls = len(tool_calls)
    return ChatResult(content="".join(st.content), reasoning="".join(st.reasoning),
                      tool_calls=tool_calls, finish_reason=st.finish,
                      prompt_tokens=rec.prompt_tokens, completion_tokens=ct,
                      cached_tokens=cached, record=rec,
                      kv_transfer_params=st.kv_transfer_params)
