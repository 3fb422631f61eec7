"""Provisioning plans: dry-run content and --apply refusals, on fake device paths and fake
/proc and /sys trees (no real block device is touched)."""
from __future__ import annotations

import pytest

from adev.config import ConfigError
from adev.storage import provision as pv


def lines(plan):
    return [s.line() for s in plan.steps]


def test_raid0_plan_steps():
    p = pv.raid0_plan(["/dev/nvme0n1", "/dev/nvme1n1"], mountpoint="/mnt/kv")
    ls = lines(p)
    assert ls[0] == ("mdadm --create /dev/md/adev-kv --level=0 --raid-devices=2 --chunk=512 "
                     "--run /dev/nvme0n1 /dev/nvme1n1")
    assert ls[1] == "mkfs.xfs -f /dev/md/adev-kv"
    assert "mount -o noatime /dev/md/adev-kv /mnt/kv" in ls
    assert "mkdir -p /mnt/kv/mooncake" in ls
    assert p.disk_dir == "/mnt/kv/mooncake"
    assert p.steps[-1].argv is None and 'disk_dir = "/mnt/kv/mooncake"' in p.steps[-1].what
    assert pv.OFFLOAD_ENV in p.steps[-1].what


def test_raid0_needs_two_distinct_devices():
    with pytest.raises(ConfigError, match="at least 2"):
        pv.raid0_plan(["/dev/a"])
    with pytest.raises(ConfigError, match="distinct"):
        pv.raid0_plan(["/dev/a", "/dev/a"])


def test_nvmeof_plan_steps():
    p = pv.nvmeof_plan(traddr="10.0.0.5", trsvcid="4420", nqn="nqn.2024-01.io.x:kv",
                       transport="rdma", fs="ext4")
    ls = lines(p)
    assert ls[0] == "modprobe nvme-rdma"
    assert ls[1] == "nvme discover -t rdma -a 10.0.0.5 -s 4420"
    assert ls[2] == "nvme connect -t rdma -a 10.0.0.5 -s 4420 -n nqn.2024-01.io.x:kv"
    assert any(x.startswith("mkfs.ext4 -F") for x in ls)
    with pytest.raises(ConfigError, match="--nqn"):
        pv.nvmeof_plan(traddr="a", trsvcid="1", nqn="bad")
    with pytest.raises(ConfigError, match="--transport"):
        pv.nvmeof_plan(traddr="a", trsvcid="1", nqn="nqn.x", transport="fc")


def test_refusals_name_the_reason(tmp_path, monkeypatch):
    """Real sysfs layout is /sys/block/<name>; the fake tree mirrors it with /dev/<name> names."""
    sysb = tmp_path / "sys"
    for n in ("fa", "fb", "fc", "fd", "fe", "fg"):
        (sysb / n / "holders").mkdir(parents=True)
    (sysb / "fc" / "holders" / "md127").write_text("")
    (sysb / "fd" / "fd1" / "holders").mkdir(parents=True)
    mounts = tmp_path / "mounts"
    mounts.write_text("/dev/fb /data ext4 rw 0 0\n/dev/fd1 /boot ext4 rw 0 0\n")
    swaps = tmp_path / "swaps"
    swaps.write_text("Filename Type Size Used Priority\n/dev/fe partition 1 0 -2\n")
    devs = tmp_path / "devnodes"
    devs.mkdir()
    paths = {}
    for n in ("fa", "fb", "fc", "fd", "fe", "ff", "fg"):
        (devs / n).write_text("")
        paths[n] = str(devs / n)
    real = {v: f"/dev/{k}" for k, v in paths.items()}
    orig = pv.os.path.realpath
    checks = dict(proc_mounts=str(mounts), proc_swaps=str(swaps), sys_block=str(sysb),
                  is_block=lambda p: not p.endswith("ff"),
                  fstype=lambda p: "linux_raid_member" if p == "/dev/fa" else None)
    monkeypatch.setattr(pv.os.path, "realpath", lambda p: real.get(p, orig(p)))
    prob = {n: pv.device_problems(paths[n], **checks) for n in paths}
    assert prob["fa"] == [f"{paths['fa']}: carries a linux_raid_member signature (wipe it with "
                          "wipefs first if it is really free)"]
    assert prob["fb"] == [f"{paths['fb']}: /dev/fb is mounted on /data"]
    assert prob["fc"] == [f"{paths['fc']}: /dev/fc is in use by md127 "
                          f"({sysb / 'fc' / 'holders'} is not empty)"]
    assert prob["fd"] == [f"{paths['fd']}: /dev/fd1 is mounted on /boot"]
    assert prob["fe"] == [f"{paths['fe']}: /dev/fe is in use as swap"]
    assert prob["ff"] == [f"{paths['ff']}: is not a block device"]
    assert prob["fg"] == []  # free
    missing = str(devs / "missing")
    assert pv.device_problems(missing, **checks) == [f"{missing}: does not exist"]


def test_check_apply_refuses_missing_devices_tools_and_non_root(tmp_path):
    plan = pv.raid0_plan(["/dev/adev-test-missing-a", "/dev/adev-test-missing-b"],
                         mountpoint=str(tmp_path / "mnt"))
    probs = pv.check_apply(plan, euid=1000, which=lambda t: None if t == "mdadm" else "/bin/x")
    assert "--apply needs root (mdadm, nvme, mkfs and mount do)" in probs
    assert "mdadm: not found on PATH (Debian package mdadm)" in probs
    assert "/dev/adev-test-missing-a: does not exist" in probs
    assert "/dev/adev-test-missing-b: does not exist" in probs
    (tmp_path / "mnt").mkdir()
    (tmp_path / "mnt" / "f").write_text("x")
    probs = pv.check_apply(plan, euid=0, which=lambda t: "/bin/x")
    assert f"{tmp_path / 'mnt'}: mount point exists and is not empty" in probs


def test_find_namespace(tmp_path):
    sub = tmp_path / "nvme-subsys0"
    (sub / "nvme0n1").mkdir(parents=True)
    (sub / "nvme0n1" / "size").write_text("100")
    (sub / "nvme0").mkdir()
    (sub / "subsysnqn").write_text("nqn.2024-01.io.x:kv\n")
    assert pv.find_namespace("nqn.2024-01.io.x:kv", str(tmp_path)) == "/dev/nvme0n1"
    assert pv.find_namespace("nqn.other", str(tmp_path)) is None


def test_cli_apply_refuses_fake_devices(capsys):
    from adev.cli import main
    rc = main(["storage", "plan", "raid0", "/dev/adev-test-missing-a", "/dev/adev-test-missing-b",
               "--mount", "/nonexistent/adev-mnt", "--apply"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "refusing --apply" in err and "/dev/adev-test-missing-a: does not exist" in err


def test_cli_dry_run_runs_nothing(capsys):
    from adev.cli import main
    assert main(["storage", "plan", "nvmeof", "--traddr", "10.0.0.5", "--nqn",
                 "nqn.2024-01.io.x:kv"]) == 0
    out = capsys.readouterr().out
    assert "nvme connect -t tcp -a 10.0.0.5 -s 4420 -n nqn.2024-01.io.x:kv" in out
    assert "dry run" in out
