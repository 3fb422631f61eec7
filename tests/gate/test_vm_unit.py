"""GateVm's libvirt lifecycle against libvirt's built-in ``test:///default`` driver (no qemu)."""
from __future__ import annotations

import json
import shutil
import subprocess
import time
import types

import pytest

libvirt = pytest.importorskip("libvirt")

from adev.gate import vm as vmmod  # noqa: E402
from adev.gate.image import Image  # noqa: E402
from adev.gate.vm import GateVm, VmConfig, render_domain  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("qemu-img") is None, reason="qemu-img missing")


@pytest.fixture
def image(tmp_path, monkeypatch):
    d = tmp_path / "img"
    d.mkdir()
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(d / "base.qcow2"), "16M"], check=True)
    for f in ("vmlinuz", "initrd.img"):
        (d / f).write_bytes(b"\0")
    (d / "id_ed25519").write_text("not used")
    (d / "ssh_host_ed25519_key.pub").write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE0 host\n")
    (d / "meta.json").write_text("{}")
    monkeypatch.setattr(vmmod, "STATE_DIR", tmp_path / "state")
    # the test driver runs no guest: waiting for SSH takes a tenth of its timeout on a clock
    # that the wait advances (boot: 18 s of its 180 s; restore: 6 s of 60 s), so the timings
    # the VM reports have known lower bounds
    skew = [0.0]
    monkeypatch.setattr(vmmod, "time", types.SimpleNamespace(
        monotonic=lambda: time.monotonic() + skew[0], time=time.time, sleep=time.sleep))

    async def no_ssh(self, timeout_s):
        skew[0] += timeout_s / 10
    monkeypatch.setattr(GateVm, "_wait_ssh", no_ssh)
    return Image(dir=d, recipe_hash="0123456789abcdef")


def test_template_renders_valid_domain(image):
    xml = render_domain(name="t", uuid="11111111-2222-3333-4444-555555555555", memory_mib=512,
                        vcpus=1, kernel=image.kernel, initrd=image.initrd, emulator="/usr/bin/qemu",
                        overlay=image.base, console_log="/tmp/c.log", ssh_port=2222)
    assert "<graphics" not in xml
    assert "hostfwd=tcp:127.0.0.1:2222-:22" in xml and "restrict=on" in xml
    assert "addr=0x10" in xml
    conn = vmmod.open_libvirt("test:///default")
    try:
        dom = conn.defineXML(xml)
        dom.create()
        assert dom.isActive()
        dom.destroy()
        dom.undefine()
    finally:
        conn.close()


async def test_boot_save_restore_and_destroy(image):
    cfg = VmConfig(uri="test:///default", memory_mib=512, vcpus=1)
    vm = GateVm(image, cfg)
    t = await vm.start()
    assert t.started_by == "boot"
    # boot: define + start + the 18 s SSH wait; save: the test driver's save + a 16 MB copy
    # (no SSH wait); restore: the 6 s SSH wait + the driver's restore (local work: < 10 s)
    assert 18.0 <= t.boot_s < 28.0
    assert 0.0 < t.save_s < 10.0
    assert 6.0 <= t.restore_s < 16.0 and t.restore_s < t.boot_s
    meta = json.loads((vm.snapdir / "meta.json").read_text())
    assert meta["name"] == vm.name and meta["uuid"] == vm.uuid and meta["save_s"] == t.save_s
    assert (vm.snapdir / "state.save").is_file() and (vm.snapdir / "overlay.qcow2").is_file()
    assert vm._dom.isActive()
    first_restore = t.restore_s
    await vm.restore()  # what recovery does: a clean guest again, on a fresh port
    assert vm._dom.isActive() and vm.port is not None
    assert 6.0 <= vm.timings.restore_s < 16.0 and vm.timings.restore_s != first_restore
    conn = vm._conn
    await vm.stop()
    assert not vm.rundir.exists()
    with pytest.raises(libvirt.libvirtError):
        conn.lookupByName(vm.name)  # destroyed (connection closed: the test driver forgets)

    # a later VM restores the snapshot instead of booting
    vm2 = GateVm(image, cfg)
    t2 = await vm2.start()
    assert t2.started_by == "restore" and t2.boot_s is None and t2.save_s is None
    assert 6.0 <= t2.restore_s < 16.0
    assert vm2.name == meta["name"]
    await vm2.stop()


async def test_stale_snapshot_falls_back_to_boot(image):
    cfg = VmConfig(uri="test:///default", memory_mib=512, vcpus=1)
    vm = GateVm(image, cfg)
    vm.snapdir.mkdir()
    for f in ("state.save", "overlay.qcow2"):
        (vm.snapdir / f).write_bytes(b"garbage")
    (vm.snapdir / "meta.json").write_text('{"name": "x", "uuid": "y"}')
    t = await vm.start()
    assert t.started_by == "boot" and 18.0 <= t.boot_s < 28.0   # the stale restore fell through
    assert json.loads((vm.snapdir / "meta.json").read_text())["name"] == vm.name  # replaced
    await vm.stop()


async def test_no_snapshot_mode_boots_and_saves_nothing(image):
    vm = GateVm(image, VmConfig(uri="test:///default", memory_mib=512, vcpus=1, use_snapshot=False))
    t = await vm.start()
    assert t.started_by == "boot" and t.save_s is None and t.restore_s is None
    assert 18.0 <= t.boot_s < 28.0
    assert not vm.snapdir.exists()
    await vm.stop()
