"""The default gate contains a hostile probe: escape writes, network, fork bomb, memory hog,
oversized files and setsid survivors. Each probe is a pytest file run by ``make_gate("local")``;
the host then checks that nothing got out."""
from __future__ import annotations

import os
import socket
import time
import uuid
from pathlib import Path

from adev.config import ROOT
from adev.gate import confine
from adev.gate.base import GateRequest
from adev.gate.registry import make_gate

from .test_local import _ws, procs_with


def _gate(**limits):
    g = make_gate("local")
    if limits:
        g.limits = confine.Limits(**limits)
    return g


async def test_escape_network_user_fsize_and_setsid_contained(tmp_path):
    token = f"adev-probe-{uuid.uuid4().hex}"
    outside = [tmp_path / "escaped.txt", ROOT / f"escaped-{token}.txt"]
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.setblocking(False)
    port = srv.getsockname()[1]
    unix_path = Path("/run") / f"{token}.sock"
    usrv = socket.socket(socket.AF_UNIX)
    usrv.bind(str(unix_path))
    os.chmod(unix_path, 0o777)
    usrv.listen(1)
    usrv.setblocking(False)
    probe = f"""import os, socket, subprocess, pytest

def test_not_root():
    assert os.getuid() != 0 and os.geteuid() != 0 and os.getgroups() == []

@pytest.mark.parametrize("path", {[str(p) for p in outside] + ["/etc/adev-escape"]!r})
def test_escape_write_refused(path):
    with pytest.raises(OSError):
        with open(path, "w") as f:
            f.write("escaped")

def test_workspace_writable():
    with open("written-inside.txt", "w") as f:
        f.write("ok")

def test_no_network():
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", {port}), timeout=2)

def test_no_host_unix_socket():
    s = socket.socket(socket.AF_UNIX)
    with pytest.raises(OSError):
        s.connect({str(unix_path)!r})

def test_file_size_limit():
    with pytest.raises(OSError):
        with open("big.bin", "wb") as f:
            f.write(b"x" * (2 << 20))

def test_setsid_survivor_started():
    subprocess.Popen(["/bin/sh", "-c", "sleep 300; :", {token!r}], start_new_session=True)
    if os.fork() == 0:  # double-forked daemon
        os.setsid()
        os.execv("/bin/sh", ["/bin/sh", "-c", "sleep 300; :", {token!r}])
"""
    ws = _ws(tmp_path, {"tests/test_probe.py": probe})
    res = await _gate(file_bytes=1 << 20).run(GateRequest("s1", ws, timeout_s=60))
    srv_conn = None
    try:
        srv_conn = srv.accept()
    except BlockingIOError:
        pass
    srv.close()
    try:
        srv_conn = srv_conn or usrv.accept()
    except BlockingIOError:
        pass
    usrv.close()
    unix_path.unlink()
    assert res.verdict == "pass", res.output_tail
    assert res.passed == 9
    assert srv_conn is None
    for p in outside:
        assert not p.exists()
    assert not (ws / "written-inside.txt").exists()  # the gate wrote only its copy
    assert procs_with(token) == []  # gone when the gate returned, not later


async def test_fork_bomb_contained(tmp_path):
    token = f"adev-probe-{uuid.uuid4().hex}"
    probe = f"""import subprocess

def test_bomb():
    n = 0
    try:
        while n < 5000:
            subprocess.Popen(["/bin/sh", "-c", "sleep 300; :", {token!r}])
            n += 1
    except OSError:
        pass
    print("SPAWNED", n)
    assert n < 5000
"""
    ws = _ws(tmp_path, {"tests/test_bomb.py": probe})
    t0 = time.monotonic()
    res = await _gate(pids_max=64).run(GateRequest("s1", ws, timeout_s=60))
    assert res.verdict == "pass", res.output_tail
    assert time.monotonic() - t0 < 60
    assert procs_with(token) == []


async def test_memory_hog_contained(tmp_path):
    probe = """def test_hog():
    hog = b"\\x01" * (512 << 20)
    print("ALLOCATED", len(hog))
"""
    ws = _ws(tmp_path, {"tests/test_hog.py": probe})
    res = await _gate(memory_bytes=128 << 20).run(GateRequest("s1", ws, timeout_s=60))
    assert res.verdict == "error" and "out of memory" in res.error, (res.error, res.output_tail)
    assert "ALLOCATED" not in res.output_tail


async def test_unconfined_runs_as_this_user(tmp_path):
    """The development mode really is unconfined (so the probes above are not vacuous)."""
    outside = tmp_path / f"escaped-{uuid.uuid4().hex}.txt"
    probe = f"def test_escape():\n    open({str(outside)!r}, 'w').write('x')\n"
    ws = _ws(tmp_path, {"tests/test_esc.py": probe})
    res = await make_gate("local-unconfined").run(GateRequest("s1", ws))
    assert res.verdict == "pass" and outside.exists()


def test_a_python_installed_under_tmp_is_bound_into_the_private_tmp(monkeypatch, tmp_path):
    """A checkout (and its .venv) under /tmp must stay visible through the sandbox's private
    /tmp: its prefix is bound read-only after the tmpfs, with a traversable way down to it."""
    import sys as _sys

    from adev.gate.confine import Limits, bwrap_argv
    venv = (tmp_path / "clone" / ".venv").resolve()
    (venv / "bin").mkdir(parents=True)
    assert Path("/tmp") in venv.parents
    monkeypatch.setattr(_sys, "prefix", str(venv))
    argv = bwrap_argv(["python", "-V"], work=Path("/w"), out=Path("/o"), limits=Limits(),
                      env={}, python=str(venv / "bin" / "python"))
    tmpfs = argv.index("/tmp", argv.index("--size"))
    bind = len(argv) - 1 - argv[::-1].index(str(venv)) - 1   # the last bind of it
    assert tmpfs < bind and argv[bind - 1] == "--ro-bind" and argv[bind + 1] == str(venv)
    assert argv[bind - 1] == "--ro-bind" or argv[bind] == "--ro-bind"
    way = [i for i, a in enumerate(argv) if a == str(venv.parent)]
    assert any(argv[i - 1] == "--dir" and tmpfs < i < bind for i in way)  # the way down
    assert bind < argv.index("/tmp/ws")                         # before the workspace bind
