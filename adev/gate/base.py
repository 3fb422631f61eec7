"""The gate: runs a session's tests (pytest) in an executor and returns a verdict. No LLM.

Lifecycle (after inspect_ai's sandboxes): ``start()`` once per fleet, ``setup(session)`` before a
session's first gate, ``run(request)`` per round, ``cleanup(session)`` after the session, ``close()``
at the end. Executors: local (subprocess), ssh (asyncssh to a host), vm (libvirt domain + ssh).
Agent-written code only ever runs inside an executor; the fleet's choice of executor is recorded.

In *delayed* runs ``GateRequest.modelled_duration_s`` replaces the gate's duration on the session's
timeline (the session waits that long in model time) while the real tests still decide the verdict;
both durations land in the :class:`~adev.records.GateRecord`.
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from ..records import TestResult


@dataclass
class GateRequest:
    session_id: str
    workspace: Path  # host directory holding the session's project
    round: int = 1
    suite: str = "agent"  # agent | acceptance
    test_paths: list[str] = field(default_factory=lambda: ["tests"])
    overlay: dict[str, bytes] = field(default_factory=dict)  # extra files (hidden tests), relpath -> bytes
    needs_nvme: bool = False
    timeout_s: float = 120.0  # real seconds, enforced by the executor
    max_output_bytes: int = 64 * 1024
    modelled_duration_s: float | None = None


@dataclass
class GateResult:
    verdict: str  # pass | fail | error
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    exit_code: int | None = None
    real_duration_s: float = 0.0  # wall seconds the tests took
    error: str | None = None
    output_tail: str = ""
    tests: list[TestResult] = field(default_factory=list)

    def failing_text(self, limit: int = 4000) -> str:
        """The failing tests and their messages, as later rounds resend them to the roles."""
        lines = [f"{t.nodeid}: {t.outcome}\n{t.message}" for t in self.tests
                 if t.outcome in ("failed", "error")]
        text = "\n\n".join(lines) or self.error or self.output_tail
        return text[-limit:]


@runtime_checkable
class Gate(Protocol):
    name: str

    async def start(self) -> None: ...
    async def setup(self, session_id: str) -> None: ...
    async def run(self, request: GateRequest) -> GateResult: ...
    async def cleanup(self, session_id: str) -> None: ...
    async def close(self) -> None: ...


def parse_junit(xml_text: str | bytes) -> list[TestResult]:
    """pytest's ``--junitxml`` output -> per-test results (empty list if unparsable)."""
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError:
        return []
    out: list[TestResult] = []
    for case in root.iter("testcase"):
        cls, name = case.get("classname", ""), case.get("name", "")
        nodeid = f"{cls.replace('.', '/')}.py::{name}" if cls else name
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                message = (el.get("message") or "") + ("\n" + el.text if el.text else "")
                break
        out.append(TestResult(nodeid=nodeid, outcome=outcome,
                              duration_s=float(case.get("time") or 0.0), message=message[:2000]))
    return out


def summarise(tests: list[TestResult], exit_code: int | None, output_tail: str,
              real_duration_s: float, error: str | None = None) -> GateResult:
    """Counts and verdict from per-test results: pass only when tests ran and none failed."""
    counts = {k: sum(t.outcome == k for t in tests) for k in ("passed", "failed", "error", "skipped")}
    if error is not None:
        verdict = "error"
    elif counts["failed"] or counts["error"]:
        verdict = "fail"
    elif counts["passed"] and exit_code == 0:
        verdict = "pass"
    elif not tests:
        verdict = "error"
        error = f"no test results (exit code {exit_code})"
    else:
        verdict = "fail"
    return GateResult(verdict=verdict, passed=counts["passed"], failed=counts["failed"],
                      errors=counts["error"], skipped=counts["skipped"], exit_code=exit_code,
                      real_duration_s=real_duration_s, error=error, output_tail=output_tail,
                      tests=tests)


def parse_markers(stdout: str) -> dict[str, str]:
    """``ADEV_KEY=value`` lines printed by the guest scripts."""
    out: dict[str, str] = {}
    for line in stdout.splitlines():
        m = re.match(r"ADEV_([A-Z_]+)=(.*)$", line.strip())
        if m:
            out[m.group(1)] = m.group(2)
    return out
