"""What the emulated model says: the policy interface.

The emulator's timing model decides *when* tokens come out; a policy decides *what* they are.
A policy sees what a real model sees (the request's messages or prompt, tools, sampling limits,
seed) and returns text, optional reasoning text and optional tool calls, or token ids.
``output_tokens`` asks the engine to pad the reply to that many tokens (reasoning padding), so
output lengths follow a distribution while the content stays useful. The request's sampling
limits (``max_tokens``, ``ignore_eos``, ``min_tokens``) are applied to the reply afterwards
(:mod:`adev.emulator.planning`), whatever the policy answers.

The ``replay`` policy also reads the request's ``adev`` extension object
(:attr:`PolicyRequest.extension`); every other policy ignores it.
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
    prompt: str | None = None
    """``/v1/completions``: the prompt text (None for token-id prompts and for chat)."""
    ignore_eos: bool = False
    min_tokens: int = 0
    extension: dict[str, Any] | None = None
    """The request body's ``adev`` object, if any (ignored by real vLLM)."""


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
    token_ids: list[int] | None = None
    """The reply as token ids (a recorded output), emitted exactly; text fields are then unused."""


class PolicyInputError(ValueError):
    """The request lacks what the policy needs (answered HTTP 400 with this message)."""


class Policy(Protocol):
    name: str

    def reply(self, request: PolicyRequest) -> PolicyReply: ...


# How the emulator finds and builds a policy: the registry in ``adev.emulator.policies``
# (``POLICIES``, ``load_policy``). A policy module defines ``Policy(stack_config, seed)``, where
# ``stack_config`` is the validated ``adev.config.StackConfig`` and ``seed`` the endpoint's seed (an
# int derived from ``StackConfig.seed`` and the endpoint name, stable across runs). The object
# satisfies the ``Policy`` protocol above; ``reply`` runs on the endpoint's event loop, so it must
# be fast (no I/O, no sleeping) and deterministic given (seed, request) so runs replay.

from adev.emulator.policies import load_policy  # noqa: E402,F401  (re-exported)
