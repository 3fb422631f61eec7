"""The run clock: model seconds since the run started, and the stack's shared held clock.

Every stamp in a record is in *model seconds*: ``(mono() - t0) * time_scale``. On the embedded
stack the emulator divides every modelled duration by ``time_scale``, so multiplying wall time by it
gives model time; against real endpoints ``time_scale`` is 1.

``mono`` is the host's CLOCK_MONOTONIC, or, on an embedded stack, the stack's *held clock*
(:class:`HeldClock`): CLOCK_MONOTONIC minus the wall seconds during which a process of the stack
held model time: an emulated endpoint because a real store read outlasted its modelled duration
or its loop has not yet handled a modelled event, a client's request slot
(:class:`RequestHolds`) while a request or an answer travels between the processes or the
client does its own work between calls, the fleet's client while a real gate outlasts its
modelled pause. Every process of the run reads the same held clock, so their stamps compare
directly, and no modelled request, client stamp or busy time sees the host's speed.
"""
from __future__ import annotations

import contextlib
import contextvars
import fcntl
import math
import mmap
import os
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

CLOCK_FILE = "clock"
"""The held clock's file in the stack's state directory."""

SLOTS = 128
"""Hold slots in the clock file: one per endpoint of a stack (from 0 up), the request slots
(:data:`REQUEST_SLOTS`) and the client's (:data:`CLIENT_SLOT`, the last)."""

REQUEST_SLOTS = range(32, SLOTS - 1)
"""Slots a client lends to one request in flight (:class:`RequestHolds`): it holds the clock at
the request's send until the endpoint has received it, and the endpoint holds it at the answer's
first tokens and at its end until the client has read them (the :data:`HOLD_HEADER` names it)."""

HOLD_HEADER = "X-Adev-Hold-Slot"
"""The request header naming the request slot the client lent to the request."""

_HEAD = struct.Struct("<Qd")         # sequence number (odd while written), held seconds D
_SLOT = struct.Struct("<d")
_HOLDS = struct.Struct(f"<{SLOTS}d")  # every slot's hold
_PID = struct.Struct("<q")           # per slot: the pid of the process holding it (0: none)
_PIDS = _HEAD.size + SLOTS * _SLOT.size
_SIZE = _PIDS + SLOTS * _PID.size
_POLL_S = 0.0005
STALE_S = 2.0
"""A reader that sees the clock stand still this long (wall seconds) checks that every holder is
still alive, and releases the holds of processes that died (an endpoint killed mid-read) and the
request slots that stop it."""


WAKE_TOLERANCE_S = 1e-6
"""Model seconds a sleeper may wake before its end: a clock held at that end reads it back
through two float conversions and may stop a rounding error short of it."""

_source: Callable[[], float] = time.monotonic
_generation = 0
"""Bumped at every change of :data:`_source`, so that a :class:`RunClock` on it re-anchors."""


def mono() -> float:
    """This process's stamp source: host-wide monotonic seconds (comparable across processes on
    one host), or the stack's held clock once :func:`use_held_clock` found one."""
    return _source()


def use_held_clock(state_dir: str | Path | None) -> HeldClock | None:
    """Make the held clock of the stack in ``state_dir`` (if it has one) this process's stamp
    source (:func:`mono`, every :class:`RunClock` without its own source); returns it. Without
    one (an external stack, a free clock), the source is CLOCK_MONOTONIC again."""
    global _source, _generation
    held = open_held_clock(state_dir)
    cur = held_source()
    if held is not None and cur is not None and held.same_file(cur):
        held.close()
        return cur   # the source already: no change for the run clocks on it to follow
    if held is None and cur is None:
        return None
    _source = held if held is not None else time.monotonic  # no held clock: the host's
    _generation += 1
    return held


