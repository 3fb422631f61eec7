"""Faults: what went wrong during a run, found in its records, and the rule that marks windows.

A *fault* is named ``<kind>`` or ``<kind>:<target>``:

* ``master_down`` / ``endpoint_down:<ep>``: a scrape of a target that had answered earlier in the
  run failed (a target that never answered is a missing data source, not a fault). From the
  failed scrape until the target answers again.
* ``call_errors:<ep>``: calls that ended with status ``error`` (refused, reset, HTTP 5xx...; not
  ``cancelled``), each over [sent, end].
* ``store_errors:<ep>``: calls whose server reports store errors (``server.store_errors`` > 0:
  lookups, loads or writes to the store tier that failed), each over [sent, end].
* ``sessions_llm_error``: sessions that ended because an LLM call failed (reason ``llm_error``),
  at their end.
* ``session_error``: a session that raised outside the model's control (fleet event
  ``session_error``), at the event.

**The window rule.** A fault *touches* window [t0, t1) when one of its intervals overlaps
[t0, t1]. A window touched by ``master_down`` or ``endpoint_down`` is **invalid** (its counters
and busy time do not describe the configuration under test: the store or an endpoint was missing
for part of it), with reason ``fault: <names>``. So is a window in which the calls touched by one
``call_errors:<ep>`` or ``store_errors:<ep>`` fault are more than :data:`ERROR_SHARE` of the calls
sent in it (or any, when that count is unknown): failures on that scale are an outage, not
noise. Otherwise the window stays **valid with the faults named** (a few failed calls or loads,
sessions ended early: they change the mix of work, not what a token costs); every figure of such
a window, and every figure pooled over it, carries the names.

The fleet applies the rule when it closes a window (:class:`FaultTracker`, fed every record as
it is written, which also writes ``fault`` events at each fault's begin and end); the report
applies it again over all records (:func:`mark_windows`), which also catches calls sent inside a
window that failed after it closed.
"""
from __future__ import annotations

import dataclasses
import math
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

INVALIDATING = ("master_down", "endpoint_down", "call_errors", "store_errors")
ALWAYS_INVALIDATING = ("master_down", "endpoint_down")
ERROR_SHARE = 0.05
"""Share of a window's calls that one ``call_errors`` / ``store_errors`` fault may touch before
the window is invalid."""


def kind_of(name: str) -> str:
    return name.split(":", 1)[0]


def invalidating(names: Iterable[str]) -> list[str]:
    """The names among ``names`` that make a window invalid (the rule above)."""
    return [n for n in names if kind_of(n) in INVALIDATING]


def verdict(counts: Mapping[str, int],
            calls: int | None = None) -> tuple[bool, str | None, list[str]]:
    """(valid, reason, fault names) of a window touched by faults ``{name: occurrences}`` in
    which ``calls`` calls were sent (None: unknown), by the rule above."""
    names = sorted(counts)
    bad = [n for n in invalidating(names)
           if kind_of(n) in ALWAYS_INVALIDATING or calls is None
           or counts[n] > ERROR_SHARE * calls]
    if bad:
        return False, "fault: " + ", ".join(f"{n} ({counts[n]})" for n in bad), names
    return True, None, names


def _as_dict(rec: Any) -> dict[str, Any]:
    return rec if isinstance(rec, dict) else dataclasses.asdict(rec)


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


