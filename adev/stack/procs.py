"""Child processes of the stack: find binaries, check libraries and ports, start, wait, stop.

Every process is started in its own session (so a Ctrl-C in the terminal reaches adev, which then
stops the children in order) with stdout+stderr going to a log file. A process is identified by
``(pid, create_time)``: :func:`stop_process` only signals a pid whose start time still matches,
so a recycled pid is never touched.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

MASTER_ENV = "ADEV_MOONCAKE_MASTER"
"""Environment variable naming the ``mooncake_master`` binary to use (else venv bin dir, PATH)."""

DEBIAN_PACKAGES = ("libibverbs1", "librdmacm1", "libnuma1")
"""System packages Mooncake's binaries and store client need, even over TCP."""

_LIB_ERROR = re.compile(r"error while loading shared libraries: ([^:\s]+)"
                        r"|([\w.+-]+\.so[\w.]*): cannot open shared object file")
"""The dynamic loader's message (a binary) or Python's ImportError (an extension module)."""


class StackError(RuntimeError):
    """The stack could not be started, found or stopped; the message says why and what to do."""


class MissingBinaryError(StackError):
    pass


class MissingLibraryError(StackError):
    pass


class PortInUseError(StackError):
    pass


class StackInUseError(StackError):
    """A measuring run and another client would share one stack's endpoints."""


def missing_library_message(binary: str | Path, libs: list[str]) -> str:
    return (f"{binary} cannot load shared libraries {', '.join(libs) or '(see log)'}; install the "
            f"Debian packages {' '.join(DEBIAN_PACKAGES)} (sudo apt-get install -y "
            f"{' '.join(DEBIAN_PACKAGES)}; scripts/bootstrap.sh does this)")


# --------------------------------------------------------------------------------------------
# Binaries


def find_master_binary() -> Path:
    """The ``mooncake_master`` to run: ``$ADEV_MOONCAKE_MASTER``, else the venv's bin dir, else PATH.

    Raises :class:`MissingBinaryError` naming where it looked and how to install it.
    """
    looked: list[str] = []
    env = os.environ.get(MASTER_ENV)
    if env:
        p = Path(env)
        if p.is_file() and os.access(p, os.X_OK):
            return p
        raise MissingBinaryError(
            f"mooncake_master not found: {MASTER_ENV}={env} is not an executable file")
    for d in (Path(sys.executable).parent, Path(sys.prefix) / "bin"):
        p = d / "mooncake_master"
        looked.append(str(p))
        if p.is_file() and os.access(p, os.X_OK):
            return p
    w = shutil.which("mooncake_master")
    if w:
        return Path(w)
    looked.append("$PATH")
    raise MissingBinaryError(
        "mooncake_master not found (looked in " + ", ".join(looked) + "); install the Python "
        "package mooncake-transfer-engine-non-cuda (pip install mooncake-transfer-engine-non-cuda, "
        f"done by scripts/bootstrap.sh), or set {MASTER_ENV} to the binary")


def missing_libraries(binary: str | Path) -> list[str]:
    """Shared libraries ``ldd`` reports as 'not found' for ``binary`` ([] if none or no ldd)."""
    ldd = shutil.which("ldd")
    if not ldd:
        return []
    try:
        out = subprocess.run([ldd, str(binary)], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    missing = []
    for line in out.stdout.splitlines():
        if "=> not found" in line:
            missing.append(line.split("=>")[0].strip())
    return missing


def check_master_binary(binary: str | Path) -> None:
    libs = missing_libraries(binary)
    if libs:
        raise MissingLibraryError(missing_library_message(binary, libs))


# --------------------------------------------------------------------------------------------
# Ports


def port_in_use(host: str, port: int) -> bool:
    """True when a server could not bind ``host:port`` now (someone listens on it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def listening(pid: int, port: int) -> bool | None:
    """True when process ``pid`` (or a child of it) listens on TCP ``port``; None if unknown."""
    try:
        procs = [psutil.Process(pid)]
        procs += procs[0].children(recursive=True)
        for p in procs:
            for c in p.net_connections(kind="tcp"):
                if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port:
                    return True
        return False
    except psutil.AccessDenied:
        return None
    except psutil.Error:
        return False


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy


def http_ok(url: str, timeout: float = 2.0) -> bool:
    """``url`` answers GET with a 2xx status within ``timeout`` seconds (never via a proxy)."""
    try:
        with _OPENER.open(url, timeout=timeout) as r:
            return 200 <= r.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def log_says_addr_in_use(log: str) -> bool:
    """The process log ``log`` says a bind failed: the address was already in use."""
    try:
        text = Path(log).read_text(errors="replace").lower()
    except OSError:
        return False
    return "address already in use" in text or "errno 98" in text


def tcp_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


# --------------------------------------------------------------------------------------------
# Processes


@dataclass
class Proc:
    """One started child: what ran, where it logs, how to recognise it later."""

    name: str
    pid: int
    create_time: float
    cmd: list[str]
    log: str
    ports: dict[str, int] = field(default_factory=dict)


_POPENS: dict[int, subprocess.Popen] = {}
"""Popen objects of children started by this process (so they are reaped, not left zombies)."""
_EXITED: dict[int, int] = {}
"""Exit status of reaped children, by pid."""


def spawn(name: str, cmd: list[str], log: Path, *, env: dict[str, str] | None = None,
          cwd: str | Path | None = None, ports: dict[str, int] | None = None) -> Proc:
    """Start ``cmd`` detached into its own session, stdout+stderr appended to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as fh:
        fh.write(f"\n=== adev: starting {name}: {' '.join(cmd)}\n".encode())
        fh.flush()
        try:
            p = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 env=env, cwd=cwd, start_new_session=True)
        except OSError as e:
            raise StackError(f"cannot start {name} ({cmd[0]}): {e}") from None
    _POPENS[p.pid] = p
    try:
        ct = psutil.Process(p.pid).create_time()
    except psutil.Error:
        ct = 0.0
    return Proc(name=name, pid=p.pid, create_time=ct, cmd=list(cmd), log=str(log),
                ports=dict(ports or {}))


