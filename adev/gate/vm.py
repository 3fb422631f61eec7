"""The gate VM: one libvirt/qemu domain (TCG) from ``vm/domain.xml``, and the VM gate executor.

The host is readied first (:func:`adev.gate.host.prepare_host`). ``GateVm`` boots the guest with
direct kernel boot on a throwaway qcow2 overlay, waits for SSH, and keeps a *clean snapshot*
(libvirt save state + the overlay at that instant) in the image cache: later starts and
recoveries restore it (~2 s) instead of booting (~20 s). ``VmGate`` is the ``vm`` executor: a
``GateVm`` plus the ssh executor (:class:`~adev.gate.ssh.SshGate`), restoring the VM when the
guest stops answering.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING

from ..config import ROOT
from ..net import free_port
from .base import GateRequest, GateResult
from .host import VmError, open_libvirt, prepare_host, qemu_binary
from .image import Image, ensure_image
from .ssh import GateTransportError, SshGate, SshGateOptions, SshTarget

if TYPE_CHECKING:
    import libvirt

log = logging.getLogger("adev.gate.vm")

TEMPLATE = ROOT / "vm" / "domain.xml"
STATE_DIR = Path(os.environ.get("ADEV_VM_STATE", "/tmp/adev-vm"))  # per-run overlays, console logs


class SnapshotBusy(VmError):
    """Another running VM carries the snapshot's identity (name + uuid)."""


def render_domain(**values) -> str:
    return Template(TEMPLATE.read_text()).substitute(**values)


# -- the VM ------------------------------------------------------------------------------------
@dataclass
class VmConfig:
    uri: str = "qemu:///system"
    memory_mib: int = 2048
    vcpus: int = 2
    boot_timeout_s: float = 180.0
    use_snapshot: bool = True  # restore the clean snapshot instead of booting when it exists
    name_prefix: str = "adev-gate"


@dataclass
class VmTimings:
    boot_s: float | None = None  # define+start -> first SSH command answered
    save_s: float | None = None
    restore_s: float | None = None  # restore -> first SSH command answered
    started_by: str = ""  # boot | restore


