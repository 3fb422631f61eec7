"""Output planning: the tokens a reply is made of, and how they stream.

A policy (``adev.emulator.policies``) says *what* the model answers (text, reasoning, tool calls,
or recorded token ids, and a target length); :func:`build_output` turns that into the exact token
sequence the engine emits, honouring the request's sampling limits as vLLM does:

- ``max_tokens`` cuts the sequence (``finish_reason: "length"``; tool calls cut off are dropped);
- ``ignore_eos`` never ends on EOS: the reply is padded to exactly ``max_tokens`` tokens
  (the server passes ``max_model_len - prompt tokens`` when the request gives no ``max_tokens``,
  vLLM's default) and finishes with ``"length"`` (``"tool_calls"`` when it holds tool calls);
- ``min_tokens`` forbids EOS before that many tokens: a shorter reply is padded so that EOS is
  token ``min_tokens + 1`` at the earliest (vLLM counts the EOS token in ``completion_tokens``).

Padding is reasoning filler (``reasoning_content``), so content and tool calls stay intact.
:func:`deltas` renders a range of tokens as chat-completion deltas; :func:`text_of` as plain
completion text.

The visible reply (content and tool calls) is tokenized as *one* string, the text the chat template
renders when the client sends the reply back as an assistant message. Its tokens are therefore
the re-rendered turn's tokens, so the next request's prefix matches the reply's cached decode
blocks, as it does in vLLM for a model whose tool calls re-render to the text it wrote (Qwen3's
``<tool_call>`` blocks). A token may then span two segments (the end of a tool call's head and the
start of its arguments): segments are character ranges of the reply's text, and deltas are cut by
character, not by token. The reasoning is tokenized on its own (it is never resent).
"""
from __future__ import annotations

import json
import uuid
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, Literal

from adev.emulator.policies.base import PolicyReply, ToolCall
from adev.emulator.tokenizer import ENDOFTEXT, IM_END, SPECIALS, Tokenizer

SegmentKind = Literal["reasoning", "content", "tool_head", "tool_args", "tool_tail", "eos"]
STOP_IDS = (IM_END, ENDOFTEXT)
_SPECIAL_IDS = frozenset(SPECIALS.values())


@dataclass(slots=True)
class OutputPlan:
    """One reply, token by token."""

    ids: list[int]
    """Token ids in emission order (EOS included when the reply ends on it)."""
    pieces: list[str]
    """Per token: its text ('' for special tokens)."""
    segments: list[tuple[SegmentKind, int]]
    """(kind, tool-call index) per segment, in the order of the text."""
    ends: list[int]
    """Per segment: the character offset in ``"".join(pieces)`` where it ends (it starts where the
    one before it ends)."""
    tool_calls: list[dict[str, Any]]
    """OpenAI tool-call objects of the calls that are complete within ``ids``."""
    finish_reason: str
    """``stop`` | ``length`` | ``tool_calls``."""
    offsets: list[int] = field(init=False, repr=False)
    """``offsets[i]``: characters before token ``i`` (``len(ids) + 1`` entries)."""

    def __post_init__(self) -> None:
        self.offsets = [0, *accumulate(len(p) for p in self.pieces)]

    def spans(self, a: int, b: int) -> list[tuple[SegmentKind, int, str]]:
        """(kind, tool-call index, text) of each segment that the text of tokens ``[a, b)``
        reaches into, with the part of the segment's text they hold; segments they hold no
        character of (a special token's, such as the EOS) are left out."""
        lo, hi = self.offsets[a], self.offsets[b]
        text = "".join(self.pieces[a:b])
        out: list[tuple[SegmentKind, int, str]] = []
        start = 0
        for (kind, idx), end in zip(self.segments, self.ends, strict=True):
            if start < hi and end > lo:
                out.append((kind, idx, text[max(start, lo) - lo:min(end, hi) - lo]))
            start = end
        return out


