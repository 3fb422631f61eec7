"""The stack handle (:class:`StackInfo`) and the state file of a running stack.

``<state_dir>/state.json`` records what ``adev stack up`` started: the config it ran with (actual
ports filled in), and per process the pid, start time, command, ports, URLs and log file. It is
written atomically once everything is healthy, and removed by ``down``. A relative ``state_dir``
is taken relative to the project root, so every adev command finds the same stack.
"""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import ROOT, ModelProfile, StackConfig, from_dict
from .procs import Proc, is_alive

STATE_FILE = "state.json"
STATE_VERSION = 1


def state_dir_path(state_dir: str | Path) -> Path:
    p = Path(state_dir).expanduser()
    return p if p.is_absolute() else ROOT / p


def state_file(state_dir: str | Path) -> Path:
    return state_dir_path(state_dir) / STATE_FILE


@dataclass
class ProcState:
    """One process of a running stack as the state file records it."""

    name: str
    pid: int
    create_time: float
    cmd: list[str]
    log: str
    port: int
    url: str  # endpoint: base URL (…/v1); master: RPC address host:port
    metrics_url: str
    health_url: str
    metrics_port: int | None = None
    disk_dir: str | None = None

    @classmethod
    def from_proc(cls, proc: Proc, **kw: Any) -> ProcState:
        return cls(name=proc.name, pid=proc.pid, create_time=proc.create_time, cmd=proc.cmd,
                   log=proc.log, **kw)

    def alive(self) -> bool:
        return is_alive(self.pid, self.create_time)


@dataclass
class StackState:
    """The content of ``state.json``."""

    state_dir: str
    started_at: str
    owner_pid: int
    config: dict[str, Any]  # dataclasses.asdict(StackConfig), actual ports filled in
    master: ProcState
    endpoints: dict[str, ProcState]
    lease_ttl_real_ms: int
    master_flags: list[str] = field(default_factory=list)
    auto_stop: bool = False  # True: started by running_stack, the last user out stops it
    version: int = STATE_VERSION

    @property
    def processes(self) -> list[ProcState]:
        """Endpoints first, master last (the order ``down`` stops them in)."""
        return [*self.endpoints.values(), self.master]

    def stack_config(self) -> StackConfig:
        return from_dict(StackConfig, self.config, "stack")

    def live(self) -> dict[str, bool]:
        return {p.name: p.alive() for p in self.processes}

    def all_alive(self) -> bool:
        return all(self.live().values())

    def any_alive(self) -> bool:
        return any(self.live().values())

    def info(self, *, started_here: bool = False) -> StackInfo:
        cfg = self.stack_config()
        return StackInfo(
            endpoints={n: p.url for n, p in self.endpoints.items()},
            metrics_urls={n: p.metrics_url for n, p in self.endpoints.items()},
            master_metrics_url=self.master.metrics_url,
            time_scale=cfg.time_scale,
            profile=cfg.model_profile(),
            config=cfg,
            started_here=started_here,
            master_address=self.master.url,
            state_path=str(state_file(self.state_dir)),
            pids={p.name: p.pid for p in self.processes},
            logs={p.name: p.log for p in self.processes},
            lease_ttl_real_ms=self.lease_ttl_real_ms,
            models={e.name: e.model or "" for e in cfg.endpoints if e.model},
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StackState:
        d = dict(d)
        d["master"] = ProcState(**d["master"])
        d["endpoints"] = {k: ProcState(**v) for k, v in d["endpoints"].items()}
        return cls(**d)


@dataclass
class StackInfo:
    """Handle on a stack that is up: what a client needs to use and observe it.

    ``endpoints``: name -> OpenAI base URL (``http://127.0.0.1:PORT/v1``); ``metrics_urls``: name ->
    Prometheus URL; ``master_metrics_url``: the Mooncake master's metrics (None when an external
    stack names none); ``time_scale``: model seconds per wall second (1 against real endpoints);
    ``started_here``: True when this process started it (and will stop it).
    """

    endpoints: dict[str, str]
    metrics_urls: dict[str, str]
    master_metrics_url: str | None
    time_scale: float
    profile: ModelProfile
    config: StackConfig
    started_here: bool = False
    master_address: str | None = None  # host:rpc_port of the Mooncake master (embedded mode)
    state_path: str | None = None
    pids: dict[str, int] = field(default_factory=dict)
    logs: dict[str, str] = field(default_factory=dict)
    lease_ttl_real_ms: int | None = None
    models: dict[str, str] = field(default_factory=dict)

    @property
    def model(self) -> str:
        """The model name the endpoints serve (the profile's ``name``)."""
        return self.profile.name

    def model_for(self, endpoint: str) -> str:
        """The model name to send to ``endpoint`` (its ``model`` in the config, else the
        profile's name: what the emulator serves and ``plan vllm`` passes as served name)."""
        return self.models.get(endpoint) or self.profile.name

    @property
    def mode(self) -> str:
        return self.config.mode


def read_state(state_dir: str | Path | StackConfig | None = None) -> StackState | None:
    """The state of the stack recorded in ``state_dir`` (a path or a StackConfig; default the
    default stack's), or None when no state file exists or it cannot be read."""
    if state_dir is None:
        state_dir = StackConfig().state_dir
    elif isinstance(state_dir, StackConfig):
        state_dir = state_dir.state_dir
    p = state_file(state_dir)
    try:
        return StackState.from_dict(json.loads(p.read_text()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError):
        return None


def write_state(state: StackState) -> Path:
    p = state_file(state.state_dir)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(state.to_dict(), indent=2, sort_keys=True))
    os.replace(tmp, p)
    return p


def remove_state(state_dir: str | Path) -> None:
    try:
        state_file(state_dir).unlink()
    except FileNotFoundError:
        pass
