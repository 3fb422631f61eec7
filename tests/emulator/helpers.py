"""Start a real mooncake_master and emulator processes on free ports (for tests and the bench).

The command lines, flags and environments are the stack's own (``adev.stack.lifecycle``:
:func:`master_flags`, :func:`endpoint_command`, :func:`endpoint_env`), so these processes are
the ones ``adev stack up`` runs; only their lifetimes are the tests' (a master killed and
restarted on the same ports, a lease given in real milliseconds)."""
from __future__ import annotations

import dataclasses
import json
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

from adev.config import DISK_CONFIGS, ROOT, StackConfig, from_dict
from adev.stack.lifecycle import endpoint_command, endpoint_env, master_flags
from adev.stack.procs import find_master_binary


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def write_profile(folder: Path, **over) -> str:
    """A model profile TOML (defaults: the real Qwen3 profile) with overrides; returns its path."""
    base = (ROOT / "stacks/profiles/models/qwen3-coder-30b-a3b.toml").read_text()
    lines = [ln for ln in base.splitlines() if ln.split("=")[0].strip() not in over]
    for k, v in over.items():
        lines.append(f"{k} = {json.dumps(v)}")
    p = folder / "profile.toml"
    p.write_text("\n".join(lines) + "\n")
    return str(p)


class Master:
    """``configuration`` picks the disk-tier flags as the stack does (default: store-ram+disk
    with ``offload``, store-ram without)."""

    def __init__(self, lease_ms: int, offload: bool, workdir: Path,
                 configuration: str | None = None, store: dict | None = None) -> None:
        self.rpc = free_port()
        self.http = free_port()
        self.lease_ms = lease_ms
        self.configuration = configuration or ("store-ram+disk" if offload else "store-ram")
        self.workdir = workdir
        self.store = store or {}    # [stack.store] settings the master's flags follow
        self.proc: subprocess.Popen | None = None

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.rpc}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.http}/metrics"

    def start(self) -> Master:
        cfg = from_dict(StackConfig, {"configuration": self.configuration, "store": self.store},
                        "stack")
        cmd = [str(find_master_binary()), *master_flags(
            cfg, rpc_port=self.rpc, metrics_port=self.http, host="127.0.0.1", lease_ms=self.lease_ms)]
        log = open(self.workdir / f"master-{self.rpc}.log", "ab")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                httpx.get(self.metrics_url, timeout=0.5)
                return self
            except httpx.HTTPError:
                time.sleep(0.05)
        raise RuntimeError("mooncake_master did not come up")

    def metrics(self) -> dict[str, float]:
        from adev.client.scrape import scrape_sync
        return scrape_sync(self.metrics_url)

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Emulator:
    def __init__(self, stack: StackConfig, name: str, master: Master | None, workdir: Path) -> None:
        self.stack = stack
        self.name = name
        self.master = master
        self.port = free_port()
        self.workdir = workdir
        self.proc: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> Emulator:
        cfg = self.workdir / f"stack-{self.name}.json"
        cfg.write_text(json.dumps(dataclasses.asdict(self.stack)))
        disk = None
        if self.master is not None and self.stack.configuration in DISK_CONFIGS:
            disk = self.workdir / f"disk-{self.name}"
            disk.mkdir(exist_ok=True)
        cmd = endpoint_command("adev.emulator.server", cfg, self.name, self.port,
                               self.master.addr if self.master is not None else None, disk)
        if self.master is not None:
            cmd += ["--master-http", f"127.0.0.1:{self.master.http}"]
        env = dict(endpoint_env(self.stack, disk), GLOG_minloglevel="2", ADEV_EMULATOR_LOG="WARNING")
        log = open(self.workdir / f"emulator-{self.name}.log", "ab")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(ROOT))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log = (self.workdir / f"emulator-{self.name}.log").read_text()
                raise RuntimeError(f"emulator exited: {log[-3000:]}")
            try:
                if httpx.get(self.root + "/health", timeout=0.5).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("emulator did not become healthy")

    def metrics(self) -> dict[str, float]:
        from adev.client.scrape import scrape_sync
        return scrape_sync(self.root + "/metrics")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def make_stack(profile: str, configuration: str = "store-ram", time_scale: float = 10.0, ram_gb: float = 32.0,
               payload_scale: int = 64, endpoints=("coder",), lease_ttl_s: float = 5.0, seed: int = 0,
               placement: str = "local", chunk_blocks: int = 1) -> StackConfig:
    """A one-endpoint stack; ``chunk_blocks`` 1 (one store object per block) unless given, so
    the store tests' expected figures are per block."""
    return from_dict(StackConfig, {
        "time_scale": time_scale, "profile": profile, "configuration": configuration,
        "payload_scale": payload_scale, "policy": "length", "seed": seed,
        "endpoints": [{"name": n} for n in endpoints],
        "store": {"ram_gb": ram_gb, "lease_ttl_s": lease_ttl_s, "placement": placement,
                  "chunk_blocks": chunk_blocks}}, "stack")


def tmpdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="adev-emu-"))


def prompt_messages(n_tokens: int, tag: str = "a") -> list[dict]:
    """User messages of about ``n_tokens`` tokens (1 token per 4-letter word here)."""
    def word(i: int) -> str:
        s = ""
        for _ in range(4):
            s += chr(97 + i % 26)
            i //= 26
        return tag[0] + s
    words = " ".join(word(i) for i in range(n_tokens))
    return [{"role": "user", "content": words}]
