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
  # the local gate's sandbox
  bubblewrap
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

# The interpreter: $PYTHON if set; else Python 3.12 where the machine has one (pyenv's, or
# python3.12 on PATH); else python3 (3.11 or newer). 3.12 is preferred for the measurements:
# there aiohttp starts a request's body write eagerly, in the same loop step as its headers,
# where 3.11 queues it behind every other ready task (bench/bench_fleet.py at width 64: the
# start burst's dispatch delay p99 ~200 ms on 3.11, a few ms on 3.12).
pick_python() {
  if [ -n "${PYTHON:-}" ]; then echo "$PYTHON"; return; fi
  local c
  for c in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 python3.12; do
    if "$c" -c 'import sys, venv, ensurepip; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1; then
      echo "$c"; return
    fi
  done
  echo python3
}
PY="$(pick_python)"
"$PY" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null || {
  echo "[bootstrap] $PY is not Python 3.11 or newer (set PYTHON=...)" >&2; exit 1; }
pyver="$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
if [ -x .venv/bin/python ] && [ "$(.venv/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" != "$pyver" ]; then
  echo "[bootstrap] .venv is not Python $pyver: recreating it"
  rm -rf .venv
fi
stamp=.adev/pip.stamp
want="$( (cat pyproject.toml scripts/bootstrap.sh; echo "$pyver") | sha256sum | cut -d' ' -f1)"
if [ ! -x .venv/bin/python ]; then
  echo "[bootstrap] creating .venv (Python $pyver: $PY)"
  "$PY" -m venv .venv
  rm -f "$stamp"  # a new .venv is empty, whatever an older stamp says
fi
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "[bootstrap] pip install -e . (Python packages, Mooncake wheel)"
  # (pip's "Location ... is ignored" warnings about this machine's optional local indexes are noise)
  .venv/bin/pip install -q -e . 2> >(grep -v -e "^WARNING: Location" -e "BuildBackendWarning" >&2)
  echo "$want" > "$stamp"
fi

# --aiperf (make test): AIPerf, the third-party client the tests check the emulated endpoint with,
# in a venv of its own (its dependencies are not ours); about 1.2 GB and a few minutes, once.
if [ "${1:-}" = "--aiperf" ]; then
  astamp=.adev/aiperf.stamp
  awant="aiperf==0.13.0 $pyver"
  if [ ! -x .venv-aiperf/bin/aiperf ] || [ ! -f "$astamp" ] || [ "$(cat "$astamp")" != "$awant" ]; then
    echo "[bootstrap] AIPerf into .venv-aiperf (the tests' third-party client)"
    rm -rf .venv-aiperf
    "$PY" -m venv .venv-aiperf
    .venv-aiperf/bin/pip install -q "aiperf==0.13.0" 2> >(grep -v -e "^WARNING: Location" >&2)
    echo "$awant" > "$astamp"
  fi
fi