class GateVm:
    """One gate VM: boot or restore, SSH target, restore on demand, destroy + undefine on exit."""

    def __init__(self, image: Image, config: VmConfig | None = None):
        self.image = image
        self.cfg = config or VmConfig()
        self.name = f"{self.cfg.name_prefix}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.rundir = STATE_DIR / self.name
        self.overlay = self.rundir / "overlay.qcow2"
        self.console_log = self.rundir / "console.log"
        self.port: int | None = None
        self.uuid = str(uuid.uuid4())
        self.timings = VmTimings()
        self._conn: libvirt.virConnect | None = None
        self._dom: libvirt.virDomain | None = None
        self.owned = True  # False when attached to the VM of `adev vm up`: left running on stop

    @classmethod
    def attach(cls, info: dict, image: Image) -> GateVm:
        """The VM recorded by ``adev vm up`` (see :func:`read_up`); raises VmError if it is gone."""
        import libvirt
        vm = cls(image, VmConfig(uri=info["uri"], memory_mib=info["memory_mib"], vcpus=info["vcpus"]))
        vm.name, vm.uuid, vm.port, vm.owned = info["name"], info["uuid"], info["port"], False
        vm.rundir = Path(info["rundir"])
        vm.overlay, vm.console_log = vm.rundir / "overlay.qcow2", vm.rundir / "console.log"
        conn = vm._conn = open_libvirt(vm.cfg.uri)
        try:
            dom = vm._dom = conn.lookupByName(vm.name)
        except libvirt.libvirtError as e:
            raise VmError(f"the VM from `adev vm up` ({vm.name}) is gone: {e}") from e
        if not dom.isActive():
            raise VmError(f"the VM from `adev vm up` ({vm.name}) is not running")
        return vm

    def info(self) -> dict:
        return {"name": self.name, "uuid": self.uuid, "port": self.port, "uri": self.cfg.uri,
                "memory_mib": self.cfg.memory_mib, "vcpus": self.cfg.vcpus,
                "rundir": str(self.rundir), "image_dir": str(self.image.dir),
                "recipe_hash": self.image.recipe_hash, "timings": self.timings.__dict__}

    def _libvirt(self) -> libvirt.virConnect:
        if self._conn is None:
            raise VmError(f"{self.name}: no libvirt connection (the VM is not started)")
        return self._conn

    def _domain(self) -> libvirt.virDomain:
        if self._dom is None:
            raise VmError(f"{self.name}: no libvirt domain (the VM is not running)")
        return self._dom

    @property
    def snapdir(self) -> Path:
        return self.image.dir / f"snap-m{self.cfg.memory_mib}-c{self.cfg.vcpus}"

    def target(self) -> SshTarget:
        assert self.port is not None
        return SshTarget(host="127.0.0.1", port=self.port, client_key=self.image.client_key,
                         known_hosts=self.image.known_hosts("127.0.0.1", self.port),
                         remote_root="/srv/adev", isolate=True)

    def _xml(self, port: int, overlay: Path, dom_uuid: str | None = None) -> str:
        return render_domain(name=self.name, uuid=dom_uuid or self.uuid, memory_mib=self.cfg.memory_mib,
                             vcpus=self.cfg.vcpus, kernel=self.image.kernel,
                             initrd=self.image.initrd, emulator=qemu_binary(), overlay=overlay,
                             console_log=self.console_log, ssh_port=port)

    async def start(self) -> VmTimings:
        self.rundir.mkdir(parents=True, exist_ok=True)
        self._conn = open_libvirt(self.cfg.uri)
        snap = self.snapdir
        save = self.cfg.use_snapshot
        if self.cfg.use_snapshot and all((snap / f).is_file() for f in ("state.save", "overlay.qcow2", "meta.json")):
            try:
                await self.restore()
                self.timings.started_by = "restore"
                return self.timings
            except SnapshotBusy as e:
                log.warning("%s; booting a VM of our own", e)
                save = False
            except Exception as e:  # noqa: BLE001 - a stale snapshot: fall back to a cold boot
                log.warning("restoring the clean snapshot failed (%s); booting", e)
                await self._destroy_domain()
                shutil.rmtree(snap, ignore_errors=True)
            self.name = f"{self.cfg.name_prefix}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
            self.uuid = str(uuid.uuid4())
        if save:  # the snapshot fixes name and uuid: libvirt restores only into the saved identity
            self.name = f"{self.cfg.name_prefix}-snap-{self.image.recipe_hash[:8]}-{uuid.uuid4().hex[:4]}"
        await self._boot()
        self.timings.started_by = "boot"
        if save:
            await self._save_snapshot()
            await self.restore()
        return self.timings

    async def _boot(self) -> None:
        self.overlay.unlink(missing_ok=True)
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b",
                        str(self.image.base), str(self.overlay)], check=True)
        self.port = free_port()
        t0 = time.monotonic()
        dom = self._dom = self._libvirt().defineXML(self._xml(self.port, self.overlay))
        dom.create()
        await self._wait_ssh(self.cfg.boot_timeout_s)
        self.timings.boot_s = time.monotonic() - t0

    async def _save_snapshot(self) -> None:
        """Save the booted guest (memory state) and its disk at the same instant into the cache."""
        tmp = Path(tempfile.mkdtemp(prefix="snap.", dir=self.image.dir))
        t0 = time.monotonic()
        # save stops the guest; the overlay copied now matches the saved memory (page cache included)
        await asyncio.to_thread(self._domain().save, str(tmp / "state.save"))
        shutil.copyfile(self.overlay, tmp / "overlay.qcow2")
        self.timings.save_s = time.monotonic() - t0
        (tmp / "meta.json").write_text(json.dumps({"saved_at": time.time(), "uuid": self.uuid,
                                                   "name": self.name,
                                                   "save_s": self.timings.save_s}))
        shutil.rmtree(self.snapdir, ignore_errors=True)
        tmp.rename(self.snapdir)

    async def restore(self) -> None:
        """Hand out a clean booted VM: the cached snapshot's disk + memory, a fresh SSH port."""
        import libvirt
        await self._destroy_domain(undefine=False)
        meta = json.loads((self.snapdir / "meta.json").read_text())
        # libvirt restores only into the saved name and uuid; disk path and port may change
        self.name, self.uuid = meta["name"], meta["uuid"]
        with contextlib.suppress(libvirt.libvirtError):
            other = self._libvirt().lookupByName(self.name)
            if other.isActive() and (self._dom is None or other.UUIDString() != self._dom.UUIDString()):
                raise SnapshotBusy(f"the clean snapshot is in use by the running VM {self.name}")
        self._dom = None
        shutil.copyfile(self.snapdir / "overlay.qcow2", self.overlay)
        self.port = free_port()
        t0 = time.monotonic()
        xml: str | None = self._xml(self.port, self.overlay)
        if self.cfg.uri.startswith("test:"):
            xml = None  # libvirt's test driver restores only the saved XML (no dxml support)
        conn = self._libvirt()
        await asyncio.to_thread(conn.restoreFlags, str(self.snapdir / "state.save"), xml, 0)
        self._dom = conn.lookupByName(self.name)
        await self._wait_ssh(60.0)
        self.timings.restore_s = time.monotonic() - t0
        if not self.owned:
            write_up(self.info())  # the port changed

    async def _wait_ssh(self, timeout_s: float) -> None:
        import asyncssh
        deadline = time.monotonic() + timeout_s
        t, last = self.target(), None
        while time.monotonic() < deadline:
            if not self._domain().isActive():
                raise VmError(f"VM stopped while waiting for SSH; console: {self._console_tail()}")
            try:
                async with asyncssh.connect(
                        t.host, t.port, username=t.username, client_keys=[str(t.client_key)],
                        known_hosts=asyncssh.import_known_hosts(t.known_hosts.decode()),
                        agent_path=None, config=None, connect_timeout=5) as c:
                    r = await asyncio.wait_for(c.run("true", check=False), 10)
                    if r.exit_status == 0:
                        return
            except (TimeoutError, OSError, asyncssh.Error) as e:
                last = e
            await asyncio.sleep(0.5)
        raise VmError(f"no SSH within {timeout_s:g} s ({last!r}); console: {self._console_tail()}")

    def _console_tail(self, n: int = 600) -> str:
        try:
            return self.console_log.read_text(errors="replace")[-n:]
        except OSError:
            return "(no console log)"

    async def _destroy_domain(self, undefine: bool = True) -> None:
        import libvirt
        dom = self._dom
        if dom is None:
            with contextlib.suppress(libvirt.libvirtError):
                dom = self._libvirt().lookupByName(self.name)
        if dom is None:
            return
        with contextlib.suppress(libvirt.libvirtError):
            if dom.isActive():
                dom.destroy()
        if undefine:
            with contextlib.suppress(libvirt.libvirtError):
                dom.undefine()
            self._dom = None

    async def stop(self) -> None:
        """Destroy and undefine the domain and remove its run files (only a VM this object owns)."""
        if not self.owned:
            if self._conn is not None:
                with contextlib.suppress(Exception):
                    self._conn.close()
                self._conn = None
            return
        if self._conn is not None:
            await self._destroy_domain(undefine=True)
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
        shutil.rmtree(self.rundir, ignore_errors=True)


