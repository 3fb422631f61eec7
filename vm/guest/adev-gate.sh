#!/usr/bin/env bash
# Guest side of the gate: per-session workspace setup, one contained pytest run, cleanup.
# Uploaded by adev.gate.ssh at start to ROOT/bin/ and run as root over SSH:
#   adev-gate.sh setup   ROOT SID USER ISOLATE
#   adev-gate.sh run     ROOT SID USER ISOLATE TIMEOUT_S MAX_OUTPUT_BYTES DEVICE TEST_PATH...
#   adev-gate.sh cleanup ROOT SID USER ISOLATE
# ISOLATE=1 (the VM): tests run as a per-session unprivileged user in their own cgroup (pids.max,
# memory.max; killed as a whole afterwards) with ulimits; files the user left outside the
# workspace are removed. ISOLATE=0 (the unit tests' in-process server on the host): only the
# timeout, the file-size limit and the output cap apply. ISOLATE=1 refuses to run outside the guest.
set -uo pipefail
cmd="$1"; root="$2"; sid="$3"; user="$4"; isolate="$5"; shift 5
d="$root/s/$sid"
cg="/sys/fs/cgroup/adev/$sid"
PIDS_MAX="${ADEV_PIDS_MAX:-64}"
MEM_MAX="${ADEV_MEM_MAX:-768M}"
FSIZE_KB="${ADEV_FSIZE_KB:-262144}"   # largest file a test may write (256 MiB)
PY="${ADEV_GATE_PYTHON:-python3}"     # the unit tests' fake guest points this at its venv

if [ "$isolate" = 1 ] && [ "$(cat /etc/hostname 2>/dev/null)" != adev-gate ]; then
  echo "adev-gate.sh: ISOLATE=1 outside the gate guest; refusing" >&2; exit 90
fi

kill_all() {  # every process of the session: cgroup first, then the user, then stray files
  if [ -d "$cg" ]; then
    echo 1 > "$cg/cgroup.kill" 2>/dev/null
    for _ in $(seq 50); do [ -z "$(cat "$cg/cgroup.procs" 2>/dev/null)" ] && break; sleep 0.1; done
  fi
  pkill -KILL -u "$user" 2>/dev/null
  for _ in $(seq 50); do pgrep -u "$user" >/dev/null || break; sleep 0.1; done
  find /tmp /var/tmp /dev/shm /run/lock -xdev -user "$user" -delete 2>/dev/null
}

case "$cmd" in
setup)
  mkdir -p "$d/ws" "$d/out" "$d/tmp"
  if [ "$isolate" = 1 ]; then
    id "$user" >/dev/null 2>&1 || useradd --system --user-group --no-create-home \
      --home-dir "$d/ws" --shell /usr/sbin/nologin "$user" || exit 91
    chown root:"$user" "$d"; chmod 750 "$d"
    chown "$user:$user" "$d/ws" "$d/out" "$d/tmp"; chmod 700 "$d/ws" "$d/tmp"
    mkdir -p /sys/fs/cgroup/adev
    echo "+memory +pids" > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null
    echo "+memory +pids" > /sys/fs/cgroup/adev/cgroup.subtree_control 2>/dev/null
    mkdir -p "$cg"
    echo "$PIDS_MAX" > "$cg/pids.max"; echo "$MEM_MAX" > "$cg/memory.max"
    echo 0 > "$cg/memory.swap.max" 2>/dev/null
  fi
  echo "ADEV_SETUP=ok"
  ;;
run)
  timeout_s="$1"; maxout="$2"; device="$3"; shift 3
  [ "$device" = - ] && device=""
  [ -d "$d/ws" ] || { echo "adev-gate.sh: session $sid not set up" >&2; exit 92; }
  [ "$isolate" = 1 ] && kill_all
  find "$d/ws" "$d/out" "$d/tmp" -mindepth 1 -delete 2>/dev/null
  [ "$isolate" = 1 ] && chown "$user:$user" "$d/out"
  as_user=()
  if [ "$isolate" = 1 ]; then
    as_user=(setpriv --reuid="$user" --regid="$user" --init-groups --inh-caps=-all --bounding-set=-all --no-new-privs)
    pre0="$(cat "$cg/pids.events" 2>/dev/null | awk '/max/{print $2}')"
    oom0="$(awk '/oom_kill /{print $2}' "$cg/memory.events" 2>/dev/null)"
  fi
  if ! "${as_user[@]}" tar -x -f "$d/upload.tar" -C "$d/ws" --no-same-owner --no-same-permissions 2>"$d/out/tar.err"; then
    echo "ADEV_UPLOAD_ERROR=$(head -c 300 "$d/out/tar.err" | tr '\n' ' ')"; exit 0
  fi
  rm -f "$d/upload.tar"
  t0=$(date +%s.%N)
  (
    cd "$d/ws" || exit 93
    [ "$isolate" = 1 ] && echo "$BASHPID" > "$cg/cgroup.procs"
    ulimit -f "$FSIZE_KB" -c 0
    [ "$isolate" = 1 ] && ulimit -u "$PIDS_MAX"
    exec timeout -k 5 "$timeout_s" "${as_user[@]}" env -i PATH=/usr/local/bin:/usr/bin:/bin \
      HOME="$d/ws" TMPDIR="$d/tmp" LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 \
      ADEV_BLOCK_DEVICE="$device" ADEV_SESSION="$sid" \
      "$PY" -m pytest -q --color=no --tb=short -p no:cacheprovider \
      --junitxml="$d/out/junit.xml" -- "$@"
  ) < /dev/null > "$d/out/output.full" 2>&1   # a file, not a pipe: orphans holding it can't stall us
  rc=$?
  t1=$(date +%s.%N)
  tail -c "$maxout" "$d/out/output.full" > "$d/out/output.txt"; rm -f "$d/out/output.full"
  echo "ADEV_RC=$rc"
  echo "ADEV_DURATION_S=$(echo "$t1 $t0" | awk '{printf "%.3f", $1-$2}')"
  if [ "$isolate" = 1 ]; then
    pre1="$(awk '/max/{print $2}' "$cg/pids.events" 2>/dev/null)"
    oom1="$(awk '/oom_kill /{print $2}' "$cg/memory.events" 2>/dev/null)"
    echo "ADEV_PIDS_LIMIT_HITS=$(( ${pre1:-0} - ${pre0:-0} ))"
    echo "ADEV_OOM_KILLS=$(( ${oom1:-0} - ${oom0:-0} ))"
    echo "ADEV_LEFTOVER_PROCS=$(cat "$cg/cgroup.procs" 2>/dev/null | wc -l)"
    kill_all
    chown -R root:root "$d/out"   # results are read back as root; the user may not alter them now
  fi
  ;;
cleanup)
  [ "$isolate" = 1 ] && kill_all
  rm -rf "$d"
  if [ "$isolate" = 1 ]; then
    rmdir "$cg" 2>/dev/null
    userdel "$user" 2>/dev/null
  fi
  echo "ADEV_CLEANUP=ok"
  ;;
*) echo "adev-gate.sh: unknown command $cmd" >&2; exit 94 ;;
esac
