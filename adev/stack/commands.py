"""Command lines and environments of the embedded stack's processes.

The master: :func:`master_flags` (ports, lease, disk tier), :func:`master_env`. An endpoint:
:func:`endpoint_command`, :func:`endpoint_env`. :func:`cpu_pin` prefixes either
with ``taskset`` for ``stack.cpus``. ``adev stack up`` runs exactly these; ``adev stack plan
vllm`` and the emulator's tests reuse them.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from ..config import HOST_CPUS, StackConfig, check_cpus
from ..emulator.leases import lease_split
from .loopback import bind_env
from .procs import StackError

ENDPOINT_MODULE = "adev.emulator.server"
ENDPOINT_MODULE_ENV = "ADEV_ENDPOINT_MODULE"
"""Environment variable overriding the endpoint module (tests use a stand-in server)."""

CLIENT_TTL_S = 10
"""Master ``--client_ttl`` (real seconds a store client stays alive without a heartbeat)."""

MASTER_READY_TIMEOUT_S = 30.0
"""Seconds the master gets to listen on its ports and serve metrics after it is started."""


def master_lease_ms(config: StackConfig) -> int:
    """The master's ``--default_kv_lease_ttl`` in real milliseconds.

    ``lease_real_ms = lease_ttl_s / time_scale / k * 1000`` (Mooncake counts the lease in real
    time; the config gives it in model seconds), at least 1 ms. ``k``
    (:func:`adev.emulator.leases.lease_split`) is 1 unless the model clock is held and the lease
    long enough to be split: the endpoints then renew each lease until its model TTL has passed
    (:class:`adev.emulator.leases.ModelLeases`), so it lasts its TTL in model time on a held clock.
    """
    lease, scale = config.store.lease_ttl_s, config.time_scale
    return max(1, round(lease / scale / lease_split(lease, scale, config.model_clock) * 1000.0))


def heartbeat_real_s(offload_heartbeat_s: float, time_scale: float) -> int:
    """The offload heartbeat of an endpoint's store client in real seconds (Mooncake takes whole
    seconds, at least 1):

        max(1, round(offload_heartbeat_s / time_scale))

    The heartbeat writes objects the master chose for eviction to the disk tier; until then they
    stay in RAM, readable but not evictable. Scaled like every modelled duration, it waits about
    the same model time at every time scale: 10 model s is 1 s real at time scale 10 and 5 s at
    time scale 2 (above time scale 10 it stays 1 s real, longer than the model's)."""
    return max(1, round(offload_heartbeat_s / time_scale))


MIN_HEARTBEAT_REAL_S = 1
"""Mooncake's shortest offload heartbeat: whole seconds, at least 1."""


def heartbeat_max_scale(offload_heartbeat_s: float) -> float:
    """The highest time scale at which the offload heartbeat keeps its model period:

        offload_heartbeat_s / MIN_HEARTBEAT_REAL_S

    (10 for the default 10 model s). Above it the heartbeat stays 1 s real, S model seconds: an
    object the master chose for eviction (or, in ``disk-only``, every object put) stays in RAM
    and cannot be evicted for S / offload_heartbeat_s times longer than modelled, so each eviction
    cycle finds fewer objects it may evict, and the store runs more cycles, each freeing less."""
    return offload_heartbeat_s / MIN_HEARTBEAT_REAL_S


def offload_heartbeat_real_s(config: StackConfig) -> int:
    """:func:`heartbeat_real_s` of the stack's ``store.offload_heartbeat_s``."""
    return heartbeat_real_s(config.store.offload_heartbeat_s, config.time_scale)


def master_flags(config: StackConfig, *, rpc_port: int, metrics_port: int,
                 host: str | None = None, lease_ms: int | None = None) -> list[str]:
    """``mooncake_master`` flags for ``config``.

    Disk tier: ``store-ram+disk`` offloads objects to disk when RAM evicts them
    (``--enable_offload=true --offload_on_evict=true``), or with ``store.disk_writes = "put"``
    every object after its put (``--enable_offload=true``), and with ``store.promotion_on_hit``
    copies a disk-only object back to RAM once it has been read ``store.promotion_threshold``
    times (:func:`promotion_flags`); ``disk-only`` writes every object through to disk at put
    time (``--enable_offload=true``), the RAM segment being a staging area only.
    """
    host = host or config.host
    flags = [f"--rpc_port={rpc_port}", f"--rpc_address={host}",
             f"--metrics_port={metrics_port}", f"--metrics_host={host}",
             f"--default_kv_lease_ttl={lease_ms if lease_ms is not None else master_lease_ms(config)}",
             f"--client_ttl={CLIENT_TTL_S}"]
    if config.configuration == "store-ram+disk":
        on_evict = ["--offload_on_evict=true"] if config.store.disk_writes == "evict" else []
        flags += ["--enable_offload=true", *on_evict, *promotion_flags(config)]
    elif config.configuration == "disk-only":
        flags += ["--enable_offload=true"]
    return flags


PROMOTION_QUEUE_LIMIT = 50_000
"""Mooncake's default ``--promotion_queue_limit`` (promotions in flight over the whole store): the
per-heartbeat cap given for ``store.promotion_per_heartbeat = 0``."""


def promotion_flags(config: StackConfig) -> list[str]:
    """The master's promotion-on-hit flags for ``store.promotion_on_hit`` ([] when off):
    ``--promotion_on_hit=true``, ``--promotion_admission_threshold`` = ``promotion_threshold``
    and ``--promotion_max_per_heartbeat`` = ``promotion_per_heartbeat``, or
    :data:`PROMOTION_QUEUE_LIMIT` for 0 (no cap of its own)."""
    s = config.store
    if not s.promotion_on_hit:
        return []
    cap = s.promotion_per_heartbeat or PROMOTION_QUEUE_LIMIT
    return ["--promotion_on_hit=true", f"--promotion_admission_threshold={s.promotion_threshold}",
            f"--promotion_max_per_heartbeat={cap}"]


def cpu_pin(cpus: list[int]) -> list[str]:
    """The command prefix that runs a process on ``cpus`` (``stack.cpus``): util-linux's
    ``taskset``, which execs the command (same pid) with the affinity set before it starts any
    thread. [] = any core: no prefix, unless this process was itself pinned since start-up (a
    fleet's ``client_cpus``), whose affinity the stack must not inherit."""
    if not cpus:
        if not HOST_CPUS or sorted(os.sched_getaffinity(0)) == HOST_CPUS:
            return []
        cpus = HOST_CPUS
    check_cpus(cpus, "stack.cpus")
    taskset = shutil.which("taskset")
    if taskset is None:
        raise StackError("stack.cpus needs taskset (Debian package util-linux); not found on PATH")
    return [taskset, "--cpu-list", ",".join(str(c) for c in cpus)]


def endpoint_command(module: str, stack_json: Path, name: str, port: int, master: str | None,
                     disk_dir: Path | None) -> list[str]:
    """The emulator process command line (``module`` may also be a ``.py`` path;
    ``master`` None: no store, for the recompute and gpu-only configurations)."""
    run = [sys.executable, module] if module.endswith(".py") else [sys.executable, "-m", module]
    cmd = [*run, "--config", str(stack_json), "--endpoint", name, "--port", str(port)]
    if master is not None:
        cmd += ["--master", master]
    if disk_dir is not None:
        cmd += ["--disk-dir", str(disk_dir)]
    return cmd


def master_env(config: StackConfig) -> dict[str, str]:
    """Environment of the master: every listener on ``stack.host`` (:mod:`.loopback`)."""
    env = dict(os.environ)
    env.update(bind_env(config.host, env))
    return env


def endpoint_env(config: StackConfig, disk_dir: Path | None) -> dict[str, str]:
    """Environment of an endpoint process: Mooncake's client bound to the stack host (its
    wildcard listeners too: :mod:`.loopback`) and, with a disk tier, the file-per-key offload
    backend in the endpoint's own directory (mooncake.md)."""
    env = dict(os.environ)
    env.update(bind_env(config.host, env))
    env["MC_TCP_BIND_ADDRESS"] = config.host
    env["PYTHONUNBUFFERED"] = "1"
    if disk_dir is not None:
        env["MOONCAKE_OFFLOAD_FILE_STORAGE_PATH"] = str(disk_dir)
        env["MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR"] = "file_per_key_storage_backend"
        env["MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS"] = str(offload_heartbeat_real_s(config))
        env.setdefault("MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES", str(128 << 20))
    return env
