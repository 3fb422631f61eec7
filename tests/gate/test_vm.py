"""The gate in a real VM: build or reuse the image, boot (or restore) the guest under TCG, run three
sessions' gates concurrently (plain, NVMe, runaway code), tear everything down. Prints timings."""
from __future__ import annotations

import asyncio
import os
import shutil
import time
from pathlib import Path

import pytest

from adev.gate.base import GateRequest
from adev.gate.ssh import SshGateOptions, session_dirname

pytestmark = [pytest.mark.integration, pytest.mark.vm]

PLAIN = {
    "calc.py": "def add(a, b):\n    return a + b\n",
    "tests/test_calc.py": "from calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n\n"
                          "def test_add_neg():\n    assert add(-1, 1) == 0\n",
}
NVME = {
    "tests/test_blockdev.py": '''import os, stat

def test_block_device_roundtrip():
    dev = os.environ["ADEV_BLOCK_DEVICE"]
    assert dev.startswith("/dev/nvme"), dev
    assert stat.S_ISBLK(os.stat(dev).st_mode)
    fd = os.open(dev, os.O_RDWR)
    try:
        assert os.lseek(fd, 0, os.SEEK_END) == 256 * 2**20
        data = os.urandom(4096)
        os.pwrite(fd, data, 1 << 20)
        os.fsync(fd)
        assert os.pread(fd, 4096, 1 << 20) == data
    finally:
        os.close(fd)
''',
}
RUNAWAY = {
    "tests/test_runaway.py": '''import errno, os, sys, time
import pytest

def test_fork_bomb_is_capped():
    pids = []
    try:
        while len(pids) < 5000:
            pid = os.fork()
            if pid == 0:
                time.sleep(600)
                os._exit(0)
            pids.append(pid)
    except OSError as e:
        assert e.errno == errno.EAGAIN
    assert len(pids) < 1000, len(pids)

@pytest.mark.parametrize("path", ["/etc/adev-escape", "/root/adev-escape", "/srv/adev/adev-escape",
                                  "/srv/adev/s/OTHER/ws/adev-escape", "/usr/local/bin/adev-escape"])
def test_cannot_write_outside(path):
    with pytest.raises(PermissionError):
        open(path, "w")

def test_tmp_litter_allowed_but_removed():
    with open("/tmp/adev-escape-litter", "w") as f:
        f.write("x")

def test_gigabytes_of_output_are_capped():
    chunk = "y" * (4 << 20)
    with pytest.raises(OSError) as e:
        for _ in range(256):  # 1 GiB, far past the gate's file-size limit
            sys.stdout.write(chunk)
            sys.stdout.flush()
    assert e.value.errno == errno.EFBIG
''',
}
# generous: pytest's start-up alone takes 3 s in an idle TCG guest and 30+ s on a loaded host
GATE_TIMEOUT_S = float(os.environ.get("ADEV_VM_TEST_GATE_TIMEOUT_S", 300))
LOOP = {"tests/test_loop.py": "def test_spins_forever():\n    while True:\n        pass\n"}


