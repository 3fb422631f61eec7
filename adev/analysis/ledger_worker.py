"""The reuse ledger in its own process: the fleet's event loop hands each prompt's token ids over
and goes on, parsing and hashing happen elsewhere.

A fleet's event loop is shared by every session; a prompt's token ids (tens of thousands of
integers, the first event of each streamed answer) cost about 2 ms of that loop to parse and
hash in place (``bench/bench_client.py``), and calls of a round end together. The LLM client
therefore passes the event's raw ``prompt_token_ids`` JSON text (:meth:`LedgerProcess.add_json`)
to a spawned process, which parses it and calls :meth:`LedgerWriter.add` with the same
arguments, in the same order, writing the same files.

The hand-over is a pipe written without blocking and without a helper thread: each message is
one length-prefixed frame (the framing of :meth:`multiprocessing.connection.Connection.send_bytes`)
appended to a buffer that is written as far as the pipe takes it; the rest is written by the
event loop when the pipe becomes writable (``loop.add_writer``), or, with no running loop, at
once. (A :class:`multiprocessing.Queue` has a feeder thread that pickles and writes in the
client's process; its GIL hand-offs with the event loop delayed the loop's stamps by
milliseconds.) ``close()`` writes what is left, sends the end frame and waits for the process; an
error in the process is re-raised there. The process runs at niceness +10 (on a busy host the
client's event loop, whose stamps are the measurement, preempts it) and, when the fleet is pinned
to its own cores (``fleet.client_cpus``), on the host's other cores. Killing the fleet loses at
most the prompts not yet read by the process (milliseconds of calls), like the calls in flight.

Signals: the process ignores SIGINT and SIGTERM (they are blocked from before it starts until it
ignores them), so Ctrl-C at a terminal or a SIGTERM to the fleet's process group reaches only
the fleet, which stops cleanly and ends the process through ``close()``; the process also ends
when the fleet is gone (end of the pipe).
"""
from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import queue as _queue
import select
import signal
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson

__all__ = ["LedgerProcess"]

NICE = 10  # the ledger process's niceness increment (it only has to keep up on average)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # the fleet's; ignored by the ledger process


def _ignore_stop_signals() -> None:
    """In the ledger process: ignore the fleet's stop signals, then unblock them (they were
    blocked by the parent across the start, see :meth:`LedgerProcess.__init__`)."""
    for s in STOP_SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def _serve(conn: Any, errors: Any, run_dir: str, kw: dict[str, Any]) -> None:
    _ignore_stop_signals()
    from .ledger import LedgerWriter
    try:
        w = LedgerWriter(run_dir, **kw)
    except Exception as e:  # noqa: BLE001 - reported to the parent at close()
        errors.put(f"{type(e).__name__}: {e}")
        return
    try:
        while True:
            try:
                body = conn.recv_bytes()
            except EOFError:  # the fleet is gone: keep what was read
                break
            if not body:  # the end frame
                break
            head, _, payload = body.partition(b"\n")
            op, *args = orjson.loads(head)
            if op == "add":
                t, sid, cid = args
                w.add(t, sid, cid, orjson.loads(payload))
            elif op == "forget":
                w.forget(args[0])
    except Exception as e:  # noqa: BLE001
        errors.put(f"{type(e).__name__}: {e}")
    finally:
        w.close()


def _away_from_client() -> set[int] | None:
    """Cores for the ledger process when this process is pinned (``fleet.client_cpus``): the
    host's other cores, so its hashing never shares a core with the client's event loop."""
    from ..config import HOST_CPUS
    if not hasattr(os, "sched_getaffinity"):
        return None
    mine = os.sched_getaffinity(0)
    rest = set(HOST_CPUS) - mine
    return rest if rest and mine != set(HOST_CPUS) else None


