"""Provisioning plans for the store's disk tier: a local RAID0 (mdadm) or a remote NVMe-oF
namespace (nvme-cli), formatted, mounted, and given to Mooncake as its offload path.

A plan is a list of :class:`Step` (a command line and what it does). By default it is only
printed; ``apply_plan`` runs it, and refuses before running anything when not root, when a tool
is missing, or when a device is missing, not a block device, mounted (``/proc/mounts``), used as
swap (``/proc/swaps``), held by another device such as an md array or LVM volume
(``/sys/block/<dev>/holders``, also for its partitions), or carries a filesystem / RAID
signature (``lsblk -no FSTYPE``).

Mooncake's offload path: each store client writes its disk tier under
``MOONCAKE_OFFLOAD_FILE_STORAGE_PATH`` (one existing directory per live client). adev's embedded
stack sets it to ``<stack.store.disk_dir>/<endpoint name>`` for every endpoint, so the plan's
last step is the stack-file line ``disk_dir = "<mount>/mooncake"`` under ``[stack.store]``
(``store-ram+disk`` or ``disk-only`` configuration); for a real vLLM with the Mooncake
connector, export the variable per instance (``<mount>/mooncake/<instance>``).
"""
from __future__ import annotations

import os
import shlex
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal

from ..config import ConfigError

TOOLS = {"mdadm": "mdadm", "nvme": "nvme-cli", "mkfs.xfs": "xfsprogs", "mkfs.ext4": "e2fsprogs",
         "mount": "mount", "lsblk": "util-linux", "modprobe": "kmod"}
"""Command -> the Debian package that provides it."""

OFFLOAD_ENV = "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH"


@dataclass
class Step:
    what: str
    argv: list[str] | None        # None: a manual step (a config line), printed only

    def line(self) -> str:
        return shlex.join(self.argv) if self.argv else self.what


@dataclass
class Plan:
    kind: Literal["raid0", "nvmeof"]
    devices: list[str]
    mountpoint: str
    disk_dir: str
    steps: list[Step]
    tools: list[str]

    def render(self) -> str:
        out = [f"# {self.kind} plan for the store's disk tier (dry run; --apply runs it)"]
        for i, s in enumerate(self.steps, 1):
            out.append(f"# {i}. {s.what}")
            if s.argv:
                out.append(s.line())
        return "\n".join(out)


def _fs_steps(dev: str, fs: str, mountpoint: str, disk_dir: str) -> list[Step]:
    mkfs = ["mkfs.xfs", "-f", dev] if fs == "xfs" else ["mkfs.ext4", "-F", dev]
    return [Step(f"make a {fs} filesystem on {dev}", mkfs),
            Step(f"create the mount point {mountpoint}", ["mkdir", "-p", mountpoint]),
            Step(f"mount {dev} on {mountpoint} (noatime)",
                 ["mount", "-o", "noatime", dev, mountpoint]),
            Step(f"create Mooncake's offload directory {disk_dir}", ["mkdir", "-p", disk_dir]),
            Step(f'point the store at it: under [stack.store] set disk_dir = "{disk_dir}" (the '
                 f"embedded stack gives each endpoint {disk_dir}/<endpoint> as {OFFLOAD_ENV}); "
                 f"for real vLLM instances export {OFFLOAD_ENV}={disk_dir}/<instance>", None)]


def raid0_plan(devices: list[str], *, md: str = "/dev/md/adev-kv", chunk_kib: int = 512,
               fs: str = "xfs", mountpoint: str = "/mnt/adev-kv") -> Plan:
    """mdadm RAID0 over ``devices`` -> filesystem -> mount -> Mooncake offload path."""
    if len(devices) < 2:
        raise ConfigError(f"plan raid0: needs at least 2 devices, got {len(devices)}")
    if len(set(devices)) != len(devices):
        raise ConfigError(f"plan raid0: devices must be distinct, got {devices}")
    disk_dir = str(Path(mountpoint) / "mooncake")
    steps = [Step(f"stripe {len(devices)} devices into {md} (RAID0, {chunk_kib} KiB chunks)",
                  ["mdadm", "--create", md, "--level=0", f"--raid-devices={len(devices)}",
                   f"--chunk={chunk_kib}", "--run", *devices]),
             *_fs_steps(md, fs, mountpoint, disk_dir)]
    return Plan("raid0", list(devices), mountpoint, disk_dir, steps,
                ["mdadm", "mkfs.xfs" if fs == "xfs" else "mkfs.ext4", "mount", "lsblk"])


NAMESPACE_PLACEHOLDER = "<namespace of the NQN>"


def nvmeof_plan(*, traddr: str, trsvcid: str, nqn: str, transport: str = "tcp",
                fs: str = "xfs", mountpoint: str = "/mnt/adev-kv",
                namespace: str | None = None) -> Plan:
    """nvme-cli discover + connect -> the namespace -> filesystem -> mount -> offload path.
    ``namespace``: the block device once connected (found by ``find_namespace``); the dry run
    shows a placeholder."""
    if transport not in ("tcp", "rdma"):
        raise ConfigError(f"--transport: {transport!r} is not allowed; allowed values: tcp, rdma")
    if not nqn.startswith("nqn."):
        raise ConfigError(f"--nqn: {nqn!r} is not an NVMe qualified name (starts with 'nqn.')")
    dev = namespace or NAMESPACE_PLACEHOLDER
    disk_dir = str(Path(mountpoint) / "mooncake")
    steps = [Step(f"load the nvme-{transport} host driver", ["modprobe", f"nvme-{transport}"]),
             Step(f"discover the target's subsystems at {traddr}:{trsvcid}",
                  ["nvme", "discover", "-t", transport, "-a", traddr, "-s", trsvcid]),
             Step(f"connect to {nqn}", ["nvme", "connect", "-t", transport, "-a", traddr,
                                        "-s", trsvcid, "-n", nqn]),
             Step("list subsystems to find the namespace block device of the NQN",
                  ["nvme", "list-subsys"]),
             *_fs_steps(dev, fs, mountpoint, disk_dir)]
    return Plan("nvmeof", [dev], mountpoint, disk_dir, steps,
                ["modprobe", "nvme", "mkfs.xfs" if fs == "xfs" else "mkfs.ext4", "mount", "lsblk"])


