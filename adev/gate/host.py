"""The gate VM's host: libvirt made usable on it, its connection, its qemu binary.

``prepare_host()`` readies libvirt on a host without systemd (these containers): it sets the
``qemu.conf`` keys such containers need (idempotently, only when systemd is not init) and starts
``virtlogd``/``libvirtd`` when they are not running. On a host where systemd is init it changes
nothing.
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("adev.gate.vm")  # the VM's logger: host set-up is part of its start

QEMU_CONF = Path("/etc/libvirt/qemu.conf")
CONTAINER_QEMU_CONF = {"user": '"root"', "group": '"root"', "dynamic_ownership": "0",
                       "security_driver": '"none"', "cgroup_controllers": "[ ]", "namespaces": "[ ]"}


class VmError(RuntimeError):
    """The gate VM (or libvirt on its host) could not be made ready; the message says why."""


def systemd_is_init() -> bool:
    return Path("/run/systemd/system").is_dir()


def configure_qemu_conf(path: Path = QEMU_CONF, keys: dict[str, str] = CONTAINER_QEMU_CONF) -> bool:
    """Set ``keys`` in qemu.conf (replacing active lines, appending missing ones). True if changed."""
    text = path.read_text() if path.exists() else ""
    lines, seen = text.splitlines(), set()
    for i, line in enumerate(lines):
        m = re.match(r"\s*([a-z_]+)\s*=", line)
        if m and m.group(1) in keys:
            seen.add(m.group(1))
            lines[i] = f"{m.group(1)} = {keys[m.group(1)]}"
    missing = [k for k in keys if k not in seen]
    if missing:
        lines.append("# adev: settings for libvirt in a container without systemd (adev.gate.vm)")
        lines += [f"{k} = {keys[k]}" for k in missing]
    new = "\n".join(lines) + "\n"
    if new == text:
        return False
    path.write_text(new)
    return True


def _pid_alive(pidfile: Path) -> bool:
    try:
        pid = int(pidfile.read_text().strip())
        os.kill(pid, 0)
        return True
    except (OSError, ValueError):
        return False


def prepare_host(log_fn=log.info) -> dict:
    """Make ``qemu:///system`` usable here; returns what was done. Safe to call repeatedly."""
    started: list[str] = []
    done: dict[str, Any] = {"systemd": systemd_is_init(), "qemu_conf_changed": False, "started": started}
    if done["systemd"]:
        return done  # a normal host: its own libvirt units and defaults
    if os.geteuid() != 0:
        raise VmError("libvirt without systemd needs root to start its daemons")
    for tool in ("virtlogd", "libvirtd", "qemu-system-x86_64"):
        if shutil.which(tool) is None and not Path("/usr/sbin", tool).exists():
            raise VmError(f"{tool} not found: run scripts/bootstrap.sh")
    running = _pid_alive(Path("/run/libvirtd.pid"))
    if QEMU_CONF.parent.is_dir():
        done["qemu_conf_changed"] = configure_qemu_conf()
        if done["qemu_conf_changed"] and running:
            log_fn("[vm] qemu.conf changed while libvirtd runs: restart libvirtd for it to apply")
    for daemon in ("virtlogd", "libvirtd"):
        if not _pid_alive(Path(f"/run/{daemon}.pid")):
            subprocess.run([daemon, "-d"], check=True, stdin=subprocess.DEVNULL)
            started.append(daemon)
    if "libvirtd" in started:
        for _ in range(100):
            if Path("/run/libvirt/libvirt-sock").exists():
                break
            time.sleep(0.1)
        log_fn(f"[vm] started {', '.join(started)}")
    return done


def open_libvirt(uri: str):
    import libvirt
    libvirt.registerErrorHandler(lambda *_: None, None)  # errors arrive as exceptions
    conn = libvirt.open(uri)
    if conn is None:
        raise VmError(f"cannot open libvirt connection {uri}")
    return conn


def qemu_binary() -> str:
    return shutil.which("qemu-system-x86_64") or "/usr/bin/qemu-system-x86_64"
