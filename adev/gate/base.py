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
from typing import Protocol, get_args, runtime_checkable

from ..records import Suite, TestOutcome, TestResult, Verdict


@dataclass
class GateRequest:
    """What a gate is asked to run: one session's tests in its workspace."""

    session_id: str
    """The session whose tests run."""
    workspace: Path
    """The host directory holding the session's project."""
    round: int = 1
    """The session's round (1 = first)."""
    suite: Suite = "agent"
    """Which tests run."""
    test_paths: list[str] = field(default_factory=lambda: ["tests"])
    """Paths, relative to the workspace, that pytest collects."""
    overlay: dict[str, bytes] = field(default_factory=dict)
    """Extra files (the hidden acceptance tests) written into the executor's copy of the
    workspace: relative path -> content."""
    needs_nvme: bool = False
    """Whether the tests need a block device (only the ``vm`` executor has one)."""
    timeout_s: float = 120.0
    """Wall-seconds limit on the tests, enforced by the executor."""
    max_output_bytes: int = 64 * 1024
    """Bytes of pytest output kept."""
    modelled_duration_s: float | None = None
    """In delayed runs, the gate's duration on the session's timeline (model seconds); None
    when the real duration stands."""


@dataclass
class GateResult:
    """What a gate run found: the verdict, the counts and the per-test results."""

    verdict: Verdict
    """The verdict (rule in :func:`summarise`)."""
    passed: int = 0
    """Tests that passed."""
    failed: int = 0
    """Tests that failed."""
    errors: int = 0
    """Tests that errored."""
    skipped: int = 0
    """Tests that were skipped."""
    exit_code: int | None = None
    """pytest's exit code; None when it did not run to the end."""
    real_duration_s: float = 0.0
    """Wall seconds the tests took."""
    error: str | None = None
    """Why the gate errored (verdict ``error``)."""
    output_tail: str = ""
    """The end of pytest's output (at most ``GateRequest.max_output_bytes``)."""
    tests: list[TestResult] = field(default_factory=list)
    """Per-test results."""

    def failing_text(self, limit: int = 4000) -> str:
        """The failing tests and their messages, as later rounds resend them to the roles, with
        what differs between two runs of the same code replaced (:func:`run_invariant`)."""
        lines = [f"{t.nodeid}: {t.outcome}\n{t.message}" for t in self.tests
                 if t.outcome in ("failed", "error")]
        text = "\n\n".join(lines) or self.error or self.output_tail
        return run_invariant(text)[-limit:]


_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{6,16}\b")
_DURATION = re.compile(r"\bin \d+\.\d+s\b")


def run_invariant(text: str) -> str:
    """``text`` with the parts of pytest's output that change from run to run of the same code
    replaced by fixed placeholders: object addresses in reprs (``<X object at 0x7f2805a6bb30>``:
    where the allocator placed the object) -> ``0x...``, and the summary's duration (``in
    0.53s``) -> ``in ...s``. Everything a session reads is then a function of its code alone,
    so two runs of one fleet seed send the same prompts (the records keep the raw output)."""
    return _DURATION.sub("in ...s", _ADDRESS.sub("0x...", text))


@runtime_checkable
class Gate(Protocol):
    name: str

    async def start(self) -> None: ...
    async def setup(self, session_id: str) -> None: ...
    async def run(self, request: GateRequest) -> GateResult: ...
    async def cleanup(self, session_id: str) -> None: ...
    async def close(self) -> None: ...


_JUNIT_OUTCOMES: tuple[tuple[str, TestOutcome], ...] = (
    ("failure", "failed"), ("error", "error"), ("skipped", "skipped"))
"""JUnit XML child element of a ``testcase`` -> the test's outcome (no child: passed)."""


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
        outcome: TestOutcome = "passed"
        message = ""
        for tag, tag_outcome in _JUNIT_OUTCOMES:
            el = case.find(tag)
            if el is not None:
                outcome = tag_outcome
                message = (el.get("message") or "") + ("\n" + el.text if el.text else "")
                break
        out.append(TestResult(nodeid=nodeid, outcome=outcome,
                              duration_s=float(case.get("time") or 0.0), message=message[:2000]))
    return out


def summarise(tests: list[TestResult], exit_code: int | None, output_tail: str,
              real_duration_s: float, error: str | None = None) -> GateResult:
    """Counts and verdict from per-test results: pass only when tests ran and none failed."""
    counts = {k: sum(t.outcome == k for t in tests) for k in get_args(TestOutcome)}
    verdict: Verdict
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
