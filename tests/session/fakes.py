"""Deterministic in-process fake model for session unit tests (no HTTP).

``PolicyLLM`` has the surface the round loop uses of :class:`adev.client.llm.LLMClient`
(``chat``, ``max_model_len``, ``ledger``) and answers from a :class:`Policy` (the oracle, or a
scripted policy). Prompt tokens are counted as characters / ``chars_per_token`` over message text
and tool-call arguments; ``cached_tokens`` is the longest common prefix (in characters) with any
earlier prompt of the same session, divided alike -- enough to check the resend rule.
"""
from __future__ import annotations

import json
from typing import Any

from adev.client.retry import ContextLengthError
from adev.client.stream import ChatResult, ToolCallOut
from adev.emulator.policies.base import PolicyReply, PolicyRequest, ToolCall
from adev.records import CallRecord


def prompt_text(messages: list[dict[str, Any]]) -> str:
    parts = []
    for m in messages:
        parts.append(f"<{m['role']}>{m.get('content') or ''}")
        for tc in m.get("tool_calls") or ():
            parts.append(f"<call {tc['function']['name']}>{tc['function']['arguments']}")
    return "".join(parts)


class PolicyLLM:
    def __init__(self, policy: Any, *, run_dir=None, clock=None, max_model_len: int | None = None,
                 chars_per_token: float = 4.0, ledger=None):
        self.policy = policy
        self.run_dir = run_dir
        self.clock = clock
        self._mml = max_model_len
        self.cpt = chars_per_token
        self.ledger = ledger
        self.requests: list[dict[str, Any]] = []
        self._prev: dict[str, list[str]] = {}

    def count_tokens(self, messages, tools, text: str) -> int:
        """Prompt tokens of a request (characters / chars_per_token; subclasses may tokenize)."""
        return int(len(text) / self.cpt) + 1

    def max_model_len(self, endpoint: str) -> int | None:
        return self._mml

    async def chat(self, endpoint, messages, *, tools=None, max_tokens=None, temperature=None,
                   seed=None, session_id="", call_id="", role="", round=0, step=0, **kw):
        text = prompt_text(messages) + json.dumps(tools or [])
        pt = self.count_tokens(messages, tools, text)
        t = self.clock.now() if self.clock else 0.0
        rec = CallRecord(run_id=getattr(self.run_dir, "run_id", ""), session_id=session_id,
                         call_id=call_id, endpoint=endpoint, role=role, round=round, step=step,
                         t_scheduled=t, t_sent=t, prompt_tokens=pt)
        self.requests.append({"endpoint": endpoint, "messages": json.loads(json.dumps(messages)),
                              "max_tokens": max_tokens, "seed": seed, "role": role,
                              "round": round, "session_id": session_id, "prompt_tokens": pt})
        if self._mml and pt > self._mml:
            rec.status, rec.error = "error", "context"
            if self.run_dir is not None:
                self.run_dir.append(rec)
            raise ContextLengthError("HTTP 400: maximum context length exceeded", 400, rec)
        prev = self._prev.setdefault(session_id, [])
        best = 0
        for p in prev:
            best = max(best, _common_prefix(p, text))
        prev.append(text)
        cached = int(best * pt / max(1, len(text)))
        reply: PolicyReply = self.policy.reply(PolicyRequest(
            model="fake", messages=messages, tools=tools, max_tokens=max_tokens, seed=seed,
            prompt_tokens=pt))
        calls = [ToolCallOut(id=f"call_{len(self.requests)}_{i}", name=c.name,
                             arguments=c.arguments) for i, c in enumerate(reply.tool_calls)]
        rec.prompt_tokens, rec.cached_tokens = pt, cached
        rec.completion_tokens = reply.output_tokens or 10
        rec.t_end = self.clock.now() if self.clock else 0.0
        rec.n_tool_calls = len(calls)
        if self.run_dir is not None:
            self.run_dir.append(rec)
        return ChatResult(content=reply.content or "", reasoning=reply.reasoning or "",
                          tool_calls=calls, finish_reason="tool_calls" if calls else "stop",
                          prompt_tokens=pt, completion_tokens=rec.completion_tokens,
                          cached_tokens=cached, record=rec)


class ScriptedPolicy:
    """Answers each call with the next reply of a script (then plain text)."""

    name = "scripted"

    def __init__(self, replies: list[PolicyReply] | None = None, default: PolicyReply | None = None):
        self.replies = list(replies or [])
        self.default = default or PolicyReply(content="...")

    def reply(self, request: PolicyRequest) -> PolicyReply:
        return self.replies.pop(0) if self.replies else self.default


def call(name: str, **args: Any) -> ToolCall:
    return ToolCall(name, json.dumps(args))


def _common_prefix(a: str, b: str) -> int:
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:  # binary search with C-speed slice compares
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo
