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


# ---------------------------------------------------------------------------------------------
# How the emulator finds and builds a policy (the constructor contract).
#
# ``StackConfig.policy`` names a module ``adev.emulator.policies.<name>`` ("length" | "oracle" |
# "replay"). The emulator imports it lazily (only the configured one) and builds
#
#     policy = module.Policy(stack_config, seed)
#
# where ``stack_config`` is the validated ``adev.config.StackConfig`` of the stack and ``seed`` the
# endpoint's seed (an int derived from ``StackConfig.seed`` and the endpoint name, stable across
# runs). The object must satisfy the ``Policy`` protocol above: a ``name`` attribute and
# ``reply(PolicyRequest) -> PolicyReply``. ``reply`` runs on the endpoint's event loop, so it must
# be fast (no I/O, no sleeping); it must be deterministic given (seed, request) so runs replay.


def load_policy(name: str, stack_config: Any, seed: int) -> "Policy":
    """Import ``adev.emulator.policies.<name>`` and construct its ``Policy(stack_config, seed)``."""
    import importlib
    import re

    if not re.fullmatch(r"[a-z_][a-z0-9_]*", name or ""):
        raise ValueError(f"policy: {name!r} is not a policy module name; allowed: length | oracle | replay")
    try:
        mod = importlib.import_module(f"adev.emulator.policies.{name}")
    except ModuleNotFoundError as e:
        if e.name == f"adev.emulator.policies.{name}":
            raise ValueError(f"policy: no module adev/emulator/policies/{name}.py; "
                             "allowed: length | oracle | replay") from None
        raise
    cls = getattr(mod, "Policy", None)
    if cls is None:
        raise ValueError(f"policy: adev.emulator.policies.{name} defines no class Policy")
    return cls(stack_config, seed)
