"""Start, reuse and stop the embedded stack (Mooncake master + emulated endpoints).

``start_stack`` starts a local ``mooncake_master`` and one emulator process per endpoint
(contract 2: ``python -m adev.emulator.server --config STACK_JSON --endpoint NAME --port PORT
--master HOST:PORT [--disk-dir DIR]``), waits until each is healthy and writes the state file;
if anything fails, whatever it started is stopped again before the error is raised. ``stop_stack``
stops exactly the recorded processes (by pid and start time), endpoints first, master last.
``running_stack`` is the async context manager sessions and fleets use (contract 3).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import datetime
import fcntl
import json
import os
import shutil
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, AsyncIterator, Iterator
from urllib.parse import urlsplit, urlunsplit

from ..config import HOST_CPUS, ROOT, ConfigError, StackConfig, \
    check_cpus, from_dict, load_model_profile, load_stack
from .loopback import bind_env, warn_host
from .procs import (MissingLibraryError, PortInUseError, Proc, ProcessExited, StackError,
                    check_master_binary, find_master_binary, free_port, library_error_in_log,
                    listening, missing_library_message, port_in_use, spawn, stop_process,
                    tcp_open, wait_until)
from ..clock import CLOCK_FILE, HeldClock
from .state import (ProcState, StackInfo, StackState, read_state, remove_state, state_dir_path,
                    write_state)

ENDPOINT_MODULE = "adev.emulator.server"
ENDPOINT_MODULE_ENV = "ADEV_ENDPOINT_MODULE"
"""Environment variable overriding the endpoint module (tests use a stand-in server)."""

DISK_CONFIGURATIONS = ("store-ram+disk", "disk-only")
CLIENT_TTL_S = 10
"""Master ``--client_ttl`` (real seconds a store client stays alive without a heartbeat)."""

MASTER_READY_TIMEOUT_S = 30.0
ENDPOINT_READY_TIMEOUT_S = 120.0
PORT_RETRIES = 3


# --------------------------------------------------------------------------------------------
# Commands


def master_lease_ms(config: StackConfig) -> int:
    """The master's ``--default_kv_lease_ttl`` in real milliseconds.

    ``lease_real_ms = lease_ttl_s / time_scale * 1000`` (Mooncake counts the lease in real time;
    the config gives it in model seconds), at least 1 ms.
    """
    return max(1, round(config.store.lease_ttl_s / config.time_scale * 1000.0))


def master_flags(config: StackConfig, *, rpc_port: int, metrics_port: int,
                 host: str | None = None, lease_ms: int | None = None) -> list[str]:
    """``mooncake_master`` flags for ``config``.

    Disk tier: ``store-ram+disk`` offloads objects to disk when RAM evicts them
    (``--enable_offload=true --offload_on_evict=true``); ``disk-only`` writes every object through
    to disk at put time (``--enable_offload=true``), the RAM segment being a staging area only.
    """
    host = host or config.host
    flags = [f"--rpc_port={rpc_port}", f"--rpc_address={host}",
             f"--metrics_port={metrics_port}", f"--metrics_host={host}",
             f"--default_kv_lease_ttl={lease_ms if lease_ms is not None else master_lease_ms(config)}",
             f"--client_ttl={CLIENT_TTL_S}"]
    if config.configuration == "store-ram+disk":
        flags += ["--enable_offload=true", "--offload_on_evict=true"]
    elif config.configuration == "disk-only":
        flags += ["--enable_offload=true"]
    return flags


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
    """Contract 2: the emulator process command line (``module`` may also be a ``.py`` path;
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
        env["MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS"] = "1"
        env.setdefault("MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES", str(128 << 20))
    return env


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy


def _http_ok(url: str, timeout: float = 2.0) -> bool:
    try:
        with _OPENER.open(url, timeout=timeout) as r:
            return 200 <= r.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _addr_in_use(log: str) -> bool:
    try:
        text = Path(log).read_text(errors="replace").lower()
    except OSError:
        return False
    return "address already in use" in text or "errno 98" in text


# --------------------------------------------------------------------------------------------
# Configs


def external_info(config: StackConfig) -> StackInfo:
    """StackInfo for a stack of external endpoints (real vLLM): nothing is started."""
    eps, mets = {}, {}
    for e in config.endpoints:
        if not e.base_url:
            raise ConfigError(f"stack.endpoints: endpoint {e.name!r} needs base_url in mode 'external'")
        parts = urlsplit(e.base_url.rstrip("/"))
        path = parts.path if parts.path not in ("", "/") else "/v1"
        eps[e.name] = urlunsplit((parts.scheme, parts.netloc, path, "", ""))
        mets[e.name] = urlunsplit((parts.scheme, parts.netloc, "/metrics", "", ""))
    return StackInfo(endpoints=eps, metrics_urls=mets, master_metrics_url=config.store.metrics_url,
                     time_scale=1.0, profile=load_model_profile(config.profile), config=config,
                     started_here=False,
                     models={e.name: e.model for e in config.endpoints if e.model})


def small_config(state_dir: str | Path, **overrides: Any) -> StackConfig:
    """A small, fast embedded stack for tests and demos (length policy, 2 GB RAM tier, store-ram).

    ``overrides``: top-level StackConfig keys; ``store`` as a dict merged into the defaults;
    ``endpoints`` as names or dicts.
    """
    store = {"ram_gb": 2.0, "lease_ttl_s": 5.0, **(overrides.pop("store", None) or {})}
    eps = overrides.pop("endpoints", ["coder", "reasoner"])
    data: dict[str, Any] = {"mode": "embedded", "time_scale": 10.0, "configuration": "store-ram",
                            "policy": "length", "payload_scale": 64, "state_dir": str(state_dir),
                            "store": store,
                            "endpoints": [e if isinstance(e, dict) else {"name": e} for e in eps]}
    data.update(overrides)
    return from_dict(StackConfig, data, "stack")


def config_diff(running: dict[str, Any], wanted: StackConfig) -> list[str]:
    """Fields where the running stack's config differs from ``wanted`` (port 0 = any port)."""
    want = dataclasses.asdict(wanted)
    run = json.loads(json.dumps(running))
    want.pop("state_dir", None)
    run.pop("state_dir", None)
    for key in ("master_port", "metrics_port"):
        if want["store"].get(key) == 0:
            want["store"][key] = run.get("store", {}).get(key)
    run_eps = {e["name"]: e for e in run.get("endpoints", [])}
    for e in want["endpoints"]:
        if e.get("port") == 0 and e["name"] in run_eps:
            e["port"] = run_eps[e["name"]].get("port")
    diffs: list[str] = []

    def walk(a: Any, b: Any, path: str) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b)):
                walk(a.get(k), b.get(k), f"{path}.{k}")
        elif a != b:
            diffs.append(f"{path}: running {b!r}, wanted {a!r}")

    walk(want, run, "stack")
    return diffs


