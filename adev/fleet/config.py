"""Fleet and campaign definitions (``fleets/*.toml``), typed and validated.

A fleet file has one ``[fleet]`` table (see ``fleets/default.toml`` for every key with its
meaning). :func:`load_fleet` reads it, applies CLI overrides (dotted keys such as
``windows.count``) and validates through :func:`adev.config.from_dict`, so unknown keys and
impossible values are :class:`~adev.config.ConfigError` naming the key (``fleet.windows.count``).

All durations are **model seconds** (the emulator divides them by the stack's time scale).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..config import ROOT, ConfigError, StackConfig, check_cpus, from_dict, load_stack, load_toml
from ..records import LaterRounds, RoleContext, WindowProtocol
from ..tasks import SpecPlace

DEFAULT_FLEET = ROOT / "fleets" / "default.toml"


@dataclass(frozen=True)
class WindowSpec:
    """Steady state: ``count`` consecutive windows of ``length_s`` model seconds each."""

    count: int = field(default=3, metadata={"positive": True, "max": 1000})
    length_s: float = field(default=600.0, metadata={"positive": True})


@dataclass(frozen=True)
class WarmupRule:
    """When the regime detector opens the first steady-state window (see ``windows.py``).

    The fleet is *in regime* at model time t when all of:
      * t >= ``min_s`` (model seconds since the fleet's sessions started: the run's start, or
        the resume's time after ``--resume``);
      * ``width`` sessions are active (if ``full_width``);
      * at least ``min_completed`` sessions have ended (0 = no such condition);
      * the GPU pool is warm on every endpoint that has served calls: either
        ``vllm:kv_cache_usage_perc`` >= ``kv_usage`` or the prompt tokens looked up in the GPU
        prefix cache since the run started (delta of ``vllm:prefix_cache_queries_total``) reach
        ``pool_turnover`` x the pool's capacity in tokens (one turnover: the pool's content is set
        by the fleet's own traffic, not by whatever was there before). Set a threshold to 0 to
        disable that criterion; if both are 0 the pool check is skipped.
    After ``max_s`` (counted from the same start) the window opens anyway (``on_timeout =
    "open"``, recorded as an event ``regime_timeout``) or the run fails (``"fail"``).
    """

    min_s: float = field(default=0.0, metadata={"min": 0})
    max_s: float = field(default=3600.0, metadata={"positive": True})
    full_width: bool = True
    min_completed: int = field(default=0, metadata={"min": 0, "help":
                               "sessions that must have ended (desynchronises the slots)"})
    kv_usage: float = field(default=0.5, metadata={"min": 0, "max": 1})
    pool_turnover: float = field(default=1.0, metadata={"min": 0})
    on_timeout: Literal["open", "fail"] = "open"

    def validate(self, where: str) -> None:
        if self.min_s > self.max_s:
            raise ConfigError(f"{where}.min_s: {self.min_s} exceeds {where}.max_s={self.max_s}")


@dataclass(frozen=True)
class FleetConfig:
    """One fleet: N sessions (the width) under the batch or steady-state protocol."""

    name: str = "default"
    width: int = field(default=12, metadata={"positive": True, "max": 4096})
    protocol: WindowProtocol = "steady"
    runs: int = field(default=1, metadata={"positive": True, "max": 1000,
                                           "help": "batch: independent runs, fresh stack each"})
    windows: WindowSpec = field(default_factory=WindowSpec)
    warmup: WarmupRule = field(default_factory=WarmupRule)
    stagger_s: float = field(default=20.0, metadata={"min": 0,
                                                     "help": "steady: start-to-start offset"})
    pause_s: float = field(default=0.0, metadata={"min": 0,
                                                  "help": "modelled gate duration; 0 = real"})
    tasks: list[str] = field(default_factory=list)  # empty = every built-in task
    task_assignment: Literal["round-robin", "seed"] = "round-robin"
    seed: int = field(default=0, metadata={"min": 0})
    stack: str | StackConfig = "stacks/embedded.toml"
    time_scale: float | None = field(default=None, metadata={"positive": True})
    gate: str = "local"  # a name from adev.gate.registry.GATES
    # let the development gate "local-unconfined" run a real model's code (external endpoints)
    allow_unconfined_gate: bool = False
    roles: dict[str, str] = field(default_factory=dict)  # role -> logical endpoint
    # how roles see the session's history: one conversation, or each role with a system message
    # of its own (adev.session.loop, RoleContext)
    context: RoleContext = "per-role"
    # where agents find the task spec: all of it in every call's leading text, or its opening
    # section there and the whole spec as the workspace's SPEC.md (adev.tasks.SpecPlace)
    spec: SpecPlace = "file"
    # which roles the later rounds run: every role again, or the implementers and the integrator
    # (adev.session.loop, LaterRounds)
    later_rounds: LaterRounds = "fix"
    endpoints: dict[str, str] = field(default_factory=dict)  # logical endpoint -> stack endpoint
    drain_s: float = field(default=300.0, metadata={"min": 0, "help":
                           "steady: wait this long for the last window's calls to finish"})
    scrape_interval_s: float = field(default=5.0, metadata={"positive": True})
    max_session_failures: int = field(default=20, metadata={"min": 1, "help":
                                      "consecutive session errors before the fleet aborts"})
    results_dir: str = "results/runs"
    keep_workspaces: bool = False  # keep each session's workspace under <run>/workspaces/
    live: Literal["auto", "rich", "plain", "off"] = "auto"
    report: bool = True
    # CPU cores of the fleet process (sessions, LLM client, scrapes; Linux affinity); [] = any.
    # With stack.cpus on other cores the client's stamps never wait for the stack's CPU work.
    client_cpus: list[int] = field(default_factory=list)
    stack_cpus: list[int] | None = None  # overrides the stack's own ``cpus`` when set
    # Run the sessions' event loop under SCHED_FIFO (adev.event_loop.set_realtime): its stamps
    # then never wait for a CPU behind the stack's processes. Needs root or CAP_SYS_NICE.
    client_realtime: bool = False

    def validate(self, where: str) -> None:
        check_cpus(self.client_cpus, f"{where}.client_cpus")
        from ..gate.registry import gate_kind
        gate_kind(self.gate, f"{where}.gate")
        if self.protocol == "steady" and self.runs != 1:
            raise ConfigError(f"{where}.runs: {self.runs} applies to protocol 'batch' only "
                              "(steady state cuts windows from one run)")
        for table in ("roles", "endpoints"):
            for k, ep in getattr(self, table).items():
                if not ep:
                    raise ConfigError(f"{where}.{table}.{k}: expected an endpoint name")

    # -- derived ------------------------------------------------------------------------
    def stack_config(self, base: Path | None = None) -> StackConfig:
        """The stack this fleet runs on (file or inline), with the fleet's time scale applied."""
        if isinstance(self.stack, StackConfig):
            st = self.stack
            over = {k: v for k, v in (("time_scale", self.time_scale),
                                      ("cpus", self.stack_cpus)) if v is not None}
            if over:
                st = from_dict(StackConfig, {**_asdict(st), **over}, "stack")
        else:
            st = load_stack(resolve_path(self.stack, base), time_scale=self.time_scale,
                            cpus=self.stack_cpus)
        from ..gate.registry import check_gate_policy
        check_gate_policy(self.gate, external=st.mode == "external",
                          allow_unconfined=self.allow_unconfined_gate, where="fleet.gate")
        return st


def _asdict(obj: Any) -> Any:
    import dataclasses
    return dataclasses.asdict(obj)


def resolve_path(p: str, base: Path | None = None) -> Path:
    """A path from a config file: absolute, relative to the file's folder, or to the project."""
    q = Path(p)
    if q.is_absolute():
        return q
    for root in ([base] if base else []) + [Path.cwd(), ROOT]:
        if (root / q).exists():
            return root / q
    raise ConfigError(f"file not found: {p} (looked in {base or '.'}, {Path.cwd()}, {ROOT})")


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    """``set_dotted(d, "windows.count", 3)`` -> ``d["windows"]["count"] = 3``."""
    parts = key.split(".")
    cur = data
    for p in parts[:-1]:
        nxt = cur.setdefault(p, {})
        if not isinstance(nxt, dict):
            raise ConfigError(f"fleet.{'.'.join(parts[:-1])}: is not a table, cannot set {key}")
        cur = nxt
    cur[parts[-1]] = value


def fleet_from_dict(data: dict[str, Any], overrides: dict[str, Any] | None = None,
                    where: str = "fleet") -> FleetConfig:
    data = copy.deepcopy(data)
    for k, v in (overrides or {}).items():
        if v is not None:
            set_dotted(data, k, v)
    return from_dict(FleetConfig, data, where)


def load_fleet(path: str | Path | None = None,
               overrides: dict[str, Any] | None = None) -> tuple[FleetConfig, Path]:
    """Read a fleet file (default ``fleets/default.toml``) and apply dotted-key overrides.

    Returns the config and the file's folder (relative paths inside it resolve against it).
    """
    p = Path(path) if path else DEFAULT_FLEET
    doc = load_toml(p)
    extra = sorted(set(doc) - {"fleet"})
    if extra:
        raise ConfigError(f"{p}: unknown top-level table(s) {', '.join(extra)}; allowed: fleet")
    try:
        return fleet_from_dict(doc.get("fleet", {}), overrides), p.resolve().parent
    except ConfigError as e:
        raise ConfigError(f"{p}: {e}") from None


# --------------------------------------------------------------------------------------------
# Campaigns (adev nightly)


@dataclass(frozen=True)
class CampaignPoint:
    """One fleet of a campaign: a name and what it changes against the campaign's base fleet.

    ``fleet`` holds dotted fleet keys (``width``, ``pause_s``, ``windows.count`` ...); ``stack``
    holds dotted stack keys (``configuration``, ``store.disk_tier``, ``store.lease_ttl_s`` ...).
    """

    name: str
    fleet: dict[str, Any] = field(default_factory=dict)
    stack: dict[str, Any] = field(default_factory=dict)

    def validate(self, where: str) -> None:
        if not self.name or "/" in self.name or self.name.startswith("."):
            raise ConfigError(f"{where}.name: {self.name!r} must be a plain folder name")


@dataclass(frozen=True)
class CampaignQuick:
    """Scaled-down settings applied by ``adev nightly --quick`` (dotted fleet and stack keys)."""

    fleet: dict[str, Any] = field(default_factory=dict)
    stack: dict[str, Any] = field(default_factory=dict)  # dotted stack keys; a point's own win
    points: list[str] = field(default_factory=list)  # empty = all points
    width_cap: int | None = field(default=None, metadata={"positive": True})


@dataclass(frozen=True)
class CampaignConfig:
    """A nightly campaign: a base fleet, its points, where nights go, what counts as a move."""

    name: str = "nightly"
    fleet: str = "fleets/default.toml"
    fleet_overrides: dict[str, Any] = field(default_factory=dict)
    results_dir: str = "results/nights"
    threshold: float = field(default=0.25, metadata={"min": 0,
                                                     "help": "relative move that is flagged"})
    abs_floor: float = field(default=0.01, metadata={"min": 0, "help":
                             "moves smaller than this absolute amount are never flagged"})
    points: list[CampaignPoint] = field(default_factory=list)
    quick: CampaignQuick = field(default_factory=CampaignQuick)

    def validate(self, where: str) -> None:
        names = [p.name for p in self.points]
        if not names:
            raise ConfigError(f"{where}.points: at least one point is required")
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ConfigError(f"{where}.points: duplicate point names {dup}")
        for n in self.quick.points:
            if n not in names:
                raise ConfigError(f"{where}.quick.points: unknown point {n!r}; points: {names}")


def load_campaign(path: str | Path) -> tuple[CampaignConfig, Path]:
    p = Path(path)
    doc = load_toml(p)
    extra = sorted(set(doc) - {"campaign"})
    if extra:
        raise ConfigError(f"{p}: unknown top-level table(s) {', '.join(extra)}; allowed: campaign")
    try:
        return from_dict(CampaignConfig, doc.get("campaign", {}), "campaign"), p.resolve().parent
    except ConfigError as e:
        raise ConfigError(f"{p}: {e}") from None
