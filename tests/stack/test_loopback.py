"""Every listener the embedded stack starts is on loopback: the bind shim, the host warning, and
the kernel's socket table of a real stack (master + emulated endpoints with Mooncake clients)."""
from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import sys

import httpx
import psutil
import pytest

from adev.stack.loopback import bind_env, host_warning, is_loopback
from tests.emulator.helpers import prompt_messages


def listeners(pid: int) -> list[tuple[str, int]]:
    """(address, port) of each TCP socket of ``pid`` in LISTEN state, read from the kernel's
    socket table (/proc/<pid>/net/tcp{,6}: the process's own network namespace) and matched to
    the process's open sockets by inode."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = []
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            next(f)
            for line in f:
                cols = line.split()
                local, state, inode = cols[1], cols[3], cols[9]
                if state != "0A" or inode not in inodes:  # 0A = TCP_LISTEN
                    continue
                hexaddr, hexport = local.split(":")
                raw = bytes.fromhex(hexaddr)
                # the kernel prints each 32-bit word in host (little-endian) order
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                out.append((str(ipaddress.ip_address(raw)), int(hexport, 16)))
    return out


def loopback(addr: str) -> bool:
    ip = ipaddress.ip_address(addr)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def test_listeners_parser_sees_wildcard_and_loopback():
    a, b = socket.socket(), socket.socket(socket.AF_INET6)
    a.bind(("0.0.0.0", 0))
    b.bind(("::1", 0))
    a.listen()
    b.listen()
    try:
        got = set(listeners(os.getpid()))
        assert ("0.0.0.0", a.getsockname()[1]) in got and ("::1", b.getsockname()[1]) in got
        assert not loopback("0.0.0.0") and not loopback("::") and loopback("::ffff:127.0.0.1")
    finally:
        a.close()
        b.close()


def test_shim_moves_wildcard_binds_to_the_stack_host():
    code = ("import socket\n"
            "a = socket.socket(); a.bind(('0.0.0.0', 0)); a.listen()\n"
            "b = socket.socket(socket.AF_INET6); b.bind(('::', 0)); b.listen()\n"
            "c = socket.create_connection(('127.0.0.1', b.getsockname()[1]))\n"
            "print(a.getsockname()[0], b.getsockname()[0])\n")
    env = {**os.environ, **bind_env("127.0.0.1")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["127.0.0.1", "::ffff:127.0.0.1"]
    plain = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True).stdout.split()
    assert plain == ["0.0.0.0", "::"]  # what Mooncake's clients bind without it


def test_host_warning():
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        assert is_loopback(host) and host_warning(host) is None
    for host in ("0.0.0.0", "::", "192.0.2.7"):
        assert "not a loopback address" in host_warning(host)
    assert bind_env("0.0.0.0") == {}  # the stack file asked for every address


@pytest.mark.integration
def test_nothing_the_stack_started_listens_beyond_loopback(embedded_stack):
    info = embedded_stack(configuration="store-ram+disk")
    model = info.model
    # traffic through the store: a prompt put by the coder is read by the reasoner from the
    # coder's segment over Mooncake's TCP transport (the listeners the shim moved)
    msgs = prompt_messages(3000, "p")
    for name in ("coder", "reasoner"):
        r = httpx.post(info.endpoints[name] + "/chat/completions", timeout=120,
                       json={"model": model, "messages": msgs, "max_tokens": 2})
        assert r.status_code == 200, r.text
    tokens = r.json()["adev"]["tokens"]
    assert tokens["store_ram"] > 0, tokens
    seen: dict[str, list[tuple[str, int]]] = {}
    for name, pid in info.pids.items():
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
        seen[name] = [x for p in procs for x in listeners(p.pid)]
    beyond = {n: [x for x in ls if not loopback(x[0])] for n, ls in seen.items()}
    assert beyond == {n: [] for n in seen}, seen
    # not vacuous: each endpoint's HTTP server and its store client's three listeners
    # (P2P handshake, TCP transport, offload RPC), the master's RPC and metrics
    assert all(len(seen[e.name]) >= 4 for e in info.config.endpoints), seen
    assert len(seen["master"]) >= 2, seen


def test_start_warns_when_host_is_not_loopback(monkeypatch, capsys, tmp_path):
    import adev.stack.lifecycle as lifecycle
    from adev.stack import small_config

    def stop_here(*a, **k):
        raise RuntimeError("not starting anything in a unit test")
    monkeypatch.setattr(lifecycle, "_start", stop_here)
    for host, warned in (("192.0.2.7", True), ("127.0.0.1", False)):
        with pytest.raises(RuntimeError):
            lifecycle.start_stack(small_config(tmp_path / host, host=host))
        assert ("not a loopback address" in capsys.readouterr().err) is warned