# --------------------------------------------------------------------------------------------
# Start / stop


@contextlib.contextmanager
def _locked(sdir: Path) -> Iterator[None]:
    sdir.mkdir(parents=True, exist_ok=True)
    with open(sdir / "lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def start_stack(config: StackConfig | None = None, *, reuse: bool = True,
                endpoint_module: str | None = None, master_binary: str | Path | None = None,
                cancel: threading.Event | None = None,
                ready_timeout_s: float = ENDPOINT_READY_TIMEOUT_S, auto_stop: bool = False,
                user: str | None = None) -> StackInfo:
    """Start the embedded stack of ``config`` (default ``stacks/embedded.toml``); return its handle.

    A stack already running in the same state dir is reused when ``reuse`` and its config matches
    (``started_here`` False), else a :class:`StackError` says so. A stale state file (processes
    gone) is cleaned up. External mode starts nothing. On any failure, nothing is left running.
    Such a stack is stopped by :func:`stop_stack` (or ``adev stack down``) only; ``auto_stop``
    (used by :func:`running_stack`) lets the last registered ``user`` out stop it instead
    (see :func:`release_user`); ``user`` is registered under the same lock as the reuse decision.
    """
    config = config or load_stack()
    if config.mode == "external":
        return external_info(config)
    sdir = state_dir_path(config.state_dir)
    warn_host(config.host)
    with _locked(sdir):
        st = read_state(sdir)
        if st is not None:
            if st.all_alive():
                diffs = config_diff(st.config, config)
                if reuse and not diffs:
                    bad = [n for n, p in st.endpoints.items()
                           if not any(_http_ok(p.health_url, timeout=5.0) for _ in range(3))]
                    if bad:
                        raise StackError(f"the stack in {sdir} is running but endpoints {bad} are "
                                         "not healthy; run `adev stack down` and start it again")
                    if user:
                        _add_user(sdir, user)
                    return st.info(started_here=False)
                why = ("differs: " + "; ".join(diffs)) if diffs else "reuse not allowed"
                raise StackError(
                    f"a stack is already running in {sdir} (pids "
                    f"{', '.join(f'{p.name}={p.pid}' for p in st.processes)}; {why}); "
                    f"run `adev stack down{_sd_arg(config)}` first")
            _stop_recorded(st)  # stale: stop any survivor, forget it
            remove_state(sdir)
        _stop_pending(sdir)  # an earlier start-up killed half-way
        shutil.rmtree(sdir / USERS_DIR, ignore_errors=True)
        info = _start(config, sdir, endpoint_module=endpoint_module, master_binary=master_binary,
                      cancel=cancel, ready_timeout_s=ready_timeout_s, auto_stop=auto_stop)
        if user:
            _add_user(sdir, user)
        return info