def write_ws(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def vm_available() -> str | None:
    if os.geteuid() != 0:
        return "needs root (libvirt system daemon, mmdebstrap)"
    for tool in ("qemu-system-x86_64", "mmdebstrap", "qemu-img"):
        if shutil.which(tool) is None:
            return f"{tool} missing (scripts/bootstrap.sh installs it)"
    return None


@pytest.mark.skipif(vm_available() is not None, reason=str(vm_available()))
async def test_three_sessions_in_the_vm(tmp_path):
    from adev.gate.image import ensure_image
    from adev.gate.vm import VmConfig, VmGate, VmGateConfig

    t0 = time.monotonic()
    image = await asyncio.to_thread(ensure_image)
    t_image = time.monotonic() - t0
    # small file-size limit so the output flood hits it quickly under TCG
    gate = VmGate(VmGateConfig(vm=VmConfig(memory_mib=2048, vcpus=2), reuse_up=False,
                               ssh=SshGateOptions(fsize_kb=32 * 1024, pids_max=48)), image=image)
    t1 = time.monotonic()
    await gate.start()
    t_start = time.monotonic() - t1
    try:
        tm = gate.timings
        print(f"\n[vm] image ready in {t_image:.1f} s (build_s={image.meta.get('build_s')}); VM "
              f"started by {tm.started_by} in {t_start:.1f} s: boot_s={tm.boot_s} save_s={tm.save_s} "
              f"restore_s={tm.restore_s}")
        # the parts add up to no more than the start as measured here; a restore from the saved
        # snapshot beats a cold boot (which is why the snapshot exists)
        assert tm.restore_s is not None and 0 < tm.restore_s <= 60.0
        if tm.started_by == "boot":
            assert 0 < tm.boot_s <= 180.0 and tm.save_s is not None and tm.save_s > 0
            assert tm.restore_s < tm.boot_s
        else:
            assert tm.started_by == "restore" and tm.boot_s is None and tm.save_s is None
        assert (tm.boot_s or 0) + (tm.save_s or 0) + tm.restore_s <= t_start
        ws = {s: write_ws(tmp_path / s, files) for s, files in
              (("plain", PLAIN), ("nvme", NVME), ("runaway", RUNAWAY))}
        other = session_dirname("plain")
        (ws["runaway"] / "tests/test_runaway.py").write_text(
            (ws["runaway"] / "tests/test_runaway.py").read_text().replace("OTHER", other))
        for s in ws:
            await gate.setup(s)
        reqs = [GateRequest(session_id="plain", workspace=ws["plain"], timeout_s=GATE_TIMEOUT_S),
                GateRequest(session_id="nvme", workspace=ws["nvme"], needs_nvme=True, timeout_s=GATE_TIMEOUT_S),
                GateRequest(session_id="runaway", workspace=ws["runaway"], timeout_s=GATE_TIMEOUT_S)]
        t2 = time.monotonic()
        plain, nvme, runaway = await asyncio.gather(*(gate.run(r) for r in reqs))
        t_gates = time.monotonic() - t2
        print(f"[vm] three concurrent gates in {t_gates:.1f} s: plain {plain.real_duration_s:.1f} s, "
              f"nvme {nvme.real_duration_s:.1f} s, runaway {runaway.real_duration_s:.1f} s")
        assert plain.verdict == "pass" and plain.passed == 2, plain
        assert nvme.verdict == "pass" and nvme.passed == 1, nvme
        assert runaway.verdict == "pass", runaway.failing_text() + runaway.output_tail[-2000:]
        assert "process limit reached" in runaway.output_tail
        assert "leftover processes killed" in runaway.output_tail

        # an infinite loop: killed by the guest's timeout, recorded as a failing run
        write_ws(ws["runaway"], LOOP)
        t3 = time.monotonic()
        loop = await gate.run(GateRequest(session_id="runaway", workspace=ws["runaway"],
                                          test_paths=["tests/test_loop.py"], timeout_s=15))
        print(f"[vm] infinite loop stopped after {time.monotonic() - t3:.1f} s: {loop.error}")
        assert loop.verdict == "fail" and "timeout" in loop.error

        # the guest is intact: litter removed, device gone, later gates still pass
        out = await gate.ssh._exec("ls /tmp; ls /dev | grep -c nvme || true; "
                                   "ls /sys/kernel/config/nvmet/subsystems | wc -l", 30)
        assert "adev-escape" not in out, out
        t4 = time.monotonic()
        again = await gate.run(GateRequest(session_id="plain", workspace=ws["plain"]))
        print(f"[vm] single gate afterwards {time.monotonic() - t4:.1f} s")
        assert again.verdict == "pass"
        for s in ws:
            await gate.cleanup(s)

        # a hung guest (vCPUs paused): detected by the deadline, VM restored, gate usable again
        gate.vm._dom.suspend()
        gate.ssh.opt.op_timeout_s = 15.0
        t5 = time.monotonic()
        restore_before = gate.timings.restore_s
        hung = await gate.run(GateRequest(session_id="plain", workspace=ws["plain"], timeout_s=15))
        t_hung = time.monotonic() - t5
        print(f"[vm] hung guest detected and restored in {time.monotonic() - t5:.1f} s "
              f"(restore_s={gate.timings.restore_s:.1f}): {hung.error}")
        assert hung.verdict == "error" and "restored" in hung.error, hung
        # a fresh restore was timed, within the time the whole recovery took
        assert gate.timings.restore_s != restore_before and 0 < gate.timings.restore_s < t_hung
        gate.ssh.opt.op_timeout_s = 60.0
        after = await gate.run(GateRequest(session_id="plain", workspace=ws["plain"]))
        assert after.verdict == "pass", after
        await gate.cleanup("plain")
    finally:
        name = gate.vm.name if gate.vm else None
        await gate.close()
    import libvirt

    from adev.gate.vm import open_libvirt
    conn = open_libvirt("qemu:///system")
    try:
        with pytest.raises(libvirt.libvirtError):
            conn.lookupByName(name)
    finally:
        conn.close()
    print(f"[vm] whole test {time.monotonic() - t0:.1f} s; host load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
