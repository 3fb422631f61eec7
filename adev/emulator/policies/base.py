"""What the emulated model says: the policy interface.

The emulator's timing model decides *when* tokens come out; a policy decides *what* they are.
A policy sees only what a real model sees (the request's messages, tools, max_tokens, seed) and
returns text, optional reasoning text and optional tool calls. ``output_tokens`` asks the engine to
pad the reply to that many tokens (reasoning padding), so output lengths follow a distribution
while the content stays useful.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class PolicyRequest:
    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    max_tokens: int | None = None
    seed: int | None = None
    prompt_tokens: int = 0


@dataclass
class ToolCall:
    name: str
    arguments: str  # JSON text, exactly as the model "wrote" it (may be malformed on purpose)


@dataclass
class PolicyReply:
    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    output_tokens: int | None = None  # target completion length; None = natural length


class Policy(Protocol):
    name: str

    def reply(self, request: PolicyRequest) -> PolicyReply: ...
