"""The record types of a run directory and the allowed values of their string fields.

One definition for what crosses a process or file boundary: the fleet client, sessions, gates
and the fleet write these records (:class:`adev.records.RunDir` appends them as JSON lines) and
the analysis reads them back by the same field names. Every time ``t_*`` is in model seconds
since the run started (see :mod:`adev.clock`); durations ``*_s`` are model seconds too unless
the field's docstring says wall seconds. :mod:`adev.records` re-exports every name here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

# ---------------------------------------------------------------------------------------------
# Enumerations: the allowed values of the string fields below, defined once. Producers assign
# them and consumers compare against them; a module that lists them again uses ``get_args``.

CallStatus = Literal["ok", "error", "cancelled"]
"""How one attempt of an LLM call ended: ``ok`` (a complete answer), ``error`` (HTTP or stream
error, timeout; ``error`` holds the message), ``cancelled`` (the session was cancelled)."""

TestOutcome = Literal["passed", "failed", "error", "skipped"]
"""pytest's outcome of one test, as its JUnit XML reports it."""

Verdict = Literal["pass", "fail", "error"]
"""A gate run's verdict: ``pass`` (tests ran, none failed, exit code 0), ``fail`` (a test failed
or errored), ``error`` (no test results: the executor, the workspace or pytest itself failed)."""

Suite = Literal["agent", "acceptance"]
"""Which tests a gate ran: ``agent`` (the session's own tests, each round), ``acceptance`` (the
task's hidden acceptance tests, once at the end of a session)."""

GateExecutor = Literal["local", "local-unconfined", "ssh", "vm"]
"""Where a gate ran the tests: the names of :data:`adev.gate.registry.GATES`, plus ``ssh`` (the
bare ssh executor, :class:`adev.gate.ssh.SshGate`, that ``vm`` wraps)."""

SessionStatus = Literal["started", "passed", "failed", "ended", "error", "cancelled"]
"""A session's state: ``started`` (its first record), then one end: ``passed`` (its tests
passed), ``failed`` (tests still failing after the last round), ``ended`` (stopped early by a
limit: context, steps, no progress), ``error`` (an LLM call or the harness failed),
``cancelled`` (the fleet stopped it)."""

RoleContext = Literal["shared", "per-role", "per-round"]
"""How a session's roles see its history (:mod:`adev.session.loop`): ``shared`` (one
conversation through every role: one system message, so a role turn continues the previous
turn's prefix), ``per-role`` (each role, and each implementer's module, an agent of its own: a
system message of its own ahead of the same history, so agents share only the system prompt and
the spec) or ``per-round`` (the session's earlier rounds one conversation ahead of every agent,
then a line naming the agent, then this round's history: agents share the earlier rounds and
nothing of the current one)."""

LaterRounds = Literal["all", "fix"]
"""Which roles a session's later rounds run (:mod:`adev.session.loop`): ``all`` (every role again:
architect, contract, test writer, implementers, integrator, then the gate) or ``fix`` (the
implementers and the integrator, then the gate: the plan, the contract and the tests of round 1
stand, and round N's implementers start from round N-1's full text, its gate report and the
integrator's assignments)."""

WindowProtocol = Literal["batch", "steady"]
"""The fleet protocol that cut a measurement window: ``steady`` (fixed-length windows of a
running fleet) or ``batch`` (one window per run of the whole batch)."""

EventKind = Literal[
    "fault",                # a fault began, ended or occurred (detail: fault, state, evidence)
    "fleet_start",          # the fleet began (epoch 0)
    "fleet_restart",        # a resumed fleet began again (epoch > 0)
    "fleet_end",            # the fleet ended (detail: stopped, aborted)
    "batch_run_start",      # a batch protocol run after the first began
    "window_open",          # a measurement window opened (detail: index, t0, protocol)
    "regime",               # the steady-state regime detector's decision
    "regime_timeout",       # the regime was not reached in time (detail: action open | fail)
    "drained",              # in-flight calls drained after a window (detail: calls_left)
    "sessions_stopped",     # active sessions were cancelled at the end of the fleet
    "session_error",        # a session raised outside its own error handling
    "resume",               # an interrupted run was resumed (detail: the resume plan)
    "resume_nothing_left",  # a resume found every window measured already
    "stack_cpu",            # CPU the stack's processes used over the run
    "stack_released",       # the stack was stopped or released
    "stack_reused",         # a batch run found the stack already up (not restarted)
    "model_clock_held",     # wall seconds the held model clock stood still for slow store reads
                            # (detail: held_wall_s, wall_s, held_share)
]
"""What an :class:`EventRecord` marks on the timeline."""


