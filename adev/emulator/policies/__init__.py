"""The emulator's policies: what the emulated model says (interface in :mod:`.base`).

:data:`POLICIES` is the one table of policy names: ``stack.policy`` is validated against it
(:func:`check_policy`), ``adev stack`` offers its keys, and :func:`load_policy` imports only the
configured module. This module imports nothing else, so configuration code can read the table
without loading any policy.
"""
from __future__ import annotations

import importlib
from typing import Any

POLICIES: dict[str, str] = {
    "length": "adev.emulator.policies.length",
    "oracle": "adev.emulator.policies.oracle",
    "replay": "adev.emulator.policies.replay",
}
"""Policy name -> module defining ``Policy(stack_config, seed)``:

- ``length``: filler text of a drawn or requested length, never a tool call;
- ``oracle``: plays every session role of adev's built-in tasks;
- ``replay``: the recorded output of a trace (its length, and its token ids or text when the
  request carries them)."""


def unknown_policy(name: object, where: str = "policy") -> str:
    """The one-line error for a name not in :data:`POLICIES`."""
    return (f"{where}: {name!r} is not a policy; allowed values: "
            + ", ".join(repr(k) for k in POLICIES))


def check_policy(name: object, where: str = "policy") -> None:
    """Raise ``ValueError`` (with the allowed names) unless ``name`` is a registered policy."""
    if not isinstance(name, str) or name not in POLICIES:
        raise ValueError(unknown_policy(name, where))


def load_policy(name: str, stack_config: Any, seed: int) -> Any:
    """Import the policy registered as ``name`` and build ``Policy(stack_config, seed)``."""
    check_policy(name)
    mod = importlib.import_module(POLICIES[name])
    return mod.Policy(stack_config, seed)
