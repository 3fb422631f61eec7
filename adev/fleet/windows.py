"""Regime detection and window cuts (pure functions over a timeline; no I/O).

Steady state (docs/design.md §2): the first window opens once the fleet is *in regime*
(:class:`RegimeDetector`, rule in :class:`~adev.fleet.config.WarmupRule`), then K consecutive
windows of fixed length follow (:func:`plan_windows`). A window is announced by an
``EventRecord("window_open", {index, t0})`` when it opens and closed by a ``WindowRecord`` at its
end, so after a crash :func:`resume_plan` can tell which window was cut short: that window gets a
``WindowRecord(valid=False, reason=...)`` spanning from its start to the last sign of life in
the run, and measurement continues with new windows until ``count`` valid windows exist.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..client.scrape import total
from .config import WarmupRule

KV_USAGE = "vllm:kv_cache_usage_perc"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
CACHE_INFO = "vllm:cache_config_info"


def pool_tokens_from_samples(samples: Mapping[str, float]) -> int | None:
    """GPU pool capacity in tokens from ``vllm:cache_config_info`` labels (num_gpu_blocks x
    block_size), or None when the endpoint does not export them."""
    for key in samples:
        if not key.startswith(CACHE_INFO + "{"):
            continue
        labels = dict(part.split("=", 1) for part in key[len(CACHE_INFO) + 1:-1].split(",")
                      if "=" in part)
        try:
            blocks = int(labels["num_gpu_blocks"].strip('"'))
            bs = int(labels.get("block_size", '"16"').strip('"'))
            return blocks * bs
        except (KeyError, ValueError):
            return None
    return None


@dataclass
class EndpointWarmth:
    endpoint: str
    kv_usage: float | None
    queried_tokens: float | None
    pool_tokens: int | None
    warm: bool
    why: str


@dataclass
class RegimeDecision:
    open: bool
    reason: str
    timeout: bool = False
    endpoints: list[EndpointWarmth] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"open": self.open, "reason": self.reason, "timeout": self.timeout,
                "endpoints": [e.__dict__ for e in self.endpoints]}


class RegimeDetector:
    """Decides when a steady-state fleet is in regime (see :class:`WarmupRule` for the rule).

    ``observe`` is called with the model time, the number of active sessions, each endpoint's
    latest scraped samples and, per endpoint, whether it has served any call yet (an endpoint that
    no role uses cannot warm up and is ignored). The first samples seen for an endpoint are its
    baseline for the query counter (a reused stack may have served traffic before the run).
    ``min_s`` and ``max_s`` count from :meth:`start` (the model time the fleet's sessions
    started: 0 for a new run, the resume's time after ``--resume``, so a resumed fleet warms up
    afresh instead of opening its first window at once).
    """

    def __init__(self, width: int, rule: WarmupRule, pool_tokens: int | None = None):
        self.width = width
        self.rule = rule
        self.default_pool_tokens = pool_tokens
        self._baseline: dict[str, float] = {}
        self.t_start = 0.0

    def start(self, t: float) -> None:
        """The warm-up begins at model time ``t``."""
        self.t_start = float(t)

    def baseline(self, endpoint: str, samples: Mapping[str, float]) -> None:
        q = total(samples, PREFIX_QUERIES)
        if q is not None:
            self._baseline.setdefault(endpoint, q)

    def _warmth(self, endpoint: str, samples: Mapping[str, float]) -> EndpointWarmth:
        r = self.rule
        self.baseline(endpoint, samples)
        usage = total(samples, KV_USAGE)
        q = total(samples, PREFIX_QUERIES)
        queried = None if q is None else q - self._baseline.get(endpoint, q)
        if queried is not None and queried < 0:  # counter reset (endpoint restarted)
            self._baseline[endpoint] = 0.0
            queried = q
        pool = pool_tokens_from_samples(samples) or self.default_pool_tokens
        if r.kv_usage <= 0 and r.pool_turnover <= 0:
            return EndpointWarmth(endpoint, usage, queried, pool, True, "pool check disabled")
        if r.kv_usage > 0 and usage is not None and usage >= r.kv_usage:
            return EndpointWarmth(endpoint, usage, queried, pool, True,
                                  f"kv_cache_usage {usage:.2f} >= {r.kv_usage}")
        if r.pool_turnover > 0 and queried is not None and pool:
            need = r.pool_turnover * pool
            if queried >= need:
                return EndpointWarmth(endpoint, usage, queried, pool, True,
                                      f"queried {queried:.0f} >= {need:.0f} tokens")
            return EndpointWarmth(endpoint, usage, queried, pool, False,
                                  f"queried {queried:.0f} < {need:.0f} tokens")
        return EndpointWarmth(endpoint, usage, queried, pool, False, "no pool metrics yet")

    def observe(self, t: float, active: int, samples: Mapping[str, Mapping[str, float]],
                served: Mapping[str, bool] | None = None, completed: int = 0) -> RegimeDecision:
        r = self.rule
        ends = [self._warmth(ep, s) for ep, s in samples.items()]
        age = t - self.t_start
        if age >= r.max_s:
            return RegimeDecision(True, f"warm-up limit {r.max_s:g} s reached", True, ends)
        if age < r.min_s:
            return RegimeDecision(False, f"warm-up {age:.0f} s < min_s={r.min_s:g}", False, ends)
        if r.full_width and active < self.width:
            return RegimeDecision(False, f"{active}/{self.width} sessions active", False, ends)
        if completed < r.min_completed:
            return RegimeDecision(False, f"{completed}/{r.min_completed} sessions ended", False,
                                  ends)
        used = [e for e in ends if served is None or served.get(e.endpoint, False)]
        if not used:
            return RegimeDecision(False, "no endpoint has served a call yet", False, ends)
        cold = [e for e in used if not e.warm]
        if cold:
            return RegimeDecision(False, "; ".join(f"{e.endpoint}: {e.why}" for e in cold),
                                  False, ends)
        return RegimeDecision(True, "in regime: " + "; ".join(f"{e.endpoint}: {e.why}"
                                                              for e in used), False, ends)


def plan_windows(t_open: float, count: int, length_s: float,
                 first_index: int = 1) -> list[tuple[int, float, float]]:
    """K consecutive windows [t0, t1) from ``t_open``: ``[(index, t0, t1), ...]``."""
    if count < 0 or length_s <= 0:
        raise ValueError("count must be >= 0 and length_s > 0")
    return [(first_index + k, t_open + k * length_s, t_open + (k + 1) * length_s)
            for k in range(count)]


# --------------------------------------------------------------------------------------------
# Resume bookkeeping


@dataclass
class ResumePlan:
    """What ``--resume`` must do before continuing a run."""

    interrupted: list[dict[str, Any]]   # WindowRecord fields for windows cut short (valid=False)
    next_index: int                     # index of the next window to open
    valid_done: int                     # valid windows already measured
    remaining: int                      # windows still to measure (count - valid_done)
    orphan_sessions: list[dict[str, Any]]  # sessions started and never ended
    t_last: float                       # last stamp in the run (model seconds)
    epoch: int                          # epoch of the resumed process (1 for the first resume)
    max_seed: int | None                # highest session seed used so far


def last_stamp(records: Mapping[str, Iterable[Mapping[str, Any]]]) -> float:
    """The latest model-time stamp of any record (the run's last sign of life)."""
    t = 0.0
    keys = ("t", "t1", "t_end", "t_first_content", "t_first_byte", "t_sent", "t_scheduled",
            "t_start")
    for recs in records.values():
        for r in recs:
            for k in keys:
                v = r.get(k)
                if isinstance(v, (int, float)) and not isinstance(v, bool) and v > t:
                    t = float(v)
    return t


def resume_plan(windows: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]],
                sessions: Sequence[Mapping[str, Any]], count: int, t_last: float,
                reason: str = "interrupted: the fleet process stopped inside this window"
                ) -> ResumePlan:
    """Decide which windows were cut short and how many remain.

    A window is *open* when an ``window_open`` event names an index with no WindowRecord. Each
    open window becomes an invalid WindowRecord [t0, t_last). Windows are never renumbered: the
    next window gets the next unused index. ``remaining`` = ``count`` - valid windows so far.
    """
    closed = {int(w["index"]) for w in windows}
    opened = {}
    for e in events:
        if e.get("event") == "window_open":
            d = e.get("detail") or {}
            opened[int(d["index"])] = d
    interrupted = []
    for idx in sorted(set(opened) - closed):
        d = opened[idx]
        t0 = float(d["t0"])
        interrupted.append({"index": idx, "t0": t0, "t1": max(t0, t_last), "valid": False,
                            "reason": reason, "protocol": d.get("protocol", "steady")})
    all_idx = closed | set(opened)
    valid_done = sum(1 for w in windows if w.get("valid"))
    epochs = [int((e.get("detail") or {}).get("epoch", 0)) for e in events
              if e.get("event") in ("fleet_start", "resume")]
    ended = {s["session_id"] for s in sessions if s.get("status") != "started"}
    orphans = [dict(s) for s in sessions
               if s.get("status") == "started" and s["session_id"] not in ended]
    seeds = [int(s["seed"]) for s in sessions if isinstance(s.get("seed"), int)]
    return ResumePlan(interrupted=interrupted, next_index=(max(all_idx) + 1) if all_idx else 1,
                      valid_done=valid_done, remaining=max(0, count - valid_done),
                      orphan_sessions=orphans, t_last=t_last,
                      epoch=(max(epochs) + 1) if epochs else 1,
                      max_seed=max(seeds) if seeds else None)