def _process(pid: int, create_time: float) -> psutil.Process | None:
    """The live process ``pid`` if it is still the one started at ``create_time``."""
    try:
        p = psutil.Process(pid)
        if create_time and abs(p.create_time() - create_time) > 0.05:
            return None  # pid recycled: not ours
        if p.status() == psutil.STATUS_ZOMBIE:
            _reap(pid)
            return None
        return p
    except psutil.Error:
        return None


def _reap(pid: int) -> None:
    pop = _POPENS.pop(pid, None)
    if pop is not None:
        try:
            _EXITED[pid] = pop.wait(timeout=0)
        except subprocess.TimeoutExpired:
            _POPENS[pid] = pop


def is_alive(pid: int, create_time: float) -> bool:
    """True while the process started as ``(pid, create_time)`` runs (zombies count as dead)."""
    pop = _POPENS.get(pid)
    if pop is not None and pop.poll() is not None:
        _EXITED[pid] = _POPENS.pop(pid).returncode
        return False
    return _process(pid, create_time) is not None


def exit_code(pid: int) -> int | None:
    """Exit status of a child started by this process, if it has exited."""
    pop = _POPENS.get(pid)
    if pop is not None:
        return pop.poll()
    return _EXITED.get(pid)


def stop_process(pid: int, create_time: float, *, timeout: float = 15.0,
                 hard: bool = False) -> str:
    """SIGTERM, wait up to ``timeout`` s, then SIGKILL (at once when ``hard``).
    Returns 'stopped', 'killed' or 'gone'.

    Only the process identified by ``(pid, create_time)`` is signalled.
    """
    p = _process(pid, create_time)
    if p is None:
        _reap(pid)
        return "gone"
    if hard:
        try:
            p.kill()
            _wait(pid, p, 10.0)
        except psutil.Error:
            pass
        _reap(pid)
        return "killed"
    try:
        p.send_signal(signal.SIGTERM)
    except psutil.Error:
        _reap(pid)
        return "gone"
    result = "stopped"
    try:
        _wait(pid, p, timeout)
    except psutil.TimeoutExpired:
        result = "killed"
        try:
            p.kill()
            _wait(pid, p, 10.0)
        except psutil.Error:
            pass
    except psutil.Error:
        pass
    _reap(pid)
    return result


def _wait(pid: int, p: psutil.Process, timeout: float) -> None:
    pop = _POPENS.get(pid)
    if pop is not None:
        try:
            pop.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise psutil.TimeoutExpired(timeout, pid) from None
        _EXITED[pid] = pop.returncode
        _POPENS.pop(pid, None)
    else:
        p.wait(timeout=timeout)


def log_tail(path: str | Path, n: int = 20) -> str:
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


def library_error_in_log(path: str | Path) -> list[str] | None:
    """Library names from a dynamic loader error in ``path`` ('error while loading shared libraries')."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return None
    libs = sorted({a or b for a, b in _LIB_ERROR.findall(text)})
    return libs or None


def wait_until(ready: Callable[[], bool], proc: Proc, *, timeout: float, what: str,
               poll: float = 0.1) -> None:
    """Poll ``ready()`` until true; raise :class:`StackError` (with the log tail) if ``proc``
    exits first or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        if ready():
            return
        if not is_alive(proc.pid, proc.create_time):
            code = exit_code(proc.pid)
            raise ProcessExited(proc, code)
        if time.monotonic() > deadline:
            raise StackError(f"{what} did not become ready within {timeout:.0f} s; log "
                             f"{proc.log}:\n{log_tail(proc.log)}")
        time.sleep(poll)


class ProcessExited(StackError):
    def __init__(self, proc: Proc, code: int | None):
        self.proc = proc
        self.code = code
        super().__init__(f"{proc.name} exited during start-up (exit status {code}); log "
                         f"{proc.log}:\n{log_tail(proc.log)}")