# ---------------------------------------------------------------------------------------------
# Record types. ``kind`` names the file the record goes to.


@dataclass(slots=True)
class CallRecord:
    """One attempt of one LLM call (retries are separate records with ``attempt`` > 0).

    Stamps (model seconds since run start): scheduled (the call became ready), sent (request
    written), first_byte (first response bytes), first_content (first chunk with content,
    reasoning or a tool-call delta), end (last byte). ``dispatch_delay = t_sent - t_scheduled``.
    ``server`` holds the emulator's extension fields when present (read-path time, tier split,
    its own stamps); it is None against a real vLLM.
    """

    kind: ClassVar[str] = "calls"
    run_id: str
    """The run's id (the run folder's name)."""
    session_id: str
    """The session that made the call."""
    call_id: str
    """The call's id, shared by all its attempts."""
    endpoint: str
    """The endpoint's name in the stack (e.g. ``coder``, ``reasoner``)."""
    role: str = ""
    """The session role that made the call (empty outside a session)."""
    round: int = 0
    """The session's gate round the call belongs to (1 = first)."""
    step: int = 0
    """The call's step within its round (0 = first)."""
    attempt: int = 0
    """0 for the first attempt, n for the n-th retry."""
    status: CallStatus = "ok"
    """How this attempt ended."""
    error: str | None = None
    """The error message (at most 500 characters) when ``status`` is not ``ok``."""
    model: str = ""
    """The model name sent in the request."""
    t_scheduled: float = 0.0
    """When the call became ready to send (model seconds since run start)."""
    t_sent: float = 0.0
    """When the request was written (model seconds since run start)."""
    t_first_byte: float | None = None
    """When the first response bytes arrived (model seconds); None when none did."""
    t_first_content: float | None = None
    """When the first chunk with content, reasoning or a tool-call delta arrived (model
    seconds); None when none did."""
    t_end: float | None = None
    """When the last byte arrived or the attempt failed (model seconds)."""
    prompt_tokens: int | None = None
    """Prompt tokens as the server's usage reports them (tokens); None when not reported."""
    completion_tokens: int | None = None
    """Generated tokens as the server's usage reports them (tokens)."""
    cached_tokens: int | None = None
    """Prompt tokens the server reports as served from its prefix cache (tokens)."""
    n_prompt_blocks: int | None = None
    """Full KV blocks of the prompt (prompt tokens // the block size)."""
    finish_reason: str | None = None
    """The server's finish reason (``stop``, ``length``, ``tool_calls``...)."""
    n_tool_calls: int = 0
    """Tool calls in the answer."""
    server: dict[str, Any] | None = None
    """The emulator's extension payload (:class:`adev.emulator.schema.EndpointExtension`, as a
    dict); None against a real vLLM."""


@dataclass
class ToolEvent:
    """One tool call made by the model and its answer."""

    kind: ClassVar[str] = "tools"
    run_id: str
    """The run's id."""
    session_id: str
    """The session whose model made the tool call."""
    call_id: str
    """The LLM call whose answer held the tool call."""
    t: float
    """When the tool answered (model seconds since run start)."""
    tool: str
    """The tool's name as the model wrote it (at most 64 characters)."""
    ok: bool
    """Whether the tool succeeded."""
    args_summary: str = ""
    """A short summary of the arguments (path, command...)."""
    error: str | None = None
    """The tool's error message (at most 500 characters) when not ``ok``."""
    bytes_out: int = 0
    """Bytes of output the tool returned to the model."""


@dataclass
class TestResult:
    """One test of a gate run."""

    nodeid: str
    """pytest's node id (``path/test_x.py::test_name``)."""
    outcome: TestOutcome
    """pytest's outcome."""
    duration_s: float = 0.0
    """Wall seconds the test took, as pytest reports it."""
    message: str = ""
    """The failure, error or skip message (at most 2000 characters)."""


