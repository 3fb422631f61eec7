"""The ssh executor against an in-process asyncssh server (real SSH, generated keys, pinned host key)."""
from __future__ import annotations

import asyncio
import io
import os
import tarfile
from pathlib import Path

import asyncssh
import pytest

from adev.gate.base import GateRequest
from adev.gate.ssh import (GateInputError, GateTransportError, SshGate, SshGateOptions,
                           build_upload, compose_result, parse_markers, session_dirname,
                           session_user)

from .sshserver import FakeGuest

PASSING = "def test_ok():\n    assert 1 + 1 == 2\n"
FAILING = "def test_bad():\n    assert 1 + 1 == 3, 'arith'\n"


@pytest.fixture
async def guest(tmp_path):
    (tmp_path / "guest").mkdir()
    g = await FakeGuest(tmp_path / "guest").start()
    yield g
    await g.stop()


def make_ws(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


async def test_pass_fail_and_overlay(guest, tmp_path):
    ws = make_ws(tmp_path / "ws", {"mod.py": "X = 2\n", "tests/test_a.py": "from mod import X\n" + PASSING})
    async with SshGate(guest.target()) as gate:
        await gate.setup("s1")
        res = await gate.run(GateRequest(session_id="s1", workspace=ws, timeout_s=60))
        assert res.verdict == "pass", res
        assert res.passed == 1 and res.tests[0].nodeid.endswith("test_ok")
        assert res.real_duration_s > 0
        # hidden acceptance test arrives as an overlay file, not from the workspace
        res = await gate.run(GateRequest(session_id="s1", workspace=ws, suite="acceptance",
                                         test_paths=["acc"], overlay={"acc/test_h.py": FAILING.encode()}))
        assert res.verdict == "fail" and res.failed == 1
        assert "arith" in res.failing_text()
        await gate.cleanup("s1")
    assert not (guest.workdir / "root" / "s" / "s1").exists()


async def test_sessions_run_concurrently_in_separate_dirs(guest, tmp_path):
    spaces = {}
    for i in range(3):
        body = PASSING if i != 1 else FAILING
        # each session's test checks it only sees its own files
        check = f"import os\ndef test_own():\n    assert sorted(os.listdir('.')) == ['mine{i}.txt', 'tests']\n"
        spaces[f"c{i}"] = make_ws(tmp_path / f"ws{i}", {f"mine{i}.txt": "x", "tests/test_x.py": body + check})
    async with SshGate(guest.target()) as gate:
        results = await asyncio.gather(*(gate.run(GateRequest(session_id=s, workspace=w))
                                         for s, w in spaces.items()))
    assert [r.verdict for r in results] == ["pass", "fail", "pass"], results
    assert all(r.passed + r.failed == 2 for r in results)


async def test_timeout_kills_and_records_fail(guest, tmp_path):
    ws = make_ws(tmp_path / "ws", {"tests/test_loop.py": "def test_spin():\n    while True: pass\n"})
    async with SshGate(guest.target()) as gate:
        res = await gate.run(GateRequest(session_id="t", workspace=ws, timeout_s=2))
    assert res.verdict == "fail"
    assert "timeout" in res.error and "killed" in res.error
    assert res.real_duration_s < 30


async def test_output_is_capped(guest, tmp_path):
    ws = make_ws(tmp_path / "ws", {"tests/test_out.py":
                                   "def test_print(capsys):\n    with capsys.disabled():\n"
                                   "        print('y' * 2_000_000)\n    assert False\n"})
    async with SshGate(guest.target()) as gate:
        res = await gate.run(GateRequest(session_id="o", workspace=ws, max_output_bytes=4096))
    assert res.verdict == "fail"
    assert len(res.output_tail.encode()) <= 4096


async def test_ssh_drop_mid_gate_retries_once_then_passes(guest, tmp_path):
    ws = make_ws(tmp_path / "ws", {"tests/test_a.py": PASSING})
    guest.drop_runs = 1
    async with SshGate(guest.target()) as gate:
        await gate.setup("d")
        res = await gate.run(GateRequest(session_id="d", workspace=ws))
        assert res.verdict == "pass", res
        assert gate.stats["reconnects"] == 1


async def test_ssh_drop_twice_records_gate_error(guest, tmp_path):
    ws = make_ws(tmp_path / "ws", {"tests/test_a.py": PASSING})
    guest.drop_runs = 2
    async with SshGate(guest.target()) as gate:
        res = await gate.run(GateRequest(session_id="d2", workspace=ws))
        assert res.verdict == "error"
        assert "connection lost" in res.error and "2 attempts" in res.error
        # the gate is usable again afterwards
        res = await gate.run(GateRequest(session_id="d2", workspace=ws))
        assert res.verdict == "pass"


async def test_drop_during_concurrent_gates_reconnects_once(guest, tmp_path):
    spaces = {f"k{i}": make_ws(tmp_path / f"k{i}", {"tests/test_a.py": PASSING}) for i in range(3)}
    guest.drop_runs = 1
    async with SshGate(guest.target()) as gate:
        results = await asyncio.gather(*(gate.run(GateRequest(session_id=s, workspace=w))
                                         for s, w in spaces.items()))
        assert [r.verdict for r in results] == ["pass"] * 3, results
        assert gate.stats["reconnects"] == 1


async def test_dead_guest_after_drop_is_recovered_and_recorded(guest, tmp_path):
    ws = make_ws(tmp_path / "ws", {"tests/test_a.py": PASSING})
    guest.drop_runs, guest.die_on_drop = 1, True

    async def recover():  # what VmGate does: restore the VM; here: restart the server
        await guest.stop()
        guest.die_on_drop = False
        await guest.start()
        return guest.target()

    async with SshGate(guest.target(), recover=recover) as gate:
        res = await gate.run(GateRequest(session_id="dead", workspace=ws))
        assert res.verdict == "error"
        assert "reconnect failed" in res.error and "restored" in res.error, res.error
        assert gate.stats["recoveries"] == 1
        res = await gate.run(GateRequest(session_id="dead", workspace=ws))
        assert res.verdict == "pass", res


async def test_hung_guest_detected_and_recovered(guest, tmp_path):
    ws = make_ws(tmp_path / "ws", {"tests/test_a.py": PASSING})
    guest.hang_runs = 1
    calls = []

    async def recover():
        calls.append(1)
        return guest.target()

    async with SshGate(guest.target(), SshGateOptions(timeout_margin_s=1.0), recover=recover) as gate:
        res = await gate.run(GateRequest(session_id="h", workspace=ws, timeout_s=1))
        assert res.verdict == "error" and "unresponsive" in res.error and "restored" in res.error
        assert calls == [1]
        res = await gate.run(GateRequest(session_id="h", workspace=ws, timeout_s=30))
        assert res.verdict == "pass"


async def test_host_key_is_pinned(guest):
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().split()
    wrong = f"[127.0.0.1]:{guest.port} {other[0]} {other[1]}\n".encode()
    with pytest.raises(GateTransportError, match="connect|host key"):
        await SshGate(guest.target(known_hosts=wrong)).start()
    with pytest.raises(GateTransportError):
        await SshGate(guest.target(known_hosts=b"")).start()


async def test_bad_paths_are_gate_errors(guest, tmp_path):
    ws = make_ws(tmp_path / "ws", {"tests/test_a.py": PASSING})
    async with SshGate(guest.target()) as gate:
        for kw in ({"test_paths": ["../etc"]}, {"test_paths": ["--co"]},
                   {"overlay": {"/etc/x.py": b""}}, {"workspace": tmp_path / "missing"}):
            args = {"session_id": "b", "workspace": ws} | kw
            res = await gate.run(GateRequest(**args))
            assert res.verdict == "error" and res.error, kw


def test_upload_skips_symlinks_and_caches(tmp_path):
    ws = make_ws(tmp_path / "ws", {"a.py": "1", ".git/config": "x", "pkg/__pycache__/m.pyc": "x"})
    secret = tmp_path / "secret"
    secret.write_text("host secret")
    (ws / "leak").symlink_to(secret)
    (ws / "dirleak").symlink_to(tmp_path)
    os.link(secret, ws / "hardleak")
    data = build_upload(ws, {"acc/t.py": b"2", "a.py": b"override"}, 10_000)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        names = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    assert names == {"a.py": b"override", "acc/t.py": b"2"}
    with pytest.raises(GateInputError, match="upload limit"):
        build_upload(ws, {"big": b"x" * 20_000}, 10_000)


def test_session_names_are_safe():
    assert session_dirname("fleet-3.s07") == "fleet-3.s07"
    odd = session_dirname("../../etc; rm -rf /")
    assert "/" not in odd and ";" not in odd and " " not in odd and not odd.startswith(".")
    assert session_user("a") != session_user("b") and len(session_user("a")) <= 32


def test_compose_result_containment_notes():
    req = GateRequest(session_id="x", workspace=Path("."), timeout_s=10)
    m = parse_markers("noise\nADEV_RC=137\nADEV_DURATION_S=15.2\nADEV_PIDS_LIMIT_HITS=40\n")
    res = compose_result(req, m, None, "out", 16.0)
    assert res.verdict == "fail" and "timeout" in res.error
    assert "process limit reached 40 times" in res.output_tail
    res = compose_result(req, {"RC": "153", "DURATION_S": "1"}, None, "", 1.0)
    assert res.verdict == "fail" and "SIGXFSZ" in res.error
    res = compose_result(req, {"RC": "4", "DURATION_S": "1"}, None, "", 1.0)
    assert res.verdict == "error"  # no results, no containment event: summarise's gate error
