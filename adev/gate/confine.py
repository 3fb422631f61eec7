"""The local gate's sandbox: bubblewrap namespaces, an unprivileged user and a cgroup.

One run of model-written tests gets:

* **bubblewrap** (``bwrap``, Debian's ``bubblewrap``): new PID, network, IPC and UTS namespaces.
  The network namespace holds only ``lo``, so nothing on this host or beyond is reachable. The
  root file system is bound read-only; ``/tmp`` is a private tmpfs of ``tmp_bytes`` and ``/run``
  an empty one (no host unix sockets); the
  workspace copy (``/tmp/ws``) and the run's output folder (``/tmp/out``: JUnit XML, block
  device) are the only host paths bound writable. Folders that the unprivileged user could not
  traverse anyway (``/root``) are replaced by an empty tmpfs, with the Python installation bound
  back read-only when it lives there. bwrap is PID 1 of the namespace, so when the tests' process
  exits or is killed, the kernel kills every process left in it (``setsid`` or double-forked
  daemons included).
* **an unprivileged user**: ``setpriv`` switches to ``uid``/``gid`` (65534, ``nobody``), clears
  supplementary groups, capabilities and the bounding set, and sets ``no_new_privs``.
* **a cgroup** per run (v2 when the memory and pids controllers are delegated there, otherwise the
  v1 ``memory`` and ``pids`` hierarchies): ``memory_bytes`` (over it the kernel's OOM killer ends
  the hog) and ``pids_max`` (a fork bomb gets EAGAIN). Every process in it is killed at the end
  (``cgroup.kill`` on v2; on v1 SIGKILL to each listed process until none is left), then it is
  removed.
* **rlimits** set before exec: ``RLIMIT_FSIZE`` = ``file_bytes`` (a larger write fails with
  EFBIG) and ``RLIMIT_CORE`` = 0.

:func:`check` says why the sandbox cannot be built on this host (no bwrap, no cgroup), so the gate
can refuse to start instead of running the tests unconfined.
"""
from __future__ import annotations

import os
import resource
import shutil
import signal
import stat
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
WS = "/tmp/ws"  # the workspace copy inside the sandbox
OUT = "/tmp/out"  # JUnit XML and the block device inside the sandbox


@dataclass(frozen=True)
class Limits:
    uid: int = 65534
    gid: int = 65534
    memory_bytes: int = 1 << 30
    pids_max: int = 256
    file_bytes: int = 2 << 30  # the largest file the tests may write (block device included)
    tmp_bytes: int = 256 << 20  # the sandbox's private /tmp


class SandboxError(RuntimeError):
    """The sandbox cannot be built on this host (the message says what is missing)."""


def check() -> None:
    """Raise SandboxError unless bwrap, setpriv and a usable cgroup are present."""
    if os.geteuid() != 0:
        raise SandboxError("the local gate's sandbox needs root (to switch to an unprivileged "
                           "user, make cgroups and hand the workspace copy over); use --gate vm, "
                           "or --gate local-unconfined for development")
    for tool in ("bwrap", "setpriv"):
        if shutil.which(tool) is None:
            raise SandboxError(f"{tool} not found: install Debian's "
                               f"{'bubblewrap' if tool == 'bwrap' else 'util-linux'} "
                               "(scripts/bootstrap.sh does), or use --gate vm")
    if _layout() is None:
        raise SandboxError("no writable cgroup with the memory and pids controllers "
                           f"under {CGROUP_ROOT} (v2 delegated or v1 hierarchies)")