USERS_DIR = "users"
"""``<state_dir>/users/<pid>-<token>``: one file per live ``running_stack`` user of the stack."""


def _add_user(sdir: Path, token: str) -> None:
    d = sdir / USERS_DIR
    d.mkdir(parents=True, exist_ok=True)
    import psutil
    ct = psutil.Process().create_time()
    (d / f"{os.getpid()}-{token}").write_text(json.dumps({"pid": os.getpid(), "create_time": ct}))


def _live_users(sdir: Path) -> list[str]:
    from .procs import is_alive
    out = []
    for f in sorted((sdir / USERS_DIR).glob("*")):
        try:
            d = json.loads(f.read_text())
            if is_alive(int(d["pid"]), float(d["create_time"])):
                out.append(f.name)
                continue
        except (OSError, ValueError, KeyError, TypeError):
            pass
        f.unlink(missing_ok=True)  # a user that died without releasing
    return out


def release_user(sdir: str | Path, token: str) -> dict[str, str] | None:
    """Drop user ``token`` of the stack in ``sdir``; the last user out stops a stack that a
    ``running_stack`` started (``auto_stop``). Returns what was stopped, or None."""
    sdir = state_dir_path(sdir)
    with _locked(sdir):
        (sdir / USERS_DIR / f"{os.getpid()}-{token}").unlink(missing_ok=True)
        st = read_state(sdir)
        if st is None or not st.auto_stop or _live_users(sdir):
            return None
        out = _stop_recorded(st)
        _remove_disk(st)
        remove_state(sdir)
        shutil.rmtree(sdir / USERS_DIR, ignore_errors=True)
        return out


def _remove_disk(st: StackState) -> None:
    for p in st.endpoints.values():
        if p.disk_dir:
            shutil.rmtree(p.disk_dir, ignore_errors=True)
            with contextlib.suppress(OSError):
                Path(p.disk_dir).parent.rmdir()  # the disk root, once empty


def _sd_arg(config: StackConfig) -> str:
    return "" if config.state_dir == StackConfig().state_dir else f" --state-dir {config.state_dir}"


