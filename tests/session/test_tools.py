"""Workspace tools: confinement and untrusted arguments are answered as tool errors."""
from __future__ import annotations

import json
import os

import pytest

from adev.session.tools import SCHEMAS, Workspace, schemas


@pytest.fixture
def ws(tmp_path):
    return Workspace(tmp_path / "ws", max_file_bytes=1000, max_list_entries=5)


def j(**kw) -> str:
    return json.dumps(kw)


def test_write_read_list_finish(ws):
    out = ws.call("write_file", j(path="pkg/mod.py", content="x = 1\n"))
    assert out.ok and "6 bytes" in out.text
    assert ws.call("read_file", j(path="./pkg/mod.py")).text == "x = 1\n"
    out = ws.call("list_files", j())
    assert out.ok and "pkg/mod.py\t6" in out.text
    assert ws.call("list_files", "").ok  # empty arguments = defaults
    out = ws.call("finish", j(summary="done"))
    assert out.ok and out.finished and out.summary == "done"


@pytest.mark.parametrize("path", ["/etc/passwd", "../x", "a/../../x", "a/../b", "..", "",
                                  "a\x00b", "a\\b", "."])
def test_paths_outside_refused(ws, path):
    out = ws.call("write_file", j(path=path, content="x"))
    assert not out.ok and out.text.startswith("error: ") and out.error
    out = ws.call("read_file", j(path=path))
    assert not out.ok


def test_symlinks_refused(ws, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("s")
    os.symlink(outside, ws.root / "link")
    os.symlink(outside / "secret", ws.root / "file")
    for path in ("link/secret", "file", "link/new.py"):
        assert "symlink" in ws.call("read_file", j(path=path)).text
        assert not ws.call("write_file", j(path=path, content="pwned")).ok
    assert (outside / "secret").read_text() == "s" and not (outside / "new.py").exists()
    assert not ws.call("list_files", j(path="link")).ok
    assert "link" not in ws.call("list_files", j()).text


def test_oversized(ws):
    out = ws.call("write_file", j(path="big.txt", content="x" * 1001))
    assert not out.ok and "limit" in out.error
    (ws.root / "huge.txt").write_text("y" * 5000)
    out = ws.call("read_file", j(path="huge.txt"))
    assert not out.ok and "5000 bytes" in out.error


def test_malformed_and_unknown(ws):
    out = ws.call("write_file", '{"path": "a.py", "content": ')
    assert not out.ok and "not valid JSON" in out.error
    assert "JSON object" in ws.call("read_file", "[1, 2]").error
    assert "missing argument 'content'" in ws.call("write_file", j(path="a.py")).error
    assert "must be a str" in ws.call("write_file", j(path=3, content="x")).error or \
        "must be a string" in ws.call("write_file", j(path=3, content="x")).error
    assert "unknown tool 'rm_rf'" in ws.call("rm_rf", j()).error
    assert "not available to this role" in ws.call("write_file", j(path="a", content="x"),
                                                    allowed=["read_file", "finish"]).error
    assert "no such file" in ws.call("read_file", j(path="nope.py")).error
    ws.call("write_file", j(path="d/x.py", content="x"))
    assert "not a regular file" in ws.call("read_file", j(path="d")).error
    assert "not a folder" in ws.call("list_files", j(path="d/x.py")).error
    assert not ws.call("finish", j(summary=5)).ok


def test_listing_capped(ws):
    for i in range(8):
        ws.call("write_file", j(path=f"f{i}.txt", content="x"))
    out = ws.call("list_files", j())
    assert out.ok and "truncated at 5" in out.text


def test_schemas():
    assert [s["function"]["name"] for s in schemas(["read_file", "finish"])] == \
        ["read_file", "finish"]
    for s in SCHEMAS.values():
        assert s["type"] == "function" and s["function"]["parameters"]["type"] == "object"


def test_hard_link_target_outside_never_written_or_read(ws, tmp_path):
    """A hard link made by gate code: write_file replaces the name (the outside file keeps its
    bytes), read_file refuses to read through it."""
    outside = tmp_path / "outside.txt"
    outside.write_text("original")
    os.link(outside, ws.root / "linked.txt")
    out = ws.call("read_file", j(path="linked.txt"))
    assert not out.ok and "hard link" in out.error
    out = ws.call("write_file", j(path="linked.txt", content="pwned"))
    assert out.ok
    assert outside.read_text() == "original" and os.stat(outside).st_nlink == 1
    assert (ws.root / "linked.txt").read_text() == "pwned"
    assert ws.call("read_file", j(path="linked.txt")).text == "pwned"
    assert sorted(os.listdir(ws.root)) == ["linked.txt"]  # no temp file left behind


def test_total_size_capped(tmp_path):
    w = Workspace(tmp_path / "w", max_file_bytes=1000, max_total_bytes=2500)
    for i in range(2):
        assert w.call("write_file", j(path=f"f{i}.txt", content="x" * 1000)).ok
    out = w.call("write_file", j(path="f2.txt", content="x" * 600))
    assert not out.ok and "workspace full" in out.error and "2600 bytes" in out.error \
        and "2500" in out.error
    assert not (w.root / "f2.txt").exists()
    assert w.call("write_file", j(path="f2.txt", content="x" * 500)).ok  # exactly 2500
    assert w.call("write_file", j(path="f0.txt", content="")).ok  # shrinking always fits
    assert w.call("write_file", j(path="f2.txt", content="x" * 1000)).ok  # 0+1000+1000
    assert w.total_bytes() == 2000