# -- `adev vm up` / `down`: a VM that outlives the command -------------------------------------
def _up_file() -> Path:
    from .image import cache_root
    return cache_root() / "up.json"


def read_up() -> dict | None:
    try:
        return json.loads(_up_file().read_text())
    except (OSError, ValueError):
        return None


def write_up(info: dict) -> None:
    f = _up_file()
    f.parent.mkdir(parents=True, exist_ok=True)
    tmp = f.with_suffix(".tmp")
    tmp.write_text(json.dumps(info, indent=1))
    tmp.rename(f)


async def start_detached(cfg: VmConfig) -> dict:
    """Start a VM (restore or boot), record it in up.json and leave it running."""
    await asyncio.to_thread(prepare_host)
    image = await asyncio.to_thread(ensure_image)
    vm = GateVm(image, cfg)
    try:
        await vm.start()
    except BaseException:
        await vm.stop()
        raise
    info = vm.info()
    write_up(info)
    vm.owned = False
    await vm.stop()  # closes the libvirt connection only
    return info


def stop_detached() -> dict | None:
    """Destroy + undefine the VM recorded in up.json; None when there is none."""
    import libvirt
    info = read_up()
    if info is None:
        return None
    conn = open_libvirt(info["uri"])
    try:
        dom = conn.lookupByName(info["name"])
        with contextlib.suppress(libvirt.libvirtError):
            if dom.isActive():
                dom.destroy()
        with contextlib.suppress(libvirt.libvirtError):
            dom.undefine()
    except libvirt.libvirtError:
        pass
    finally:
        conn.close()
    shutil.rmtree(info["rundir"], ignore_errors=True)
    _up_file().unlink(missing_ok=True)
    return info