def _start(config: StackConfig, sdir: Path, *, endpoint_module: str | None,
           master_binary: str | Path | None, cancel: threading.Event | None,
           ready_timeout_s: float, auto_stop: bool) -> StackInfo:
    host = config.host
    module = endpoint_module or os.environ.get(ENDPOINT_MODULE_ENV) or ENDPOINT_MODULE
    binary = Path(master_binary) if master_binary else find_master_binary()
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        raise StackError(f"mooncake_master not found: {binary} is not an executable file")
    check_master_binary(binary)

    # Fixed ports must be free before anything starts.
    fixed = [("stack.store.master_port", config.store.master_port),
             ("stack.store.metrics_port", config.store.metrics_port),
             *((f"stack.endpoints[{e.name}].port", e.port) for e in config.endpoints)]
    for where, port in fixed:
        if port and port_in_use(host, port):
            raise PortInUseError(f"{where}: port {port} on {host} is already in use; free it or "
                                 "set the port to 0 (a free port is chosen)")
    used: set[int] = {p for _, p in fixed if p}

    def pick(configured: int) -> int:
        if configured:
            return configured
        port = free_port(host, avoid=used)
        used.add(port)
        return port

    pin = cpu_pin(config.cpus)
    logs = sdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    if config.model_clock == "held":  # before the endpoints: they open it at start-up
        HeldClock.create(sdir / CLOCK_FILE).close()
    else:
        (sdir / CLOCK_FILE).unlink(missing_ok=True)
    for old in logs.glob("*.log"):  # keep the previous stack's logs once, start fresh ones
        os.replace(old, old.with_suffix(".log.prev"))
    disk = config.configuration in DISK_CONFIGURATIONS
    disk_root = Path(config.store.disk_dir).expanduser() if config.store.disk_dir else sdir / "disk"
    if disk and not disk_root.is_absolute():
        disk_root = ROOT / disk_root
    started = _Pending(sdir)
    try:
        # --- the master -------------------------------------------------------------------
        lease_ms = master_lease_ms(config)
        rpc_port = metrics_port = 0
        master: Proc | None = None
        for attempt in range(PORT_RETRIES + 1):
            rpc_port, metrics_port = pick(config.store.master_port), pick(config.store.metrics_port)
            flags = master_flags(config, rpc_port=rpc_port, metrics_port=metrics_port,
                                 lease_ms=lease_ms)
            proc = spawn("master", [*pin, str(binary), *flags], logs / "master.log", cwd=sdir,
                         env=master_env(config),
                         ports={"rpc": rpc_port, "metrics": metrics_port})
            started.append(proc)
            metrics_url = f"http://{host}:{metrics_port}/metrics"
            try:
                # ready = *our* master listens on both ports (a lost port race must not pass
                # for ready because someone else answers there) and serves metrics
                wait_until(lambda: _cancelled(cancel) or (
                    _ours(proc, rpc_port) and _ours(proc, metrics_port) and _http_ok(metrics_url)),
                    proc, timeout=MASTER_READY_TIMEOUT_S, what="mooncake_master")
                _check_cancel(cancel)
                master = proc
                break
            except ProcessExited as e:
                started.remove(proc)
                libs = library_error_in_log(proc.log)
                if libs is not None:
                    raise MissingLibraryError(missing_library_message(binary, libs)) from None
                auto = not (config.store.master_port and config.store.metrics_port)
                # the master says nothing when its RPC port is taken: it just exits
                clash = (_addr_in_use(proc.log) or port_in_use(host, rpc_port)
                         or port_in_use(host, metrics_port))
                if auto and clash and attempt < PORT_RETRIES:
                    continue  # lost a race for an ephemeral port: pick again
                if clash:
                    raise PortInUseError(f"mooncake_master could not bind its ports "
                                         f"(rpc {rpc_port}, metrics {metrics_port}): "
                                         f"address already in use; log {proc.log}") from None
                raise StackError(str(e)) from None
        assert master is not None
        master_addr = f"{host}:{rpc_port}"

        # --- the endpoints ----------------------------------------------------------------
        ports = {e.name: pick(e.port) for e in config.endpoints}
        actual = _with_ports(config, rpc_port, metrics_port, ports)
        stack_json = sdir / "stack.json"
        stack_json.write_text(json.dumps(dataclasses.asdict(actual), indent=2))
        disk_dirs: dict[str, Path | None] = {}
        for e in config.endpoints:
            d = None
            if disk:
                d = disk_root / e.name
                shutil.rmtree(d, ignore_errors=True)
                d.mkdir(parents=True, exist_ok=True)
            disk_dirs[e.name] = d
        procs: dict[str, Proc] = {}

        def launch(name: str) -> Proc:
            cmd = [*pin, *endpoint_command(module, stack_json, name, ports[name], master_addr,
                                           disk_dirs[name])]
            p = spawn(name, cmd, logs / f"{name}.log", env=endpoint_env(config, disk_dirs[name]),
                      cwd=ROOT, ports={"http": ports[name]})
            started.append(p)
            return p

        for e in config.endpoints:
            procs[e.name] = launch(e.name)
        deadline = time.monotonic() + ready_timeout_s
        for e in config.endpoints:
            retries = 0
            while True:
                p = procs[e.name]
                health = f"http://{host}:{ports[e.name]}/health"
                try:
                    wait_until(lambda: _cancelled(cancel) or (_ours(p, ports[e.name])
                                                             and _http_ok(health)), p,
                               timeout=max(1.0, deadline - time.monotonic()),
                               what=f"endpoint {e.name}")
                    _check_cancel(cancel)
                    break
                except ProcessExited as exc:
                    started.remove(p)
                    clash = _addr_in_use(p.log) or port_in_use(host, ports[e.name])
                    if e.port == 0 and clash and retries < PORT_RETRIES:
                        retries += 1
                        ports[e.name] = pick(0)
                        procs[e.name] = launch(e.name)
                        continue
                    if clash:
                        raise PortInUseError(f"endpoint {e.name}: port {ports[e.name]} is already "
                                             f"in use; log {p.log}") from None
                    libs = library_error_in_log(p.log)
                    if libs is not None:
                        raise MissingLibraryError(missing_library_message(
                            f"endpoint {e.name} (Mooncake store client)", libs)) from None
                    raise StackError(str(exc)) from None
        actual = _with_ports(config, rpc_port, metrics_port, ports)
        stack_json.write_text(json.dumps(dataclasses.asdict(actual), indent=2))

        state = StackState(
            state_dir=str(sdir),
            started_at=datetime.datetime.now(datetime.timezone.utc).isoformat(),
            owner_pid=os.getpid(),
            config=dataclasses.asdict(actual),
            master=ProcState.from_proc(master, port=rpc_port, url=master_addr,
                                       metrics_url=f"http://{host}:{metrics_port}/metrics",
                                       health_url=f"http://{host}:{metrics_port}/health",
                                       metrics_port=metrics_port),
            endpoints={n: ProcState.from_proc(
                p, port=ports[n], url=f"http://{host}:{ports[n]}/v1",
                metrics_url=f"http://{host}:{ports[n]}/metrics",
                health_url=f"http://{host}:{ports[n]}/health",
                disk_dir=str(disk_dirs[n]) if disk_dirs[n] else None) for n, p in procs.items()},
            lease_ttl_real_ms=lease_ms,
            master_flags=master.cmd[1:],
            auto_stop=auto_stop,
        )
        write_state(state)
        started.clear()
        return state.info(started_here=True)
    except BaseException:
        # Nothing left running: stop what we started, endpoints first, master last.
        for p in reversed(started):
            stop_process(p.pid, p.create_time, timeout=10.0)
        started.clear()
        raise


