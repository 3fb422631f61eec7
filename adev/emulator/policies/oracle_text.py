"""What the oracle writes: the per-request :class:`OracleState`, and the text of its replies and
files, derived from the task's reference files (the plan from the module list, spec and known
risks; the contract from the reference interfaces; the integration review from the modules'
imports), with a seeded voice so that sessions word their messages each their own way."""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from ...tasks import SPEC_FILE_LINE

if TYPE_CHECKING:
    from .oracle import OraclePolicy

GATE_HEAD = re.compile(r"^## Gate report, round (\d+)", re.M)
NODE = re.compile(r"((?:tests|acceptance)/[\w./-]+\.py)::")


@dataclass
class OracleState:
    """Where one request stands: the task, seed, round, role, module, step of the turn, the
    history before the role prompt and the turn since it."""

    oracle: OraclePolicy
    task: Any
    seed: int | None
    rnd: int
    role: str
    module: str | None
    step: int
    history: list[dict[str, Any]]
    turn: list[dict[str, Any]]


def message_text(msg: dict[str, Any]) -> str:
    """A message's text (its content, or its text parts joined)."""
    c = msg.get("content")
    if isinstance(c, list):  # content parts
        return "".join(p.get("text", "") for p in c if isinstance(p, dict))
    return c or ""


OPENERS = ("Okay.", "Right.", "Alright,", "Good.", "Let me think.", "Understood.", "Next step:",
           "So,", "Fine.", "Looking at this,", "Plan:", "Noted.")
ANGLES = ("keeping the specification's names exact", "with the error types in mind",
          "checking the edge cases the spec lists", "watching the module boundaries",
          "minding the invariants", "with the tests' expectations in view",
          "staying inside the contract", "keeping the change small",
          "looking for off-by-one risks", "favouring the simplest correct form",
          "tracking what each module imports", "reading the examples closely")


def voice(st: OracleState) -> str:
    """A seeded lead-in to every visible reply: like a sampled model, each session words its
    messages its own way, so sessions share the task text and then diverge (docs/design.md §2)
    instead of replaying byte-identical transcripts across the fleet."""
    key = (st.rnd, st.role, st.module, st.step)
    a = OPENERS[int(st.oracle.draw(st.seed, "voice-a", *key) * len(OPENERS))]
    b = ANGLES[int(st.oracle.draw(st.seed, "voice-b", *key) * len(ANGLES))]
    return f"{a} Proceeding {b}."


def role_reasoning(role: str, task: Any, st: OracleState) -> str:
    mods = ", ".join(f"`{m.path}`" for m in task.modules)
    if st.rnd > 1:
        return (f"Round {st.rnd}: the gate reported failures. I should read the report, find "
                f"which of {mods} is responsible, and change only what the failures prove wrong.")
    return (f"The task has {len(task.modules)} modules ({mods}). As the {role.replace('_', ' ')} "
            "I should follow the specification's names and error types exactly.")


def public_names(source: str) -> list[str]:
    out = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef) and not node.name.startswith("_"):
            out.append(node.name)
    return out


def module_imports(task: Any, path: str) -> list[str]:
    mods = {m.path[:-3].replace("/", "."): m.path for m in task.modules}
    out = []
    for node in ast.walk(ast.parse(task.reference[path])):
        if isinstance(node, ast.ImportFrom):
            name = node.module or ""
            if node.level:
                pkg = PurePosixPath(path).parent.as_posix().replace("/", ".")
                name = f"{pkg}.{name}" if name else pkg
            for full in (name, *(f"{name}.{a.name}" for a in node.names)):
                if full in mods and mods[full] != path and mods[full] not in out:
                    out.append(mods[full])
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name in mods and mods[a.name] != path and mods[a.name] not in out:
                    out.append(mods[a.name])
    return out


