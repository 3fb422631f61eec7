"""An in-process asyncssh server on 127.0.0.1 for the ssh executor's unit tests.

Real SSH protocol: generated ed25519 host and client keys, the host key pinned in known_hosts,
key-only auth, SFTP, and exec requests run as local bash subprocesses in a temp directory. Fault
switches: ``drop_runs`` aborts the connection during the next N gate runs (after they started),
``hang_runs`` makes the next N gate runs never answer (a hung guest).
"""
from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh

from adev.gate.ssh import SshTarget


@dataclass
class FakeGuest:
    workdir: Path
    port: int = 0
    drop_runs: int = 0
    hang_runs: int = 0
    die_on_drop: bool = False  # a drop also stops the server: reconnects fail (a dead guest)
    commands: list[str] = field(default_factory=list)
    server: asyncssh.SSHAcceptor | None = None
    host_key: asyncssh.SSHKey | None = None
    client_key_path: Path | None = None
    connections: list = field(default_factory=list)

    def target(self, known_hosts: bytes | None = None) -> SshTarget:
        pub = self.host_key.export_public_key().decode().split()
        kh = known_hosts if known_hosts is not None else f"[127.0.0.1]:{self.port} {pub[0]} {pub[1]}\n".encode()
        return SshTarget(host="127.0.0.1", port=self.port, client_key=self.client_key_path,
                         known_hosts=kh, username="gate", remote_root=str(self.workdir / "root"),
                         isolate=False, connect_timeout_s=5)

    async def _handle(self, process: asyncssh.SSHServerProcess) -> None:
        cmd = process.command or ""
        self.commands.append(cmd)
        is_run = " run " in cmd and "adev-gate.sh" in cmd
        if is_run and self.hang_runs > 0:
            self.hang_runs -= 1
            await asyncio.sleep(3600)
        env = dict(os.environ, ADEV_GATE_PYTHON=sys.executable)
        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", cmd, cwd=self.workdir, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        if is_run and self.drop_runs > 0:
            self.drop_runs -= 1
            await asyncio.sleep(0.3)  # mid-gate: the tests are running
            if self.die_on_drop:
                self.server.close()
            process.channel.get_connection().abort()
            proc.kill()
            await proc.wait()
            return
        out, err = await proc.communicate()
        process.stdout.write(out.decode(errors="replace"))
        process.stderr.write(err.decode(errors="replace"))
        process.exit(proc.returncode if proc.returncode >= 0 else 255)

    async def start(self) -> FakeGuest:
        """Start (or, after ``stop``, restart on a new port with the same keys: a restored guest)."""
        self.client_key_path = self.workdir / "id_ed25519"
        if self.host_key is None:
            self.host_key = asyncssh.generate_private_key("ssh-ed25519")
            client = asyncssh.generate_private_key("ssh-ed25519")
            client.write_private_key(str(self.client_key_path))
            self.client_key_path.chmod(0o600)
        client = asyncssh.read_private_key(str(self.client_key_path))
        authorized = asyncssh.import_authorized_keys(client.export_public_key().decode())
        (self.workdir / "root").mkdir(exist_ok=True)

        guest = self

        class Server(asyncssh.SSHServer):
            def connection_made(self, conn):
                guest.connections.append(conn)

            def begin_auth(self, username):
                return True

        self.server = await asyncssh.create_server(
            Server, "127.0.0.1", 0, server_host_keys=[self.host_key],
            authorized_client_keys=authorized, process_factory=self._handle,
            sftp_factory=True, allow_scp=False)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
        for c in self.connections:
            c.abort()