PENDING_FILE = "pending.json"


class _Pending(list):
    """Processes started but not yet in the state file, mirrored to ``pending.json`` so that a
    start-up killed half-way (SIGKILL of adev) leaves nothing ``down`` cannot find."""

    def __init__(self, sdir: Path):
        super().__init__()
        self.path = sdir / PENDING_FILE

    def _sync(self) -> None:
        if not self:
            self.path.unlink(missing_ok=True)
            return
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps([{"name": p.name, "pid": p.pid, "create_time": p.create_time}
                                   for p in self]))
        os.replace(tmp, self.path)

    def append(self, p: Proc) -> None:
        super().append(p)
        self._sync()

    def remove(self, p: Proc) -> None:
        super().remove(p)
        self._sync()

    def clear(self) -> None:
        super().clear()
        self._sync()


def _stop_pending(sdir: Path) -> dict[str, str]:
    """Stop what an interrupted start-up left in ``pending.json`` (endpoints first)."""
    p = sdir / PENDING_FILE
    try:
        entries = json.loads(p.read_text())
    except (OSError, ValueError):
        p.unlink(missing_ok=True)
        return {}
    out = {}
    for e in reversed(entries):
        try:
            out[e["name"]] = stop_process(int(e["pid"]), float(e["create_time"]), timeout=10.0)
        except (KeyError, TypeError, ValueError):
            continue
    p.unlink(missing_ok=True)
    return out


def _ours(proc: Proc, port: int) -> bool:
    """``proc`` listens on ``port`` (unknowable without permission: assume yes)."""
    return listening(proc.pid, port) is not False


def _cancelled(cancel: threading.Event | None) -> bool:
    return cancel is not None and cancel.is_set()


def _check_cancel(cancel: threading.Event | None) -> None:
    if _cancelled(cancel):
        raise StackError("stack start-up cancelled")


def _with_ports(config: StackConfig, rpc: int, metrics: int, ports: dict[str, int]) -> StackConfig:
    return dataclasses.replace(
        config,
        store=dataclasses.replace(config.store, master_port=rpc, metrics_port=metrics),
        endpoints=[dataclasses.replace(e, port=ports[e.name]) for e in config.endpoints])


