"""The local gate executor: pytest in a subprocess on this host.

**Trusted/dev use only.** It runs agent-written (model-written) code on the host with the user's
privileges; the only isolation is a throw-away copy of the workspace, a scrubbed environment, a
process group that is killed on timeout, and a cap on captured output. Use the VM gate
(``--gate vm``) for anything you would not run yourself; it is the isolated executor.

Per run: the session's workspace is copied to a temporary folder (regular files only, symlinks
skipped), ``GateRequest.overlay`` files (hidden acceptance tests) are written into the copy, and
``python -m pytest -q -p no:cacheprovider --junitxml=...`` runs there with the copy on
``PYTHONPATH``. Block-device tasks get ``ADEV_BLOCK_DEVICE`` = a sparse file of
``block_device_bytes`` in the temp folder. Per-test results come from the JUnit XML
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

from .base import GateRequest, GateResult, parse_junit, summarise

_SKIP_DIRS = {"__pycache__", ".pytest_cache", ".git"}


class LocalGate:
    """Gate executor running pytest as a local subprocess (see the module docstring)."""

    name = "local"

    def __init__(self, python: str | None = None, tmp_root: str | Path | None = None,
                 block_device_bytes: int = 1 << 30, max_concurrent: int | None = None):
        self.python = python or sys.executable
        self.tmp_root = str(tmp_root) if tmp_root else None
        self.block_device_bytes = block_device_bytes
        self._sem = asyncio.Semaphore(max_concurrent) if max_concurrent else None

    async def start(self) -> None:
        return None

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
            junit = tmp / "junit.xml"
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp),
                   "LANG": "C.UTF-8", "PYTHONPATH": str(work), "PYTHONDONTWRITEBYTECODE": "1",
                   "PYTHONHASHSEED": "0", "TMPDIR": str(tmp)}
            if req.needs_nvme:
                dev = tmp / "block.img"
                with open(dev, "wb") as fh:
                    fh.truncate(self.block_device_bytes)
                env["ADEV_BLOCK_DEVICE"] = str(dev)
            paths = [p for p in req.test_paths if (work / p).exists()]
            if not paths:
                return GateResult(verdict="error", error="no test files: "
                                  + ", ".join(req.test_paths) + " not found in the workspace")
            argv = [self.python, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "-o", "addopts=", "--rootdir", str(work), f"--junitxml={junit}", *paths]
            t0 = time.monotonic()
            proc = await asyncio.create_subprocess_exec(
                *argv, cwd=work, env=env, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                start_new_session=True)
            tail = bytearray()
            timed_out = False

            async def pump() -> None:
                while True:
                    chunk = await proc.stdout.read(65536)
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
            tests = parse_junit(junit.read_bytes()) if junit.exists() else []
            err = f"timed out after {req.timeout_s:g} s (process group killed)" if timed_out \
                else None
            return summarise(tests, proc.returncode, out, real, error=err)
        finally:
            await asyncio.to_thread(shutil.rmtree, tmp, True)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _safe(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in s)[:40]


def _copy_tree(src: Path, dst: Path) -> None:
    """Copy regular files and folders only (symlinks and special files are skipped)."""
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
            if stat.S_ISREG(st.st_mode):
                shutil.copyfile(sp, dst / rel / f, follow_symlinks=False)
