"""The one table of gate executors, by the name a fleet file or ``--gate`` gives.

=====================  ===========================================================================
``local`` (default)    pytest on this host, confined (:mod:`adev.gate.confine`): an unprivileged
                       user, no network, writes only in its copy of the workspace, memory, process
                       and file-size limits, every descendant killed at the end.
``local-unconfined``   pytest on this host with the user's privileges and no limits: development
                       only. Refused against external endpoints (a real model) unless the user
                       allows it (``--allow-unconfined-gate``, fleet ``allow_unconfined_gate``).
``vm``                 pytest in a libvirt+qemu guest over ssh (:mod:`adev.gate.vm`).
=====================  ===========================================================================
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config import ConfigError
from ..records import GateExecutor


def _local() -> Any:
    from .local import LocalGate
    return LocalGate()


def _local_unconfined() -> Any:
    from .local import LocalGate
    return LocalGate(confined=False)


def _vm() -> Any:
    from .vm import VmGate
    return VmGate()


@dataclass(frozen=True)
class GateKind:
    name: GateExecutor
    factory: Callable[[], Any]
    confined: bool  # agent code cannot reach beyond its workspace, the network or the host's limits
    help: str


GATES: dict[str, GateKind] = {g.name: g for g in (
    GateKind("local", _local, True, "pytest on this host in a sandbox (default)"),
    GateKind("local-unconfined", _local_unconfined, False,
             "pytest on this host with your privileges and no limits (development only)"),
    GateKind("vm", _vm, True, "pytest in a libvirt+qemu guest"),
)}
DEFAULT_GATE = "local"


def gate_kind(name: str, where: str = "gate") -> GateKind:
    """The table entry for ``name``, or ConfigError listing the available names."""
    try:
        return GATES[name]
    except (KeyError, TypeError):
        raise ConfigError(f"{where}: unknown gate executor {name!r}; available: "
                          + ", ".join(GATES)) from None


def check_gate_policy(name: str, *, external: bool, allow_unconfined: bool,
                      where: str = "gate") -> GateKind:
    """Refuse an unconfined gate when a real model (an external endpoint) writes the code."""
    kind = gate_kind(name, where)
    if not kind.confined and external and not allow_unconfined:
        raise ConfigError(f"{where}: {name!r} runs model-written code unconfined on this host, "
                          "and the endpoints are external (a real model); use 'local' or 'vm', "
                          "or allow it explicitly (--allow-unconfined-gate)")
    return kind


def make_gate(name: str, *, external: bool = False, allow_unconfined: bool = False,
              where: str = "gate") -> Any:
    """A new gate executor named ``name`` (see the module table), after the policy check."""
    return check_gate_policy(name, external=external, allow_unconfined=allow_unconfined,
                             where=where).factory()