def _stop_recorded(st: StackState, timeout: float = 15.0) -> dict[str, str]:
    """Stop the processes of ``st``: endpoints together, then the master."""
    out: dict[str, str] = {}
    eps = list(st.endpoints.values())
    if eps:
        with concurrent.futures.ThreadPoolExecutor(len(eps)) as ex:
            for p, r in zip(eps, ex.map(lambda q: stop_process(q.pid, q.create_time,
                                                               timeout=timeout), eps)):
                out[p.name] = r
    out[st.master.name] = stop_process(st.master.pid, st.master.create_time, timeout=timeout)
    return out


def stop_stack(target: StackInfo | StackConfig | str | Path | None = None, *,
               timeout: float = 15.0, keep_disk: bool = False) -> dict[str, str] | None:
    """Stop the stack recorded in ``target``'s state dir (a StackInfo, StackConfig or path;
    default the default stack). Returns ``{process: 'stopped'|'killed'|'gone'}``, or None when
    no stack was recorded there. External stacks are never stopped (None)."""
    if isinstance(target, StackInfo):
        if target.config.mode == "external":
            return None
        sdir = state_dir_path(target.config.state_dir)
    elif isinstance(target, StackConfig):
        if target.mode == "external":
            return None
        sdir = state_dir_path(target.state_dir)
    else:
        sdir = state_dir_path(target if target is not None else StackConfig().state_dir)
    if read_state(sdir) is None and not (sdir / PENDING_FILE).exists():
        return None
    with _locked(sdir):
        pending = _stop_pending(sdir)
        st = read_state(sdir)
        if st is None:
            return pending or None
        out = _stop_recorded(st, timeout=timeout)
        if not keep_disk:
            _remove_disk(st)
        remove_state(sdir)
        shutil.rmtree(sdir / USERS_DIR, ignore_errors=True)
        return out


# --------------------------------------------------------------------------------------------
# Contract 3: the async context manager


@contextlib.asynccontextmanager
async def running_stack(config: StackConfig | None = None, **kwargs: Any) -> AsyncIterator[StackInfo]:
    """Use the stack of ``config``: reuse a matching one that is up, else start one (contract 3).

    Every user registers in the state dir; on exit (also on exceptions, cancellation and Ctrl-C)
    the last user out stops a stack that a ``running_stack`` started, so concurrent fleets can
    share one stack safely. A stack started by ``adev stack up`` is left running. External mode
    starts nothing. Start-up runs in a worker thread so the event loop keeps running; if the
    caller is cancelled during start-up, the start is aborted and whatever it started is stopped.
    """
    import uuid
    config = config or load_stack()
    if config.mode == "external":
        yield external_info(config)
        return
    token = uuid.uuid4().hex[:12]
    cancel = threading.Event()
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="adev-stack")
    fut = pool.submit(start_stack, config, reuse=True, cancel=cancel, user=token,
                      auto_stop=True, **kwargs)
    pool.shutdown(wait=False)
    try:
        info = await asyncio.wrap_future(fut)
    except BaseException:
        cancel.set()
        try:
            fut.result()  # the start finishes (or aborts) promptly once cancel is set
        except BaseException:
            pass  # the start failed or aborted and cleaned up after itself
        else:
            release_user(config.state_dir, token)
        raise
    try:
        yield info
    finally:
        release_user(config.state_dir, token)  # synchronous: a second cancel cannot interrupt it


# --------------------------------------------------------------------------------------------
# Status


def stack_status(config: StackConfig | None = None) -> dict[str, Any]:
    """What is up: per process pid, alive, healthy and URLs (embedded, from the state file), or
    the configured URLs probed for health (external). ``running`` is True when all is healthy."""
    config = config or load_stack()
    if config.mode == "external":
        info = external_info(config)
        eps = {}
        for n, url in info.endpoints.items():
            root = url[: -len("/v1")] if url.endswith("/v1") else url
            eps[n] = {"base_url": url, "metrics_url": info.metrics_urls[n],
                      "healthy": _http_ok(root + "/health")}
        master = ({"metrics_url": info.master_metrics_url,
                   "healthy": _http_ok(info.master_metrics_url)}
                  if info.master_metrics_url else None)
        return {"mode": "external", "running": all(e["healthy"] for e in eps.values()),
                "time_scale": 1.0, "model": info.model, "endpoints": eps, "master": master}
    sdir = state_dir_path(config.state_dir)
    st = read_state(sdir)
    if st is None:
        return {"mode": "embedded", "running": False, "state_file": str(sdir / "state.json"),
                "reason": "no stack recorded in this state dir"}
    cfg = st.stack_config()

    def proc(p: ProcState, master: bool = False) -> dict[str, Any]:
        alive = p.alive()
        d: dict[str, Any] = {"pid": p.pid, "alive": alive,
                             "healthy": alive and _http_ok(p.health_url),
                             "metrics_url": p.metrics_url, "log": p.log}
        if master:
            d["address"] = p.url
        else:
            d["base_url"] = p.url
            d["port"] = p.port
        return d

    usage = process_usage(st)
    eps = {n: {**proc(p), **usage.get(n, {})} for n, p in st.endpoints.items()}
    master = {**proc(st.master, master=True), **usage.get("master", {})}
    master["lease_ttl_real_ms"] = st.lease_ttl_real_ms
    running = master["healthy"] and all(e["healthy"] for e in eps.values())
    return {"mode": "embedded", "running": running, "state_file": str(sdir / "state.json"),
            "started_at": st.started_at, "time_scale": cfg.time_scale,
            "configuration": cfg.configuration, "model": load_model_profile(cfg.profile).name,
            "endpoints": eps, "master": master}