def leave_held_clock(state_dir: str | Path) -> bool:
    """When this process's stamp source is the held clock of the stack in ``state_dir``, make it
    CLOCK_MONOTONIC again (the stack was stopped: its clock no longer moves with its holders,
    which are gone). Returns whether it was."""
    global _source, _generation
    held = held_source()
    if held is None or held.path.parent.resolve() != Path(state_dir).resolve():
        return False
    _source = time.monotonic
    _generation += 1
    return True


SENT_HEADER = "X-Adev-Sent"
"""The request header in which a client on a stack's held clock sends the held-clock reading
(wall seconds, a float) at which it sent the request; an emulated endpoint on the same clock
takes it as the request's arrival (:func:`arrival_from_header`)."""

MAX_BACKDATE_S = 1.0
"""The most wall seconds an endpoint moves a request's arrival back to its client's stamp."""


def held_source() -> HeldClock | None:
    """This process's held clock, when :func:`use_held_clock` made one its stamp source."""
    return _source if isinstance(_source, HeldClock) else None


def arrival_from_header(value: str | None, now: float) -> float:
    """A request's arrival on the held clock: the client's stamp ``value`` (the
    :data:`SENT_HEADER`), clamped to ``[now - MAX_BACKDATE_S, now]``, or ``now`` without a
    usable one. The request's trip from the client's socket to the handler then takes no model
    time, as the endpoint's own parsing does not: the model has no term for either, and at time
    scale S each wall millisecond of it would be S model milliseconds of TTFT."""
    if not value:
        return now
    try:
        t = float(value)
    except ValueError:
        return now
    if not math.isfinite(t):
        return now
    return min(now, max(t, now - MAX_BACKDATE_S))