def visible_parts(content: str, calls: Sequence[ToolCall]) -> list[tuple[SegmentKind, int, str]]:
    """The visible reply as the chat template renders it back, as (kind, call index, text) parts
    of one string (empty parts left out)."""
    parts: list[tuple[SegmentKind, int, str]] = [("content", 0, content)]
    for j, tc in enumerate(calls):
        head = ("\n" if (content or j) else "") + f'<tool_call>\n{{"name": {json.dumps(tc.name)}, "arguments": '
        parts += [("tool_head", j, head), ("tool_args", j, tc.arguments),
                  ("tool_tail", j, "}\n</tool_call>")]
    return [pt for pt in parts if pt[2]]


def natural_length(tok: Tokenizer, reasoning: str, content: str, calls: Sequence[ToolCall]) -> int:
    """Tokens of a reply before any padding or cut, as :func:`build_output` emits it: the
    reasoning, the visible text (one string), the EOS."""
    return _natural(tok, reasoning, len(tok.encode(_text(visible_parts(content, calls)))))


def _natural(tok: Tokenizer, reasoning: str, n_visible: int) -> int:
    return len(tok.encode(reasoning)) + n_visible + 1   # + EOS


def _text(parts: list[tuple[SegmentKind, int, str]]) -> str:
    return "".join(text for _, _, text in parts)


def build_output(tok: Tokenizer, reply: PolicyReply, max_tokens: int | None, rid: str,
                 ignore_eos: bool = False, min_tokens: int = 0) -> OutputPlan:
    """The reply's tokens under the request's limits (module docstring)."""
    if reply.token_ids is not None:
        return _from_ids(tok, reply.token_ids, max_tokens, rid, ignore_eos, min_tokens)
    tool_calls = [{"id": f"chatcmpl-tool-{uuid.uuid4().hex[:24]}", "type": "function",
                   "function": {"name": tc.name, "arguments": tc.arguments}}
                  for tc in reply.tool_calls]
    reasoning = reply.reasoning or ""
    parts = visible_parts(reply.content or "", reply.tool_calls)
    visible_ids, visible_pieces = tok.encode_pieces(_text(parts))
    natural = _natural(tok, reasoning, len(visible_ids))
    target = reply.output_tokens
    if min_tokens > 0:
        target = max(target if target is not None else natural, min_tokens + 1)
    if ignore_eos and max_tokens is not None:
        target = max_tokens + 1  # padded past the limit: the limit cuts the EOS off
    if target is not None and target > natural:
        n = target - natural
        if reasoning:  # the line break between the reasoning and its filler is a token too
            n -= len(tok.encode(reasoning + "\n")) - len(tok.encode(reasoning))
        filler = _filler(n, rid)
        reasoning = (reasoning + "\n" + filler) if reasoning else filler
    ids: list[int] = []
    pieces: list[str] = []
    segments: list[tuple[SegmentKind, int]] = []
    ends: list[int] = []
    chars = 0
    if reasoning:
        i, p = tok.encode_pieces(reasoning)
        ids += i
        pieces += p
        segments.append(("reasoning", 0))
        chars += len(reasoning)
        ends.append(chars)
    ids += visible_ids
    pieces += visible_pieces
    for kind, j, text in parts:
        segments.append((kind, j))
        chars += len(text)
        ends.append(chars)
    finish = "tool_calls" if reply.tool_calls else "stop"
    # cut to the target (then end with EOS), pad exactly when still short
    if target is not None and target >= 1 and len(ids) + 1 > target:
        del ids[target - 1:], pieces[target - 1:]
    while target is not None and len(ids) + 1 < target:  # filler tokenization granularity
        segments.append(("reasoning", 0))
        ids.append(tok.encode(" x")[0])
        pieces.append(" x")
        chars += 2
        ends.append(chars)
    segments.append(("eos", 0))
    ends.append(chars)
    ids.append(IM_END)
    pieces.append("")
    if max_tokens is not None and max_tokens >= 0 and len(ids) > max_tokens:
        del ids[max_tokens:], pieces[max_tokens:]
        if not (ignore_eos and finish == "tool_calls"):
            finish = "length"
    kept = sum(len(p) for p in pieces)
    if tool_calls:  # calls cut off by max_tokens are not calls: a call is its text to the tail's end
        whole = {j for (kind, j), end in zip(segments, ends, strict=True)
                 if kind == "tool_tail" and end <= kept}
        tool_calls = [tc for j, tc in enumerate(tool_calls) if j in whole]
        if not tool_calls and finish == "tool_calls":
            finish = "length"
    return OutputPlan(ids, pieces, segments, [min(e, kept) for e in ends], tool_calls, finish)


