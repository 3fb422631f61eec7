"""Live progress of a fleet: a rich panel on a terminal, plain log lines otherwise.

:class:`FleetState` sees every record the run writes (the fleet wraps the run directory with
:class:`ObservedRunDir`) plus the fleet's own hooks, and keeps: sessions by round and role, calls
in flight per endpoint, call errors, store refusals, the current window. The window's running
figures (busy share per endpoint, gross saving, hit shares) come from
:func:`adev.analysis.live.running_figures` when the measurement stage provides it; until then they
are shown as unavailable rather than computed a second way.
"""
from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..records import RunDir

if TYPE_CHECKING:
    from rich.live import Live


class ObservedRunDir(RunDir):
    """A :class:`RunDir` that also hands every appended record to observers."""

    def __init__(self, path, observers: list[Callable[[Any], None]] | None = None):
        super().__init__(path)
        self.observers = list(observers or [])

    def append(self, record: Any) -> None:
        super().append(record)
        for obs in self.observers:
            try:
                obs(record)
            except Exception:  # display problems never lose records
                pass


class FleetState:
    def __init__(self, width: int, endpoints: list[str], time_scale: float):
        self.width = width
        self.endpoints = list(endpoints)
        self.time_scale = time_scale
        self.phase = "starting"
        self.sessions: dict[str, dict[str, Any]] = {}   # open sessions
        self.ended: Counter[str] = Counter()            # status -> count
        self.calls_done: Counter[str] = Counter()       # endpoint -> count
        self.call_errors = 0
        self.in_flight: Counter[str] = Counter()        # endpoint -> calls in flight
        self._open_calls: dict[int, float] = {}         # token -> model time scheduled
        self._call_seq = 0
        self.refused_blocks = 0
        self.put_blocks = 0
        self.store_errors = 0
        self.session_errors = 0
        self._served: dict[str, bool] = {e: False for e in endpoints}
        self.window: tuple[int, float, float | None] | None = None
        self.windows_done: list[int] = []
        self.window_calls: list[dict[str, Any]] = []
        self.window_scrapes: list[dict[str, Any]] = []
        self._last_scrape: dict[str, dict[str, Any]] = {}
        self.prefill_tokens_per_s: float | None = None
        self.server_versions: dict[str, str] = {}   # endpoint -> GET /version (discovery)
        self.figures: dict[str, Any] | None = None
        self.figures_note = ""
        self.t_now = 0.0

    # -- fleet hooks --------------------------------------------------------------------
    def session_launched(self, sid: str, slot: int, task: str, seed: int, t: float) -> None:
        self.sessions.setdefault(sid, {"slot": slot, "task": task, "seed": seed, "round": 0,
                                       "role": "-", "t": t, "recorded": False})

    def session_finished(self, sid: str, t: float) -> None:
        info = self.sessions.get(sid)
        if info is not None and not info.get("recorded"):
            self.sessions.pop(sid, None)  # never wrote a start record: nothing to close

    def window_opened(self, index: int, t0: float, t1: float | None) -> None:
        self.window = (index, t0, t1)
        self.phase = f"measuring window {index}"
        self.window_calls = []
        # the boundary scrape was taken just before the window opened: it is the window's base
        self.window_scrapes = list(self._last_scrape.values())

    def window_closed(self, index: int) -> None:
        self.windows_done.append(index)

    def call_started(self, endpoint: str, session_id: str = "", role: str = "",
                     round: int = 0, t: float | None = None) -> int:
        """A call was scheduled; returns a token for :meth:`call_finished`."""
        self.in_flight[endpoint] += 1
        self._call_seq += 1
        self._open_calls[self._call_seq] = self.t_now if t is None else t
        info = self.sessions.get(session_id)
        if info is not None:
            info["role"], info["round"] = role or info["role"], round or info["round"]
        return self._call_seq

    def call_finished(self, endpoint: str, token: int | None = None) -> None:
        self.in_flight[endpoint] = max(0, self.in_flight[endpoint] - 1)
        if token is not None:
            self._open_calls.pop(token, None)

    def calls_open_since_before(self, t: float) -> int:
        """Calls still in flight that were scheduled before model time ``t``."""
        return sum(1 for ts in self._open_calls.values() if ts < t)

    def served(self) -> dict[str, bool]:
        return dict(self._served)

    def open_sessions(self) -> dict[str, dict[str, Any]]:
        """Sessions with a start record and no end record."""
        return {k: v for k, v in self.sessions.items() if v.get("recorded")}

    # -- record observer ----------------------------------------------------------------
    def on_record(self, rec: Any) -> None:
        kind = getattr(rec, "kind", "")
        if kind == "sessions":
            if rec.status == "started":
                info = self.sessions.setdefault(rec.session_id, {"slot": -1, "task": rec.task,
                                                                 "seed": rec.seed, "round": 0,
                                                                 "role": "-", "t": rec.t})
                info["recorded"] = True
            else:
                self.sessions.pop(rec.session_id, None)
                self.ended[rec.status] += 1
        elif kind == "calls":
            self._served[rec.endpoint] = True
            if rec.status == "ok":
                self.calls_done[rec.endpoint] += 1
            else:
                self.call_errors += 1
            open_info = self.sessions.get(rec.session_id)
            if open_info is not None:
                open_info["role"] = rec.role or open_info["role"]
                open_info["round"] = rec.round or open_info["round"]
            srv = rec.server or {}
            self.refused_blocks += int(srv.get("put_refused_blocks") or 0)
            self.put_blocks += int(srv.get("put_blocks") or 0)
            self.store_errors += int(srv.get("store_errors") or 0)
            if self.window is not None:
                import dataclasses
                self.window_calls.append(dataclasses.asdict(rec))
        elif kind == "scrapes":
            import dataclasses
            self.t_now = max(self.t_now, rec.t)
            d = dataclasses.asdict(rec)
            if rec.ok:
                self._last_scrape[rec.target] = d
            if self.window is not None:
                self.window_scrapes.append(d)
        elif kind == "events" and rec.event == "session_error":
            self.session_errors += 1

    # -- running figures ----------------------------------------------------------------
    def update_figures(self, t_now: float) -> None:
        """Running figures of the current window, from the measurement stage's function."""
        self.t_now = t_now
        if self.window is None:
            self.figures, self.figures_note = None, "no window open yet"
            return
        try:
            from ..analysis.live import running_figures  # measurement stage (issue 4)
        except ImportError:
            self.figures, self.figures_note = None, "running figures: analysis stage not available"
            return
        idx, t0, _ = self.window
        try:
            self.figures = running_figures(self.window_calls, self.window_scrapes, t0, t_now,
                                           self.prefill_tokens_per_s, self.server_versions)
            self.figures_note = ""
        except Exception as e:
            self.figures, self.figures_note = None, f"running figures failed: {type(e).__name__}: {e}"

    # -- views --------------------------------------------------------------------------
    def by_round_role(self) -> dict[tuple[int, str], int]:
        c: Counter = Counter()
        for info in self.sessions.values():
            c[(int(info.get("round") or 0), str(info.get("role") or "-"))] += 1
        return dict(sorted(c.items()))

    def line(self) -> str:
        """One plain log line."""
        rr = ", ".join(f"r{r}/{role}:{n}" for (r, role), n in self.by_round_role().items())
        fl = " ".join(f"{e}:{self.in_flight[e]}" for e in self.endpoints)
        w = f"window {self.window[0]}" if self.window else "no window"
        figs = ""
        if self.figures:
            figs = " " + " ".join(f"{k}={_fmt(v)}" for k, v in _flat(self.figures).items())
        ended = ",".join(f"{k}:{v}" for k, v in sorted(self.ended.items()))
        return (f"[t={self.t_now:7.0f}s] {self.phase} | {w} | active {len(self.sessions)}/"
                f"{self.width} ({rr}) | in flight {fl} | calls {sum(self.calls_done.values())} "
                f"errors {self.call_errors} | store blocks put {self.put_blocks}, refused {self.refused_blocks}"
                f" | sessions ended {ended or 0}{figs}")

    def render(self):
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        head = Text(f"t = {self.t_now:,.0f} model s   {self.phase}", style="bold")
        if self.window:
            i, t0, t1 = self.window
            head.append(f"   window {i}: [{t0:,.0f}, {t1:,.0f})" if t1 else
                        f"   run window {i} from {t0:,.0f}")
        t_sess = Table(title="sessions by round and role", expand=False)
        t_sess.add_column("round")
        t_sess.add_column("role")
        t_sess.add_column("sessions", justify="right")
        for (r, role), n in self.by_round_role().items():
            t_sess.add_row(str(r), role, str(n))
        t_ep = Table(title="endpoints", expand=False)
        for c in ("endpoint", "in flight", "calls", "busy share"):
            t_ep.add_column(c, justify="right")
        busy = (self.figures or {}).get("busy_share", {}) if self.figures else {}
        for e in self.endpoints:
            b = busy.get(e) if isinstance(busy, dict) else None
            t_ep.add_row(e, str(self.in_flight[e]), str(self.calls_done[e]), _fmt(b))
        t_fig = Table(title="current window", expand=False)
        t_fig.add_column("figure")
        t_fig.add_column("value", justify="right")
        for k, v in _flat(self.figures or {}).items():
            if not k.startswith("busy_share"):
                t_fig.add_row(k, _fmt(v))
        if self.figures_note:
            t_fig.add_row(self.figures_note, "")
        t_fig.add_row("store blocks put / refused", f"{self.put_blocks} / {self.refused_blocks}")
        t_fig.add_row("call errors", str(self.call_errors))
        t_fig.add_row("session errors", str(self.session_errors))
        t_fig.add_row("sessions ended", ", ".join(f"{k} {v}" for k, v in sorted(self.ended.items())) or "0")
        grid = Table.grid(padding=(0, 2))  # side by side: fits a 24-line terminal
        grid.add_row(t_sess, Group(t_ep, t_fig))
        return Group(head, grid)


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in (d or {}).items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, key + "."))
        elif isinstance(v, (int, float)) or v is None:
            out[key] = v
    return out


