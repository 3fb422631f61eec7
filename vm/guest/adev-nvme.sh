#!/usr/bin/env bash
# Guest side of per-session NVMe block devices: nvmet over tcp on the guest's 127.0.0.1:4420
# (Debian's kernel has no nvme-loop). Uploaded by adev.gate.ssh next to adev-gate.sh; run as root:
#   adev-nvme.sh create ROOT SID USER SIZE_MB   -> prints ADEV_DEVICE=/dev/nvmeXnY (owned by USER)
#   adev-nvme.sh remove ROOT SID                -> disconnects and removes everything create made
# A sparse file in the session directory backs the device: loop file -> losetup -> nvmet
# subsystem/namespace linked to one shared tcp port -> nvme connect -> /dev/nvmeXnY.
set -uo pipefail
cmd="$1"; root="$2"; sid="$3"; shift 3
d="$root/s/$sid"
cfg=/sys/kernel/config/nvmet
port="$cfg/ports/1"
nqn="nqn.2026-11.io.adev:gate.$sid"
state="$d/nvme.state"

fail() { echo "ADEV_NVME_ERROR=$*"; exit 1; }

remove() {
  nvme disconnect -n "$nqn" >/dev/null 2>&1
  [ -L "$port/subsystems/$nqn" ] && rm -f "$port/subsystems/$nqn"
  if [ -d "$cfg/subsystems/$nqn" ]; then
    echo 0 > "$cfg/subsystems/$nqn/namespaces/1/enable" 2>/dev/null
    rmdir "$cfg/subsystems/$nqn/namespaces/1" 2>/dev/null
    rmdir "$cfg/subsystems/$nqn" 2>/dev/null
  fi
  if [ -f "$state" ]; then
    loopdev="$(sed -n 's/^loop=//p' "$state")"
    [ -n "$loopdev" ] && losetup -d "$loopdev" 2>/dev/null
  fi
  rm -f "$d/nvme.img" "$state"
}

case "$cmd" in
create)
  user="$1"; size_mb="$2"
  [ -d "$d" ] || fail "session $sid not set up"
  modprobe -a nvmet nvmet-tcp nvme-tcp loop 2>/dev/null
  mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
  [ -d "$cfg" ] || fail "nvmet configfs missing (modprobe nvmet failed?)"
  exec 9>/run/adev-nvme.lock; flock 9
  remove
  truncate -s "${size_mb}M" "$d/nvme.img" || fail "truncate"
  loopdev="$(losetup --find --show "$d/nvme.img")" || fail "losetup"
  echo "loop=$loopdev" > "$state"
  if [ ! -d "$port" ]; then
    mkdir "$port" && echo ipv4 > "$port/addr_adrfam" && echo tcp > "$port/addr_trtype" \
      && echo 127.0.0.1 > "$port/addr_traddr" && echo 4420 > "$port/addr_trsvcid" || fail "port"
  fi
  sub="$cfg/subsystems/$nqn"
  mkdir "$sub" && echo 1 > "$sub/attr_allow_any_host" && mkdir "$sub/namespaces/1" \
    && echo "$loopdev" > "$sub/namespaces/1/device_path" && echo 1 > "$sub/namespaces/1/enable" \
    || { remove; fail "subsystem"; }
  ln -s "$sub" "$port/subsystems/$nqn" || { remove; fail "port link"; }
  nvme connect -t tcp -a 127.0.0.1 -s 4420 -n "$nqn" >/dev/null 2>"$d/nvme.err" \
    || { remove; fail "nvme connect: $(head -c 200 "$d/nvme.err")"; }
  dev=""
  for _ in $(seq 100); do
    for b in /sys/block/nvme*; do
      name="${b##*/}"
      [[ "$name" =~ c[0-9]+n ]] && continue   # hidden multipath path devices
      [ "$(cat "$b/device/subsysnqn" 2>/dev/null)" = "$nqn" ] && { dev="/dev/$name"; break; }
    done
    [ -n "$dev" ] && [ -b "$dev" ] && break
    dev=""; sleep 0.1
  done
  [ -n "$dev" ] || { remove; fail "no block device appeared for $nqn"; }
  udevadm settle -t 5 2>/dev/null
  chown "$user" "$dev" && chmod 600 "$dev"
  echo "dev=$dev" >> "$state"
  echo "ADEV_DEVICE=$dev"
  ;;
remove)
  exec 9>/run/adev-nvme.lock; flock 9
  remove
  echo "ADEV_NVME_REMOVED=ok"
  ;;
*) echo "adev-nvme.sh: unknown command $cmd" >&2; exit 94 ;;
esac
