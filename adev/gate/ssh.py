"""The ssh gate executor: runs a session's pytest on a remote host (the gate VM) over asyncssh.

One SSH connection (pinned host key, key auth) serves many sessions concurrently, each in its own
directory ``<remote_root>/s/<session>/``. Per gate run: the workspace (plus overlay files such as
hidden acceptance tests) goes up as one tar over SFTP; the guest script ``vm/guest/adev-gate.sh``
extracts it and runs pytest under the guest's ``timeout -k`` (with ``isolate`` as a per-session
unprivileged user in its own cgroup); JUnit XML and the capped output come back over SFTP.
With ``needs_nvme`` the session gets a fresh NVMe block device (``vm/guest/adev-nvme.sh``) for the
run, exported as ``ADEV_BLOCK_DEVICE`` and torn down afterwards.

Faults: an SSH drop mid-gate reconnects and retries the run once, then records a gate error; no
answer within ``timeout_s + margin`` means an unresponsive guest: the ``recover`` hook (the VM
executor restores the VM) runs and the gate records an error.
"""
from __future__ import annotations

import asyncio
import hashlib
import io
import logging
import os
import re
import shlex
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Awaitable, Callable

from ..config import ROOT
from .base import GateRequest, GateResult, parse_junit, parse_markers, summarise
from .nvme import NvmeError, create_device, remove_device

log = logging.getLogger("adev.gate.ssh")

GUEST_SCRIPTS = ("vm/guest/adev-gate.sh", "vm/guest/adev-nvme.sh")
SKIP_DIRS = {".git", "__pycache__", ".pytest_cache", ".venv", "venv", "node_modules", ".mypy_cache"}
_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class GateTransportError(RuntimeError):
    """The SSH connection failed or dropped."""


class GuestUnresponsive(RuntimeError):
    """The remote side did not answer within its deadline."""


class GateInputError(ValueError):
    """The request cannot be run as given (bad path, workspace too large)."""


@dataclass
class SshTarget:
    """Where and how to reach the gate host. ``known_hosts`` pins its host key (no TOFU)."""

    host: str
    port: int
    client_key: Path
    known_hosts: bytes
    username: str = "root"
    remote_root: str = "/srv/adev"
    isolate: bool = True  # per-session user + cgroup; only inside the gate guest
    connect_timeout_s: float = 15.0


@dataclass
class SshGateOptions:
    timeout_margin_s: float = 60.0  # client waits timeout_s + this before calling the guest hung
    op_timeout_s: float = 60.0  # any other remote operation (setup, upload, fetch, NVMe)
    nvme_size_mb: int = 256
    max_upload_bytes: int = 64 * 1024 * 1024
    max_junit_bytes: int = 8 * 1024 * 1024
    retries_on_drop: int = 1
    # per-session containment in the guest (isolate mode): processes, memory (cgroup), file size
    pids_max: int = 64
    mem_max: str = "768M"
    fsize_kb: int = 256 * 1024


def session_dirname(session_id: str) -> str:
    """The session's remote directory name: the id itself when safe, else a sanitised form + hash."""
    if _SAFE_ID.fullmatch(session_id):
        return session_id
    clean = re.sub(r"[^A-Za-z0-9_.-]", "_", session_id)[:40].lstrip(".-_") or "s"
    return f"{clean}-{hashlib.sha1(session_id.encode()).hexdigest()[:10]}"


def session_user(session_id: str) -> str:
    """The guest user a session's tests run as (unique per session, valid for useradd)."""
    return "ag" + hashlib.sha1(session_id.encode()).hexdigest()[:12]


def _check_relpath(rel: str, what: str) -> str:
    p = PurePosixPath(rel)
    if not rel or p.is_absolute() or ".." in p.parts or rel.startswith("-"):
        raise GateInputError(f"{what}: {rel!r} must be a relative path inside the workspace")
    return str(p)


