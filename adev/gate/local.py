"""The local gate executor: pytest in a subprocess on this host, confined by default.

``LocalGate()`` (gate ``local``) runs the tests in the sandbox of :mod:`adev.gate.confine`: an
unprivileged user, no network, writes only in its copy of the workspace, memory, process and
file-size limits, every descendant killed at the end. It refuses to start (``start()`` raises
:class:`~adev.gate.confine.SandboxError`) where the sandbox cannot be built, rather than run the
tests unconfined. ``LocalGate(confined=False)`` (gate ``local-unconfined``) is for development
only: it runs model-written code with the user's privileges, its only protections being the
throw-away copy, a scrubbed environment and a process group killed on timeout.

Per run: the session's workspace is copied to a temporary folder (regular files only; symlinks
and files with more than one hard link skipped), ``GateRequest.overlay`` files (hidden acceptance tests) are written into the copy, and
``python -m pytest -q -p no:cacheprovider --junitxml=...`` runs there with the copy on
``PYTHONPATH``. Block-device tasks get ``ADEV_BLOCK_DEVICE`` = a sparse file of
``block_device_bytes`` in the run's output folder. Per-test results come from the JUnit XML
(:func:`adev.gate.base.parse_junit`); the verdict from :func:`adev.gate.base.summarise`.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import signal
import stat
import sys
import tempfile
import time
from pathlib import Path, PurePosixPath

from . import confine
from .base import GateRequest, GateResult, parse_junit, summarise

_SKIP_DIRS = {"__pycache__", ".pytest_cache", ".git"}


class LocalGate:
    """Gate executor running pytest as a local subprocess (see the module docstring)."""

    def __init__(self, python: str | None = None, tmp_root: str | Path | None = None,
                 block_device_bytes: int = 1 << 30, max_concurrent: int | None = None,
                 confined: bool = True, limits: confine.Limits | None = None):
        self.confined = confined
        self.name = "local" if confined else "local-unconfined"
        self.limits = limits or confine.Limits()
        self.python = python or sys.executable
        self.tmp_root = str(tmp_root) if tmp_root else None
        self.block_device_bytes = block_device_bytes
        self._sem = asyncio.Semaphore(max_concurrent) if max_concurrent else None

    async def start(self) -> None:
        if self.confined:
            confine.check()

    async def setup(self, session_id: str) -> None:
        return None

    async def cleanup(self, session_id: str) -> None:
        return None

    async def close(self) -> None:
        return None

    async def run(self, request: GateRequest) -> GateResult:
        if self._sem is None:
            return await self._run(request)
        async with self._sem:
            return await self._run(request)

    async def _run(self, req: GateRequest) -> GateResult:
        tmp = Path(tempfile.mkdtemp(prefix=f"adev-gate-{_safe(req.session_id)}-",
                                    dir=self.tmp_root))
        cgroup: confine.Cgroup | None = None
        try:
            work = tmp / "ws"
            await asyncio.to_thread(_copy_tree, Path(req.workspace), work)
            for rel, data in req.overlay.items():
                p = PurePosixPath(rel)
                if p.is_absolute() or ".." in p.parts:
                    return GateResult(verdict="error", error=f"overlay path {rel!r} is not "
                                      "relative to the workspace")
                dest = work / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                if dest.is_symlink():
                    dest.unlink()
                dest.write_bytes(data)
            out_dir = tmp / "out"
            out_dir.mkdir()
            junit = out_dir / "junit.xml"
            inner = (confine.WS, confine.OUT) if self.confined else (str(work), str(out_dir))
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": inner[1],
                   "LANG": "C.UTF-8", "PYTHONPATH": inner[0], "PYTHONDONTWRITEBYTECODE": "1",
                   "PYTHONHASHSEED": "0", "TMPDIR": "/tmp" if self.confined else str(tmp)}
            if req.needs_nvme:
                with open(out_dir / "block.img", "wb") as fh:
                    fh.truncate(self.block_device_bytes)
                env["ADEV_BLOCK_DEVICE"] = f"{inner[1]}/block.img"
            paths = [p for p in req.test_paths if (work / p).exists()]
            if not paths:
                return GateResult(verdict="error", error="no test files: "
                                  + ", ".join(req.test_paths) + " not found in the workspace")
            argv = [self.python, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "-o", "addopts=", "--rootdir", inner[0], f"--junitxml={inner[1]}/junit.xml",
                    *paths]
            preexec = None
            if self.confined:
                await asyncio.to_thread(confine.chown_tree, tmp, self.limits)
                argv = confine.bwrap_argv(argv, work=work, out=out_dir, limits=self.limits,
                                          env=env, python=self.python)
                cgroup = await asyncio.to_thread(confine.Cgroup, self.limits,
                                                 _safe(req.session_id)[:16])
                lim = self.limits
                preexec = lambda: confine.child_setup(cgroup, lim)  # noqa: E731
            t0 = time.monotonic()
            proc = await asyncio.create_subprocess_exec(
                *argv, cwd=work, env=env, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                start_new_session=True, preexec_fn=preexec)
            tail = bytearray()
            timed_out = False

            stdout = proc.stdout
            assert stdout is not None

            async def pump() -> None:
                while True:
                    chunk = await stdout.read(65536)
                    if not chunk:
                        break
                    tail.extend(chunk)
                    if len(tail) > req.max_output_bytes:
                        del tail[:len(tail) - req.max_output_bytes]
            try:
                both = asyncio.gather(pump(), proc.wait())
                # on timeout/cancel wait_for cancels it: mark its CancelledError as seen
                both.add_done_callback(lambda f: f.cancelled() or f.exception())
                await asyncio.wait_for(both, req.timeout_s)
            except asyncio.TimeoutError:
                timed_out = True
            except asyncio.CancelledError:
                _kill_group(proc.pid)
                await proc.wait()
                raise
            if timed_out:
                _kill_group(proc.pid)
                await proc.wait()
            real = time.monotonic() - t0
            out = tail.decode("utf-8", "replace")
            tests = parse_junit(_read_capped(junit))
            err = f"timed out after {req.timeout_s:g} s (process group killed)" if timed_out \
                else None
            if cgroup is not None and err is None and cgroup.oom_kills():
                err = (f"out of memory: the sandbox's limit is {self.limits.memory_bytes} bytes "
                       "and the kernel killed a test process")
            return summarise(tests, proc.returncode, out, real, error=err)
        finally:
            if cgroup is not None:
                await asyncio.to_thread(cgroup.kill_all)
                await asyncio.to_thread(cgroup.remove)
            await asyncio.to_thread(shutil.rmtree, tmp, True)


def _read_capped(path: Path, limit: int = 16 << 20) -> bytes:
    """The JUnit XML the tests wrote, never through a symlink they planted, at most ``limit``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return b""
    with os.fdopen(fd, "rb") as f:
        return f.read(limit) if stat.S_ISREG(os.fstat(fd).st_mode) else b""


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _safe(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in s)[:40]


def _copy_tree(src: Path, dst: Path) -> None:
    """Copy regular files and folders only (symlinks, hard-linked files and special files are
    skipped)."""
    dst.mkdir(parents=True, exist_ok=True)
    if not src.is_dir():
        return
    for dirpath, dirnames, filenames in os.walk(src, followlinks=False):
        rel = Path(dirpath).relative_to(src)
        dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS
                       and not os.path.islink(os.path.join(dirpath, d))]
        (dst / rel).mkdir(parents=True, exist_ok=True)
        for f in filenames:
            sp = Path(dirpath) / f
            st = os.lstat(sp)
            if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:  # a hard link may name a file
                shutil.copyfile(sp, dst / rel / f, follow_symlinks=False)  # outside: skipped