# --------------------------------------------------------------------------------------------
# Faults: the master going away and coming back


def _target_dir(target: StackInfo | StackConfig | str | Path | None) -> Path:
    if isinstance(target, StackInfo):
        return state_dir_path(target.config.state_dir)
    if isinstance(target, StackConfig):
        return state_dir_path(target.state_dir)
    return state_dir_path(target if target is not None else StackConfig().state_dir)


def kill_master(target: StackInfo | StackConfig | str | Path | None = None, *,
                hard: bool = True) -> str:
    """Stop the running stack's master (SIGKILL when ``hard``), leaving the endpoints up.

    Returns how it went ('killed', 'stopped' or 'gone'). The state file keeps the master's entry
    so :func:`restart_master` can bring one back on the same ports.
    """
    sdir = _target_dir(target)
    with _locked(sdir):
        st = read_state(sdir)
        if st is None:
            raise StackError(f"no stack recorded in {sdir}")
        m = st.master
        return stop_process(m.pid, m.create_time, hard=hard)


def restart_master(target: StackInfo | StackConfig | str | Path | None = None, *,
                   timeout_s: float = MASTER_READY_TIMEOUT_S) -> StackInfo:
    """Start the master again with its recorded command (same ports, same flags) if it is not
    running, wait until it is ready and update the state file. Returns the refreshed StackInfo."""
    sdir = _target_dir(target)
    with _locked(sdir):
        st = read_state(sdir)
        if st is None:
            raise StackError(f"no stack recorded in {sdir}")
        m = st.master
        if not m.alive():
            host = m.url.rpartition(":")[0]
            deadline = time.monotonic() + timeout_s
            while True:  # the old sockets may linger for a moment after a kill
                proc = spawn("master", m.cmd, Path(m.log), cwd=sdir,
                             env=master_env(st.stack_config()),
                             ports={"rpc": m.port, "metrics": m.metrics_port or 0})
                try:
                    wait_until(lambda: tcp_open(host, m.port) and _http_ok(m.metrics_url), proc,
                               timeout=max(1.0, deadline - time.monotonic()),
                               what="mooncake_master")
                    break
                except ProcessExited:
                    if not _addr_in_use(proc.log) or time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            st.master = ProcState.from_proc(proc, port=m.port, url=m.url,
                                            metrics_url=m.metrics_url, health_url=m.health_url,
                                            metrics_port=m.metrics_port)
            write_state(st)
        return st.info(started_here=isinstance(target, StackInfo) and target.started_here)


def process_usage(target: StackState | StackInfo | StackConfig | str | Path | None = None
                  ) -> dict[str, dict[str, float]]:
    """CPU seconds (user + system, since start) and resident memory of each live stack process.

    CPU share over an interval = delta of ``cpu_s`` / wall seconds (cores used); this is what the
    stack itself costs the machine, apart from the client driving it.
    """
    import psutil

    from .procs import _process
    st = target if isinstance(target, StackState) else read_state(_target_dir(target))
    if st is None:
        return {}
    out: dict[str, dict[str, float]] = {}
    for p in st.processes:
        proc = _process(p.pid, p.create_time)
        if proc is None:
            continue
        try:
            with proc.oneshot():
                t = proc.cpu_times()
                out[p.name] = {"cpu_s": t.user + t.system, "rss_mb": proc.memory_info().rss / 2**20}
        except psutil.Error:
            continue
    return out
