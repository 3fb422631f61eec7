"""The end of a fleet run: :class:`RunOutcome` (what :func:`adev.fleet.runner.run_fleet` returns)
and :func:`fleet_summary`, the text printed when the fleet stops."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..records import RunDir


@dataclass
class RunOutcome:
    run_dir: Path
    windows: list[dict[str, Any]]
    stopped: str | None
    aborted: str | None
    summary: str
    report_path: Path | None
    wall_s: float

    @property
    def exit_code(self) -> int:
        if self.aborted:
            return 1
        if self.stopped:
            return 130
        return 0


def fleet_summary(run_dir: RunDir, *, stopped: str | None, aborted: str | None,
                  summarise: Callable[[Path], str] | None, clock_started: bool) -> str:
    """Windows (valid and not), how the run ended, sessions by end status, calls, the stack's CPU
    and, when the run's clock started, ``summarise``'s figures."""
    ws = run_dir.read("windows")
    valid = [w for w in ws if w.get("valid")]
    lines = [f"run {run_dir.run_id}: {run_dir.path}",
             f"windows: {len(valid)} valid, {len(ws) - len(valid)} invalid"
             + "".join(f"\n  window {w['index']}: [{w['t0']:.0f}, {w['t1']:.0f}) "
                       f"{'valid' if w['valid'] else 'INVALID: ' + str(w.get('reason'))}"
                       + (f" (faults: {', '.join(w['faults'])})"
                          if w.get("faults") and w["valid"] else "")
                       for w in ws)]
    if stopped:
        lines.append(f"stopped early: {stopped}")
    if aborted:
        lines.append(f"aborted: {aborted}")
    ss = run_dir.read("sessions")
    ends: dict[str, int] = {}
    for s in ss:
        if s["status"] != "started":
            ends[s["status"]] = ends.get(s["status"], 0) + 1
    lines.append(f"sessions: {sum(1 for s in ss if s['status'] == 'started')} started; "
                 + ", ".join(f"{k} {v}" for k, v in sorted(ends.items())))
    calls = run_dir.read("calls")
    lines.append(f"calls: {len(calls)} records, "
                 f"{sum(1 for c in calls if c.get('status') != 'ok')} not ok")
    for e in run_dir.read("events"):
        if e.get("event") == "stack_cpu":
            d = e["detail"]
            lines.append(f"stack CPU: {d['cores']:.2f} cores over {d['wall_s']:.0f} s wall ("
                         + ", ".join(f"{k} {v:.2f}" for k, v in d["per_process"].items())
                         + f"; host has {d['host_cores']})")
    if summarise is not None and clock_started:
        try:
            lines.append(summarise(run_dir.path))
        except Exception as e:
            lines.append(f"summary figures: unavailable ({type(e).__name__}: {e})")
    return "\n".join(lines)