class HeldClock:
    """A monotonic clock shared through a file by the processes of one stack, that stops while
    an endpoint holds it.

        u(w) = min(w - D, min over slots of H_slot)

    ``w``: CLOCK_MONOTONIC; ``D``: wall seconds the clock has been held so far; ``H_slot``: the
    held-clock time a slot's holder may not pass (an in-flight store read's modelled end), +inf
    when it holds nothing. A holder that raises or clears its slot first folds the time held so far
    into D (``D = w - u(w)``), under an exclusive lock, so the clock never goes back nor jumps.
    Readers take no lock: a sequence number (odd while a writer is at work) makes them retry.
    """

    def __init__(self, path: str | Path, source: Callable[[], float] = time.monotonic) -> None:
        self.path = Path(path)
        self.source = source
        self._fd = os.open(self.path, os.O_RDWR)
        self._mm = mmap.mmap(self._fd, _SIZE)
        self._last = -math.inf
        self._still_since: float | None = None

    @classmethod
    def create(cls, path: str | Path) -> HeldClock:
        """The clock file at ``path`` with nothing held: a new one, or an existing one with every
        slot released (a stack restarted under a running client keeps its timeline; holds of
        endpoints that died are dropped)."""
        path = Path(path)
        if path.exists() and path.stat().st_size == _SIZE:
            c = cls(path)
            for i in range(SLOTS):
                c.set_hold(i, math.inf)
            return c
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        buf = bytearray(_SIZE)
        _HEAD.pack_into(buf, 0, 0, 0.0)
        for i in range(SLOTS):
            _SLOT.pack_into(buf, _HEAD.size + i * _SLOT.size, math.inf)
            _PID.pack_into(buf, _PIDS + i * _PID.size, 0)
        tmp.write_bytes(bytes(buf))
        os.replace(tmp, path)
        return cls(path)

    def close(self) -> None:
        self._mm.close()
        os.close(self._fd)

    def same_file(self, other: HeldClock) -> bool:
        """Whether ``other`` maps the same clock file (not a new one a restarted stack created at
        the same path)."""
        a, b = os.fstat(self._fd), os.fstat(other._fd)
        return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)

    def _snapshot(self) -> tuple[float, tuple[float, ...]]:
        """(D, every slot's hold), a consistent snapshot."""
        mm = self._mm
        for _ in range(100_000):  # a writer killed mid-write leaves the number odd: give up then
            s1, held = _HEAD.unpack_from(mm, 0)
            holds = _HOLDS.unpack_from(mm, _HEAD.size)
            s2 = _HEAD.unpack_from(mm, 0)[0]
            if s1 == s2 and not s1 & 1:
                break
        return held, holds

    def _read(self) -> tuple[float, float]:
        """(D, min hold), a consistent snapshot."""
        held, holds = self._snapshot()
        return held, min(holds)

    def _u(self, w: float) -> float:
        held, hold = self._read()
        return min(w - held, hold)

    def __call__(self) -> float:
        """The held clock's time now (never less than a value this object returned before). A
        clock that has *stood still* for over :data:`STALE_S` (this reader saw no advance in that
        time) makes this reader release the holds of dead processes, so a killed endpoint cannot
        stop the run's model time, and the request slots that hold it (a request's trip between
        two processes takes far less: one whose reader went away must not stop the run). A clock
        that is held but moving (holders that follow one another, as on a loaded host) is not
        stale: releasing a request slot then would let model time pass an answer's first tokens
        before its client has read them."""
        w = self.source()
        held, hold = self._read()
        u = min(w - held, hold)
        if u <= self._last:                    # standing still since this reader's last value
            if self._still_since is None:
                self._still_since = w
            elif w - self._still_since > STALE_S:
                self._still_since = w
                if self.drop_dead() + self.drop_request_holds(hold):
                    held, hold = self._read()
                    u = min(w - held, hold)
        else:
            self._still_since = None
        u = max(self._last, u)
        self._last = u
        return u

    def holder(self) -> int | None:
        """The slot that holds the clock now: the one with the earliest hold, when that hold
        stops the clock short of the free-running time ``w - D``; None while the clock runs free.
        A diagnostic (``bench/clock_holds.py``): nothing in a run reads it."""
        w = self.source()
        held, holds = self._snapshot()
        slot = min(range(SLOTS), key=holds.__getitem__)
        return slot if holds[slot] < w - held else None

    def free_to(self, at: float) -> bool:
        """True when no slot holds the clock before ``at`` (held-clock time): it passes ``at`` as
        soon as the wall does."""
        return self._read()[1] >= at

    def slot_hold(self, slot: int) -> float:
        """What slot ``slot`` holds the clock at (math.inf: nothing)."""
        return _SLOT.unpack_from(self._mm, _HEAD.size + slot * _SLOT.size)[0]

    def drop_dead(self) -> int:
        """Release every slot whose holding process no longer exists; returns how many."""
        n = 0
        for i in range(SLOTS):
            hold = self.slot_hold(i)
            pid = _PID.unpack_from(self._mm, _PIDS + i * _PID.size)[0]
            if math.isinf(hold) or pid <= 0 or _alive(pid):
                continue
            self.set_hold(i, math.inf)
            n += 1
        return n

    def drop_request_holds(self, at: float) -> int:
        """Release every request slot holding the clock at or before ``at``; returns how many."""
        n = 0
        for i in REQUEST_SLOTS:
            if self.slot_hold(i) <= at:
                self.set_hold(i, math.inf)
                n += 1
        return n

    def held_s(self) -> float:
        """Wall seconds the clock has been held so far (D plus a hold in progress)."""
        w = self.source()
        return w - self._u(w)

    def set_hold(self, slot: int, until: float) -> None:
        """Slot ``slot`` holds the clock at ``until`` (held-clock time; math.inf: no hold). A hold
        in the past holds the clock where it is now."""
        if not 0 <= slot < SLOTS:
            raise ValueError(f"slot: expected 0..{SLOTS - 1}, got {slot}")
        off = _HEAD.size + slot * _SLOT.size
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            mm = self._mm
            w = self.source()
            u = self._u(w)
            seq, held = _HEAD.unpack_from(mm, 0)
            seq |= 1                                       # odd: a writer at work
            _HEAD.pack_into(mm, 0, seq, held)
            _HEAD.pack_into(mm, 0, seq, max(held, w - u))  # fold the time held so far
            _SLOT.pack_into(mm, off, max(until, u))
            _PID.pack_into(mm, _PIDS + slot * _PID.size, 0 if until == math.inf else os.getpid())
            _HEAD.pack_into(mm, 0, seq + 1, max(held, w - u))
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)


