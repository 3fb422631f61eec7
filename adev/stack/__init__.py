"""The stack: a local Mooncake master + emulated endpoints (embedded), or external endpoints.

API::

    from adev.stack import running_stack, start_stack, stop_stack, read_state, StackInfo

    async with running_stack(config) as info:      # reuse a matching stack or start one
        info.endpoints["coder"]                      # http://127.0.0.1:PORT/v1
        info.metrics_urls["coder"], info.master_metrics_url, info.time_scale, info.profile

    info = start_stack(config)                       # sync, for pytest fixtures and scripts
    stop_stack(info)

Modules: :mod:`.procs` (binaries, ports, processes), :mod:`.state` (StackInfo, state file),
:mod:`.commands` (process command lines), :mod:`.configs` (external, small, diff),
:mod:`.tracking` (lock, users, pending start-ups), :mod:`.lifecycle` (start/stop/reuse),
:mod:`.status` (status, usage), :mod:`.faults` (master kill/restart), :mod:`.plan`
(``plan vllm``), :mod:`.cli` (verbs).
"""
from __future__ import annotations

from .cli import register
from .commands import (
                       CLIENT_TTL_S,
                       ENDPOINT_MODULE,
                       ENDPOINT_MODULE_ENV,
                       endpoint_command,
                       master_flags,
                       master_lease_ms,
)
from .configs import config_diff, external_info, small_config
from .faults import kill_master, restart_master
from .lifecycle import release_user, running_stack, start_stack, stop_stack
from .procs import (
                       DEBIAN_PACKAGES,
                       MASTER_ENV,
                       MissingBinaryError,
                       MissingLibraryError,
                       PortInUseError,
                       StackError,
                       StackInUseError,
                       find_master_binary,
)
from .state import ProcState, StackInfo, StackState, read_state, state_dir_path
from .status import process_usage, stack_status

__all__ = [
    "StackInfo", "StackState", "ProcState", "StackError", "MissingBinaryError",
    "MissingLibraryError", "PortInUseError", "StackInUseError", "running_stack", "start_stack",
    "stop_stack",
    "read_state", "stack_status", "small_config", "external_info", "master_flags",
    "master_lease_ms", "endpoint_command", "config_diff", "find_master_binary", "register",
    "state_dir_path", "MASTER_ENV", "ENDPOINT_MODULE", "ENDPOINT_MODULE_ENV", "DEBIAN_PACKAGES",
    "CLIENT_TTL_S", "kill_master", "restart_master", "release_user", "process_usage",
]
