"""Fixed-width (tumbling) windows over a trace: counts, tokens, durations, busy fraction."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .events import Event
from .stats import Summary, busy_fraction, summarize


@dataclass(frozen=True)
class Window:
    index: int
    start: float
    end: float
    count: int
    tokens: int
    busy: float
    by_kind: dict[str, int] = field(default_factory=dict)
    dur: Summary = field(default_factory=lambda: Summary(count=0))

    @property
    def rate(self) -> float:
        """Events starting in the window per second."""
        return self.count / (self.end - self.start)


def windows(events: list[Event], width: float, start: float | None = None,
            end: float | None = None, kind: str | None = None) -> list[Window]:
    """Cut [start, end) into windows of ``width`` seconds (the last may reach past ``end``).

    Defaults: ``start`` = earliest ts, ``end`` = latest event end, extended by whole windows
    until every event's ts lies inside. An event belongs to the window containing its ``ts``;
    ``busy`` counts every event interval overlapping the window.
    """
    if isinstance(width, bool) or not isinstance(width, int | float) or not width > 0:
        raise ValueError(f"width must be a positive number, got {width!r}")
    evs = [e for e in events if kind is None or e.kind == kind]
    if not evs and (start is None or end is None):
        return []
    lo = min(e.ts for e in evs) if start is None else float(start)
    hi = max(e.end for e in evs) if end is None else float(end)
    if hi < lo:
        raise ValueError(f"end {hi} is before start {lo}")
    n = max(1, math.ceil((hi - lo) / width))
    if end is None and evs:
        # the default range also holds every event's start (a zero-length last event at hi)
        n = max(n, int((max(e.ts for e in evs) - lo) // width) + 1)
    buckets: list[list[Event]] = [[] for _ in range(n)]
    for e in evs:
        if lo <= e.ts < lo + n * width:
            buckets[min(n - 1, int((e.ts - lo) // width))].append(e)
    spans = [(e.ts, e.end) for e in evs]
    out = []
    for k, bucket in enumerate(buckets):
        ws, we = lo + k * width, lo + (k + 1) * width
        by_kind: dict[str, int] = {}
        for e in bucket:
            by_kind[e.kind] = by_kind.get(e.kind, 0) + 1
        out.append(Window(index=k, start=ws, end=we, count=len(bucket),
                          tokens=sum(e.tokens for e in bucket),
                          busy=busy_fraction(spans, ws, we), by_kind=by_kind,
                          dur=summarize(e.dur for e in bucket)))
    return out