def build_upload(workspace: Path, overlay: dict[str, bytes], max_bytes: int) -> bytes:
    """The workspace (regular files only; symlinks, hard-linked files and caches skipped) plus
    overlay files, as tar."""
    overlay = {_check_relpath(k, "overlay"): v for k, v in overlay.items()}
    buf, total = io.BytesIO(), 0
    with tarfile.open(fileobj=buf, mode="w") as tar:
        if workspace.is_dir():
            for dirpath, dirnames, filenames in os.walk(workspace, followlinks=False):
                dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS
                                     and not os.path.islink(os.path.join(dirpath, d)))
                for name in sorted(filenames):
                    path = Path(dirpath, name)
                    rel = path.relative_to(workspace).as_posix()
                    if rel in overlay or path.is_symlink() or not path.is_file() \
                            or path.stat().st_nlink > 1:  # a hard link may name a file outside
                        continue
                    total += path.stat().st_size
                    if total > max_bytes:
                        raise GateInputError(f"workspace exceeds the upload limit of {max_bytes} bytes")
                    info = tarfile.TarInfo(rel)
                    info.size, info.mode, info.mtime = path.stat().st_size, 0o644, int(time.time())
                    with open(path, "rb") as f:
                        tar.addfile(info, f)
        elif not workspace.exists():
            raise GateInputError(f"workspace {workspace} does not exist")
        for rel, data in sorted(overlay.items()):
            total += len(data)
            if total > max_bytes:
                raise GateInputError(f"workspace exceeds the upload limit of {max_bytes} bytes")
            info = tarfile.TarInfo(rel)
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def compose_result(req: GateRequest, markers: dict[str, str], junit: bytes | None, output: str,
                   real_duration_s: float) -> GateResult:
    """Verdict from the guest's markers, JUnit XML and output.

    Tests that outlive ``timeout_s`` are killed and the verdict is ``fail`` (the code under test
    hung, not the gate). Containment events (fork limit hits, OOM kills, a file over the size
    limit) are noted at the head of ``output_tail``; a run they stopped before any result is
    ``fail`` too. ``error`` verdicts are left to the gate's own faults.
    """
    if "UPLOAD_ERROR" in markers:
        return GateResult(verdict="error", error=f"workspace extraction failed: {markers['UPLOAD_ERROR']}",
                          real_duration_s=real_duration_s)
    rc = int(markers["RC"]) if markers.get("RC", "").lstrip("-").isdigit() else None
    guest_s = float(markers.get("DURATION_S") or 0.0)
    notes = []
    timed_out = rc in (124, 137) and guest_s >= req.timeout_s * 0.95
    if timed_out:
        notes.append(f"tests ran past the gate timeout ({req.timeout_s:g} s) and were killed")
    if int(markers.get("PIDS_LIMIT_HITS") or 0) > 0:
        notes.append(f"process limit reached {markers['PIDS_LIMIT_HITS']} times (fork refused)")
    if int(markers.get("OOM_KILLS") or 0) > 0:
        notes.append(f"{markers['OOM_KILLS']} processes killed for exceeding the memory limit")
    if rc is not None and rc > 128 and rc - 128 == 25:
        notes.append("a file exceeded the size limit (SIGXFSZ)")
    if int(markers.get("LEFTOVER_PROCS") or 0) > 0:
        notes.append(f"{markers['LEFTOVER_PROCS']} leftover processes killed after the run")
    tests = parse_junit(junit) if junit else []
    head = "".join(f"[gate] {n}\n" for n in notes)
    tail = (head + output)[-req.max_output_bytes:] if head else output
    if timed_out:
        res = summarise(tests, rc, tail, real_duration_s)
        res.verdict, res.error = "fail", notes[0]
        return res
    res = summarise(tests, rc, tail, real_duration_s)
    if not tests and notes:
        res.verdict, res.error = "fail", "; ".join(notes)
    return res


