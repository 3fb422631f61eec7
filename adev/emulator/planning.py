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
"""
from __future__ import annotations

import json
import uuid
import zlib
from dataclasses import dataclass
from typing import Any, Literal

from adev.emulator.policies.base import PolicyReply
from adev.emulator.tokenizer import ENDOFTEXT, IM_END, SPECIALS, Tokenizer

SegmentKind = Literal["reasoning", "content", "tool_head", "tool_args", "tool_tail", "eos"]
STOP_IDS = (IM_END, ENDOFTEXT)
_SPECIAL_IDS = frozenset(SPECIALS.values())


@dataclass(slots=True)
class OutputPlan:
    """One reply, token by token."""

    ids: list[int]
    """Token ids in emission order (EOS included when the reply ends on it)."""
    kinds: list[int]
    """Per token: the index of its segment in ``segments``."""
    pieces: list[str]
    """Per token: its text ('' for special tokens)."""
    segments: list[tuple[SegmentKind, int]]
    """(kind, tool-call index) per segment."""
    tool_calls: list[dict[str, Any]]
    """OpenAI tool-call objects of the calls that are complete within ``ids``."""
    finish_reason: str
    """``stop`` | ``length`` | ``tool_calls``."""


def build_output(tok: Tokenizer, reply: PolicyReply, max_tokens: int | None, rid: str,
                 ignore_eos: bool = False, min_tokens: int = 0) -> OutputPlan:
    """The reply's tokens under the request's limits (module docstring)."""
    if reply.token_ids is not None:
        return _from_ids(tok, reply.token_ids, max_tokens, rid, ignore_eos, min_tokens)
    ids: list[int] = []
    kinds: list[int] = []
    pieces: list[str] = []
    segments: list[tuple[SegmentKind, int]] = []

    def add(kind: SegmentKind, idx: int, text: str) -> None:
        if not text:
            return
        i, p = tok.encode_pieces(text)
        segments.append((kind, idx))
        s = len(segments) - 1
        ids.extend(i)
        pieces.extend(p)
        kinds.extend([s] * len(i))

    tool_calls = [{"id": f"chatcmpl-tool-{uuid.uuid4().hex[:24]}", "type": "function",
                   "function": {"name": tc.name, "arguments": tc.arguments}}
                  for tc in reply.tool_calls]
    reasoning = reply.reasoning or ""
    content = reply.content or ""
    parts: list[tuple[SegmentKind, int, str]] = [("content", 0, content)]
    for j, tc in enumerate(reply.tool_calls):
        head = ("\n" if (content or j) else "") + f'<tool_call>\n{{"name": {json.dumps(tc.name)}, "arguments": '
        parts += [("tool_head", j, head), ("tool_args", j, tc.arguments),
                  ("tool_tail", j, "}\n</tool_call>")]
    # the tokens the reply holds, each part encoded as add() encodes it, + EOS
    natural = len(tok.encode(reasoning)) + sum(len(tok.encode(text)) for _, _, text in parts) + 1
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
    add("reasoning", 0, reasoning)
    for kind, j, text in parts:
        add(kind, j, text)
    finish = "tool_calls" if reply.tool_calls else "stop"
    # cut to the target (then end with EOS), pad exactly when still short
    if target is not None and target >= 1 and len(ids) + 1 > target:
        del ids[target - 1:], kinds[target - 1:], pieces[target - 1:]
    while target is not None and len(ids) + 1 < target:  # filler tokenization granularity
        segments.append(("reasoning", 0))
        ids.append(tok.encode(" x")[0])
        kinds.append(len(segments) - 1)
        pieces.append(" x")
    segments.append(("eos", 0))
    ids.append(IM_END)
    kinds.append(len(segments) - 1)
    pieces.append("")
    if max_tokens is not None and max_tokens >= 0 and len(ids) > max_tokens:
        del ids[max_tokens:], kinds[max_tokens:], pieces[max_tokens:]
        if not (ignore_eos and finish == "tool_calls"):
            finish = "length"
    if tool_calls:  # calls cut off by max_tokens are not calls
        seen = {segments[k][1] for k in kinds if segments[k][0] == "tool_tail"}
        tool_calls = [tc for j, tc in enumerate(tool_calls) if j in seen]
        if not tool_calls and finish == "tool_calls":
            finish = "length"
    return OutputPlan(ids, kinds, pieces, segments, tool_calls, finish)


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
    segments: list[tuple[SegmentKind, int]] = [("content", 0), ("eos", 0)]
    kinds = [0] * len(ids)
    if finish == "stop":
        kinds[-1] = 1
    return OutputPlan(ids, kinds, pieces, segments, [], finish)


def _filler(n: int, rid: str) -> str:
    words = ("so", "then", "we", "check", "the", "next", "step", "and", "it", "is", "fine", "ok")
    x = zlib.crc32(rid.encode())
    out = [words[(x + i * 7) % len(words)] for i in range(max(0, n))]
    return " " + " ".join(out) if out else ""


def deltas(plan: OutputPlan, a: int, b: int, started_tools: set[int]) -> list[dict[str, Any]]:
    """OpenAI/vLLM chat deltas for output tokens [a, b)."""
    out: list[dict[str, Any]] = []
    i = a
    while i < b:
        s = plan.kinds[i]
        j = i
        while j < b and plan.kinds[j] == s:
            j += 1
        kind, idx = plan.segments[s]
        text = "".join(plan.pieces[i:j])
        if kind == "reasoning" and text:
            out.append({"reasoning_content": text})
        elif kind == "content" and text:
            out.append({"content": text})
        elif kind in ("tool_head", "tool_args"):
            tc = plan.tool_calls[idx] if idx < len(plan.tool_calls) else None
            if tc is not None:
                if idx not in started_tools:
                    started_tools.add(idx)
                    out.append({"tool_calls": [{"index": idx, "id": tc["id"], "type": "function",
                                                "function": {"name": tc["function"]["name"], "arguments": ""}}]})
                if kind == "tool_args" and text:
                    out.append({"tool_calls": [{"index": idx, "function": {"arguments": text}}]})
        i = j
    return out


def text_of(plan: OutputPlan, a: int, b: int) -> str:
    """Plain completion text of output tokens [a, b): every token's text, reasoning and tool-call
    framing included (``/v1/completions`` runs no reasoning or tool parser)."""
    return "".join(plan.pieces[a:b])


def message_parts(plan: OutputPlan, k: int) -> tuple[str, str]:
    """(reasoning, content) text of the first ``k`` tokens."""
    reasoning, content = [], []
    for p, s in zip(plan.pieces[:k], plan.kinds[:k], strict=True):
        kind = plan.segments[s][0]
        if kind == "reasoning":
            reasoning.append(p)
        elif kind == "content":
            content.append(p)
    return "".join(reasoning), "".join(content)
