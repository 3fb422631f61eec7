"""Statistics over numbers and time intervals: percentiles, summaries, interval unions."""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

Interval = tuple[float, float]


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0 <= q <= 100) with linear interpolation between closest ranks:
    rank = q/100 * (n-1) in the sorted values (numpy's default method)."""
    if not values:
        raise ValueError("percentile of an empty sequence")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be within 0..100, got {q}")
    xs = sorted(values)
    rank = q / 100 * (len(xs) - 1)
    lo = math.floor(rank)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (rank - lo)


@dataclass(frozen=True)
class Summary:
    count: int
    mean: float | None = None
    min: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None


def summarize(values: Iterable[float]) -> Summary:
    """Count, mean, min, p50, p90, p99, max; only ``count=0`` for no values."""
    xs = list(values)
    if not xs:
        return Summary(count=0)
    return Summary(count=len(xs), mean=sum(xs) / len(xs), min=min(xs),
                   p50=percentile(xs, 50), p90=percentile(xs, 90), p99=percentile(xs, 99),
                   max=max(xs))


def merge_intervals(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint union of half-open intervals; touching ones merge, empty ones vanish."""
    items = []
    for a, b in intervals:
        if b < a:
            raise ValueError(f"interval ({a}, {b}) ends before it starts")
        if b > a:
            items.append((a, b))
    items.sort()
    out: list[Interval] = []
    for a, b in items:
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def union_length(intervals: Iterable[Interval]) -> float:
    """Total length covered by at least one interval."""
    return sum(b - a for a, b in merge_intervals(intervals))


def clip(intervals: Iterable[Interval], lo: float, hi: float) -> list[Interval]:
    """Each interval cut to [lo, hi); those that end up empty are dropped."""
    out = []
    for a, b in intervals:
        a2, b2 = max(a, lo), min(b, hi)
        if b2 > a2:
            out.append((a2, b2))
    return out


def busy_fraction(intervals: Iterable[Interval], lo: float, hi: float) -> float:
    """Fraction of [lo, hi) covered by the union of the intervals."""
    if hi <= lo:
        raise ValueError(f"empty range [{lo}, {hi})")
    return union_length(clip(intervals, lo, hi)) / (hi - lo)