CLIENT_SLOT = SLOTS - 1
"""The slot of the stack's client process (the fleet: its sessions' gate runs; endpoints take
the slots from 0 up, one each)."""


class Holds:
    """The holds of one process in one slot of a :class:`HeldClock`: any number of keyed holds,
    of which the earliest is published (``until`` in held-clock time; a hold in the past holds the
    clock where it is)."""

    def __init__(self, clock: HeldClock, slot: int) -> None:
        self.clock = clock
        self.slot = slot
        self._holds: dict[object, float] = {}
        self._at = math.inf

    def set(self, key: object, until: float | None) -> None:
        """Hold at ``until`` for ``key`` (None: release ``key``'s hold)."""
        if until is None:
            self._holds.pop(key, None)
        else:
            self._holds[key] = until
        at = min(self._holds.values(), default=math.inf)
        if at != self._at:
            self._at = at
            self.clock.set_hold(self.slot, at)

    @contextlib.contextmanager
    def holding(self, key: object, until: float) -> Iterator[None]:
        """Hold at ``until`` while the block runs."""
        self.set(key, until)
        try:
            yield
        finally:
            self.set(key, None)


class RequestHolds:
    """This process's request slots of a :class:`HeldClock` (:data:`REQUEST_SLOTS`), lent to one
    request in flight each. :meth:`take` holds the clock where it is in a free slot (None when
    every slot is lent: the request then goes without); the endpoint releases that hold once it
    has the request, holds the slot at the answer's first tokens and end, and the client releases
    those as it reads them (:meth:`release`); :meth:`give_back` releases the slot and returns it
    to the pool."""

    def __init__(self, clock: HeldClock) -> None:
        self.clock = clock
        self._free = list(reversed(REQUEST_SLOTS))

    def take(self) -> int | None:
        if not self._free:
            return None
        slot = self._free.pop()
        self.hold(slot)
        return slot

    def hold(self, slot: int) -> None:
        """Hold the clock in ``slot`` where it is now."""
        self.clock.set_hold(slot, -math.inf)

    def release(self, slot: int) -> None:
        self.clock.set_hold(slot, math.inf)

    def give_back(self, slot: int) -> None:
        self.clock.set_hold(slot, math.inf)
        self._free.append(slot)


_request_holds: RequestHolds | None = None


def request_holds() -> RequestHolds | None:
    """The request slots of this process's held clock (None without one)."""
    global _request_holds
    held = held_source()
    if held is None:
        return None
    if _request_holds is None or _request_holds.clock is not held:
        _request_holds = RequestHolds(held)
    return _request_holds


def hold_slot_from_header(value: str | None) -> int | None:
    """The request slot a :data:`HOLD_HEADER` names (None: absent or not a request slot)."""
    try:
        slot = int(value) if value else None
    except ValueError:
        return None
    return slot if slot is not None and slot in REQUEST_SLOTS else None


_client_holds: Holds | None = None


def _client(clock: RunClock) -> Holds | None:
    """This process's holds in :data:`CLIENT_SLOT`, when ``clock`` runs on the stack's held clock."""
    global _client_holds
    held = _source if isinstance(_source, HeldClock) else None
    if held is None or clock.source not in (mono, held):
        return None
    if _client_holds is None or _client_holds.clock is not held:
        _client_holds = Holds(held, CLIENT_SLOT)
    return _client_holds


