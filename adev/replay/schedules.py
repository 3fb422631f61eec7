"""When each call of a replay is dispatched: short reuse gap, long reuse gap, trace timestamps.

All times are model seconds on the run clock (:class:`adev.clock.RunClock`); a schedule's waits
hold a stack's held clock at their ends until the call that follows holds it itself (a hold left
in the task's :class:`adev.clock.HandOver`, released once the dispatch has run to its first
wait), from each call's end until the schedule's next release, and at a schedule's start until
every slot or session has left its first such hold, so a call is released at its planned model
time however late the host wakes the client. A
schedule drives ``dispatch(session_index, call)`` (an async callable that returns when the call
has completed; on the held clock it holds the clock itself before its first wait, and before
it lets go of its own hold at the call's end it leaves one where the clock is in
:func:`adev.clock.handover`) over the sessions of a trace, each session's calls in turn order,
one at a time.

- **Short reuse gap** (:func:`run_short_gap`): ``active`` sessions (16) run at once; the first
  group starts staggered evenly over ``stagger_s`` (30 s): slot ``i`` starts at ``i * stagger_s
  / active``. A later turn starts when the previous turn has finished *and* its planned
  start-to-start interval since the previous turn's start has passed:
  ``start_k+1 = max(end_k, start_k + interval)``. When a session has no turns left, the slot takes
  the next waiting session at once. Intervals come from a fixed-seed clipped log-normal
  (:class:`ClippedLogNormal`) fitted to the published inter-call distribution.
- **Long reuse gap** (:class:`LongGapPolicy`, :func:`run_long_gap`): at most ``max_in_flight``
  (16) calls in flight; after a turn completes, its session may not start its next turn until
  at least ``gap`` (128) other calls have completed since. Free slots go to eligible sessions in
  the order they became ready; there is no round barrier. The gap is relaxed only as far as
  needed to keep the slots filled: with ``R`` sessions left (waiting or in flight) at most
  ``R - max_in_flight`` sessions wait while the slots are full, so a session waits for
  ``min(gap, max(0, R - max_in_flight))`` other completions. With ``gap + max_in_flight`` or more
  sessions left that is the full gap; as sessions finish it falls, reaching 0 once no more than
  ``max_in_flight`` are left. Should nothing be in flight and no session eligible, the waiting
  session with the most completions since its last turn goes next. Every start after fewer than
  ``gap`` other completions is counted as relaxed.
- **Trace timestamps** (:func:`run_timestamps`): a call starts at ``t / speed`` after the run's
  start, but never before its session's previous turn has completed.
"""
from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..clock import HandOver, RunClock, handing_over, hold_at
from .format import Call

Dispatch = Callable[[int, Call], Awaitable[None]]

# The published inter-call distribution the short-gap schedule is calibrated to (seconds).
TARGET_MEAN_S, TARGET_P50_S, TARGET_P90_S, TARGET_P99_S, CAP_S = 10.36, 5.16, 23.44, 80.56, 300.0


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