def _own_path(controller: str) -> str:
    """This process's cgroup path in the hierarchy of ``controller`` ('' = v2 unified)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        if (controller == "" and ctrls == "") or controller in ctrls.split(","):
            return path.lstrip("/")
    return ""


def _layout() -> tuple[str, list[Path]] | None:
    """("v2", [parent]) or ("v1", [memory parent, pids parent]) where run cgroups can be made."""
    v2 = CGROUP_ROOT / "cgroup.controllers"
    if v2.exists() and {"memory", "pids"} <= set(v2.read_text().split()):
        parent = CGROUP_ROOT / "adev-gate"
        try:
            parent.mkdir(exist_ok=True)
            (CGROUP_ROOT / "cgroup.subtree_control").write_text("+memory +pids")
            (parent / "cgroup.subtree_control").write_text("+memory +pids")
            return "v2", [parent]
        except OSError:
            return None
    parents = [CGROUP_ROOT / c / _own_path(c) for c in ("memory", "pids")]
    if all((p / "cgroup.procs").exists() and os.access(p, os.W_OK) for p in parents):
        return "v1", parents
    return None


class Cgroup:
    """One run's cgroup (see the module docstring)."""

    def __init__(self, limits: Limits, tag: str):
        layout = _layout()
        if layout is None:
            raise SandboxError("no writable cgroup with the memory and pids controllers")
        self.version, parents = layout
        name = f"adev-gate-{tag}-{uuid.uuid4().hex[:8]}"
        self.dirs = [p / name for p in parents]
        for d in self.dirs:
            d.mkdir()
        if self.version == "v2":
            d = self.dirs[0]
            (d / "memory.max").write_text(str(limits.memory_bytes))
            (d / "memory.swap.max").exists() and (d / "memory.swap.max").write_text("0")
            (d / "pids.max").write_text(str(limits.pids_max))
        else:
            mem, pids = self.dirs
            (mem / "memory.limit_in_bytes").write_text(str(limits.memory_bytes))
            sw = mem / "memory.memsw.limit_in_bytes"
            if sw.exists():
                sw.write_text(str(limits.memory_bytes))
            (pids / "pids.max").write_text(str(limits.pids_max))

    def enter(self) -> None:
        """Move the calling process into the cgroup (called in the child before exec)."""
        for d in self.dirs:
            with open(d / "cgroup.procs", "w") as f:
                f.write(str(os.getpid()))

    def pids(self) -> list[int]:
        return [int(x) for x in (self.dirs[-1] / "cgroup.procs").read_text().split()]

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer ended in this cgroup."""
        f = self.dirs[0] / ("memory.events" if self.version == "v2" else "memory.oom_control")
        for line in f.read_text().splitlines() if f.exists() else []:
            key, _, val = line.partition(" ")
            if key == "oom_kill":
                return int(val)
        return 0

    def kill_all(self, timeout_s: float = 10.0) -> None:
        """SIGKILL every process in the cgroup and wait until it is empty."""
        kill = self.dirs[0] / "cgroup.kill"
        if kill.exists():
            kill.write_text("1")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            left = self.pids()
            if not left:
                return
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.01)
        raise SandboxError(f"processes still alive in {self.dirs[-1]}: {self.pids()}")

    def remove(self) -> None:
        for d in self.dirs:
            for _ in range(100):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # the last processes are still being reaped
                    time.sleep(0.01)


def child_setup(cgroup: Cgroup, limits: Limits) -> None:
    """``preexec_fn`` of the sandbox's bwrap: join the cgroup, set rlimits."""
    cgroup.enter()
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _hidden_ancestor(path: Path) -> Path | None:
    """The topmost ancestor of ``path`` that others may not traverse (``/root``), if any."""
    for a in reversed(path.parents):
        if a != Path("/") and not os.stat(a).st_mode & stat.S_IXOTH:
            return a
    return None


def bwrap_argv(argv: list[str], *, work: Path, out: Path, limits: Limits,
               env: dict[str, str], python: str = sys.executable) -> list[str]:
    """The command running ``argv`` in the sandbox: ``work`` at :data:`WS`, ``out`` at
    :data:`OUT`."""
    args = ["bwrap", "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net",
            "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    needed = {Path(os.path.realpath(python)).parent.parent, Path(sys.base_prefix).resolve(),
              Path(sys.prefix).resolve()}
    hidden: dict[Path, set[Path]] = {}
    for p in needed:
        h = _hidden_ancestor(p)
        if h is not None:
            hidden.setdefault(h, set()).add(p)
    for h, keep in sorted(hidden.items()):
        args += ["--tmpfs", str(h)]
        dirs = sorted({a for p in keep for a in p.parents if h in a.parents})
        for d in dirs:  # the way down to each kept path, traversable
            args += ["--perms", "0755", "--dir", str(d)]
        for p in sorted(keep):
            args += ["--ro-bind", str(p), str(p)]
    args += ["--tmpfs", "/run",  # the host's unix sockets (libvirt, D-Bus) out of reach
             "--perms", "1777", "--size", str(limits.tmp_bytes), "--tmpfs", "/tmp"]
    tmp = Path("/tmp")
    for p in sorted(p for p in needed if tmp in p.parents):  # a Python installed under /tmp
        for d in sorted(a for a in p.parents if tmp in a.parents):
            args += ["--perms", "0755", "--dir", str(d)]
        args += ["--ro-bind", str(p), str(p)]
    args += ["--bind", str(work), WS, "--bind", str(out), OUT, "--chdir", WS, "--clearenv"]
    for k, v in env.items():
        args += ["--setenv", k, v]
    args += ["--", "setpriv", f"--reuid={limits.uid}", f"--regid={limits.gid}", "--clear-groups",
             "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", *argv]
    return args


def chown_tree(root: Path, limits: Limits) -> None:
    """Give the sandbox's user the workspace copy and the output folder."""
    os.chown(root, limits.uid, limits.gid)
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            os.chown(os.path.join(dirpath, n), limits.uid, limits.gid, follow_symlinks=False)
