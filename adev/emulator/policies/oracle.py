"""The oracle policy: plays every session role for adev's built-in tasks.

It sees only what a real model sees (the request's messages and seed) and answers like a capable
coding model: it recognises the role and round from the role prompt (``## Role: <name>``, "This is
round N of M of task `<name>`"), the task from that line (tasks come from
:func:`adev.tasks.load_task`), and where it is in its turn from the assistant messages
since the role prompt. Its tool calls carry content derived from the task's reference files: the
plan from the module list, spec and known risks; the contract from the reference interfaces; the
tests from the reference tests; modules from the reference implementation.

**Seeded mistakes.** From the request's ``seed`` (the loop sets one per session) the oracle draws
how many rounds the session needs: 1, 2 or 3 with probabilities ``round_shares`` (default 0.40,
0.35, 0.25). In each round before the last needed one, one module's implementer applies one of
the task's seeded mistakes (``task.toml`` ``mistakes``, which the task's tests catch) -- in round
2 a different one than in round 1 where possible, as a regression while fixing -- and the
implementer of the round-1 module fixes it when the failing tests come back. A task without
seeded mistakes gets a fallback mistake: one public function left as ``raise NotImplementedError``.

**Output lengths.** ``thinking`` says whether the served model thinks before it answers. The
default (``false``) is the source study's model, Qwen3-Coder-30B-A3B-Instruct, which does not: a
reply is its visible content and tool calls and nothing else, so the oracle asks for no
``output_tokens`` (the engine generates the reply's own tokens) and its short notes of intent are
part of the visible content, which the next request resends. With ``thinking = true`` each reply
asks the engine for ``output_tokens`` drawn from a log-normal per role (``output_tokens``: median
and sigma), clipped to the request's ``max_tokens``, and the engine pads the reasoning to that
length; reasoning is never resent (chat templates drop it), so those generated tokens are cached
on the GPU but no later prompt matches them.

**One call per turn** (``one_call_per_turn``, a what-if, off by default): each role turn's
scripted steps come in one reply, so a round is one call per role (plus one per implementer).

Everything is a pure function of the request (no state between calls), so concurrent sessions
and replays give the same answers for the same seed.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from ...tasks import SPEC_FILE
from .base import PolicyReply, PolicyRequest, ToolCall
from .oracle_config import OracleConfig
from .oracle_mistakes import Mistake, apply_mistake, mistake_pool
from .oracle_text import (
    OracleState,
    contract_text,
    dependency_order,
    failing_files,
    integration_text,
    message_text,
    plan_text,
    role_reasoning,
    spec_is_file,
    tests_for,
    voice,
)

if TYPE_CHECKING:
    from ..tokenizer import Tokenizer

ROLE_HEAD = re.compile(r"^## Role: ([a-z _]+)$", re.M)
ROUND = re.compile(r"This is round (\d+) of (\d+) of task `([A-Za-z0-9_-]+)`")
MODULE = re.compile(r"You are the implementer of module `([^`]+)`")


class OraclePolicy:
    """See the module docstring. ``tasks``: name -> Task, to use tasks not on disk (tests)."""

    name = "oracle"

    def __init__(self, config: OracleConfig | dict | None = None,
                 tasks: dict[str, Any] | None = None):
        self.config = config if isinstance(config, OracleConfig) else OracleConfig.from_dict(config)
        self._tasks: dict[str, Any] = dict(tasks or {})
        self._tok: Tokenizer | None = None

    # ---- seeded decisions ---------------------------------------------------------------
    def draw(self, seed: int | None, *parts: Any) -> float:
        """A uniform draw in [0, 1) that is a pure function of the salt, ``seed`` and ``parts``."""
        h = hashlib.sha256(repr((self.config.salt, seed, *parts)).encode()).digest()
        return int.from_bytes(h[:8], "big") / 2 ** 64

    def rounds_needed(self, seed: int | None) -> int:
        """How many rounds this session's team needs (1, 2 or 3), from the seed alone."""
        u = self.draw(seed, "rounds")
        a, b, _ = self.config.round_shares
        return 1 if u < a else 2 if u < a + b else 3

    def mistakes_for(self, task: Any, seed: int | None, rnd: int) -> list[Mistake]:
        """The mistakes the implementers make in round ``rnd`` (empty once the team gets it)."""
        if rnd >= self.rounds_needed(seed):
            return []
        pool = mistake_pool(task)
        if not pool:
            return []
        i1 = int(self.draw(seed, "mistake", 1) * len(pool))
        if rnd == 1:
            return [pool[i1]]
        rest = [m for j, m in enumerate(pool) if j != i1] or pool
        return [rest[int(self.draw(seed, "mistake", rnd) * len(rest))]]

    def _output_tokens(self, role: str, seed: int | None, key: tuple, max_tokens: int | None) -> int:
        med, sigma = self.config.output_tokens.get(role) or self.config.output_tokens["other"]
        u = min(max(self.draw(seed, "len", *key), 1e-9), 1 - 1e-9)
        z = _norm_ppf(u)
        n = int(med * math.exp(sigma * z))
        if max_tokens:
            n = min(n, max_tokens)
        return max(16, n)

    def _task(self, name: str) -> Any:
        t = self._tasks.get(name)
        if t is None:
            from ...tasks import load_task
            t = self._tasks[name] = load_task(name)
        return t

    # ---- the policy -------------------------------------------------------------------
    def reply(self, request: PolicyRequest) -> PolicyReply:
        msgs = request.messages
        found = _role_prompt(msgs)
        if found is None:
            return PolicyReply(content="I need a role and a task to work on.",
                               output_tokens=self._output_tokens("other", request.seed, ("none",),
                                                                 request.max_tokens)
                               if self.config.thinking else None)
        idx, role = found
        prompt = message_text(msgs[idx])
        m = ROUND.search(prompt)
        if not m:
            return PolicyReply(content="The role prompt names no round or task.")
        rnd, task_name = int(m.group(1)), m.group(3)
        try:
            task = self._task(task_name)
        except Exception:  # not a built-in task: answer, don't crash the endpoint
            return PolicyReply(content=f"I do not know task {task_name!r}.",
                               tool_calls=[ToolCall("finish", json.dumps(
                                   {"summary": f"unknown task {task_name}"}))])
        turn = msgs[idx + 1:]
        step = sum(1 for x in turn if x.get("role") == "assistant")
        mm = MODULE.search(prompt)
        module = mm.group(1) if mm else None
        st = OracleState(self, task, request.seed, rnd, role, module, step, msgs[:idx], turn)
        play = getattr(self, f"_play_{role}", None)
        if play and self.config.one_call_per_turn and step == 0:
            content, reasoning, calls = self._whole_turn(play, st)
        else:
            content, reasoning, calls = play(st) if play else ("Done.", None, [_finish("done")])
        if content:
            content = f"{voice(st)} {content}"
        if not self.config.thinking:  # a non-thinking model says what it means to do, visibly
            if reasoning:
                content = f"{reasoning}\n\n{content}" if content else reasoning
            return PolicyReply(content=content, tool_calls=calls)
        out = self._output_tokens(role, request.seed, (rnd, role, module, step),
                                  request.max_tokens)
        # never ask for fewer tokens than the reply itself holds (the engine would cut it)
        out = max(out, self._natural(content, reasoning, calls) + 2)
        return PolicyReply(content=content, reasoning=reasoning, tool_calls=calls,
                           output_tokens=out)

    @staticmethod
    def _whole_turn(play, st: OracleState):
        """A what-if (``one_call_per_turn``): the turn's scripted steps in one reply (reads,
        writes and ``finish`` together), so a role turn is one model call."""
        texts, reasoning, calls = [], None, []
        for k in range(32):
            st.step = k
            c, r, cl = play(st)
            texts.append(c or "")
            reasoning = reasoning or r
            calls += cl
            if any(x.name == "finish" for x in cl):
                break
        st.step = 0
        return " ".join(t for t in texts if t), reasoning, calls

    def _natural(self, content: str | None, reasoning: str | None, calls: list[ToolCall]) -> int:
        """The reply's own length in the emulator's tokens (as the engine counts it)."""
        tok = self._tok
        if tok is None:
            from ..tokenizer import Tokenizer
            tok = self._tok = Tokenizer(cache_messages=16)
        from ..planning import natural_length
        return natural_length(tok, reasoning or "", content or "", calls)

    # ---- roles (each returns content, reasoning, tool calls) ----------------------------
    def _play_architect(self, st: OracleState):
        t = st.task
        if st.step == 0:
            calls = [_call("list_files", path=".")]
            if st.rnd > 1:
                calls.append(_call("read_file", path="INTEGRATION.md"))
            elif spec_is_file(st.history):  # the spec is a workspace file: read it
                calls.append(_call("read_file", path=SPEC_FILE))
            return (f"I'll look at the workspace{' and the integrator notes' if st.rnd > 1 else ''}"
                    " before writing the plan.", role_reasoning("architect", t, st), calls)
        if st.step == 1:
            return ("Writing the module plan to PLAN.md.", None,
                    [_call("write_file", path="PLAN.md", content=plan_text(t, st))])
        return ("The plan is in PLAN.md.", None,
                [_finish(f"PLAN.md: {len(t.modules)} modules, dependency order "
                         + " -> ".join(PurePosixPath(x.path).stem for x in dependency_order(t))
                         + (f"; round {st.rnd} focuses on the failing tests" if st.rnd > 1 else ""))])

    def _play_contract(self, st: OracleState):
        t = st.task
        if st.rnd > 1:
            if st.step == 0:
                return ("The failures are behavioural; I'll re-read the contract to be sure it "
                        "matches the specification.", None, [_call("read_file", path="CONTRACT.md")])
            return ("The contract is consistent with the specification; no change this round.",
                    None, [_finish("CONTRACT.md unchanged: the failing tests exercise "
                                   "behaviour, not interfaces")])
        if st.step == 0:
            return ("Reading the plan first.", role_reasoning("contract", t, st),
                    [_call("read_file", path="PLAN.md")])
        if st.step == 1:
            return ("Writing the public interfaces of every module to CONTRACT.md.", None,
                    [_call("write_file", path="CONTRACT.md", content=contract_text(t))])
        return ("CONTRACT.md is written.", None,
                [_finish("CONTRACT.md fixes the public interface of "
                         + ", ".join(f"`{x.path}`" for x in t.modules))])

    def _play_test_writer(self, st: OracleState):
        t = st.task
        files = sorted(t.tests)
        if st.rnd > 1:
            failing = [p for p in failing_files(st.history) if p in t.tests] or files[:1]
            if st.step == 0:
                return ("Checking the failing tests against the contract.", None,
                        [_call("read_file", path=p) for p in failing[:3]])
            return ("The failing tests match the contract and the specification; the "
                    "implementation must change, not the tests.", None,
                    [_finish("tests unchanged; failures are implementation bugs: "
                             + ", ".join(failing[:3]))])
        if st.step == 0:
            return ("Reading the contract before writing tests.", role_reasoning("test_writer", t, st),
                    [_call("read_file", path="CONTRACT.md")])
        k = st.step - 1
        if k < len(files):
            p = files[k]
            return (f"Writing {p}.", None, [_call("write_file", path=p, content=t.tests[p])])
        return ("All test files are written.", None,
                [_finish(f"wrote {len(files)} test files: " + ", ".join(files))])

    def _play_implementer(self, st: OracleState):
        t, path = st.task, st.module
        if path is None or path not in t.reference:
            return ("That module is not part of this task's plan.", None,
                    [_finish(f"no such module {path}")])
        now = [m for m in st.oracle.mistakes_for(t, st.seed, st.rnd) if m.path == path]
        before = [m for m in st.oracle.mistakes_for(t, st.seed, st.rnd - 1) if m.path == path] \
            if st.rnd > 1 else []
        rewrite = st.rnd == 1 or bool(now) or bool(before)
        text = t.reference[path]
        for m in now:
            text = apply_mistake(text, m)
        tests = tests_for(t, path)
        if st.step == 0:
            if st.rnd == 1:
                return (f"I'll read the tests for `{path}` first.", role_reasoning("implementer", t, st),
                        [_call("read_file", path=p) for p in tests] or
                        [_call("list_files", path="tests")])
            return (f"Reading my module `{path}` and the integrator's notes against the gate "
                    "report.", role_reasoning("implementer", t, st),
                    [_call("read_file", path=path), _call("read_file", path="INTEGRATION.md")])
        if st.step == 1 and rewrite:
            what = ("Writing the module." if st.rnd == 1 else
                    f"Fixing `{path}`: " + "; ".join(f"it {m.note}" for m in before)
                    if before else f"Refactoring `{path}` along the integrator's notes.")
            return (what, None, [_call("write_file", path=path, content=text)])
        summary = (f"wrote {path}" if st.rnd == 1 else
                   f"fixed {path}: " + "; ".join(m.note for m in before) if before else
                   f"rewrote {path}" if now else f"{path}: no failing test involves it")
        return ("Done with my module.", None, [_finish(summary)])

    def _play_integrator(self, st: OracleState):
        t = st.task
        if st.step == 0:
            calls = [_call("read_file", path=x.path) for x in t.modules]
            return ("Reading every module to check that they fit together.",
                    role_reasoning("integrator", t, st), calls)
        if st.step == 1:
            return ("Recording the review and assignments in INTEGRATION.md.", None,
                    [_call("write_file", path="INTEGRATION.md", content=integration_text(t, st))])
        return ("Integration review done; the gate can run.", None,
                [_finish(f"reviewed {len(t.modules)} modules; imports resolve to contract names")])