def _fmt(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 10 else f"{v:,.0f}"
    return str(v)


class LiveDisplay:
    """Refreshes the state's view: rich Live on a TTY, a plain line every ``log_every_wall_s``."""

    def __init__(self, state: FleetState, clock: Any, mode: str = "auto",
                 log_every_wall_s: float = 10.0, stream=None):
        self.state = state
        self.clock = clock
        self.stream = stream or sys.stdout
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.mode = ("rich" if tty else "plain") if mode == "auto" else mode
        self.every = log_every_wall_s
        self._task: asyncio.Task | None = None
        self._live: Live | None = None

    async def _run(self) -> None:
        if self.mode == "rich":
            from rich.console import Console
            from rich.live import Live
            live = self._live = Live(self.state.render(), console=Console(file=self.stream),
                                     refresh_per_second=2, transient=False)
            live.start()
            while True:
                self.state.update_figures(self.clock.now())
                live.update(self.state.render())
                await asyncio.sleep(1.0)
        else:
            last = 0.0
            while True:
                await asyncio.sleep(1.0)
                if time.monotonic() - last >= self.every:
                    last = time.monotonic()
                    self.state.update_figures(self.clock.now())
                    print(self.state.line(), file=self.stream, flush=True)

    def start(self) -> None:
        if self.mode != "off":
            self._task = asyncio.create_task(self._run(), name="live")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._live is not None:
            self.state.update_figures(self.clock.now())
            self._live.update(self.state.render())
            self._live.stop()