@dataclass
class GateRecord:
    """One gate run: real verdict and duration, plus the modelled duration in delayed runs."""

    kind: ClassVar[str] = "gates"
    run_id: str
    """The run's id."""
    session_id: str
    """The session whose tests ran."""
    round: int
    """The session's round (1 = first)."""
    executor: GateExecutor | str
    """Where the tests ran (a test double's class name outside the registry)."""
    t_start: float
    """When the gate began (model seconds since run start)."""
    t_end: float
    """When the session resumed after the gate (model seconds since run start)."""
    verdict: Verdict
    """The gate's verdict."""
    suite: Suite = "agent"
    """Which tests ran."""
    passed: int = 0
    """Tests that passed."""
    failed: int = 0
    """Tests that failed."""
    errors: int = 0
    """Tests that errored."""
    skipped: int = 0
    """Tests that were skipped."""
    real_duration_s: float = 0.0
    """Wall seconds the tests took."""
    modelled_duration_s: float | None = None
    """In delayed runs, the gate's duration on the session's timeline (model seconds); None
    when the real duration stands."""
    exit_code: int | None = None
    """pytest's exit code; None when it did not run to the end."""
    error: str | None = None
    """Why the gate errored (verdict ``error``)."""
    output_tail: str = ""
    """The last 4000 characters of pytest's output."""
    tests: list[TestResult] = field(default_factory=list)
    """Per-test results."""


@dataclass
class SessionRecord:
    """Session lifecycle: one record at start (status 'started') and one at the end."""

    kind: ClassVar[str] = "sessions"
    run_id: str
    """The run's id."""
    session_id: str
    """The session's id."""
    task: str
    """The task's name."""
    t: float
    """When the session started or ended (model seconds since run start)."""
    status: SessionStatus
    """``started`` in the first record, the way it ended in the second."""
    seed: int = 0
    """The session's seed."""
    rounds: int = 0
    """Gate rounds the session reached."""
    reason: str | None = None
    """Why it ended, in words (None when it passed). A cause the analysis counts starts with
    its code: ``llm_error:``, ``context_limit:``, ``no_progress:``; ``interrupted:`` marks a
    session closed by a resume."""
    calls: int = 0
    """LLM calls the session made (failed ones included; retries of one call count once)."""
    prompt_tokens: int = 0
    """Prompt tokens of its successful calls, as the server reported them (tokens)."""
    acceptance: Verdict | None = None
    """The hidden acceptance suite's verdict; None when it was not run."""


@dataclass
class ScrapeRecord:
    """One scrape of a Prometheus endpoint: raw samples ``{"name{label=..}": value}``.

    ``t`` is when the request was sent (a window's boundary scrapes all carry the boundary's
    time); the server rendered the samples somewhere in ``[t, t_answer]`` (``t_answer``: when
    the answer had arrived; None for a failed scrape), so ``t_answer - t`` bounds their timing
    error."""

    kind: ClassVar[str] = "scrapes"
    run_id: str
    """The run's id."""
    target: str
    """The endpoint's name, or ``master`` (the Mooncake master)."""
    url: str
    """The scraped URL."""
    t: float
    """When the request was sent (model seconds since run start)."""
    ok: bool
    """Whether the scrape answered."""
    error: str | None = None
    """Why the scrape failed."""
    samples: dict[str, float] = field(default_factory=dict)
    """The samples, ``{"name{label=..}": value}`` in each metric's own unit."""
    t_answer: float | None = None
    """When the answer had arrived (model seconds); None for a failed scrape."""


@dataclass
class WindowRecord:
    """A measurement window [t0, t1) cut from a run; invalid windows keep a reason. ``faults``
    names the faults that touched it (rule in :mod:`adev.analysis.faults`)."""

    kind: ClassVar[str] = "windows"
    run_id: str
    """The run's id."""
    index: int
    """The window's number in the run (1 = first)."""
    t0: float
    """Start of the window (model seconds since run start)."""
    t1: float
    """End of the window, excluded (model seconds since run start)."""
    valid: bool = True
    """Whether its figures count."""
    reason: str | None = None
    """Why it is invalid."""
    protocol: WindowProtocol = "steady"
    """The protocol that cut it."""
    faults: list[str] = field(default_factory=list)
    """The names of the faults that touched it."""


@dataclass
class EventRecord:
    """Anything else worth keeping on the timeline (faults, stack changes, resume). A fault is
    ``event="fault"`` with ``detail = {"fault": name, "state": "begin" | "end" | "occurred",
    ...evidence}`` (names in :mod:`adev.analysis.faults`)."""

    kind: ClassVar[str] = "events"
    run_id: str
    """The run's id."""
    t: float
    """When it happened (model seconds since run start)."""
    event: EventKind
    """What happened."""
    detail: dict[str, Any] = field(default_factory=dict)
    """Its details (JSON values)."""


RECORD_TYPES = {c.kind: c for c in (CallRecord, ToolEvent, GateRecord, SessionRecord,
                                     ScrapeRecord, WindowRecord, EventRecord)}