@dataclass
class FaultTracker:
    """Faults found in a stream of records (fed in the order written).

    ``feed(kind, record)`` takes one record; ``touching(t0, t1)`` gives ``{name: occurrences}``
    of the faults whose intervals overlap [t0, t1]. ``on_event(name, t, detail)`` (optional) is
    called at each fault's begin and end (the fleet writes them as ``fault`` events)."""

    on_event: Callable[[str, float, dict[str, Any]], None] | None = None
    intervals: list[tuple[str, float, float | None]] = field(default_factory=list)
    _up: set[str] = field(default_factory=set)           # targets seen answering
    _down: dict[str, tuple[int, float, int]] = field(default_factory=dict)  # name -> (i, t, n)
    _calls: dict[str, tuple[float, int]] = field(default_factory=dict)  # name -> (t, n) open
    _lock: threading.RLock = field(default_factory=threading.RLock)  # on_event re-enters
    sent: list[float] = field(default_factory=list)      # t_sent of every call record

    def _emit(self, name: str, t: float, **detail: Any) -> None:
        if self.on_event is not None:
            self.on_event(name, t, detail)

    def feed(self, kind: str, rec: Any) -> None:
        r = _as_dict(rec)
        with self._lock:
            if kind == "scrapes":
                self._scrape(r)
            elif kind == "calls":
                self._call(r)
            elif kind == "sessions":
                reason = str(r.get("reason") or "")
                if r.get("status") not in ("started", None) and reason.startswith("llm_error"):
                    t = _num(r.get("t")) or 0.0
                    self.intervals.append(("sessions_llm_error", t, t))
                    self._emit("sessions_llm_error", t, state="occurred",
                               session_id=r.get("session_id"), reason=reason[:300])
            elif kind == "events" and r.get("event") == "session_error":
                t = _num(r.get("t")) or 0.0
                self.intervals.append(("session_error", t, t))

    def _scrape(self, r: dict[str, Any]) -> None:
        target = str(r.get("target") or "?")
        name = "master_down" if target == "master" else f"endpoint_down:{target}"
        t = _num(r.get("t")) or 0.0
        if r.get("ok"):
            self._up.add(target)
            if name in self._down:
                i, t0, n = self._down.pop(name)
                self.intervals[i] = (name, t0, t)
                self._emit(name, t, state="end", failed_scrapes=n, down_since=t0)
            return
        if target not in self._up:
            return  # never answered in this run: a missing source, not a fault
        if name in self._down:
            i, t0, n = self._down[name]
            self._down[name] = (i, t0, n + 1)
            return
        self.intervals.append((name, t, None))
        self._down[name] = (len(self.intervals) - 1, t, 1)
        self._emit(name, t, state="begin", target=target, error=str(r.get("error"))[:300])

    def _call(self, r: dict[str, Any]) -> None:
        ep = str(r.get("endpoint") or "?")
        ts = _num(r.get("t_sent")) or 0.0
        self.sent.append(ts)
        te = _num(r.get("t_end"))
        te = ts if te is None else te
        srv = r.get("server")
        if not isinstance(srv, dict):
            srv = {}
        found = []
        if r.get("status") == "error":
            found.append((f"call_errors:{ep}", str(r.get("error") or "")[:300]))
        if (_num(srv.get("store_errors")) or 0) > 0:
            found.append((f"store_errors:{ep}", f"{srv.get('store_errors')} store errors"))
        for name, err in found:
            self.intervals.append((name, ts, te))
            if name in self._calls:
                t0, n = self._calls[name]
                self._calls[name] = (t0, n + 1)
            else:
                self._calls[name] = (ts, 1)
                self._emit(name, te, state="begin", call_id=r.get("call_id"), error=err)
        if r.get("status") == "ok":
            for name in (f"call_errors:{ep}",) + (() if found else (f"store_errors:{ep}",)):
                if name in self._calls:
                    t0, n = self._calls.pop(name)
                    self._emit(name, te, state="end", calls=n, since=t0)

    def touching(self, t0: float, t1: float) -> dict[str, int]:
        """``{name: occurrences}`` of the faults overlapping [t0, t1] (an open interval: a fault
        not over yet)."""
        out: Counter[str] = Counter()
        with self._lock:
            for name, a, b in self.intervals:
                if a <= t1 and (b is None or b >= t0):
                    out[name] += 1
        return dict(out)


    def calls_sent(self, t0: float, t1: float) -> int:
        """Call records sent in [t0, t1)."""
        with self._lock:
            return sum(1 for t in self.sent if t0 <= t < t1)


def tracker_from_records(records: Mapping[str, Iterable[Mapping[str, Any]]]) -> FaultTracker:
    """A tracker fed a run's records (scrapes, calls, sessions, events) in time order."""
    tr = FaultTracker()
    stamp = {"scrapes": "t", "calls": "t_end", "sessions": "t", "events": "t"}
    items = []
    for kind, key in stamp.items():
        for i, r in enumerate(records.get(kind) or ()):
            t = _num(r.get(key))
            if t is None and kind == "calls":
                t = _num(r.get("t_sent"))
            items.append((t if t is not None else 0.0, i, kind, r))
    items.sort(key=lambda x: (x[0], x[1]))
    for _, _, kind, r in items:
        tr.feed(kind, r)
    return tr


def mark_windows(windows: list[dict[str, Any]], tracker: FaultTracker) -> list[dict[str, Any]]:
    """Each window with ``faults`` (names touching it) and the rule applied: a window recorded
    valid that invalidating faults touch becomes invalid with reason ``fault: ...``."""
    out = []
    for w in windows:
        w = dict(w)
        t0, t1 = float(w["t0"]), float(w["t1"])
        valid, reason, names = verdict(tracker.touching(t0, t1), tracker.calls_sent(t0, t1))
        w["faults"] = sorted(set(w.get("faults") or []) | set(names))
        if w.get("valid", True) and not valid:
            w["valid"], w["reason"] = False, reason
        out.append(w)
    return out


FAULT_COLS = ["window", "t0", "t1", "valid", "reason", "faults", "calls", "failed_calls",
              "store_error_calls",
              "sessions_ended_llm_error", "sessions_ended_error", "failed_scrapes"]


