"""Host preparation for the gate VM: qemu.conf settings for libvirt without systemd."""
from __future__ import annotations

from adev.gate.host import configure_qemu_conf


def test_qemu_conf_is_set_idempotently(tmp_path):
    conf = tmp_path / "qemu.conf"
    conf.write_text('#user = "qemu"\nuser = "libvirt-qemu"\nvnc_listen = "0.0.0.0"\n')
    assert configure_qemu_conf(conf) is True
    text = conf.read_text()
    assert 'user = "root"' in text and 'user = "libvirt-qemu"' not in text
    assert "dynamic_ownership = 0" in text and 'security_driver = "none"' in text
    assert "cgroup_controllers = [ ]" in text and 'vnc_listen = "0.0.0.0"' in text
    assert '#user = "qemu"' in text
    assert configure_qemu_conf(conf) is False
    assert conf.read_text() == text
