"""Prefix-cache statistics: lifetime counters, a sliding window of recent queries, exposition."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class StatsSnapshot:
    queries: int
    query_tokens: int
    hit_tokens: int
    evictions: int
    hit_rate: float
    window_hit_rate: float


class StatsRecorder:
    """Counts queries, their tokens and hit tokens; hit rates are hit_tokens / query_tokens."""

    def __init__(self, window: int = 1000) -> None:
        if not isinstance(window, int) or window <= 0:
            raise ValueError(f"window must be a positive integer, got {window!r}")
        self.window = window
        self.queries = 0
        self.query_tokens = 0
        self.hit_tokens = 0
        self.evictions = 0
        self._recent: deque[tuple[int, int]] = deque()
        self._recent_query = 0
        self._recent_hit = 0

    def record(self, query_tokens: int, hit_tokens: int) -> None:
        """One lookup of ``query_tokens`` tokens of which ``hit_tokens`` were cached."""
        if query_tokens < 0 or hit_tokens < 0 or hit_tokens > query_tokens:
            raise ValueError(f"need 0 <= hit_tokens <= query_tokens, got hit={hit_tokens} "
                             f"query={query_tokens}")
        self.queries += 1
        self.query_tokens += query_tokens
        self.hit_tokens += hit_tokens
        self._recent.append((query_tokens, hit_tokens))
        self._recent_query += query_tokens
        self._recent_hit += hit_tokens
        if len(self._recent) > self.window:
            q, h = self._recent.popleft()
            self._recent_query -= q
            self._recent_hit -= h

    def record_eviction(self, n: int = 1) -> None:
        if n < 0:
            raise ValueError(f"eviction count must be >= 0, got {n}")
        self.evictions += n

    @property
    def hit_rate(self) -> float:
        """Lifetime hit_tokens / query_tokens (0.0 before any query token)."""
        return self.hit_tokens / self.query_tokens if self.query_tokens else 0.0

    @property
    def window_hit_rate(self) -> float:
        """The same ratio over the last ``window`` queries only."""
        return self._recent_hit / self._recent_query if self._recent_query else 0.0

    def snapshot(self) -> StatsSnapshot:
        return StatsSnapshot(queries=self.queries, query_tokens=self.query_tokens,
                             hit_tokens=self.hit_tokens, evictions=self.evictions,
                             hit_rate=self.hit_rate, window_hit_rate=self.window_hit_rate)

    def reset(self) -> None:
        """Zero every counter and forget the window."""
        self.__init__(self.window)

    def render(self, prefix: str = "prefixcache") -> str:
        """Prometheus text exposition of the counters and rates, one sample per line."""
        s = self.snapshot()
        lines = []
        for name, kind, value in (("queries_total", "counter", s.queries),
                                  ("query_tokens_total", "counter", s.query_tokens),
                                  ("hit_tokens_total", "counter", s.hit_tokens),
                                  ("evictions_total", "counter", s.evictions),
                                  ("hit_rate", "gauge", s.hit_rate),
                                  ("window_hit_rate", "gauge", s.window_hit_rate)):
            lines.append(f"# TYPE {prefix}_{name} {kind}")
            lines.append(f"{prefix}_{name} {value}")
        return "\n".join(lines) + "\n"
