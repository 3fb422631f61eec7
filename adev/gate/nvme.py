"""Per-session NVMe block devices inside the gate guest (nvmet over tcp on the guest's loopback).

Debian's guest kernel lacks ``nvme-loop``, so ``vm/guest/adev-nvme.sh`` exports a sparse file
through nvmet's tcp transport on 127.0.0.1:4420 and connects to it: loop file -> losetup ->
configfs subsystem ``nqn.2026-11.io.adev:gate.<session>`` -> ``nvme connect`` -> /dev/nvmeXnY,
owned by the session's test user. The gate creates one before a run that ``needs_nvme`` and
removes it afterwards; tests find it in env ``ADEV_BLOCK_DEVICE``.
"""
from __future__ import annotations

from typing import Awaitable, Protocol

from .base import parse_markers


class ScriptRunner(Protocol):
    def __call__(self, script: str, cmd: str, session_id: str, *extra: str) -> Awaitable[str]: ...


class NvmeError(RuntimeError):
    pass


async def create_device(run_script: ScriptRunner, session_id: str, user: str, size_mb: int) -> str:
    """Create the session's device; returns its path in the guest (e.g. ``/dev/nvme0n1``)."""
    out = await run_script("adev-nvme.sh", "create", session_id, user, str(int(size_mb)))
    m = parse_markers(out)
    if "DEVICE" not in m:
        raise NvmeError(m.get("NVME_ERROR") or out[-300:] or "no output")
    return m["DEVICE"]


async def remove_device(run_script: ScriptRunner, session_id: str) -> None:
    """Disconnect and remove everything ``create_device`` made (idempotent)."""
    out = await run_script("adev-nvme.sh", "remove", session_id)
    if parse_markers(out).get("NVME_REMOVED") != "ok":
        raise NvmeError(f"NVMe teardown did not confirm: {out[-300:]}")
