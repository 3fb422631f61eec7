"""What ``adev fleet --resume`` needs to continue an interrupted run: the run's saved state
(``fleet.json``: its configuration and clock), record files whose torn last line is closed, a
clock that continues the run's timeline, and the records that close what the stopped process
left open (its open window as invalid, its running sessions as cancelled). Which windows remain
is planned by :func:`adev.fleet.windows.resume_plan`."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..clock import RunClock, mono, use_held_clock
from ..config import ROOT, ConfigError, StackConfig
from ..records import RECORD_TYPES, RunDir, SessionRecord, WindowRecord, ends_torn, read_json
from ..stack.state import state_dir_path
from .config import FleetConfig, fleet_from_dict
from .windows import ResumePlan

FLEET_STATE = "fleet.json"


def find_fleet_run(run: str | Path) -> Path:
    """The directory of run ``run`` (a path, or a run id under results/runs); ConfigError when
    it holds no ``fleet.json``."""
    p = Path(run)
    if not (p / FLEET_STATE).exists():
        cand = ROOT / "results" / "runs" / str(run)
        if (cand / FLEET_STATE).exists():
            p = cand
        else:
            raise ConfigError(f"--resume: {run} is not a fleet run directory (no {FLEET_STATE})")
    return p


def read_fleet_state(path: Path) -> FleetConfig:
    """The fleet configuration saved in ``fleet.json`` (ConfigError naming the file, line and
    field when it is not what a fleet wrote)."""
    st = read_json(path, "a fleet.json a fleet wrote", ConfigError)
    for key, typ in (("fleet", dict), ("clock", dict)):
        if not isinstance(st, dict) or not isinstance(st.get(key), typ):
            raise ConfigError(f"{path}: field {key!r} missing or not an object; not a fleet.json "
                              "a fleet wrote")
    ck = st["clock"]
    for key in ("t0_mono", "time_scale"):
        v = ck.get(key)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            raise ConfigError(f"{path}: field clock.{key} is {v!r}; expected a finite number")
    try:
        return fleet_from_dict(st["fleet"])
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    except (TypeError, ValueError, KeyError) as e:
        raise ConfigError(f"{path}: field 'fleet': {type(e).__name__}: {e}") from None


def repair_torn_tails(run_path: Path) -> dict[str, int]:
    """End every record file whose last line was torn by a crash with a newline, so records
    appended after a resume start on a line of their own (the torn fragment stays, unreadable,
    and is counted by ``RunDir.torn_lines``). Returns {kind: fragments terminated}."""
    fixed: dict[str, int] = {}
    for kind in RECORD_TYPES:
        p = run_path / f"{kind}.jsonl"
        if ends_torn(p):
            with p.open("ab") as fh:
                fh.write(b"\n")
            fixed[kind] = 1
    return fixed


def resumed_clock(run_path: Path, stack_cfg: StackConfig, t_last: float) -> RunClock:
    """The clock of the interrupted run (``fleet.json``), continuing its timeline
    (CLOCK_MONOTONIC is host-wide); after a reboot it is shifted so that new stamps follow the
    last recorded one, ``t_last``."""
    ck = json.loads((run_path / FLEET_STATE).read_text())["clock"]  # checked by read_fleet_state
    if stack_cfg.mode == "embedded" and stack_cfg.model_clock == "held":
        use_held_clock(state_dir_path(stack_cfg.state_dir))
    clock = RunClock(time_scale=float(ck["time_scale"]), t0=float(ck["t0_mono"]))
    if clock.now() <= t_last:
        clock = RunClock(time_scale=clock.time_scale,
                         t0=mono() - (t_last + 1.0) / clock.time_scale)
    return clock


def close_interrupted(run_dir: RunDir, run_id: str, plan: ResumePlan,
                      t_last: float) -> list[dict[str, Any]]:
    """Record the windows the stopped process left open as invalid and its sessions still running
    as cancelled at ``t_last``; returns the windows recorded."""
    windows = []
    for w in plan.interrupted:
        run_dir.append(WindowRecord(run_id=run_id, **w))
        windows.append({"run_id": run_id, **w})
    for s in plan.orphan_sessions:
        run_dir.append(SessionRecord(
            run_id=run_id, session_id=s["session_id"], task=s.get("task", ""),
            t=t_last, status="cancelled", seed=int(s.get("seed", 0)),
            reason="interrupted: the fleet process stopped during the session"))
    return windows
