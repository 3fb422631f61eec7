"""Faults: the master going away and coming back, endpoints left up (tests and fault runs).

:func:`kill_master` stops the running stack's master (SIGKILL by default); :func:`restart_master`
starts it again with its recorded command on the same ports and updates the state file.
"""
from __future__ import annotations

import time
from pathlib import Path

from ..config import StackConfig
from .commands import MASTER_READY_TIMEOUT_S, master_env
from .procs import ProcessExited, StackError, http_ok, log_says_addr_in_use, spawn, stop_process, tcp_open, wait_until
from .state import ProcState, StackInfo, read_state, write_state
from .tracking import locked, target_dir


def kill_master(target: StackInfo | StackConfig | str | Path | None = None, *,
                hard: bool = True) -> str:
    """Stop the running stack's master (SIGKILL when ``hard``), leaving the endpoints up.

    Returns how it went ('killed', 'stopped' or 'gone'). The state file keeps the master's entry
    so :func:`restart_master` can bring one back on the same ports.
    """
    sdir = target_dir(target)
    with locked(sdir):
        st = read_state(sdir)
        if st is None:
            raise StackError(f"no stack recorded in {sdir}")
        m = st.master
        return stop_process(m.pid, m.create_time, hard=hard)


def restart_master(target: StackInfo | StackConfig | str | Path | None = None, *,
                   timeout_s: float = MASTER_READY_TIMEOUT_S) -> StackInfo:
    """Start the master again with its recorded command (same ports, same flags) if it is not
    running, wait until it is ready and update the state file. Returns the refreshed StackInfo."""
    sdir = target_dir(target)
    with locked(sdir):
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
                    wait_until(lambda: tcp_open(host, m.port) and http_ok(m.metrics_url), proc,
                               timeout=max(1.0, deadline - time.monotonic()),
                               what="mooncake_master")
                    break
                except ProcessExited:
                    if not log_says_addr_in_use(proc.log) or time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            st.master = ProcState.from_proc(proc, port=m.port, url=m.url,
                                            metrics_url=m.metrics_url, health_url=m.health_url,
                                            metrics_port=m.metrics_port)
            write_state(st)
        return st.info(started_here=isinstance(target, StackInfo) and target.started_here)
