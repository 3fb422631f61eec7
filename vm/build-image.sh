#!/usr/bin/env bash
# Build the gate guest image from Debian's packages (no network in the guest, no other registry).
#   vm/build-image.sh OUTDIR AUTHORIZED_KEY_PUB HOST_KEY_PRIVATE
# Produces OUTDIR/{base.qcow2,vmlinuz,initrd.img}. Run as root (mmdebstrap root mode).
# Everything that changes the guest lives in this file: adev.gate.image hashes it to key the cache.
set -euo pipefail
out="$1"; authkey="$2"; hostkey="$3"
suite="${ADEV_VM_SUITE:-bookworm}"
mirror="${ADEV_VM_MIRROR:-http://deb.debian.org/debian}"
size="${ADEV_VM_DISK:-4G}"
packages=python3,python3-pytest,openssh-server,nvme-cli,kmod,iproute2,systemd-sysv,udev,linux-image-amd64,initramfs-tools,procps,util-linux,e2fsprogs

work="$(mktemp -d "$out/build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
rootfs="$work/rootfs"
mkdir -p "$rootfs"

mmdebstrap --variant=minbase --include="$packages" \
  --customize-hook='echo adev-gate > "$1/etc/hostname"' \
  --customize-hook='echo "127.0.1.1 adev-gate" >> "$1/etc/hosts"' \
  --customize-hook='echo "/dev/vda / ext4 defaults,errors=remount-ro 0 1" > "$1/etc/fstab"' \
  --customize-hook="mkdir -p \"\$1/root/.ssh\" && cp '$authkey' \"\$1/root/.ssh/authorized_keys\" && chmod 700 \"\$1/root/.ssh\" && chmod 600 \"\$1/root/.ssh/authorized_keys\"" \
  --customize-hook="rm -f \"\$1\"/etc/ssh/ssh_host_*_key* && cp '$hostkey' \"\$1/etc/ssh/ssh_host_ed25519_key\" && cp '$hostkey.pub' \"\$1/etc/ssh/ssh_host_ed25519_key.pub\" && chmod 600 \"\$1/etc/ssh/ssh_host_ed25519_key\"" \
  --customize-hook='printf "HostKey /etc/ssh/ssh_host_ed25519_key\nUseDNS no\nPasswordAuthentication no\nPermitRootLogin prohibit-password\nMaxSessions 64\nMaxStartups 64:30:128\n" > "$1/etc/ssh/sshd_config.d/adev.conf"' \
  --customize-hook='mkdir -p "$1/etc/systemd/network" && printf "[Match]\nName=en* eth*\n\n[Network]\nAddress=10.0.2.15/24\nGateway=10.0.2.2\n" > "$1/etc/systemd/network/10-user.network"' \
  --customize-hook='chroot "$1" systemctl enable systemd-networkd ssh' \
  --customize-hook='printf "nvmet\nnvmet-tcp\nnvme-tcp\nloop\n" > "$1/etc/modules-load.d/adev-nvme.conf"' \
  --customize-hook='mkdir -p "$1/srv/adev" && chmod 711 "$1/srv/adev"' \
  --customize-hook="cp \"\$1\"/boot/vmlinuz-* '$work/vmlinuz' && cp \"\$1\"/boot/initrd.img-* '$work/initrd.img'" \
  --customize-hook='rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*' \
  "$suite" "$rootfs" "$mirror"

truncate -s "$size" "$work/root.raw"
mkfs.ext4 -q -F -L root -d "$rootfs" "$work/root.raw"
qemu-img convert -O qcow2 "$work/root.raw" "$work/base.qcow2"
mv "$work/vmlinuz" "$work/initrd.img" "$work/base.qcow2" "$out/"