# --------------------------------------------------------------------------------------------
# Refusal checks


def _mounted_sources(proc_mounts: str) -> dict[str, str]:
    out = {}
    try:
        for line in Path(proc_mounts).read_text().splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0].startswith("/"):
                out[os.path.realpath(parts[0])] = parts[1]
    except OSError:
        pass
    return out


def _swaps(proc_swaps: str) -> set[str]:
    try:
        lines = Path(proc_swaps).read_text().splitlines()[1:]
    except OSError:
        return set()
    return {os.path.realpath(ln.split()[0]) for ln in lines if ln.split()}


def _is_block(path: str) -> bool:
    try:
        return stat.S_ISBLK(os.stat(path).st_mode)
    except OSError:
        return False


def _lsblk_fstype(dev: str) -> str | None:
    if shutil.which("lsblk") is None:
        return None
    try:
        r = subprocess.run(["lsblk", "-ndo", "FSTYPE", dev], capture_output=True, text=True,
                           timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() or None


def device_problems(dev: str, *, proc_mounts: str = "/proc/mounts",
                    proc_swaps: str = "/proc/swaps", sys_block: str = "/sys/block",
                    is_block: Callable[[str], bool] = _is_block,
                    fstype: Callable[[str], str | None] = _lsblk_fstype) -> list[str]:
    """Why ``dev`` must not be used (empty when it is free). Reads only: the mount and swap
    tables, sysfs holders, and lsblk's signature column."""
    if not os.path.exists(dev):
        return [f"{dev}: does not exist"]
    if not is_block(dev):
        return [f"{dev}: is not a block device"]
    real = os.path.realpath(dev)
    name = os.path.basename(real)
    problems = []
    sysdir = Path(sys_block) / name
    parts = [p.name for p in sysdir.iterdir() if p.is_dir() and p.name.startswith(name)] \
        if sysdir.is_dir() else []
    mounts = _mounted_sources(proc_mounts)
    for n in [name, *parts]:
        where = mounts.get(f"/dev/{n}")
        if where:
            problems.append(f"{dev}: /dev/{n} is mounted on {where}")
        if f"/dev/{n}" in _swaps(proc_swaps):
            problems.append(f"{dev}: /dev/{n} is in use as swap")
        hdir = sysdir / "holders" if n == name else sysdir / n / "holders"
        holders = sorted(h.name for h in hdir.iterdir()) if hdir.is_dir() else []
        if holders:
            problems.append(f"{dev}: /dev/{n} is in use by {', '.join(holders)} "
                            f"({hdir} is not empty)")
    sig = fstype(real)
    if sig:
        problems.append(f"{dev}: carries a {sig} signature (wipe it with wipefs first if it "
                        "is really free)")
    return problems


def check_apply(plan: Plan, *, euid: int | None = None, which: Callable[[str], str | None] =
                shutil.which, **checks) -> list[str]:
    """Every reason to refuse ``--apply`` of ``plan`` (empty: it may run)."""
    problems = []
    if (os.geteuid() if euid is None else euid) != 0:
        problems.append("--apply needs root (mdadm, nvme, mkfs and mount do)")
    for t in plan.tools:
        if which(t) is None:
            problems.append(f"{t}: not found on PATH (Debian package {TOOLS.get(t, t)})")
    for d in plan.devices:
        if d != NAMESPACE_PLACEHOLDER:
            problems += device_problems(d, **checks)
    mp = Path(plan.mountpoint)
    if mp.is_dir() and any(mp.iterdir()):
        problems.append(f"{plan.mountpoint}: mount point exists and is not empty")
    return problems


def find_namespace(nqn: str, sys_class: str = "/sys/class/nvme-subsystem") -> str | None:
    """The block device (``/dev/nvmeXnY``) of the first namespace of the subsystem ``nqn``."""
    root = Path(sys_class)
    if not root.is_dir():
        return None
    for sub in sorted(root.iterdir()):
        try:
            if (sub / "subsysnqn").read_text().strip() != nqn:
                continue
        except OSError:
            continue
        for ns in sorted(sub.iterdir()):
            if ns.name.startswith("nvme") and "n" in ns.name[4:] and (ns / "size").exists():
                return f"/dev/{ns.name}"
    return None


def run_steps(steps: list[Step], echo: Callable[[str], None] = print) -> None:
    """Run the steps in order; stop at the first failure (raises ``RuntimeError`` naming it)."""
    for i, s in enumerate(steps, 1):
        if s.argv is None:
            echo(f"# {i}. {s.what}")
            continue
        echo(f"# {i}. {s.what}\n{s.line()}")
        r = subprocess.run(s.argv, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"step {i} failed (exit {r.returncode}): {s.line()}: "
                               f"{(r.stderr or r.stdout).strip()[:300]}")
