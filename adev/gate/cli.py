"""``adev vm build | up | down | status | ssh``: the gate VM by hand.

``up`` leaves a VM running (restored from the clean snapshot when there is one) and records it in
``<cache>/up.json``; ``VmGate`` reuses that VM instead of starting its own, and ``down`` destroys
and undefines it. ``ssh`` opens a shell (or runs a command) in it with the pinned host key.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from typing import Any


def register(subparsers) -> None:
    p = subparsers.add_parser("vm", help="the gate VM: build the image, bring it up/down, ssh in")
    sub = p.add_subparsers(dest="vm_cmd", metavar="CMD", required=True)
    b = sub.add_parser("build", help="build the guest image (cached; rebuilt when the recipe changes)")
    b.add_argument("--rebuild", action="store_true", help="rebuild even if the cache has it")
    b.set_defaults(func=cmd_build)
    u = sub.add_parser("up", help="start the gate VM and leave it running")
    u.add_argument("--memory-mib", type=int, default=2048)
    u.add_argument("--vcpus", type=int, default=2)
    u.add_argument("--no-snapshot", action="store_true", help="cold boot; do not use or save the snapshot")
    u.set_defaults(func=cmd_up)
    d = sub.add_parser("down", help="destroy and undefine the VM started by `up`")
    d.set_defaults(func=cmd_down)
    s = sub.add_parser("status", help="image, snapshot and running VM")
    s.set_defaults(func=cmd_status)
    h = sub.add_parser("ssh", help="ssh into the running VM (pinned host key)")
    h.add_argument("command", nargs=argparse.REMAINDER, help="command to run (default: a shell)")
    h.set_defaults(func=cmd_ssh)


def cmd_build(args) -> int:
    from .image import ImageError, ensure_image
    try:
        img = ensure_image(rebuild=args.rebuild)
    except ImageError as e:
        print(f"adev vm build: {e}", file=sys.stderr)
        return 1
    print(json.dumps({"dir": str(img.dir), **img.meta}, indent=1))
    return 0


def cmd_up(args) -> int:
    from .vm import VmConfig, read_up, start_detached
    if read_up() is not None:
        print("adev vm up: a VM is already up (see `adev vm status`; `adev vm down` first)", file=sys.stderr)
        return 1
    cfg = VmConfig(memory_mib=args.memory_mib, vcpus=args.vcpus, use_snapshot=not args.no_snapshot)
    info = asyncio.run(start_detached(cfg))
    print(json.dumps(info, indent=1))
    return 0


def cmd_down(args) -> int:
    from .vm import stop_detached
    info = stop_detached()
    if info is None:
        print("adev vm down: no VM is up")
        return 0
    print(f"destroyed {info['name']}")
    return 0


def cmd_status(args) -> int:
    from .image import image_for
    from .vm import up_status
    img = image_for()
    image: dict[str, Any] = {"dir": str(img.dir), "recipe_hash": img.recipe_hash, "ready": img.ready()}
    if img.ready():
        image.update({k: v for k, v in img.meta.items() if k != "host_key"})
    snaps = sorted(p.name for p in img.dir.glob("snap-*")) if img.dir.is_dir() else []
    out = {"image": image, "snapshots": snaps, "up": up_status()}
    print(json.dumps(out, indent=1))
    return 0


def cmd_ssh(args) -> int:
    from .image import Image
    from .vm import read_up
    info = read_up()
    if info is None:
        print("adev vm ssh: no VM is up (`adev vm up`)", file=sys.stderr)
        return 1
    img = Image(dir=__import__("pathlib").Path(info["image_dir"]), recipe_hash=info["recipe_hash"])
    fd, kh = tempfile.mkstemp(prefix="adev-known-hosts.")
    with os.fdopen(fd, "wb") as f:
        f.write(img.known_hosts("127.0.0.1", info["port"]))
    argv = ["ssh", "-q", "-i", str(img.client_key), "-p", str(info["port"]),
            "-o", f"UserKnownHostsFile={kh}", "-o", "StrictHostKeyChecking=yes",
            "-o", "IdentitiesOnly=yes", "-o", "GlobalKnownHostsFile=/dev/null",
            "root@127.0.0.1", *args.command]
    import subprocess
    try:
        return subprocess.call(argv)
    finally:
        os.unlink(kh)