def up_status() -> dict | None:
    import libvirt
    info = read_up()
    if info is None:
        return None
    try:
        conn = open_libvirt(info["uri"])
        try:
            info["state"] = "running" if conn.lookupByName(info["name"]).isActive() else "stopped"
        finally:
            conn.close()
    except (libvirt.libvirtError, VmError) as e:
        info["state"] = f"gone ({e})"
    return info


# -- the executor ------------------------------------------------------------------------------
@dataclass
class VmGateConfig:
    vm: VmConfig = field(default_factory=VmConfig)
    ssh: SshGateOptions = field(default_factory=SshGateOptions)
    build_image: bool = True  # build the image when the cache lacks it
    prepare_host: bool = True
    reuse_up: bool = True  # use the VM of `adev vm up` when one is running for this image


class VmGate:
    """The ``vm`` executor: one shared gate VM, sessions in separate directories over SSH."""

    name = "vm"

    def __init__(self, config: VmGateConfig | None = None, image: Image | None = None):
        self.cfg = config or VmGateConfig()
        self._image = image
        self.vm: GateVm | None = None
        self.ssh: SshGate | None = None

    @classmethod
    def from_config(cls, memory_mib: int = 2048, vcpus: int = 2, uri: str = "qemu:///system",
                    nvme_size_mb: int = 256, timeout_margin_s: float = 60.0,
                    use_snapshot: bool = True) -> VmGate:
        return cls(VmGateConfig(
            vm=VmConfig(uri=uri, memory_mib=memory_mib, vcpus=vcpus, use_snapshot=use_snapshot),
            ssh=SshGateOptions(nvme_size_mb=nvme_size_mb, timeout_margin_s=timeout_margin_s)))

    async def __aenter__(self) -> VmGate:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    @property
    def timings(self) -> VmTimings | None:
        return self.vm.timings if self.vm else None

    async def start(self) -> None:
        if self.cfg.prepare_host:
            await asyncio.to_thread(prepare_host)
        image = self._image
        if image is None:
            image = await asyncio.to_thread(ensure_image) if self.cfg.build_image else None
            if image is None or not image.ready():
                raise VmError("no gate image: run `adev vm build`")
        up = read_up() if self.cfg.reuse_up else None
        if up is not None and up.get("recipe_hash") == image.recipe_hash:
            try:
                self.vm = GateVm.attach(up, image)
            except VmError as e:
                log.warning("not reusing the VM from `adev vm up`: %s", e)
        try:
            if self.vm is None:
                self.vm = GateVm(image, self.cfg.vm)
                await self.vm.start()
            self.ssh = SshGate(self.vm.target(), self.cfg.ssh, recover=self._recover)
            await self.ssh.start()
        except BaseException:
            await self.close()
            raise

    async def _recover(self) -> SshTarget:
        """The guest stopped answering: put the clean snapshot back (or reboot without one)."""
        assert self.vm is not None
        if (self.vm.snapdir / "meta.json").is_file():
            await self.vm.restore()
        else:
            await self.vm._destroy_domain(undefine=True)
            await self.vm._boot()
        return self.vm.target()

    async def setup(self, session_id: str) -> None:
        await self._ssh().setup(session_id)

    async def run(self, request: GateRequest) -> GateResult:
        return await self._ssh().run(request)

    async def cleanup(self, session_id: str) -> None:
        await self._ssh().cleanup(session_id)

    async def close(self) -> None:
        if self.ssh is not None:
            await self.ssh.close()
            self.ssh = None
        if self.vm is not None:
            await self.vm.stop()
            self.vm = None

    def _ssh(self) -> SshGate:
        if self.ssh is None:
            raise GateTransportError("the VM gate is not started")
        return self.ssh


VMGate = VmGate  # the spelling adev.session.cli looks for


def make_gate() -> VmGate:
    """The ``--gate vm`` executor with defaults (reuses a VM from ``adev vm up`` when present)."""
    return VmGate.from_config()
