"""The replay's gateway: which prefill and which decode replica serve a call.

Load figures, kept by the router as calls are dispatched and finish:

- a prefill replica's **queued-token score**: prompt tokens of the calls routed to it whose
  prefill has not finished yet (added at dispatch, removed when its prefill ends);
- a decode replica's **queued output-token budget**: ``max_tokens`` of the calls routed to it
  that have not finished (added at dispatch, removed at the end of the call).

Prefill policies (``route_prefill``):

- ``soft-sticky`` (the source's gateway): a session's first turn goes to the least-loaded
  prefill replica, which becomes the session's *preferred* replica. A later turn stays on the
  preferred replica while ``score[preferred] - min(score) <= threshold_tokens``; otherwise it
  spills to the least-loaded replica (the preference is kept for the next turn).
- ``least-loaded``: always the replica with the lowest score.
- ``round-robin``: replicas in turn.

Ties go to the replica with fewer calls routed so far, then the lower index. Decode is chosen per
call, independently of the session, by the lowest queued output-token budget (same tie rule);
``round-robin`` routes decode in turn as well.

Recorded: **stickiness** = non-initial turns served by their session's preferred replica /
non-initial turns (soft-sticky only; the source saw 82-89%) and the **traffic matrix**, calls per
(prefill, decode) pair.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Policy = Literal["soft-sticky", "least-loaded", "round-robin"]
POLICIES = ("soft-sticky", "least-loaded", "round-robin")
DEFAULT_THRESHOLD_TOKENS = 32768


@dataclass
class Route:
    prefill: int
    decode: int
    preferred: int | None  # the session's preferred prefill replica (None: first turn)
    initial: bool          # the session's first turn
    sticky: bool | None    # a later turn kept on its preferred replica (None: first turn)


@dataclass
class Router:
    n_prefill: int
    n_decode: int
    policy: Policy = "soft-sticky"
    threshold_tokens: int = DEFAULT_THRESHOLD_TOKENS
    score: list[int] = field(default_factory=list)
    budget: list[int] = field(default_factory=list)
    routed_p: list[int] = field(default_factory=list)
    routed_d: list[int] = field(default_factory=list)
    preferred: dict[str, int] = field(default_factory=dict)
    matrix: list[list[int]] = field(default_factory=list)
    later_turns: int = 0
    sticky_turns: int = 0
    _rr_p: int = 0
    _rr_d: int = 0

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"routing policy: {self.policy!r} is not allowed; allowed values: "
                             + ", ".join(POLICIES))
        if self.n_prefill < 1 or self.n_decode < 1:
            raise ValueError("routing: at least one prefill and one decode replica are needed")
        self.score = [0] * self.n_prefill
        self.budget = [0] * self.n_decode
        self.routed_p = [0] * self.n_prefill
        self.routed_d = [0] * self.n_decode
        self.matrix = [[0] * self.n_decode for _ in range(self.n_prefill)]

    @staticmethod
    def _least(load: list[int], routed: list[int]) -> int:
        return min(range(len(load)), key=lambda i: (load[i], routed[i], i))

    def _prefill(self, session: str) -> tuple[int, int | None, bool, bool | None]:
        pref = self.preferred.get(session)
        initial = pref is None
        if self.policy == "round-robin":
            p = self._rr_p % self.n_prefill
            self._rr_p += 1
        else:
            p = self._least(self.score, self.routed_p)
            if self.policy == "soft-sticky" and pref is not None \
                    and self.score[pref] - self.score[p] <= self.threshold_tokens:
                p = pref
        if initial:
            self.preferred[session] = p
            return p, None, True, None
        sticky = p == pref
        self.later_turns += 1
        self.sticky_turns += sticky
        return p, pref, False, sticky

    def route(self, session: str, prompt_tokens: int, max_tokens: int) -> Route:
        """Choose the replicas of one call and charge its load to them."""
        p, pref, initial, sticky = self._prefill(session)
        if self.policy == "round-robin":
            d = self._rr_d % self.n_decode
            self._rr_d += 1
        else:
            d = self._least(self.budget, self.routed_d)
        self.score[p] += prompt_tokens
        self.budget[d] += max_tokens
        self.routed_p[p] += 1
        self.routed_d[d] += 1
        self.matrix[p][d] += 1
        return Route(prefill=p, decode=d, preferred=pref, initial=initial, sticky=sticky)

    def prefill_done(self, route: Route, prompt_tokens: int) -> None:
        self.score[route.prefill] -= prompt_tokens

    def call_done(self, route: Route, max_tokens: int) -> None:
        self.budget[route.decode] -= max_tokens

    def stickiness(self) -> float | None:
        """Non-initial turns on their preferred prefill replica / non-initial turns."""
        return self.sticky_turns / self.later_turns if self.later_turns else None

    def matrix_shares(self) -> list[list[float]]:
        """The traffic matrix as shares of all routed calls."""
        n = sum(map(sum, self.matrix))
        return [[v / n if n else 0.0 for v in row] for row in self.matrix]
