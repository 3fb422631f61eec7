#!/usr/bin/env bash
# One-time (idempotent) set-up of a fresh Debian machine for adev:
# system packages through apt-get, Python packages into .venv through pip.
# Re-running is cheap: each step is skipped when its inputs have not changed.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
mkdir -p .adev

APT_PACKAGES=(
  # build libvirt-python
  libvirt-dev pkg-config gcc python3-dev python3-venv
  # Mooncake binaries need these even over TCP
  libibverbs1 librdmacm1 libnuma1
  # the gate VM (libvirt + qemu under TCG) and its guest image
  qemu-system-x86 qemu-utils libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients
  libvirt-daemon-system mmdebstrap e2fsprogs openssh-client
  # storage characterisation
  fio
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[bootstrap] apt-get install ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PY="${PYTHON:-python3}"
stamp=.adev/pip.stamp
want="$(cat pyproject.toml scripts/bootstrap.sh | sha256sum | cut -d' ' -f1)"
if [ ! -x .venv/bin/python ]; then
  echo "[bootstrap] creating .venv"
  "$PY" -m venv .venv
fi
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "[bootstrap] pip install -e . (Python packages, Mooncake wheel)"
  # (pip's "Location ... is ignored" warnings about this machine's optional local indexes are noise)
  .venv/bin/pip install -q -e . 2> >(grep -v -e "^WARNING: Location" -e "BuildBackendWarning" >&2)
  echo "$want" > "$stamp"
fi