class LedgerProcess:
    """The :class:`~adev.analysis.ledger.LedgerWriter` hook, run in a spawned process.

    ``LedgerProcess(run_dir, **LedgerWriter kwargs)``; ``add`` / ``add_json`` / ``forget`` /
    ``close`` as the writer's. Use as a context manager or call ``close()``. Not thread-safe:
    call it from one thread (the event loop's)."""

    def __init__(self, run_dir: Any, **kw: Any):
        ctx = mp.get_context("spawn")  # the fleet process has threads: no fork
        reader, self._conn = ctx.Pipe(duplex=False)
        self._errors = ctx.Queue()
        self.dir = Path(getattr(run_dir, "path", run_dir))
        self._p = ctx.Process(target=_serve, args=(reader, self._errors, str(self.dir), kw),
                              name="adev-ledger", daemon=True)
        # the spawned interpreter inherits this thread's signal mask: a Ctrl-C during its start
        # stays pending (then ignored) instead of raising KeyboardInterrupt in it; here it is
        # delivered when the mask is restored
        old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            self._p.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        pid = self._p.pid
        assert pid is not None  # started
        try:  # background work, its start-up included (a spawned interpreter imports for
            # hundreds of ms): the client's event loop (and the stack) preempt it on wake-up
            os.setpriority(os.PRIO_PROCESS, pid,
                           min(19, os.getpriority(os.PRIO_PROCESS, 0) + NICE))
        except OSError:
            pass
        reader.close()
        self._fd = self._conn.fileno()
        os.set_blocking(self._fd, False)
        self._buf = bytearray()
        self._loop: asyncio.AbstractEventLoop | None = None  # a writer is registered on it
        self._closed = False
        away = _away_from_client()
        if away:
            try:
                os.sched_setaffinity(pid, away)
            except OSError:
                pass

    def add(self, t: float, session_id: str, call_id: str,
            token_ids: Sequence[int] | np.ndarray) -> None:
        """As :meth:`LedgerWriter.add` (returns nothing: the block count is known later)."""
        self._send(["add", float(t), str(session_id), str(call_id)],
                   orjson.dumps(token_ids, option=orjson.OPT_SERIALIZE_NUMPY))

    def add_json(self, t: float, session_id: str, call_id: str, ids_json: bytes) -> None:
        """One prompt's token ids as the JSON array text of a ``prompt_token_ids`` field."""
        self._send(["add", float(t), str(session_id), str(call_id)], bytes(ids_json))

    def forget(self, session_id: str) -> None:
        self._send(["forget", str(session_id)], b"")

    def _send(self, head: list, payload: bytes) -> None:
        if self._closed:
            raise ValueError("ledger writer is closed")
        if not self._p.is_alive():
            raise RuntimeError(f"ledger process ended (exit code {self._p.exitcode}): "
                               f"{self._error() or 'no error reported'}")
        body = orjson.dumps(head) + b"\n" + payload
        self._buf += struct.pack("!i", len(body))
        self._buf += body
        self._flush()

    def _write_some(self) -> None:
        """One write of what the pipe takes now; a gone process (EPIPE) drops the buffer (the
        next add or close() says why)."""
        try:
            del self._buf[:os.write(self._fd, self._buf)]
        except BlockingIOError:
            pass
        except OSError:
            self._buf.clear()

    def _drain(self) -> None:
        """Wait here until the process has taken the whole buffer (or is gone)."""
        while self._buf and self._p.is_alive():
            if select.select([], [self._fd], [], 1.0)[1]:
                self._write_some()

    def _flush(self) -> None:
        """Write as much of the buffer as the pipe takes now; leave the rest to the loop."""
        while self._buf:
            before = len(self._buf)
            self._write_some()
            if len(self._buf) == before:
                break
        if self._buf and self._loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop in this thread: wait for the reader here
                self._drain()
                return
            loop.add_writer(self._fd, self._on_writable)
            self._loop = loop
        elif not self._buf and self._loop is not None:
            self._loop.remove_writer(self._fd)
            self._loop = None

    def _on_writable(self) -> None:
        if not self._p.is_alive():  # nobody reads any more: stop trying (close() reports it)
            if self._loop is not None:
                self._loop.remove_writer(self._fd)
                self._loop = None
            return
        self._flush()

    def _error(self) -> str | None:
        try:
            return self._errors.get_nowait()
        except _queue.Empty:
            return None

    def close(self, timeout_s: float = 120.0) -> None:
        """Write everything queued, stop the process; raise what went wrong in it, if anything."""
        if self._closed:
            return
        self._closed = True
        if self._loop is not None:
            self._loop.remove_writer(self._fd)
            self._loop = None
        self._buf += struct.pack("!i", 0)  # the end frame
        self._drain()
        self._conn.close()
        self._p.join(timeout_s)
        if self._p.is_alive():
            self._p.kill()  # it ignores SIGTERM
            self._p.join(5)
            raise RuntimeError(f"ledger process did not finish within {timeout_s:g} s")
        err = self._error()
        if err or self._p.exitcode:
            raise RuntimeError(f"ledger process failed (exit code {self._p.exitcode}): "
                               f"{err or 'no error reported'}")

    def __enter__(self) -> LedgerProcess:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
