"""Image cache keying and the ``adev vm`` verbs that need no VM."""
from __future__ import annotations

import json

import pytest

from adev.cli import main
from adev.gate import image as imagemod
from adev.gate.image import ensure_image, image_for, recipe_hash


@pytest.fixture
def fake_root(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    (root / "vm").mkdir(parents=True)
    (root / "vm/build-image.sh").write_text("echo recipe v1\n")
    monkeypatch.setenv("ADEV_VM_CACHE", str(tmp_path / "cache"))
    return root


def test_recipe_hash_tracks_the_recipe(fake_root):
    h1 = recipe_hash(fake_root)
    assert h1 == recipe_hash(fake_root)
    (fake_root / "vm/build-image.sh").write_text("echo recipe v2\n")
    assert recipe_hash(fake_root) != h1
    assert image_for(fake_root).dir.parent == fake_root.parent / "cache"


def test_cached_image_is_reused_without_building(fake_root, monkeypatch):
    img = image_for(fake_root)
    img.dir.mkdir(parents=True)
    for f in ("base.qcow2", "vmlinuz", "initrd.img"):
        (img.dir / f).write_bytes(b"x")
    (img.dir / "meta.json").write_text(json.dumps({"recipe_hash": img.recipe_hash}))
    (img.dir / "ssh_host_ed25519_key.pub").write_text("ssh-ed25519 AAAAKEY adev-gate-host\n")

    def boom(*a, **k):
        raise AssertionError("must not build")
    monkeypatch.setattr(imagemod.subprocess, "run", boom)
    got = ensure_image(root=fake_root)
    assert got.dir == img.dir and got.ready()
    assert got.known_hosts("127.0.0.1", 2222) == b"[127.0.0.1]:2222 ssh-ed25519 AAAAKEY\n"


def test_incomplete_cache_means_build(fake_root, monkeypatch):
    calls = []

    def fake_run(argv, **kw):
        calls.append(argv[0])
        raise RuntimeError("stop here")
    monkeypatch.setattr(imagemod.subprocess, "run", fake_run)
    monkeypatch.setattr(imagemod.os, "geteuid", lambda: 0)
    monkeypatch.setattr(imagemod.shutil, "which", lambda t: "/bin/" + t)
    with pytest.raises(RuntimeError, match="stop here"):
        ensure_image(root=fake_root)
    assert calls == ["ssh-keygen"]  # keys first, then the recipe
    assert oct(image_for(fake_root).dir.stat().st_mode & 0o777) == "0o700"


def test_vm_status_and_down_without_a_vm(fake_root, monkeypatch, capsys):
    monkeypatch.setattr(imagemod, "ROOT", fake_root)
    assert main(["vm", "status"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["up"] is None and out["image"]["ready"] is False  # empty cache
    assert main(["vm", "down"]) == 0
    assert "no VM is up" in capsys.readouterr().out
    assert main(["vm", "ssh", "true"]) == 1
