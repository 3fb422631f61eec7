"""The reuse ledger in its own process: the fleet's event loop hands each prompt's token ids over
and goes on, parsing and hashing happen elsewhere.

A fleet's event loop is shared by every session; a prompt's token ids (tens of thousands of
integers, the first event of each streamed answer) cost about 2 ms of that loop to parse and
hash in place (``bench/bench_client.py``), and calls of a round end together. The LLM client
therefore passes the event's raw ``prompt_token_ids`` JSON text (:meth:`LedgerProcess.add_json`)
to a :class:`multiprocessing.Queue` (its feeder thread writes the pipe, so ``put`` never blocks
the loop); a spawned process parses it and calls :meth:`LedgerWriter.add` with the same
arguments, in the same order, writing the same files. ``close()`` drains the queue and waits for
the process; an error in the process is re-raised there. The process runs at niceness +10: on a
busy host the client's event loop, whose stamps are the measurement, preempts it. Killing the fleet loses at most the
prompts still in the queue (milliseconds of calls), like the calls in flight.
"""
from __future__ import annotations

import multiprocessing as mp
import queue as _queue
from pathlib import Path
from typing import Any, Sequence

import numpy as np

__all__ = ["LedgerProcess"]

NICE = 10  # the ledger process's niceness increment (it only has to keep up on average)


def _serve(q: Any, errors: Any, run_dir: str, kw: dict[str, Any]) -> None:
    import os

    import orjson
    try:  # background work: the client's event loop (and the stack) preempt it on wake-up
        os.nice(NICE)
    except OSError:
        pass

    from .ledger import LedgerWriter
    try:
        w = LedgerWriter(run_dir, **kw)
    except Exception as e:  # noqa: BLE001 - reported to the parent at close()
        errors.put(f"{type(e).__name__}: {e}")
        return
    try:
        while True:
            msg = q.get()
            if msg is None:
                break
            op = msg[0]
            if op == "add":
                _, t, sid, cid, ids = msg
                w.add(t, sid, cid, orjson.loads(ids) if isinstance(ids, bytes) else ids)
            elif op == "forget":
                w.forget(msg[1])
    except Exception as e:  # noqa: BLE001
        errors.put(f"{type(e).__name__}: {e}")
    finally:
        w.close()


class LedgerProcess:
    """The :class:`~adev.analysis.ledger.LedgerWriter` hook, run in a spawned process.

    ``LedgerProcess(run_dir, **LedgerWriter kwargs)``; ``add`` / ``add_json`` / ``forget`` /
    ``close`` as the writer's. Use as a context manager or call ``close()``."""

    def __init__(self, run_dir: Any, **kw: Any):
        ctx = mp.get_context("spawn")  # the fleet process has threads: no fork
        self._q = ctx.Queue()
        self._errors = ctx.Queue()
        self.dir = Path(getattr(run_dir, "path", run_dir))
        self._p = ctx.Process(target=_serve, args=(self._q, self._errors, str(self.dir), kw),
                              name="adev-ledger", daemon=True)
        self._p.start()
        self._closed = False

    def add(self, t: float, session_id: str, call_id: str,
            token_ids: Sequence[int] | np.ndarray) -> None:
        """As :meth:`LedgerWriter.add` (returns nothing: the block count is known later)."""
        ids = np.asarray(token_ids, dtype=np.uint32) if not isinstance(token_ids, np.ndarray) \
            else token_ids
        self._put(("add", float(t), str(session_id), str(call_id), ids))

    def add_json(self, t: float, session_id: str, call_id: str, ids_json: bytes) -> None:
        """One prompt's token ids as the JSON array text of a ``prompt_token_ids`` field."""
        self._put(("add", float(t), str(session_id), str(call_id), bytes(ids_json)))

    def forget(self, session_id: str) -> None:
        self._put(("forget", str(session_id)))

    def _put(self, msg: tuple) -> None:
        if self._closed:
            raise ValueError("ledger writer is closed")
        if not self._p.is_alive():
            raise RuntimeError(f"ledger process ended (exit code {self._p.exitcode}): "
                               f"{self._error() or 'no error reported'}")
        self._q.put(msg)

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
        if self._p.is_alive():
            self._q.put(None)  # after everything queued: the process drains the queue first
        self._p.join(timeout_s)
        if self._p.is_alive():
            self._p.terminate()
            self._p.join(5)
            self._q.cancel_join_thread()  # nobody reads the pipe any more: do not wait on it
            self._q.close()
            raise RuntimeError(f"ledger process did not finish within {timeout_s:g} s")
        err = self._error()
        if err or self._p.exitcode:
            self._q.cancel_join_thread()
        self._q.close()
        self._q.join_thread()
        if err or self._p.exitcode:
            raise RuntimeError(f"ledger process failed (exit code {self._p.exitcode}): "
                               f"{err or 'no error reported'}")

    def __enter__(self) -> "LedgerProcess":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