def hold_until(clock: RunClock, model_t: float) -> contextlib.AbstractContextManager[None]:
    """While the block runs, model time on ``clock`` does not pass ``model_t`` (model seconds of
    ``clock``), for every process of the stack: the client's work that the model times (a gate
    run with a modelled duration) holds the stack's clock while it is behind, as an endpoint's
    store read does. A no-op unless ``clock`` runs on the stack's held clock."""
    holds = _client(clock)
    if holds is None:
        return contextlib.nullcontext()
    return holds.holding(object(), clock.t0 + model_t / clock.time_scale)


def hold_at(clock: RunClock, model_t: float) -> Callable[[], None]:
    """As :func:`hold_until`, for a hold that is not one block's: model time does not pass
    ``model_t`` until the returned function is called (calling it again does nothing). For a
    hand-over between tasks: one task holds, the task that takes over releases. A ``model_t``
    the clock has passed (``-math.inf``) holds it where it is."""
    holds = _client(clock)
    if holds is None:
        return lambda: None
    key = object()
    holds.set(key, clock.t0 + model_t / clock.time_scale)
    return lambda: holds.set(key, None)


class HandOver:
    """A hold passed from one holder to the next within one asyncio task (a fleet's session slot):
    :meth:`leave` parks a hold's release function here, and the next holder, once it holds
    its own, calls :meth:`take` to release it. Nothing runs unheld in between, so the next
    holder starts at the model time the last one left off, whatever the host's time between
    them. A hold left and never taken is released when :func:`handing_over` ends."""

    def __init__(self) -> None:
        self._release: Callable[[], None] = no_release

    def leave(self, release: Callable[[], None]) -> None:
        """Park ``release`` (a hold's release function), releasing the one parked before it."""
        prev, self._release = self._release, release
        prev()

    def take(self) -> None:
        """Release the parked hold (the caller holds its own by now); nothing if none."""
        self.detach()()

    def detach(self) -> Callable[[], None]:
        """The parked hold's release function, no longer parked here: for a holder that releases
        it at a moment of its own choosing (:func:`no_release` if none is parked)."""
        release, self._release = self._release, no_release
        return release


def no_release() -> None:
    """A release function with no hold to release."""
    return None


_handover: contextvars.ContextVar[HandOver | None] = contextvars.ContextVar("adev_handover",
                                                                            default=None)


@contextlib.contextmanager
def handing_over() -> Iterator[HandOver]:
    """A :class:`HandOver` for the code this task runs inside the block (:func:`handover`
    finds it); any hold still parked at the end is released."""
    h = HandOver()
    token = _handover.set(h)
    try:
        yield h
    finally:
        _handover.reset(token)
        h.take()


def handover() -> HandOver | None:
    """The :class:`HandOver` of the :func:`handing_over` block this code runs in (None outside
    one: a holder then releases its own hold)."""
    return _handover.get()


