"""Typed records and the append-only run directory.

A run directory ``results/runs/<id>/`` holds ``manifest.json``, ``endpoints.json`` (what the
client discovered of each endpoint: model, context length, the server's release at
``GET /version``) and one JSONL file per record kind
(``calls.jsonl``, ``tools.jsonl``, ``gates.jsonl``, ``sessions.jsonl``, ``scrapes.jsonl``,
``windows.jsonl``, ``events.jsonl``; the record types are defined in :mod:`adev.record_types` and
re-exported here), plus ``ledger/`` (block touches, written by :mod:`adev.analysis.ledger`). Records
are appended and flushed one line at a time as they happen, so killing the process loses at most
what was in flight; a truncated last line (a crash mid-write) is skipped and counted by the reader,
never fatal. Every time ``t_*`` is in model seconds since the
run started (see :mod:`adev.clock`); durations ``*_s`` are model seconds too unless named ``*_wall_s``.
"""
from __future__ import annotations

import dataclasses
import io
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .config import ROOT
from .record_types import (  # re-exported: the record types and their enumerations
    RECORD_TYPES,
    CallRecord,
    CallStatus,
    EventKind,
    EventRecord,
    GateExecutor,
    GateRecord,
    LaterRounds,
    RoleContext,
    ScrapeRecord,
    SessionRecord,
    SessionStatus,
    Suite,
    TestOutcome,
    TestResult,
    ToolEvent,
    Verdict,
    WindowProtocol,
    WindowRecord,
)

__all__ = [
    "ID_RANDOM_BYTES",
    "RECORD_TYPES",
    "RUNS_DIR",
    "CallRecord",
    "CallStatus",
    "EventKind",
    "EventRecord",
    "GateExecutor",
    "GateRecord",
    "LaterRounds",
    "RecordError",
    "RoleContext",
    "RunDir",
    "ScrapeRecord",
    "SessionRecord",
    "SessionStatus",
    "Suite",
    "TestOutcome",
    "TestResult",
    "ToolEvent",
    "Verdict",
    "WindowProtocol",
    "WindowRecord",
    "complete_lines",
    "create_run_path",
    "ends_torn",
    "new_run_id",
    "read_jsonl",
]

RUNS_DIR = ROOT / "results" / "runs"


# ---------------------------------------------------------------------------------------------
# The run directory


def _default(o: Any) -> Any:
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return dataclasses.asdict(o)
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "item"):  # numpy scalars
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def complete_lines(p: Path) -> Iterator[tuple[int, bytes]]:
    """``(line number, raw line)`` for every complete line of JSONL file ``p`` (none when it does
    not exist); a last line without its newline was torn by a crash mid-write and is not
    yielded. The one reader of append-only JSONL files: records, the ledger's call index."""
    if not p.exists():
        return
    with p.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            if not raw.endswith(b"\n"):
                return
            yield lineno, raw


def read_jsonl(p: Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of the complete lines of ``p``; a line that is not a JSON object (a
    fragment a resume closed with a newline) is skipped."""
    for _, raw in complete_lines(p):
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            continue
        if isinstance(obj, dict):
            yield obj


def ends_torn(p: Path) -> bool:
    """True when file ``p`` is non-empty and does not end with a newline."""
    try:
        with p.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            if fh.tell() == 0:
                return False
            fh.seek(-1, os.SEEK_END)
            return fh.read(1) != b"\n"
    except OSError:
        return False


def read_json(p: Path, what: str, error: type[Exception]) -> Any:
    """The JSON document in file ``p``; ``error`` naming the file (and line) when it is not UTF-8
    JSON, ``what`` saying what the file should have been (e.g. "a manifest adev wrote")."""
    try:
        return json.loads(p.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise error(f"{p}: not UTF-8 text (byte {e.start}); not {what}") from None
    except json.JSONDecodeError as e:
        raise error(f"{p}: line {e.lineno}: not valid JSON ({e.msg}); not {what}") from None


class RecordError(ValueError):
    """A line of a record file that adev did not write (the message names file and line)."""


def _required(kind: str) -> set[str]:
    cls = RECORD_TYPES.get(kind)
    if cls is None:
        return set()
    return {f.name for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}


def _parse_line(raw: bytes, kind: str) -> tuple[dict[str, Any] | None, str | None]:
    """(record, None), or (None, why it is not a record adev wrote), or (None, None) for the
    fragment of a line torn by a crash (adev writes ASCII JSON objects, one per line)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, f"not UTF-8 (byte {e.start} of the line); not a {kind} record adev wrote"
    try:
        obj = json.loads(text)
    except RecursionError:
        return None, f"JSON nested too deeply; not a {kind} record adev wrote"
    except json.JSONDecodeError as e:
        if text.lstrip().startswith("{"):
            return None, None  # a torn fragment (counted by torn_lines)
        return None, f"not JSON ({e.msg}); not a {kind} record adev wrote"
    if not isinstance(obj, dict):
        what = {list: "array", str: "string", int: "number", float: "number", bool: "boolean",
                type(None): "null"}.get(type(obj), type(obj).__name__)
        return None, f"a JSON {what}, not a {kind} record (one JSON object per line)"
    missing = _required(kind) - obj.keys()
    if missing:
        return None, (f"an object without the {kind} record field(s) "
                      f"{', '.join(sorted(missing))}; not a {kind} record adev wrote")
    return obj, None


ID_RANDOM_BYTES = 6
"""Random bytes in a run id: 48 bits, so ids made in the same second clash with probability
about n^2 / 2^49 (n = 1000 ids: 2e-9); :func:`create_run_path` retries on a clash anyway."""


def _id_suffix() -> str:
    import secrets
    return secrets.token_hex(ID_RANDOM_BYTES)


def new_run_id(prefix: str = "run") -> str:
    """``{prefix}-{UTC yyyymmdd-HHMMSS}-{12 random hex digits}``."""
    import datetime
    ts = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    return f"{prefix}-{ts}-{_id_suffix()}"


def create_run_path(base: str | Path, prefix: str = "run", tries: int = 8) -> Path:
    """Create a fresh, empty run folder ``base / new_run_id(prefix)``: the folder is made with
    ``exist_ok=False`` and a new id drawn if that name is taken, so two runs never share one."""
    base = Path(base)
    base.mkdir(parents=True, exist_ok=True)
    for _ in range(tries):
        path = base / new_run_id(prefix)
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"{base}: no free run id after {tries} tries (prefix {prefix!r})")


