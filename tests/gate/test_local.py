"""The local gate executor: verdicts from JUnit XML, overlay, block device, timeout, limits."""
from __future__ import annotations

import os
import time
import uuid

import pytest

from adev.gate.base import Gate, GateRequest
from adev.gate.local import LocalGate


def _ws(tmp_path, files: dict[str, str]):
    ws = tmp_path / "ws"
    for rel, text in files.items():
        p = ws / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return ws


MOD = "def add(a, b):\n    return a + b\n"
GOOD = "from pkg.mod import add\n\ndef test_add():\n    assert add(1, 2) == 3\n"
BAD = "from pkg.mod import add\n\ndef test_add_wrong():\n    assert add(1, 2) == 4, 'want 4'\n"


async def test_pass_and_fail_parsed(tmp_path):
    g = LocalGate()
    assert isinstance(g, Gate)
    ws = _ws(tmp_path, {"pkg/mod.py": MOD, "tests/test_a.py": GOOD, "tests/test_b.py": BAD})
    res = await g.run(GateRequest("s1", ws, test_paths=["tests"]))
    assert res.verdict == "fail" and (res.passed, res.failed) == (1, 1)
    failing = [t for t in res.tests if t.outcome == "failed"]
    assert failing[0].nodeid.endswith("test_add_wrong") and "want 4" in failing[0].message
    assert "want 4" in res.failing_text()
    (ws / "tests/test_b.py").unlink()
    res = await g.run(GateRequest("s1", ws, test_paths=["tests"]))
    assert res.verdict == "pass" and res.passed == 1 and res.exit_code == 0
    assert not (ws / "junit.xml").exists() and not (ws / ".pytest_cache").exists()


async def test_overlay_hidden_tests_not_in_workspace(tmp_path):
    ws = _ws(tmp_path, {"pkg/mod.py": MOD, "tests/test_a.py": GOOD})
    res = await LocalGate().run(GateRequest(
        "s1", ws, suite="acceptance", test_paths=["acceptance"],
        overlay={"acceptance/test_hidden.py": BAD.encode()}))
    assert res.verdict == "fail" and res.failed == 1 and res.passed == 0
    assert not (ws / "acceptance").exists()


async def test_block_device_and_scrubbed_env(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    test = ("import os\n\ndef test_dev():\n    p = os.environ['ADEV_BLOCK_DEVICE']\n"
            "    assert os.path.getsize(p) == 1 << 24\n    assert 'OPENAI_API_KEY' not in "
            "os.environ\n    with open(p, 'r+b') as f:\n        f.seek(4096)\n"
            "        f.write(b'x' * 4096)\n")
    ws = _ws(tmp_path, {"tests/test_dev.py": test})
    g = LocalGate(block_device_bytes=1 << 24)
    res = await g.run(GateRequest("s1", ws, needs_nvme=True))
    assert res.verdict == "pass", res.output_tail
    res = await g.run(GateRequest("s1", ws, needs_nvme=False))
    assert res.verdict == "fail"  # no device without needs_nvme


def procs_with(token: str) -> list[int]:
    """Live (not zombie) processes whose command line holds ``token``."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as fh:
                if token.encode() not in fh.read():
                    continue
            with open(f"/proc/{d}/stat") as fh:
                if fh.read().split(")")[-1].split()[0] != "Z":
                    out.append(int(d))
        except (FileNotFoundError, ProcessLookupError):
            pass
    return out


@pytest.mark.parametrize("confined", [True, False])
async def test_timeout_kills_process_group(tmp_path, confined):
    token = f"adev-probe-{uuid.uuid4().hex}"
    test = ("import subprocess, time\n\ndef test_hang():\n"
            f"    subprocess.Popen(['/bin/sh', '-c', 'sleep 60; :', {token!r}])\n"
            "    time.sleep(60)\n")
    ws = _ws(tmp_path, {"tests/test_hang.py": test})
    t0 = time.monotonic()
    res = await LocalGate(confined=confined).run(GateRequest("s1", ws, timeout_s=12))
    assert time.monotonic() - t0 < 40
    assert res.verdict == "error" and "timed out" in res.error
    for _ in range(50):  # the grandchild died with its group
        if not procs_with(token):
            break
        time.sleep(0.1)
    else:
        pytest.fail("grandchild survived the timeout")


async def test_output_limit_and_no_tests(tmp_path):
    test = "def test_noise():\n    print('y' * 200000)\n    assert False\n"
    ws = _ws(tmp_path, {"tests/test_noise.py": test})
    res = await LocalGate().run(GateRequest("s1", ws, max_output_bytes=4096))
    assert res.verdict == "fail" and len(res.output_tail.encode()) <= 4096
    empty = _ws(tmp_path / "e", {"README.md": "x"})
    res = await LocalGate().run(GateRequest("s1", empty))
    assert res.verdict == "error" and "no test files" in res.error


async def test_symlinks_and_hard_links_not_copied(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    test = ("import os\n\ndef test_link():\n    assert not os.path.exists('tests/leak.txt')\n")
    ws = _ws(tmp_path, {"tests/test_link.py": test})
    os.symlink(secret, ws / "tests" / "leak.txt")
    res = await LocalGate().run(GateRequest("s1", ws))
    assert res.verdict == "pass", res.output_tail
    (ws / "tests" / "leak.txt").unlink()
    os.link(secret, ws / "tests" / "leak.txt")  # a hard link is not copied either
    res = await LocalGate().run(GateRequest("s1", ws))
    assert res.verdict == "pass", res.output_tail


async def test_bad_overlay_path(tmp_path):
    ws = _ws(tmp_path, {"tests/test_a.py": "def test_a():\n    pass\n"})
    res = await LocalGate().run(GateRequest("s1", ws, overlay={"../evil.py": b"x"}))
    assert res.verdict == "error" and "overlay" in res.error
    assert not (tmp_path / "evil.py").exists()