class SshGate:
    """Gate executor over SSH; see the module docstring. Use as ``async with SshGate(...)``."""

    name = "ssh"

    def __init__(self, target: SshTarget, options: SshGateOptions | None = None,
                 recover: Callable[[], Awaitable[SshTarget]] | None = None):
        self.target = target
        self.opt = options or SshGateOptions()
        self.recover = recover  # called when the guest is unresponsive; returns the new target
        self._conn = None
        self._sftp = None
        self._sessions: set[str] = set()
        self._lock = asyncio.Lock()
        self._generation = 0  # bumps on each (re)connect
        self.stats: dict[str, float | int] = {"reconnects": 0, "recoveries": 0}

    # -- lifecycle -------------------------------------------------------------------------
    async def __aenter__(self) -> "SshGate":
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def start(self) -> None:
        await self._connect()

    async def setup(self, session_id: str) -> None:
        await self._setup_remote(session_id)
        self._sessions.add(session_id)

    async def cleanup(self, session_id: str) -> None:
        self._sessions.discard(session_id)
        try:
            await self._script("adev-gate.sh", "cleanup", session_id)
        except (GateTransportError, GuestUnresponsive) as e:
            log.warning("cleanup of %s failed: %s", session_id, e)

    async def close(self) -> None:
        conn, self._conn, self._sftp = self._conn, None, None
        if conn is not None:
            conn.close()
            try:
                await asyncio.wait_for(conn.wait_closed(), 5)
            except (asyncio.TimeoutError, OSError):
                pass

    async def run(self, request: GateRequest) -> GateResult:
        """One gate run; never raises for remote faults (they become ``error`` results)."""
        t0 = time.monotonic()
        attempts = 1 + self.opt.retries_on_drop
        last = ""
        for attempt in range(attempts):
            gen = self._generation
            try:
                return await self._run_once(request)
            except GateInputError as e:
                return GateResult(verdict="error", error=str(e), real_duration_s=time.monotonic() - t0)
            except GuestUnresponsive as e:
                err = f"guest unresponsive: {e}"
                if self.recover is not None:
                    try:
                        await self._recover(gen)
                        err += "; VM restored from its clean snapshot"
                    except Exception as re_:  # noqa: BLE001 - recorded, not raised
                        err += f"; restore failed: {re_}"
                return GateResult(verdict="error", error=err, real_duration_s=time.monotonic() - t0)
            except GateTransportError as e:
                last = str(e)
                log.warning("gate %s round %s: ssh dropped (%s); attempt %d/%d", request.session_id,
                            request.round, e, attempt + 1, attempts)
                if attempt + 1 < attempts:
                    try:
                        await self._reconnect(gen)
                    except (GateTransportError, GuestUnresponsive) as e2:
                        last = f"{e}; reconnect failed: {e2}"
                        if self.recover is not None:  # the guest is gone or hung: restore it
                            try:
                                await self._recover(gen)
                                last += "; VM restored from its clean snapshot"
                            except Exception as e3:  # noqa: BLE001 - recorded, not raised
                                last += f"; restore failed: {e3}"
                        break
        return GateResult(verdict="error", real_duration_s=time.monotonic() - t0,
                          error=f"ssh connection lost during the gate (after {attempts} attempts): {last}")

    # -- internals ------------------------------------------------------------------------
    async def _connect(self) -> None:
        import asyncssh
        t = self.target
        try:
            self._conn = await asyncio.wait_for(asyncssh.connect(
                t.host, t.port, username=t.username, client_keys=[str(t.client_key)],
                known_hosts=asyncssh.import_known_hosts(t.known_hosts.decode()),
                agent_path=None, config=None, connect_timeout=t.connect_timeout_s,
                keepalive_interval=10, keepalive_count_max=3), t.connect_timeout_s + 5)
            self._sftp = await asyncio.wait_for(self._conn.start_sftp_client(), self.opt.op_timeout_s)
            await self._upload_scripts()
        except asyncssh.HostKeyNotVerifiable as e:
            raise GateTransportError(f"host key of {t.host}:{t.port} does not match the pinned key: {e}")
        except (asyncio.TimeoutError, OSError, asyncssh.Error) as e:
            raise GateTransportError(f"connect to {t.host}:{t.port} failed: {e!r}") from e
        self._generation += 1

    async def _reconnect(self, gen: int) -> None:
        async with self._lock:
            if gen != self._generation and self._conn is not None:
                return  # another run already reconnected
            self.stats["reconnects"] += 1
            await self.close()
            await self._connect()
            await asyncio.gather(*(self._setup_remote(sid) for sid in sorted(self._sessions)))

    async def _recover(self, gen: int) -> None:
        async with self._lock:
            if gen != self._generation and self._conn is not None:
                return  # another run already recovered the guest
            self.stats["recoveries"] += 1
            await self.close()
            self.target = await self.recover()
            await self._connect()
            await asyncio.gather(*(self._setup_remote(sid) for sid in sorted(self._sessions)))

    async def _upload_scripts(self) -> None:
        root = self.target.remote_root
        await self._sftp.makedirs(f"{root}/bin", exist_ok=True)
        for rel in GUEST_SCRIPTS:
            data = (ROOT / rel).read_bytes()
            async with self._sftp.open(f"{root}/bin/{Path(rel).name}", "wb") as f:
                await f.write(data)

    async def _setup_remote(self, session_id: str) -> None:
        out = await self._script("adev-gate.sh", "setup", session_id)
        if parse_markers(out).get("SETUP") != "ok":
            raise GateTransportError(f"session setup failed on the guest: {out[-300:]}")

    def _args(self, session_id: str) -> list[str]:
        t = self.target
        return [t.remote_root, session_dirname(session_id), session_user(session_id),
                "1" if t.isolate else "0"]

    async def _exec(self, cmd: str, timeout_s: float) -> str:
        """Run one remote command; transport faults -> GateTransportError, silence -> GuestUnresponsive."""
        import asyncssh
        conn = self._conn
        if conn is None:
            raise GateTransportError("not connected")
        try:
            res = await asyncio.wait_for(conn.run(cmd, check=False), timeout_s)
        except asyncio.TimeoutError as e:  # includes asyncssh.TimeoutError
            what = " ".join(w for w in cmd.split()[4:6])
            raise GuestUnresponsive(f"no answer within {timeout_s:g} s to {what!r}") from e
        except (OSError, asyncssh.Error) as e:
            raise GateTransportError(repr(e)) from e
        if res.exit_status is None and res.exit_signal is None:
            raise GateTransportError("channel closed without an exit status")
        if res.exit_status not in (0, None) and not str(res.stdout).strip():
            raise GateTransportError(f"remote command failed ({res.exit_status}): {str(res.stderr)[-300:]}")
        return str(res.stdout)

    async def _script(self, script: str, cmd: str, session_id: str, *extra: str,
                      timeout_s: float | None = None) -> str:
        args = [f"{self.target.remote_root}/bin/{script}", cmd]
        if script == "adev-nvme.sh":
            args += [self.target.remote_root, session_dirname(session_id)]
        else:
            args += self._args(session_id)
        env = (f"ADEV_PIDS_MAX={int(self.opt.pids_max)} ADEV_MEM_MAX={shlex.quote(self.opt.mem_max)} "
               f"ADEV_FSIZE_KB={int(self.opt.fsize_kb)} ")
        line = env + "bash " + " ".join(shlex.quote(a) for a in args + list(extra))
        return await self._exec(line, timeout_s or self.opt.op_timeout_s)

    async def _sftp_op(self, coro):
        import asyncssh
        try:
            return await asyncio.wait_for(coro, self.opt.op_timeout_s)
        except asyncio.TimeoutError as e:
            raise GuestUnresponsive(f"SFTP silent for {self.opt.op_timeout_s:g} s") from e
        except (OSError, asyncssh.Error) as e:
            if isinstance(e, asyncssh.SFTPNoSuchFile):
                raise
            raise GateTransportError(f"SFTP: {e!r}") from e

    async def _put(self, path: str, data: bytes) -> None:
        async def go():
            async with self._sftp.open(path, "wb") as f:
                await f.write(data)
        await self._sftp_op(go())

    async def _get(self, path: str, limit: int) -> bytes | None:
        import asyncssh

        async def go():
            st = await self._sftp.lstat(path)
            if not st.type == asyncssh.FILEXFER_TYPE_REGULAR:
                return None
            async with self._sftp.open(path, "rb") as f:
                if (st.size or 0) > limit:
                    await f.seek(st.size - limit)
                return await f.read(limit)
        try:
            return await self._sftp_op(go())
        except asyncssh.SFTPNoSuchFile:
            return None

    async def _run_once(self, req: GateRequest) -> GateResult:
        t0 = time.monotonic()
        if self._sftp is None:
            raise GateTransportError("not connected")
        paths = [_check_relpath(p, "test path") for p in req.test_paths] or ["tests"]
        tar = await asyncio.to_thread(build_upload, Path(req.workspace), dict(req.overlay),
                                      self.opt.max_upload_bytes)
        sid = req.session_id
        if sid not in self._sessions:
            await self.setup(sid)
        d = f"{self.target.remote_root}/s/{session_dirname(sid)}"
        await self._put(f"{d}/upload.tar", tar)
        device = "-"
        if req.needs_nvme:
            try:
                device = await create_device(self._script, sid, session_user(sid), self.opt.nvme_size_mb)
            except NvmeError as e:
                return GateResult(verdict="error", real_duration_s=time.monotonic() - t0,
                                  error=f"NVMe device setup failed: {e}")
        try:
            out = await self._script(
                "adev-gate.sh", "run", sid, f"{req.timeout_s:g}", str(int(req.max_output_bytes)),
                device, *paths, timeout_s=req.timeout_s + self.opt.timeout_margin_s)
            markers = parse_markers(out)
            if "RC" not in markers and "UPLOAD_ERROR" not in markers:
                raise GateTransportError(f"gate script ended without a result: {out[-300:]}")
            junit = await self._get(f"{d}/out/junit.xml", self.opt.max_junit_bytes)
            output = await self._get(f"{d}/out/output.txt", req.max_output_bytes) or b""
        finally:
            if req.needs_nvme and self._conn is not None:
                try:
                    await remove_device(self._script, sid)
                except (GateTransportError, GuestUnresponsive, NvmeError) as e:
                    log.warning("NVMe teardown for %s failed: %s", sid, e)
        return compose_result(req, markers, junit, output.decode("utf-8", "replace"),
                              time.monotonic() - t0)
