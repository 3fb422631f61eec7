"""Hot-path cost of the CallRecord definition: build + serialise N records (default 100k).

The fleet client builds one :class:`adev.records.CallRecord` per call attempt, fills it in as
the answer streams, and :meth:`adev.records.RunDir.append` serialises it
(``json.dumps(dataclasses.asdict(record), ...)``). This times exactly that for the record type
as defined in :mod:`adev.records` against a baseline: the same fields in a plain (unslotted)
``@dataclass`` with ``str`` annotations, the definition before the typed schema, measured in the
same process (with ``slots=True`` the only runtime difference). Variants run interleaved,
``--repeats`` times each; the figure is the best time per variant and the ratio
``records.CallRecord / baseline`` (< 1: faster). A second figure includes ``RunDir.append`` itself
(a flushed write to a temporary run folder); a third isolates building and filling the record (the
part slots can change; ``asdict`` dominates the rest).

    PYTHONPATH=$PWD .venv/bin/python bench/bench_records.py [--n 100000] [--repeats 5]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from adev.records import CallRecord, RunDir, _default


@dataclass
class BaselineCallRecord:
    """CallRecord as defined before the typed schema (plain dataclass, no slots)."""

    kind: ClassVar[str] = "calls"
    run_id: str
    session_id: str
    call_id: str
    endpoint: str
    role: str = ""
    round: int = 0
    step: int = 0
    attempt: int = 0
    status: str = "ok"
    error: str | None = None
    model: str = ""
    t_scheduled: float = 0.0
    t_sent: float = 0.0
    t_first_byte: float | None = None
    t_first_content: float | None = None
    t_end: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    n_prompt_blocks: int | None = None
    finish_reason: str | None = None
    n_tool_calls: int = 0
    server: dict[str, Any] | None = None


SERVER = {  # an emulator extension payload of typical size
    "t_arrival_mono": 1.0, "t_scheduled_mono": 1.001, "t_first_token_mono": 1.2,
    "t_first_byte_sent_mono": 1.0012, "t_first_token_sent_mono": 1.2003, "t_end_mono": 3.4,
    "read_s": 0.012, "tokens": {"gpu": 4096, "store_ram": 8192, "store_disk": 0, "computed": 812},
    "policy": "length", "transfer": "none", "preempted": 0,
}


def one(cls: type, i: int) -> Any:
    """Build and fill one record the way :meth:`adev.client.llm.LLMClient._call` does."""
    rec = cls(run_id="run-20260101-000000-abcdef012345", session_id=f"s{i % 18}",
              call_id=f"s{i % 18}/r1/coder/s{i}", endpoint="coder", role="implementer",
              round=1, step=i % 40, attempt=0, model="emulated", t_scheduled=i * 0.01)
    rec.t_sent = rec.t_scheduled + 0.0004
    rec.t_first_byte = rec.t_sent + 0.002
    rec.t_first_content = rec.t_sent + 0.2
    rec.server = SERVER
    rec.finish_reason = "tool_calls"
    rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens = 13100, 850, 12288
    rec.n_prompt_blocks = 13100 // 16
    rec.n_tool_calls = 1
    rec.t_end = rec.t_sent + 3.4
    return rec


def serialise(rec: Any) -> str:
    """The line :meth:`RunDir.append` writes (same expression)."""
    return json.dumps(dataclasses.asdict(rec), default=_default, separators=(",", ":"))


def time_build(cls: type, n: int) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        one(cls, i)
    return time.perf_counter() - t0


def time_build_serialise(cls: type, n: int) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        serialise(one(cls, i))
    return time.perf_counter() - t0


def time_append(cls: type, n: int) -> float:
    with tempfile.TemporaryDirectory() as d, RunDir(d) as rd:
        t0 = time.perf_counter()
        for i in range(n):
            rd.append(one(cls, i))
        return time.perf_counter() - t0


def best(fn: Callable[[type, int], float], n: int, repeats: int) -> dict[str, float]:
    out: dict[str, list[float]] = {"baseline": [], "records": []}
    for _ in range(repeats):
        for name, cls in (("baseline", BaselineCallRecord), ("records", CallRecord)):
            out[name].append(fn(cls, n))
    return {k: min(v) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    assert serialise(one(CallRecord, 7)) == serialise(one(BaselineCallRecord, 7))
    slots = hasattr(CallRecord, "__slots__")
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=False).stdout.strip()
    except OSError:
        commit = "?"
    print(f"commit {commit}, python {platform.python_version()}, n={args.n}, "
          f"repeats={args.repeats}, records.CallRecord slots={slots}")
    for label, fn in (("build only", time_build), ("build + serialise", time_build_serialise),
                      ("build + RunDir.append", time_append)):
        b = best(fn, args.n, args.repeats)
        per = {k: v / args.n * 1e6 for k, v in b.items()}
        print(f"{label}: baseline {per['baseline']:.2f} us/record, records.CallRecord "
              f"{per['records']:.2f} us/record, ratio {b['records'] / b['baseline']:.3f}")


if __name__ == "__main__":
    main()