def _from_ids(tok: Tokenizer, token_ids: list[int], max_tokens: int | None, rid: str,
              ignore_eos: bool, min_tokens: int) -> OutputPlan:
    """A reply given as token ids (a recorded output), emitted as they are, as content. An EOS id
    at the end ends it (``stop``) unless ``ignore_eos``, which pads it with filler ids to exactly
    ``max_tokens``; ``min_tokens`` pads before that EOS; ``max_tokens`` cuts (``length``)."""
    ids = [int(i) for i in token_ids]
    tail = ids[-1:] if ids and ids[-1] in STOP_IDS and not ignore_eos else []
    body = ids[:len(ids) - len(tail)]
    if ignore_eos and max_tokens is not None:
        want = max_tokens
    else:
        want = (min_tokens + 1 if tail else min_tokens) if min_tokens > 0 else 0
    need = want - len(ids)
    if need > 0:
        pad = tok.encode(_filler(need, rid))[:need]
        pad += [tok.encode(" x")[0]] * (need - len(pad))
        body += pad
    ids = body + tail
    finish = "stop" if tail else "length"
    if max_tokens is not None and len(ids) > max_tokens:
        del ids[max_tokens:]
        finish = "length"
    pieces = ["" if i in _SPECIAL_IDS else tok.decode([i]) for i in ids]
    chars = sum(len(p) for p in pieces)
    return OutputPlan(ids, pieces, [("content", 0), ("eos", 0)], [chars, chars], [], finish)


def _filler(n: int, rid: str) -> str:
    words = ("so", "then", "we", "check", "the", "next", "step", "and", "it", "is", "fine", "ok")
    x = zlib.crc32(rid.encode())
    out = [words[(x + i * 7) % len(words)] for i in range(max(0, n))]
    return " " + " ".join(out) if out else ""


def deltas(plan: OutputPlan, a: int, b: int, started_tools: set[int]) -> list[dict[str, Any]]:
    """OpenAI/vLLM chat deltas for output tokens [a, b): one per segment their text reaches into,
    cut by character (a token that spans a call's head and arguments opens the call and streams
    the arguments' first characters)."""
    out: list[dict[str, Any]] = []
    for kind, idx, text in plan.spans(a, b):
        if kind == "reasoning":
            out.append({"reasoning_content": text})
        elif kind == "content":
            out.append({"content": text})
        elif kind in ("tool_head", "tool_args"):
            tc = plan.tool_calls[idx] if idx < len(plan.tool_calls) else None
            if tc is not None:
                if idx not in started_tools:
                    started_tools.add(idx)
                    out.append({"tool_calls": [{"index": idx, "id": tc["id"], "type": "function",
                                                "function": {"name": tc["function"]["name"], "arguments": ""}}]})
                if kind == "tool_args":
                    out.append({"tool_calls": [{"index": idx, "function": {"arguments": text}}]})
    return out


def text_of(plan: OutputPlan, a: int, b: int) -> str:
    """Plain completion text of output tokens [a, b): every token's text, reasoning and tool-call
    framing included (``/v1/completions`` runs no reasoning or tool parser)."""
    return "".join(plan.pieces[a:b])


def message_parts(plan: OutputPlan, k: int) -> tuple[str, str]:
    """(reasoning, content) text of the first ``k`` tokens."""
    reasoning, content = [], []
    for kind, _, text in plan.spans(0, k):
        if kind == "reasoning":
            reasoning.append(text)
        elif kind == "content":
            content.append(text)
    return "".join(reasoning), "".join(content)
