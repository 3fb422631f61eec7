"""The gate guest image: build it from ``vm/build-image.sh`` once, cache it outside the repository.

The cache lives in ``$ADEV_VM_CACHE`` or ``~/.cache/adev/vm/<recipe-hash>/`` where the hash covers
the recipe files (``RECIPE_FILES``), so the image is rebuilt only when the recipe changes. The
directory holds ``base.qcow2``, ``vmlinuz``, ``initrd.img``, the client key pair ``id_ed25519``
(0600, root's authorized key in the guest) and the guest's SSH host key (generated here, baked into
the image, its public half pinned in ``known_hosts``). Private keys never leave this directory.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ..config import ROOT

RECIPE_FILES = ("vm/build-image.sh",)
IMAGE_FILES = ("base.qcow2", "vmlinuz", "initrd.img")


class ImageError(RuntimeError):
    pass


def recipe_hash(root: Path = ROOT) -> str:
    """sha256 over the recipe files' names and contents (first 16 hex digits)."""
    h = hashlib.sha256()
    for rel in RECIPE_FILES:
        h.update(rel.encode() + b"\0" + (root / rel).read_bytes() + b"\0")
    return h.hexdigest()[:16]


def cache_root() -> Path:
    env = os.environ.get("ADEV_VM_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "adev" / "vm"


@dataclass(frozen=True)
class Image:
    """A built image: paths to its files and the SSH material to reach it."""

    dir: Path
    recipe_hash: str

    @property
    def base(self) -> Path:
        return self.dir / "base.qcow2"

    @property
    def kernel(self) -> Path:
        return self.dir / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.dir / "initrd.img"

    @property
    def client_key(self) -> Path:
        return self.dir / "id_ed25519"

    @property
    def host_key_pub(self) -> Path:
        return self.dir / "ssh_host_ed25519_key.pub"

    @property
    def meta(self) -> dict:
        return json.loads((self.dir / "meta.json").read_text())

    def known_hosts(self, host: str, port: int) -> bytes:
        """A known_hosts line pinning the guest's host key for ``[host]:port``."""
        key = self.host_key_pub.read_text().split()
        return f"[{host}]:{port} {key[0]} {key[1]}\n".encode()

    def ready(self) -> bool:
        return all((self.dir / f).is_file() for f in IMAGE_FILES + ("meta.json",))


def _keygen(path: Path, comment: str) -> None:
    if path.exists():
        return
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, stdin=subprocess.DEVNULL)
    path.chmod(0o600)


def image_for(root: Path = ROOT) -> Image:
    h = recipe_hash(root)
    return Image(dir=cache_root() / h, recipe_hash=h)


def ensure_image(rebuild: bool = False, log=print, root: Path = ROOT) -> Image:
    """Return the cached image for the current recipe, building it first when absent."""
    img = image_for(root)
    if img.ready() and not rebuild:
        return img
    if os.geteuid() != 0:
        raise ImageError("building the gate image needs root (mmdebstrap root mode, mkfs -d)")
    for tool in ("mmdebstrap", "mkfs.ext4", "qemu-img", "ssh-keygen"):
        if shutil.which(tool) is None:
            raise ImageError(f"{tool} not found: run scripts/bootstrap.sh")
    img.dir.mkdir(parents=True, exist_ok=True)
    img.dir.chmod(0o700)
    for f in IMAGE_FILES + ("meta.json",):
        (img.dir / f).unlink(missing_ok=True)
    _keygen(img.client_key, "adev-gate-client")
    _keygen(img.dir / "ssh_host_ed25519_key", "adev-gate-host")
    log(f"[vm] building guest image {img.recipe_hash} in {img.dir} (mmdebstrap, ~1.5 min)")
    t0 = time.monotonic()
    logf = img.dir / "build.log"
    with open(logf, "wb") as out:
        proc = subprocess.run(
            ["bash", str(root / "vm/build-image.sh"), str(img.dir), str(img.client_key) + ".pub",
             str(img.dir / "ssh_host_ed25519_key")],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        tail = logf.read_text(errors="replace")[-2000:]
        raise ImageError(f"image build failed (exit {proc.returncode}); {logf}:\n{tail}")
    build_s = time.monotonic() - t0
    base_bytes = img.base.stat().st_size
    meta = {"recipe_hash": img.recipe_hash, "build_s": round(build_s, 1),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "base_bytes": base_bytes,
            "host_key": img.host_key_pub.read_text().strip()}
    (img.dir / "meta.json").write_text(json.dumps(meta, indent=1))
    log(f"[vm] image built in {build_s:.0f} s ({base_bytes / 1e6:.0f} MB)")
    return img