@dataclass(frozen=True)
class ClippedLogNormal:
    """``X = min(exp(mu + sigma * Z), cap)``, Z standard normal.

    mean = exp(mu + sigma^2/2) * Phi((ln cap - mu - sigma^2)/sigma) + cap * (1 - Phi((ln cap -
    mu)/sigma)); quantile q (below the cap) = exp(mu + sigma * z_q)."""

    mu: float
    sigma: float
    cap: float = CAP_S

    def mean(self) -> float:
        m, s, lc = self.mu, self.sigma, math.log(self.cap)
        return (math.exp(m + s * s / 2) * _phi((lc - m - s * s) / s)
                + self.cap * (1 - _phi((lc - m) / s)))

    def quantile(self, q: float) -> float:
        from scipy.stats import norm
        return min(self.cap, math.exp(self.mu + self.sigma * float(norm.ppf(q))))

    def sample(self, n: int, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        return np.minimum(rng.lognormal(self.mu, self.sigma, n), self.cap)

    @classmethod
    def fit(cls, mean: float = TARGET_MEAN_S, p50: float = TARGET_P50_S, p90: float = TARGET_P90_S,
            p99: float = TARGET_P99_S, cap: float = CAP_S) -> ClippedLogNormal:
        """Least squares over the log-ratios of the four targets (mean, p50, p90, p99)."""
        from scipy.optimize import minimize

        def loss(x: np.ndarray) -> float:
            d = cls(float(x[0]), float(math.exp(x[1])), cap)
            return sum(math.log(a / b) ** 2 for a, b in (
                (d.mean(), mean), (d.quantile(.5), p50), (d.quantile(.9), p90),
                (d.quantile(.99), p99)))
        x0 = np.array([math.log(p50), math.log(max(1e-3, math.log(p90 / p50) / 1.2816))])
        r = minimize(loss, x0, method="Nelder-Mead", options={"xatol": 1e-8, "fatol": 1e-12})
        return cls(float(r.x[0]), float(math.exp(r.x[1])), cap)


def describe_fit(d: ClippedLogNormal, seed: int, n: int = 100_000) -> str:
    """The fitted parameters and the quantiles of ``n`` fixed-seed samples, against the targets."""
    x = d.sample(n, seed)
    return (f"short-gap intervals: clipped log-normal mu={d.mu:.4f} sigma={d.sigma:.4f} cap="
            f"{d.cap:g} s; {n:,} samples (seed {seed}): mean {x.mean():.2f} s (target "
            f"{TARGET_MEAN_S}), p50 {np.percentile(x, 50):.2f} ({TARGET_P50_S}), p90 "
            f"{np.percentile(x, 90):.2f} ({TARGET_P90_S}), p99 {np.percentile(x, 99):.2f} "
            f"({TARGET_P99_S})")


def session_intervals(d: ClippedLogNormal, seed: int, session_index: int, n: int) -> np.ndarray:
    """The planned start-to-start intervals of one session (independent of completion order)."""
    return d.sample(n, seed * 1_000_003 + session_index)


# ---------------------------------------------------------------------------------------------


async def run_short_gap(sessions: Sequence[Sequence[Call]], dispatch: Dispatch, clock: RunClock,
                        *, active: int = 16, stagger_s: float = 30.0,
                        dist: ClippedLogNormal | None = None, seed: int = 0) -> None:
    dist = dist or ClippedLogNormal.fit()
    queue = deque(range(len(sessions)))

    async def slot(i: int, t_first: float) -> None:
        with handing_over() as h:
            await _sleep_to(clock, h, t_first + i * stagger_s / active)
            while queue:
                s = queue.popleft()
                calls = sessions[s]
                iv = session_intervals(dist, seed, s, len(calls))
                for k, call in enumerate(calls):
                    t_start = clock.now()
                    await _dispatch(h, dispatch, s, call)
                    if k + 1 < len(calls):
                        await _sleep_to(clock, h, t_start + float(iv[k]))

    await _started(clock, lambda t: [slot(i, t) for i in range(min(active, len(sessions)))])


@dataclass
class LongGapPolicy:
    """The long-reuse-gap rule as a pure state machine (see the module docstring).

    ``n_turns[s]``: turns of session s. ``pick(free)`` returns the sessions to start now (at most
    ``free``); ``done(s)`` records a completed turn of session s."""

    n_turns: Sequence[int]
    gap: int = 128
    max_in_flight: int = 16
    completed: int = 0
    relaxed: int = 0
    in_flight: int = 0
    next_turn: list[int] = field(default_factory=list)
    last_done: dict[int, int] = field(default_factory=dict)   # session -> completed at its end
    ready: deque = field(default_factory=deque)               # waiting sessions, FIFO

    def __post_init__(self) -> None:
        self.next_turn = [0] * len(self.n_turns)
        self.ready = deque(s for s, n in enumerate(self.n_turns) if n > 0)

    def remaining_sessions(self) -> int:
        return len(self.ready) + self.in_flight

    def since(self, s: int) -> int:
        """Calls completed since session s's last turn (unbounded before its first turn)."""
        return self.completed - self.last_done[s] if s in self.last_done else self.gap

    def target(self) -> int:
        """Completions a session waits for now: ``min(gap, max(0, R - max_in_flight))``."""
        return min(self.gap, max(0, self.remaining_sessions() - self.max_in_flight))

    def pick(self, free: int) -> list[int]:
        out: list[int] = []
        free = min(free, self.max_in_flight - self.in_flight)
        need = self.target()  # a start moves a session from waiting to in flight: R stays
        while free > 0 and self.ready:
            s = next((s for s in self.ready if self.since(s) >= need), None)
            if s is None:
                if self.in_flight or out:
                    break
                s = max(self.ready, key=self.since)
            if self.since(s) < self.gap:
                self.relaxed += 1
            self.ready.remove(s)
            self.in_flight += 1
            free -= 1
            out.append(s)
        return out

    def done(self, s: int) -> None:
        self.completed += 1
        self.in_flight -= 1
        self.next_turn[s] += 1
        self.last_done[s] = self.completed
        if self.next_turn[s] < self.n_turns[s]:
            self.ready.append(s)

    @property
    def finished(self) -> bool:
        return not self.ready and self.in_flight == 0


async def run_long_gap(sessions: Sequence[Sequence[Call]], dispatch: Dispatch, clock: RunClock,
                       *, gap: int = 128, max_in_flight: int = 16) -> LongGapPolicy:
    pol = LongGapPolicy([len(cs) for cs in sessions], gap=gap, max_in_flight=max_in_flight)
    running: dict[asyncio.Task, int] = {}

    async def one(s: int, call: Call) -> None:
        await dispatch(s, call)

    while not pol.finished:
        for s in pol.pick(max_in_flight - len(running)):
            call = sessions[s][pol.next_turn[s]]
            running[asyncio.ensure_future(one(s, call))] = s
        if not running:
            break  # nothing can start (cannot happen: pick relaxes when idle)
        done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
        for t in done:
            s = running.pop(t)
            t.result()
            pol.done(s)
    return pol


async def run_timestamps(sessions: Sequence[Sequence[Call]], dispatch: Dispatch, clock: RunClock,
                         *, speed: float = 1.0) -> None:
    if speed <= 0:
        raise ValueError(f"speed: {speed!r} must be greater than 0")
    t0 = min((c.t for cs in sessions for c in cs if c.t is not None), default=0.0)

    async def session(s: int) -> None:
        with handing_over() as h:
            for call in sessions[s]:
                if call.t is not None:
                    await _sleep_to(clock, h, (call.t - t0) / speed)
                await _dispatch(h, dispatch, s, call)

    await _started(clock, lambda t: [session(s) for s in range(len(sessions))])


async def _sleep_to(clock: RunClock, h: HandOver, model_t: float) -> None:
    """Sleep until model time ``model_t``, leaving a hold there in ``h`` that lasts into the
    dispatch that follows (:func:`_dispatch`): on the stack's held clock nothing runs unheld
    between the wake-up and the call's release, so the call is released at ``model_t`` however
    late the host wakes the client."""
    h.leave(hold_at(clock, model_t))
    await clock.sleep_to(model_t)


async def _dispatch(h: HandOver, dispatch: Dispatch, s: int, call: Call) -> None:
    """``dispatch(s, call)``, releasing the hold left in ``h`` once the dispatch has run to its
    first wait: by then the call holds the clock itself (the replay's dispatch takes a request
    slot and stamps the call's release before anything it awaits), so the release is stamped
    where the schedule held the clock. From the call's end the hold the dispatch left in ``h``
    (where the clock was when it gave its own back) waits there until the schedule's next
    release, so that the schedule's own work in between (taking the next session, drawing its
    intervals) is no model time either."""
    asyncio.get_running_loop().call_soon(h.detach())  # runs once this task first waits
    await dispatch(s, call)


async def _started(clock: RunClock,
                   starts: Callable[[float], list[Coroutine[Any, Any, None]]]) -> None:
    """Run ``starts(t)`` (a schedule's slots or sessions, ``t`` the schedule's start in model
    seconds) to their ends. Model time stands still at ``t`` until each has left its own first
    hold (:func:`_sleep_to`), so that the first calls are released at their planned times
    however long the host takes to start them."""
    release = hold_at(clock, -math.inf)  # where the clock is now
    tasks: list[asyncio.Future[None]] = []
    try:
        tasks = [asyncio.ensure_future(c) for c in starts(clock.now())]
        await asyncio.sleep(0)  # every task runs to its first wait, its hold left
    finally:
        release()
    await asyncio.gather(*tasks)