class RunDir:
    """An append-only run directory. One writer process; readers may run concurrently."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._files: dict[str, io.TextIOBase] = {}
        self._lock = threading.Lock()

    @classmethod
    def create(cls, run_id: str | None = None, base: str | Path | None = None,
               prefix: str = "run") -> RunDir:
        """A new run folder under ``base``: named ``run_id`` (refused if it exists), else a fresh
        id (:func:`create_run_path`)."""
        if run_id is None:
            return cls(create_run_path(base or RUNS_DIR, prefix))
        path = Path(base or RUNS_DIR) / run_id
        path.mkdir(parents=True, exist_ok=False)
        return cls(path)

    @property
    def run_id(self) -> str:
        return self.path.name

    # -- writing --------------------------------------------------------------------------
    def append(self, record: Any) -> None:
        """Append one record as a JSON line and flush it (survives a kill of this process)."""
        kind = record.kind
        line = json.dumps(dataclasses.asdict(record), default=_default, separators=(",", ":"))
        with self._lock:
            fh = self._files.get(kind)
            if fh is None:
                fh = self._files[kind] = open(self.path / f"{kind}.jsonl", "a", encoding="utf-8")
                if ends_torn(self.path / f"{kind}.jsonl"):
                    fh.write("\n")  # close a line torn by a crash so this record stays whole
            fh.write(line + "\n")
            fh.flush()

    def write_json(self, name: str, obj: Any) -> Path:
        """Write a whole JSON document atomically (manifest, summaries)."""
        p = self.path / name
        tmp = p.with_suffix(p.suffix + ".tmp")
        tmp.write_text(json.dumps(obj, default=_default, indent=2, sort_keys=True))
        os.replace(tmp, p)
        return p

    def close(self) -> None:
        with self._lock:
            for fh in self._files.values():
                fh.close()
            self._files.clear()

    def __enter__(self) -> RunDir:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- reading --------------------------------------------------------------------------
    def iter_records(self, kind: str, strict: bool = False) -> Iterator[dict[str, Any]]:
        """Yield the records of one kind. A line torn by a crash mid-write (the last line without
        its newline, or a fragment of a JSON object that a resume closed with a newline) is
        skipped and counted by ``torn_lines``. With ``strict``, a line adev cannot have written
        (not UTF-8, JSON that is not an object, an object without the record's fields) raises
        :class:`RecordError` naming the file and line; without, it is skipped too."""
        p = self.path / f"{kind}.jsonl"
        for lineno, raw in complete_lines(p):
            rec, why = _parse_line(raw, kind)
            if rec is not None:
                yield rec
            elif strict and why is not None:
                raise RecordError(f"{p}: line {lineno}: {why}")

    def read(self, kind: str, strict: bool = False) -> list[dict[str, Any]]:
        return list(self.iter_records(kind, strict))

    def torn_lines(self, kind: str) -> int:
        """Lines of ``kind`` that could not be read back (0 after a clean run): the records lost
        to a crash mid-write (and, for a file adev did not write, its unreadable lines)."""
        p = self.path / f"{kind}.jsonl"
        if not p.exists():
            return 0
        bad = 0
        with p.open("rb") as fh:
            for raw in fh:
                if not raw.endswith(b"\n") or _parse_line(raw, kind)[0] is None:
                    bad += 1
        return bad

    def frame(self, kind: str, strict: bool = False):
        """The records of one kind as a pandas DataFrame (empty frame when there are none)."""
        import pandas as pd
        rows = self.read(kind, strict)
        if rows:
            return pd.DataFrame(rows)
        cls = RECORD_TYPES.get(kind)
        cols = [f.name for f in dataclasses.fields(cls)] if cls else []
        return pd.DataFrame(columns=cols)

    def manifest(self) -> dict[str, Any]:
        """``manifest.json`` ({} when absent); :class:`RecordError` when it is not a JSON object."""
        p = self.path / "manifest.json"
        if not p.exists():
            return {}
        doc = read_json(p, "a manifest adev wrote", RecordError)
        if not isinstance(doc, dict):
            raise RecordError(f"{p}: not a JSON object; not a manifest adev wrote")
        return doc