def dependency_order(task: Any) -> list[Any]:
    order: list[Any] = []
    seen: set[str] = set()
    by_path = {m.path: m for m in task.modules}

    def visit(p: str, depth: int = 0) -> None:
        if p in seen or depth > 20:
            return
        seen.add(p)
        for d in module_imports(task, p):
            visit(d, depth + 1)
        order.append(by_path[p])
    for m in task.modules:
        visit(m.path)
    return order


def plan_text(task: Any, st: OracleState) -> str:
    lines = [f"# Plan: {task.title}", ""]
    if st.rnd > 1:
        fails = failing_files(st.history)
        lines += [f"## Changes in round {st.rnd}", "",
                  "The module split stays. The gate report shows failing tests in "
                  + (", ".join(f"`{f}`" for f in fails) or "the suite")
                  + "; the owners of the modules those tests exercise fix them this round, "
                  "guided by INTEGRATION.md. Interfaces do not change.", ""]
    lines += ["## Modules", ""]
    for m in dependency_order(task):
        deps = module_imports(task, m.path)
        lines += [f"### `{m.path}`", "", m.summary, "",
                  "Exports: " + ", ".join(f"`{n}`" for n in public_names(task.reference[m.path])),
                  "Imports: " + (", ".join(f"`{d}`" for d in deps) or "standard library only"),
                  ""]
    lines += ["## Data flow", ""]
    for i, (head, _) in enumerate([s for s in task.spec_sections() if s[0]][:12], 1):
        lines.append(f"{i}. {head}")
    lines += ["", "## Cross-module invariants and risks", ""]
    for k in getattr(task, "mistakes", []) or []:
        lines.append(f"- `{k.path}`: easy to get wrong -- an implementation that {k.note} must "
                     "fail a test.")
    lines += ["- Every public boundary validates its arguments and raises the specification's "
              "exception types.", ""]
    return "\n".join(lines)

def contract_text(task: Any) -> str:
    parts = [f"# Contract: {task.title}", "",
             "Binding public interfaces. Implementers implement exactly these names; tests "
             "use only these names.", ""]
    for path, text in task.interfaces().items():
        parts += [f"## `{path}`", "", "```python", text.rstrip(), "```", ""]
    return "\n".join(parts)


def integration_text(task: Any, st: OracleState) -> str:
    lines = [f"# Integration review, round {st.rnd}", ""]
    for m in task.modules:
        deps = module_imports(task, m.path)
        lines += [f"## `{m.path}`", "",
                  "- Public names match CONTRACT.md: "
                  + ", ".join(f"`{n}`" for n in public_names(task.reference[m.path])),
                  "- Imports: " + (", ".join(f"`{d}`" for d in deps) or "standard library only")
                  + "; no cycle.", ""]
    fails = failing_files(st.history)
    if st.rnd > 1 and fails:
        lines += ["## Assignments", "", "Owners of the modules exercised by "
                  + ", ".join(f"`{f}`" for f in fails)
                  + " re-check the behaviour the failing assertions name against the "
                  "specification.", ""]
    return "\n".join(lines)


def tests_for(task: Any, path: str) -> list[str]:
    stem = PurePosixPath(path).stem
    hits = [p for p in sorted(task.tests) if PurePosixPath(p).stem == f"test_{stem}"]
    if not hits:
        dotted = path[:-3].replace("/", ".")
        hits = [p for p in sorted(task.tests) if dotted in task.tests[p]][:2]
    return hits


def failing_files(history: list[dict[str, Any]]) -> list[str]:
    for msg in reversed(history):
        if msg.get("role") == "user":
            text = message_text(msg)
            if GATE_HEAD.search(text):
                return sorted(set(NODE.findall(text)))
    return []


def spec_is_file(history: list[dict[str, Any]]) -> bool:
    """Whether the request's system message says the task spec is a workspace file (fleet
    ``spec = "file"``: :data:`adev.tasks.SPEC_FILE_LINE`), which the architect then reads."""
    line = SPEC_FILE_LINE.strip()
    return any(m.get("role") == "system" and line in message_text(m) for m in history)