async def sleep_until(clock: RunClock, model_t: float) -> None:
    """Sleep until model time ``model_t`` of ``clock``. On the stack's held clock the sleeper
    holds model time at ``model_t`` until it is awake (:func:`hold_until`): how late this process
    wakes (the host's scheduling, at time scale S each wall millisecond is S model milliseconds)
    is no model time, so what the sleeper does next starts at ``model_t`` in every run."""
    with hold_until(clock, model_t):
        await clock.sleep_to(model_t)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs: it exists and is no zombie (an endpoint killed under a
    parent that has not reaped it yet is a zombie, and a zombie's holds must be released)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True   # no procfs: existence is all we know
    return stat[stat.rindex(")") + 2:][:1] not in ("Z", "X")


def open_held_clock(state_dir: str | Path | None) -> HeldClock | None:
    """The stack's held clock in ``state_dir`` (None when the stack has none: an external stack,
    or one started with ``stack.model_clock = "free"``, or when the file there has another
    layout: left by a stack of another adev version)."""
    if state_dir is None:
        return None
    p = Path(state_dir) / CLOCK_FILE
    try:
        ok = p.stat().st_size == _SIZE   # another size: a clock of another layout, not this stack's
    except FileNotFoundError:
        return None
    return HeldClock(p) if ok else None


def stack_held_dir(info) -> Path | None:
    """The state directory of the stack ``info`` (a :class:`adev.stack.state.StackInfo`) when it
    runs a held clock (an embedded stack with ``model_clock = "held"``), else None."""
    cfg = getattr(info, "config", None)
    if cfg is not None and getattr(cfg, "mode", None) == "embedded" and getattr(cfg, "model_clock", "") == "held":
        from adev.stack.state import state_dir_path
        return state_dir_path(cfg.state_dir)
    return None


def stack_run_clock(info, clock: RunClock | None = None) -> RunClock:
    """The run clock of a client of the stack ``info``: on an embedded stack with a held clock,
    that clock becomes this process's stamp source. ``clock``: the run's clock so far (a batch
    fleet's later run, on a stack of its own), which goes on from where it was on the new
    source (:meth:`RunClock.follow`)."""
    use_held_clock(stack_held_dir(info))
    if clock is not None:
        clock.follow()
        return clock
    return RunClock(time_scale=float(info.time_scale))


@dataclass
class RunClock:
    """Model seconds since ``t0`` on ``source`` (CLOCK_MONOTONIC, or a stack's :class:`HeldClock`).

    On the default source (:func:`mono`, this process's stamp source) the clock follows a change
    of that source: a stopped stack's held clock gives way to the host's, and a batch fleet's next
    stack brings a held clock of its own, each with an origin of its own. At the first reading
    after the change, ``t0`` moves so that model time goes on from the latest time the clock gave
    (:meth:`follow`); stamps taken on the old source are not converted after it."""
    time_scale: float = 1.0
    t0: float = math.nan  # NaN: the source's reading when the clock is made
    source: Callable[[], float] = field(default=mono, repr=False)
    _generation: int = field(default=-1, init=False, repr=False, compare=False)
    _latest: float = field(default=0.0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if math.isnan(self.t0):
            self.t0 = self.source()
        self._generation = _generation

    def follow(self) -> None:
        """Re-anchor on this process's stamp source when it has changed since the clock was
        anchored (only for a clock on the default source)."""
        if self._generation != _generation and self.source is mono:
            self.t0 = mono() - self._latest / self.time_scale
        self._generation = _generation   # a clock on a source of its own only takes note

    def mono(self) -> float:
        """A stamp on this clock's source (convert with :meth:`to_model`)."""
        if self._generation != _generation:
            self.follow()
        return self.source()

    def now(self) -> float:
        """Model seconds since the run started."""
        if self._generation != _generation:
            self.follow()
        t = (self.source() - self.t0) * self.time_scale
        if t > self._latest:
            self._latest = t
        return t

    def to_model(self, mono_t: float) -> float:
        """A stamp on this clock's source -> model seconds since the run started."""
        if self._generation != _generation:
            self.follow()
        t = (mono_t - self.t0) * self.time_scale
        if t > self._latest:
            self._latest = t
        return t

    def model_to_wall(self, seconds: float) -> float:
        """A model duration -> the wall seconds it takes on this stack (while nothing holds it)."""
        return seconds / self.time_scale

    async def sleep(self, model_seconds: float) -> None:
        """Sleep ``model_seconds`` of model time (longer on the wall while the clock is held)."""
        import asyncio
        if model_seconds <= 0:
            await asyncio.sleep(0)
            return
        await self.sleep_to(self.now() + model_seconds)

    async def sleep_to(self, end: float) -> None:
        """Sleep until model time ``end`` (at once if it has passed)."""
        import asyncio
        while True:
            left = end - self.now()
            if left <= WAKE_TOLERANCE_S:   # a clock held at ``end`` may read a rounding below it
                return
            await asyncio.sleep(max(left / self.time_scale, _POLL_S))