def fault_rows(run: Any) -> list[dict[str, Any]]:
    """Per window of ``run`` (an :class:`adev.analysis.run.Run`): calls sent in it, failed calls
    (status ``error``), calls with store errors, sessions that ended in it with reason
    ``llm_error`` / status ``error``, failed scrapes of targets that had answered, fault names.
    Two more rows, ``before`` (warm-up) and ``after`` (drain and stop), hold what happened
    outside the windows when anything did, so the rows add up to the whole run."""
    import numpy as np
    c, ss = run.calls, run.sessions
    ws = run.measurement_windows()
    spans = list(ws)
    if ws:
        first, last = min(float(w["t0"]) for w in ws), max(float(w["t1"]) for w in ws)
        spans = ([{"index": "before", "t0": -math.inf, "t1": first, "valid": False,
                   "faults": sorted(run.faults.touching(-math.inf, first))
                   if run.faults is not None else [], "outside": True}]
                 + spans
                 + [{"index": "after", "t0": last, "t1": math.inf, "valid": False,
                     "faults": sorted(run.faults.touching(last, math.inf))
                     if run.faults is not None else [], "outside": True}])
    rows = []
    for w in spans:
        t0, t1 = float(w["t0"]), float(w["t1"])
        sent = c[(c["t_sent"] >= t0) & (c["t_sent"] < t1)] if len(c) else c
        ended = ss[(ss["status"] != "started") & (ss["t"] >= t0) & (ss["t"] < t1)] \
            if len(ss) else ss
        reasons = ended["reason"].fillna("").astype(str) if len(ended) else []
        failed = 0
        for scrapes in run.scrapes.values():
            seen = False
            for s in scrapes:
                seen = seen or s.ok
                if not s.ok and seen and t0 <= s.t <= t1:
                    failed += 1
        se = sent["srv_store_errors"].to_numpy(dtype=float) if len(sent) else np.empty(0)
        rows.append({"window": w["index"] if w.get("outside") else int(w.get("index", 0)),
                     "t0": t0, "t1": t1,
                     "valid": "outside" if w.get("outside") else bool(w.get("valid", True)),
                     "reason": "" if w.get("outside") else (w.get("reason") or ""),
                     "faults": ", ".join(w.get("faults") or []) or "none",
                     "calls": int(len(sent)),
                     "failed_calls": int((sent["status"] == "error").sum()) if len(sent) else 0,
                     "store_error_calls": int(np.count_nonzero(se > 0)),
                     "sessions_ended_llm_error": int(sum(r.startswith("llm_error")
                                                         for r in reasons)),
                     "sessions_ended_error": int((ended["status"] == "error").sum())
                     if len(ended) else 0,
                     "failed_scrapes": failed})
        if w.get("outside") and not any(rows[-1][k] for k in (
                "failed_calls", "store_error_calls", "sessions_ended_llm_error",
                "sessions_ended_error", "failed_scrapes")):
            rows.pop()  # nothing went wrong outside the windows: no row
    return rows


def fault_events(run: Any) -> list[dict[str, Any]]:
    """The run's ``fault`` events (begin/end of each fault, as the fleet wrote them)."""
    ev = run.events
    if not len(ev) or "event" not in ev:
        return []
    return [r for r in ev[ev["event"] == "fault"].to_dict("records")]


def faults_md(run: Any, label: str) -> str:
    """The run's faults and failures per window (rule in :mod:`adev.analysis.faults`)."""
    import pandas as pd

    from .render import md_table
    rows = fault_rows(run)
    tot = {k: sum(r[k] for r in rows) for k in ("failed_calls", "store_error_calls",
                                                 "sessions_ended_llm_error", "failed_scrapes")}
    head = f"## Faults and failures: {label}\n\n"
    evs = fault_events(run)
    touched = [r for r in rows if r["faults"] != "none"]
    if not any(tot.values()) and not touched and not evs:
        bad = [r for r in rows if r["valid"] is False]
        return head + ("No faults: no call failed, no store error, no session ended with "
                       "llm_error, every target that answered kept answering.\n"
                       + ("\nInvalid windows:\n\n" + "\n".join(
                           f"- window {r['window']}: {r['reason']}" for r in bad) + "\n"
                          if bad else ""))
    txt = head + (f"{tot['failed_calls']} failed calls, {tot['store_error_calls']} calls with "
                  f"store errors, {tot['sessions_ended_llm_error']} sessions ended with llm_error, "
                  f"{tot['failed_scrapes']} failed scrapes of targets that had answered, over the "
                  f"whole run (rows before and after: outside the windows). A window touched "
                  f"by master_down or endpoint_down is invalid, and so is one where a "
                  f"call_errors or store_errors fault touches more than {ERROR_SHARE:.0%} of its "
                  f"calls; otherwise it stays valid with the faults named, and every figure over "
                  f"it carries them.\n\n")
    txt += md_table(pd.DataFrame(rows), FAULT_COLS) + "\n"
    if evs:
        txt += "Fault events:\n\n" + "\n".join(
            f"- t={e['t']:.1f} s: `{(e.get('detail') or {}).get('fault')}` "
            f"{(e.get('detail') or {}).get('state')}"
            + "".join(f", {k} {str(v)[:120]}" for k, v in (e.get("detail") or {}).items()
                      if k not in ("fault", "state"))
            for e in evs[:50]) + "\n"
    return txt
