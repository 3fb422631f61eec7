"""Keep every listener the embedded stack starts on ``stack.host`` (loopback by default).

Mooncake's store client (``mooncake-transfer-engine-non-cuda``) binds three listeners per
process to the wildcard address, whatever ``MC_TCP_BIND_ADDRESS`` or the ``local_hostname`` given
to ``setup()`` say: the P2P handshake (``SocketHandShakePlugin``), the TCP transport's data port
and, with the disk tier, the offload RPC server (``coro_rpc_server(..., "0.0.0.0")``). Mooncake
offers no option for them (docs/security.md). The stack therefore starts its endpoints and its
master with ``LD_PRELOAD`` = the small shim ``native/bind_loopback.c``, which replaces a
wildcard address in ``bind()`` with ``ADEV_BIND_ADDRESS`` = ``stack.host`` (an IPv6 wildcard
becomes the IPv4-mapped form, so dual-stack listeners still take their peers' IPv4
connections). The real client runs unchanged; nothing sits on the request path.

The shim is compiled on first use with the C compiler (``cc``/``gcc``; scripts/bootstrap.sh
installs gcc) into ``.adev/native/`` under a name that carries the source's hash.
"""
from __future__ import annotations

import hashlib
import ipaddress
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from ..config import ROOT
from .procs import StackError

SOURCE = Path(__file__).parent / "native" / "bind_loopback.c"
BUILD_DIR = ROOT / ".adev" / "native"


def numeric_host(host: str) -> str:
    """``host`` as an IP literal (a name such as ``localhost`` is resolved)."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    try:
        return str(socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)[0][4][0])
    except OSError as e:
        raise StackError(f"stack.host: cannot resolve {host!r} ({e})") from None


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(numeric_host(host)).is_loopback
    except (StackError, ValueError):
        return False


def host_warning(host: str) -> str | None:
    """The warning to print when ``stack.host`` lets other machines reach the stack."""
    if is_loopback(host):
        return None
    return (f"warning: stack.host is {host!r}, not a loopback address: the endpoints, the "
            "Mooncake master and the store clients listen there and are reachable from other "
            "machines (the store's data port accepts raw buffer addresses from whoever connects)")


def shim_path() -> Path:
    """The compiled shim, built now if this source has not been built yet."""
    src = SOURCE.read_bytes()
    out = BUILD_DIR / f"bind_loopback-{hashlib.sha256(src).hexdigest()[:12]}.so"
    if out.is_file():
        return out
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise StackError("no C compiler (cc/gcc) to build the stack's bind shim "
                         f"({SOURCE.name}); install gcc (scripts/bootstrap.sh does)")
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=BUILD_DIR, suffix=".so.tmp")
    os.close(fd)
    try:
        r = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", tmp, str(SOURCE), "-ldl"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise StackError(f"building {SOURCE.name} failed: {r.stderr.strip()[-400:]}")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def bind_env(host: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment entries that keep a process's wildcard listeners on ``host``
    (none when ``host`` is itself a wildcard: the stack file asked for every address)."""
    addr = numeric_host(host)
    if ipaddress.ip_address(addr).is_unspecified:
        return {}
    pre = (base if base is not None else os.environ).get("LD_PRELOAD", "")
    shim = str(shim_path())
    return {"ADEV_BIND_ADDRESS": addr, "LD_PRELOAD": f"{shim} {pre}".strip()}


def warn_host(host: str) -> None:
    msg = host_warning(host)
    if msg:
        print(msg, file=sys.stderr, flush=True)
