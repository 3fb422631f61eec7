"""Command line: ``python -m tracetools.cli validate|stats|windows FILE ...``."""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from .events import KINDS, TraceError, out_of_order, read_trace
from .stats import summarize
from .windows import windows


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.6g}"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tracetools", description="Inspect JSONL session traces.")
    sub = p.add_subparsers(dest="command", required=True)
    v = sub.add_parser("validate", help="check every line of a trace")
    v.add_argument("file")
    s = sub.add_parser("stats", help="summary statistics of one field")
    s.add_argument("file")
    s.add_argument("--kind", choices=KINDS)
    s.add_argument("--field", choices=("dur", "tokens"), default="dur")
    s.add_argument("--json", action="store_true")
    w = sub.add_parser("windows", help="per-window counts, tokens and busy fraction")
    w.add_argument("file")
    w.add_argument("--width", type=float, required=True)
    w.add_argument("--kind", choices=KINDS)
    w.add_argument("--json", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 1 invalid trace, 2 usage or I/O error)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    try:
        trace = read_trace(args.file, strict=args.command != "validate")
    except OSError as e:
        print(f"error: cannot read {args.file}: {e.strerror or e}", file=sys.stderr)
        return 2
    except TraceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.command == "validate":
        for err in trace.errors:
            print(err)
        for i in out_of_order(trace.events):
            e = trace.events[i]
            print(f"warning: event {i + 1} of session {e.session} goes back in time (ts {e.ts:g})")
        if trace.errors:
            print(f"invalid: {len(trace.errors)} error(s) in {trace.lines} line(s)")
            return 1
        print(f"ok: {len(trace.events)} events, {len(trace.sessions())} sessions")
        return 0
    if args.command == "stats":
        vals = [getattr(e, args.field) for e in trace.events
                if args.kind is None or e.kind == args.kind]
        summ = summarize(vals)
        if args.json:
            print(json.dumps(dataclasses.asdict(summ), sort_keys=True))
        else:
            print(" ".join(f"{k}={_fmt(v) if k != 'count' else v}"
                           for k, v in dataclasses.asdict(summ).items()))
        return 0
    if args.width <= 0:
        print(f"error: --width must be positive, got {args.width:g}", file=sys.stderr)
        return 2
    rows = windows(trace.events, args.width, kind=args.kind)
    if args.json:
        for w in rows:
            print(json.dumps({"index": w.index, "start": w.start, "end": w.end,
                              "count": w.count, "tokens": w.tokens, "busy": w.busy,
                              "by_kind": w.by_kind}, sort_keys=True))
    else:
        print("index\tstart\tend\tcount\ttokens\tbusy")
        for w in rows:
            print(f"{w.index}\t{_fmt(w.start)}\t{_fmt(w.end)}\t{w.count}\t{w.tokens}\t"
                  f"{w.busy:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