# ---- reading the request -------------------------------------------------------------


def _role_prompt(msgs: list[dict[str, Any]]) -> tuple[int, str] | None:
    """The index of the last user message with a role heading, and the role it names."""
    for i in range(len(msgs) - 1, -1, -1):
        head = ROLE_HEAD.search(message_text(msgs[i])) if msgs[i].get("role") == "user" else None
        if head:
            return i, head.group(1).strip().replace(" ", "_")
    return None


def _call(name: str, **args: Any) -> ToolCall:
    return ToolCall(name, json.dumps(args))


def _finish(summary: str) -> ToolCall:
    return _call("finish", summary=summary)


def _norm_ppf(p: float) -> float:
    """Inverse of the standard normal CDF (Acklam's approximation, |error| < 1.2e-9)."""
    a = (-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
         1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00)
    b = (-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
         6.680131188771972e+01, -1.328068155288572e+01)
    c = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
         -2.549671010243293e+00, 4.374664141464968e+00, 2.938163982698783e+00)
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
         3.754408661907416e+00)
    lo = 0.02425
    if p < lo:
        q = math.sqrt(-2 * math.log(p))
        return (((((c[0]*q+c[1])*q+c[2])*q+c[3])*q+c[4])*q+c[5]) / \
            ((((d[0]*q+d[1])*q+d[2])*q+d[3])*q+1)
    if p > 1 - lo:
        q = math.sqrt(-2 * math.log(1 - p))
        return -(((((c[0]*q+c[1])*q+c[2])*q+c[3])*q+c[4])*q+c[5]) / \
            ((((d[0]*q+d[1])*q+d[2])*q+d[3])*q+1)
    q = p - 0.5
    r = q * q
    return (((((a[0]*r+a[1])*r+a[2])*r+a[3])*r+a[4])*r+a[5])*q / \
        (((((b[0]*r+b[1])*r+b[2])*r+b[3])*r+b[4])*r+1)


class Policy(OraclePolicy):
    """The emulator's constructor convention (``load_policy``): ``Policy(stack_config, seed)``.

    The oracle's settings are the stack's ``oracle`` table (:attr:`adev.config.StackConfig.oracle`,
    keys of :class:`OracleConfig`), defaults when it is empty or there is no stack config; the
    endpoint seed is not used (the session's request seed decides everything, so both endpoints
    agree).
    """

    def __init__(self, stack_config: Any = None, seed: int = 0):
        super().__init__(OracleConfig.from_dict(getattr(stack_config, "oracle", None)))
