"""Start, reuse and stop the embedded stack (Mooncake master + emulated endpoints).

``start_stack`` starts a local ``mooncake_master`` and one emulator process per endpoint
(``endpoint_command``: ``python -m adev.emulator.server --config STACK_JSON --endpoint NAME
--port PORT --master HOST:PORT [--disk-dir DIR]``), waits until each is healthy and writes the
state file; if anything fails, whatever it started is stopped again before the error is raised.
``stop_stack`` stops exactly the recorded processes (by pid and start time), endpoints first,
master last. ``running_stack`` is the async context manager sessions and fleets use.

The processes' command lines live in :mod:`.commands`, configs beyond the file in
:mod:`.configs`, the state dir's lock, users and pending start-ups in :mod:`.tracking`;
``adev stack status`` is :mod:`.status`, fault injection (master kill/restart) :mod:`.faults`.
Their public names are importable from here too.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import datetime
import json
import os
import shutil
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from ..clock import CLOCK_FILE, HeldClock, leave_held_clock
from ..config import ROOT, StackConfig, load_stack
from ..emulator.disk_device import reset_device
from ..net import NoFreePortError, free_port
from .commands import (
    CLIENT_TTL_S,
    ENDPOINT_MODULE,
    ENDPOINT_MODULE_ENV,
    MASTER_READY_TIMEOUT_S,
    cpu_pin,
    endpoint_command,
    endpoint_env,
    master_env,
    master_flags,
    master_lease_ms,
)
from .configs import config_diff, external_info, small_config
from .faults import kill_master, restart_master
from .loopback import warn_host
from .procs import (
    MissingLibraryError,
    PortInUseError,
    Proc,
    ProcessExited,
    StackError,
    StackInUseError,
    check_master_binary,
    find_master_binary,
    http_ok,
    library_error_in_log,
    listening,
    log_says_addr_in_use,
    missing_library_message,
    port_in_use,
    spawn,
    stop_process,
    wait_until,
)
from .state import ProcState, StackInfo, StackState, read_state, remove_state, state_dir_path, write_state
from .status import process_usage, stack_status
from .tracking import (
    PENDING_FILE,
    USERS_DIR,
    Pending,
    add_user,
    live_users,
    locked,
    remove_disk,
    sharing_conflict,
    stop_pending,
    stop_recorded,
)

__all__ = [
    "start_stack", "stop_stack", "running_stack", "release_user",
    # re-exported from the modules named above
    "CLIENT_TTL_S", "ENDPOINT_MODULE", "ENDPOINT_MODULE_ENV", "MASTER_READY_TIMEOUT_S", "cpu_pin",
    "endpoint_command", "endpoint_env", "master_env", "master_flags", "master_lease_ms",
    "config_diff", "external_info", "small_config", "kill_master", "restart_master",
    "process_usage", "stack_status", "free_port",
]

DISK_CONFIGURATIONS = ("store-ram+disk", "disk-only")

ENDPOINT_READY_TIMEOUT_S = 120.0
PORT_RETRIES = 3


# --------------------------------------------------------------------------------------------
# Start / stop


def start_stack(config: StackConfig | None = None, *, reuse: bool = True,
                endpoint_module: str | None = None, master_binary: str | Path | None = None,
                cancel: threading.Event | None = None,
                ready_timeout_s: float = ENDPOINT_READY_TIMEOUT_S, auto_stop: bool = False,
                user: str | None = None, exclusive: bool = False) -> StackInfo:
    """Start the embedded stack of ``config`` (default ``stacks/embedded.toml``); return its handle.

    A stack already running in the same state dir is reused when ``reuse`` and its config matches
    (``started_here`` False), else a :class:`StackError` says so. A stale state file (processes
    gone) is cleaned up. External mode starts nothing. On any failure, nothing is left running.
    Such a stack is stopped by :func:`stop_stack` (or ``adev stack down``) only; ``auto_stop``
    (used by :func:`running_stack`) lets the last registered ``user`` out stop it instead
    (see :func:`release_user`); ``user`` is registered under the same lock as the reuse decision.
    ``exclusive``: the user measures the endpoints' counters (a fleet, a replay), so a running
    stack that others use is not shared with it, and one it holds is shared with no one
    (:func:`~adev.stack.tracking.sharing_conflict`; a :class:`StackInUseError` says so).
    """
    config = config or load_stack()
    if config.mode == "external":
        return external_info(config)
    sdir = state_dir_path(config.state_dir)
    warn_host(config.host)
    with locked(sdir):
        st = read_state(sdir)
        if st is not None:
            if st.all_alive():
                diffs = config_diff(st.config, config)
                if reuse and not diffs:
                    bad = [n for n, p in st.endpoints.items()
                           if not any(http_ok(p.health_url, timeout=5.0) for _ in range(3))]
                    if bad:
                        raise StackError(f"the stack in {sdir} is running but endpoints {bad} are "
                                         "not healthy; run `adev stack down` and start it again")
                    if user:
                        conflict = sharing_conflict(sdir, exclusive)
                        if conflict:
                            raise StackInUseError(conflict)
                        add_user(sdir, user, exclusive)
                    return st.info(started_here=False)
                why = ("differs: " + "; ".join(diffs)) if diffs else "reuse not allowed"
                raise StackError(
                    f"a stack is already running in {sdir} (pids "
                    f"{', '.join(f'{p.name}={p.pid}' for p in st.processes)}; {why}); "
                    f"run `adev stack down{_sd_arg(config)}` first")
            stop_recorded(st)  # stale: stop any survivor, forget it
            remove_state(sdir)
        stop_pending(sdir)  # an earlier start-up killed half-way
        shutil.rmtree(sdir / USERS_DIR, ignore_errors=True)
        info = _start(config, sdir, endpoint_module=endpoint_module, master_binary=master_binary,
                      cancel=cancel, ready_timeout_s=ready_timeout_s, auto_stop=auto_stop)
        if user:
            add_user(sdir, user, exclusive)
        return info


def release_user(sdir: str | Path, token: str) -> dict[str, str] | None:
    """Drop user ``token`` of the stack in ``sdir``; the last user out stops a stack that a
    ``running_stack`` started (``auto_stop``). Returns what was stopped, or None."""
    sdir = state_dir_path(sdir)
    with locked(sdir):
        (sdir / USERS_DIR / f"{os.getpid()}-{token}").unlink(missing_ok=True)
        st = read_state(sdir)
        if st is None or not st.auto_stop or live_users(sdir):
            return None
        out = stop_recorded(st)
        leave_held_clock(sdir)  # its clock no longer moves: this process's stamps go back to the host's
        remove_disk(st)
        remove_state(sdir)
        shutil.rmtree(sdir / USERS_DIR, ignore_errors=True)
        return out


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
        try:
            port = free_port(host, avoid=used)
        except NoFreePortError as e:
            raise StackError(str(e)) from None
        used.add(port)
        return port

    pin = cpu_pin(config.cpus)
    logs = sdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    if config.model_clock == "held":  # before the endpoints: they open it at start-up
        HeldClock.create(sdir / CLOCK_FILE).close()
    else:
        (sdir / CLOCK_FILE).unlink(missing_ok=True)
    reset_device(sdir)  # the disk tier's shared device starts idle
    for old in logs.glob("*.log"):  # keep the previous stack's logs once, start fresh ones
        os.replace(old, old.with_suffix(".log.prev"))
    disk = config.configuration in DISK_CONFIGURATIONS
    disk_root = Path(config.store.disk_dir).expanduser() if config.store.disk_dir else sdir / "disk"
    if disk and not disk_root.is_absolute():
        disk_root = ROOT / disk_root
    started = Pending(sdir)
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
                wait_until(_serving(cancel, proc, (rpc_port, metrics_port), metrics_url),
                           proc, timeout=MASTER_READY_TIMEOUT_S, what="mooncake_master")
                _check_cancel(cancel)
                master = proc
                break
            except ProcessExited as exited:
                started.remove(proc)
                libs = library_error_in_log(proc.log)
                if libs is not None:
                    raise MissingLibraryError(missing_library_message(binary, libs)) from None
                auto = not (config.store.master_port and config.store.metrics_port)
                # the master says nothing when its RPC port is taken: it just exits
                clash = (log_says_addr_in_use(proc.log) or port_in_use(host, rpc_port)
                         or port_in_use(host, metrics_port))
                if auto and clash and attempt < PORT_RETRIES:
                    continue  # lost a race for an ephemeral port: pick again
                if clash:
                    raise PortInUseError(f"mooncake_master could not bind its ports "
                                         f"(rpc {rpc_port}, metrics {metrics_port}): "
                                         f"address already in use; log {proc.log}") from None
                raise StackError(str(exited)) from None
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
                    wait_until(_serving(cancel, p, (ports[e.name],), health), p,
                               timeout=max(1.0, deadline - time.monotonic()),
                               what=f"endpoint {e.name}")
                    _check_cancel(cancel)
                    break
                except ProcessExited as exc:
                    started.remove(p)
                    clash = log_says_addr_in_use(p.log) or port_in_use(host, ports[e.name])
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
            started_at=datetime.datetime.now(datetime.UTC).isoformat(),
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


def _ours(proc: Proc, port: int) -> bool:
    """``proc`` listens on ``port`` (unknowable without permission: assume yes)."""
    return listening(proc.pid, port) is not False


def _serving(cancel: threading.Event | None, proc: Proc, ports: tuple[int, ...],
             url: str) -> Callable[[], bool]:
    """Readiness predicate for :func:`wait_until`: cancelled, or *our* ``proc`` listens on every
    one of ``ports`` (a lost port race must not pass for ready because someone else answers
    there) and ``url`` answers. Binds its arguments now, not the caller's loop variables."""
    return lambda: _cancelled(cancel) or (all(_ours(proc, port) for port in ports) and http_ok(url))


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
    with locked(sdir):
        pending = stop_pending(sdir)
        st = read_state(sdir)
        if st is None:
            return pending or None
        out = stop_recorded(st, timeout=timeout)
        leave_held_clock(sdir)
        if not keep_disk:
            remove_disk(st)
        remove_state(sdir)
        shutil.rmtree(sdir / USERS_DIR, ignore_errors=True)
        return out


# --------------------------------------------------------------------------------------------
# The async context manager sessions and fleets use


@contextlib.asynccontextmanager
async def running_stack(config: StackConfig | None = None, **kwargs: Any) -> AsyncIterator[StackInfo]:
    """Use the stack of ``config``: reuse a matching one that is up, else start one.

    Every user registers in the state dir; on exit (also on exceptions, cancellation and Ctrl-C)
    the last user out stops a stack that a ``running_stack`` started, so concurrent users can
    share one stack safely; ``exclusive=True`` (a fleet, a replay: they measure the endpoints'
    counters) refuses to share it (:func:`start_stack`). A stack started by ``adev stack up`` is
    left running. External mode starts nothing. Start-up runs in a worker thread so the event
    loop keeps running; if the caller is cancelled during start-up, the start is aborted and
    whatever it started is stopped.
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
