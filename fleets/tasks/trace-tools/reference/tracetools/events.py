"""Trace events: parse and validate JSON Lines traces of agent sessions."""
from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KINDS = ("request", "response", "tool", "gate", "error")
REQUIRED = ("ts", "kind", "session")
OPTIONAL = ("dur", "tokens", "attrs")


class TraceError(ValueError):
    """One invalid line: ``lineno`` (1-based), ``field`` (None for the whole line), ``message``."""

    def __init__(self, lineno: int, field: str | None, message: str) -> None:
        self.lineno = lineno
        self.field = field
        self.message = message
        where = f"line {lineno}: {field}: " if field else f"line {lineno}: "
        super().__init__(where + message)


@dataclass(frozen=True)
class Event:
    ts: float
    kind: str
    session: str
    dur: float = 0.0
    tokens: int = 0
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass
class Trace:
    events: list[Event]
    errors: list[TraceError]
    lines: int

    def sessions(self) -> dict[str, list[Event]]:
        """Events grouped by session, in file order; sessions in order of first appearance."""
        out: dict[str, list[Event]] = {}
        for e in self.events:
            out.setdefault(e.session, []).append(e)
        return out


def _number(obj: dict, name: str, lineno: int, default: float | None = None) -> float:
    v = obj.get(name, default)
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise TraceError(lineno, name, f"expected a number, got {v!r}")
    if not math.isfinite(v) or v < 0:
        raise TraceError(lineno, name, f"must be a finite number >= 0, got {v!r}")
    return float(v)


def parse_line(line: str, lineno: int = 1) -> Event | None:
    """One line -> Event; None for a blank line or a ``#`` comment; TraceError if invalid."""
    text = line.strip()
    if not text or text.startswith("#"):
        return None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise TraceError(lineno, None, f"invalid JSON: {e.msg}") from None
    if not isinstance(obj, dict):
        raise TraceError(lineno, None, "expected a JSON object")
    unknown = sorted(set(obj) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        raise TraceError(lineno, unknown[0], "unknown field")
    for name in REQUIRED:
        if name not in obj:
            raise TraceError(lineno, name, "required field missing")
    ts = _number(obj, "ts", lineno)
    kind = obj["kind"]
    if kind not in KINDS:
        raise TraceError(lineno, "kind", f"{kind!r} is not one of {', '.join(KINDS)}")
    session = obj["session"]
    if not isinstance(session, str) or not session:
        raise TraceError(lineno, "session", f"expected a non-empty string, got {session!r}")
    dur = _number(obj, "dur", lineno, 0.0)
    tokens = obj.get("tokens", 0)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise TraceError(lineno, "tokens", f"expected an integer >= 0, got {tokens!r}")
    attrs = obj.get("attrs", {})
    if not isinstance(attrs, dict):
        raise TraceError(lineno, "attrs", f"expected an object, got {attrs!r}")
    return Event(ts=ts, kind=kind, session=session, dur=dur, tokens=tokens, attrs=attrs)


def read_trace(source: str | Path | Iterable[str], strict: bool = True) -> Trace:
    """Parse a trace file (a path) or an iterable of lines.

    ``strict``: the first invalid line raises its TraceError. Otherwise invalid lines are
    skipped and their errors collected in ``Trace.errors``. An unreadable path raises OSError.
    """
    if isinstance(source, str | Path):
        with open(source, encoding="utf-8") as fh:
            return read_trace(fh.read().splitlines(), strict=strict)
    events: list[Event] = []
    errors: list[TraceError] = []
    n = 0
    for n, line in enumerate(source, start=1):
        try:
            ev = parse_line(line, n)
        except TraceError as e:
            if strict:
                raise
            errors.append(e)
            continue
        if ev is not None:
            events.append(ev)
    return Trace(events=events, errors=errors, lines=n)


def out_of_order(events: list[Event]) -> list[int]:
    """Indices of events whose ``ts`` is earlier than the previous event of the same session."""
    last: dict[str, float] = {}
    bad = []
    for i, e in enumerate(events):
        if e.session in last and e.ts < last[e.session]:
            bad.append(i)
        else:
            last[e.session] = e.ts
    return bad
