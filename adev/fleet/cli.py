"""``adev fleet``: run one fleet (``fleets/default.toml`` plus command-line overrides)."""
from __future__ import annotations

import argparse
import sys
from typing import get_args

from ..gate.registry import GATES
from ..records import LaterRounds, RoleContext, WindowProtocol
from ..tasks import SpecPlace

OVERRIDES = {  # CLI option dest -> dotted fleet key
    "width": "width", "protocol": "protocol", "windows": "windows.count",
    "window_length": "windows.length_s", "runs": "runs", "pause": "pause_s",
    "time_scale": "time_scale", "gate": "gate", "stagger": "stagger_s", "seed": "seed",
    "stack": "stack", "warmup_max": "warmup.max_s", "scrape_interval": "scrape_interval_s",
    "results_dir": "results_dir", "drain": "drain_s", "min_completed": "warmup.min_completed",
    "client_realtime": "client_realtime", "allow_unconfined_gate": "allow_unconfined_gate",
    "context": "context", "spec": "spec", "later_rounds": "later_rounds",
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fleet", help="run a fleet of agent sessions (batch or steady state)",
                       description="Run a fleet of coding-agent sessions against the stack and "
                                   "cut measurement windows. Reads fleets/default.toml (or "
                                   "--config) and applies the options below. Durations are "
                                   "model seconds.")
    p.add_argument("--config", metavar="FILE", help="fleet file (default fleets/default.toml)")
    p.add_argument("--width", type=int, help="sessions in the fleet")
    p.add_argument("--protocol", choices=get_args(WindowProtocol))
    p.add_argument("--context", choices=get_args(RoleContext),
                   help="how roles see the session's history: shared (one conversation through "
                        "every role), per-role (each role a system message of its own) or "
                        "per-round (earlier rounds shared ahead of each role's line)")
    p.add_argument("--spec", choices=get_args(SpecPlace),
                   help="where agents find the task spec: prompt (all of it in every call's "
                        "leading text) or file (its opening there, the whole spec as SPEC.md)")
    p.add_argument("--later-rounds", choices=get_args(LaterRounds),
                   help="roles of rounds 2 and 3: all (every role again) or fix (the implementers "
                        "and the integrator; round 1's plan, contract and tests stand)")
    p.add_argument("--windows", type=int, help="steady: number of windows")
    p.add_argument("--window-length", type=float, metavar="S", help="steady: window length")
    p.add_argument("--runs", type=int, help="batch: independent runs (fresh stack each)")
    p.add_argument("--pause", type=float, metavar="S",
                   help="modelled gate duration (0 = the real gate duration)")
    p.add_argument("--time-scale", type=float, metavar="S",
                   help="embedded stack: model seconds per wall second")
    p.add_argument("--gate", choices=list(GATES), help="gate executor: local (sandboxed, default), "
                   "local-unconfined (development only) or vm")
    p.add_argument("--allow-unconfined-gate", action="store_true", default=None,
                   help="let gate local-unconfined run code from external endpoints")
    p.add_argument("--stagger", type=float, metavar="S", help="steady: start-to-start offset")
    p.add_argument("--seed", type=int)
    p.add_argument("--tasks", help="comma-separated task names (default: every built-in task)")
    p.add_argument("--stack", metavar="FILE", help="stack file (default from the fleet file)")
    p.add_argument("--warmup-max", type=float, metavar="S",
                   help="steady: open the first window after this long even if not in regime")
    p.add_argument("--min-completed", type=int, metavar="N",
                   help="steady: sessions that must have ended before the first window")
    p.add_argument("--drain", type=float, metavar="S",
                   help="steady: wait at most this long for the last window's calls to finish")
    p.add_argument("--scrape-interval", type=float, metavar="S")
    p.add_argument("--results-dir", metavar="DIR")
    p.add_argument("--client-cpus", metavar="LIST",
                   help="cores of the fleet process, e.g. 1 or 2-3,6 (fleet.client_cpus)")
    p.add_argument("--client-realtime", action="store_true", default=None,
                   help="schedule the sessions' event loop SCHED_FIFO (needs root or "
                        "CAP_SYS_NICE; fleet.client_realtime)")
    p.add_argument("--stack-cpus", metavar="LIST",
                   help="cores of the embedded stack's processes (stack.cpus)")
    p.add_argument("--live", choices=["auto", "rich", "plain", "off"],
                   help="progress display (auto: rich on a terminal, plain lines otherwise)")
    p.add_argument("--no-report", action="store_true", help="do not write the full report")
    p.add_argument("--resume", metavar="RUN",
                   help="continue an interrupted run (its own config; other options ignored)")
    p.set_defaults(func=main)


def overrides_from_args(args: argparse.Namespace) -> dict:
    from ..config import parse_cpu_list
    ov = {key: getattr(args, dest, None) for dest, key in OVERRIDES.items()}
    if getattr(args, "tasks", None):
        ov["tasks"] = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if getattr(args, "no_report", False):
        ov["report"] = False
    if getattr(args, "live", None):
        ov["live"] = args.live
    for dest in ("client_cpus", "stack_cpus"):
        if getattr(args, dest, None):
            ov[dest] = parse_cpu_list(getattr(args, dest), "--" + dest.replace("_", "-"))
    return {k: v for k, v in ov.items() if v is not None}


def main(args: argparse.Namespace) -> int:
    from .config import load_fleet
    from .runner import resume_fleet, run_fleet

    if args.resume:
        outcome = resume_fleet(args.resume, live=args.live)
    else:
        cfg, base = load_fleet(args.config, overrides_from_args(args))
        outcome = run_fleet(cfg, base=base)
    print_outcome(outcome)
    return outcome.exit_code


def print_outcome(outcome, stream=None) -> None:
    stream = stream or sys.stdout
    print("", file=stream)
    print(outcome.summary, file=stream)
    if outcome.report_path:
        print(f"full report: {outcome.report_path}", file=stream)
    else:
        print(f"full report: run `adev report {outcome.run_dir}`", file=stream)
    print(f"wall time: {outcome.wall_s:.1f} s", file=stream, flush=True)
