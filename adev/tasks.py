"""Built-in coding tasks: what agent sessions work on and what the oracle policy answers from.

A task lives in ``fleets/tasks/<name>/``::

    task.toml      name, title, modules = [{path, summary}], needs_block_device, test_timeout_s,
                   optional mistakes = [{path, find, replace, note}] (seeded bugs the tests catch)
    spec.md        the long task spec; its opening section (or all of it) is the leading text
                   every session of a fleet shares (:meth:`Task.shared_prefix`)
    reference/     reference implementation, files at their workspace paths
    tests/         reference tests (what a test writer would write), workspace paths ``tests/...``
    acceptance/    hidden acceptance tests, workspace paths ``acceptance/...``

Paths in :class:`Task` are *workspace* paths (relative to the session's workspace root): a file
``reference/kvblock/device.py`` is ``kvblock/device.py`` in the workspace; ``tests/test_x.py`` and
``acceptance/test_y.py`` keep their folder. Tests run as ``python -m pytest <dir>`` from the
workspace root. Block-device tasks read the device path from env ``ADEV_BLOCK_DEVICE``.
"""
from __future__ import annotations

import ast
import copy
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Literal

from .config import ROOT, ConfigError, from_dict, load_toml

TASKS_DIR = ROOT / "fleets" / "tasks"
"""Folder holding the built-in tasks."""

SpecPlace = Literal["prompt", "file"]
"""Where a session's agents find the task spec: ``prompt`` (all of it in every call's leading text)
or ``file`` (the leading text carries its opening section; the whole spec is the workspace's
:data:`SPEC_FILE`, which the architect reads)."""
SPEC_FILE = "SPEC.md"
SPEC_FILE_LINE = (f"The whole specification, module by module, is the workspace's `{SPEC_FILE}`: "
                  "read it before you plan or write anything it covers.\n")

ACCEPTANCE_DIR = "acceptance"
TESTS_DIR = "tests"
_SKIP_PARTS = {"__pycache__", ".pytest_cache"}
_SKIP_SUFFIXES = {".pyc", ".pyo"}


@dataclass(frozen=True)
class ModuleSpec:
    """One module of the task: its workspace path and a one-line job description."""

    path: str
    summary: str


@dataclass(frozen=True)
class Mistake:
    """A seeded, realistic bug: replace ``find`` (exactly once in ``path``) with ``replace``.

    The oracle policy may make these in early rounds; the task's tests must catch every one
    (checked by ``tests/test_tasks.py``).
    """

    path: str
    find: str
    replace: str
    note: str = ""


@dataclass(frozen=True)
class TaskConfig:
    """The validated contents of ``task.toml``."""

    name: str
    title: str
    modules: list[ModuleSpec]
    needs_block_device: bool = False
    test_timeout_s: float = field(default=120.0, metadata={"positive": True,
                                                           "help": "real seconds per gate run"})
    mistakes: list[Mistake] = field(default_factory=list)

    def validate(self, where: str) -> None:
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", self.name):
            raise ConfigError(f"{where}.name: {self.name!r} must be lower-case letters, digits "
                              "and '-'")
        if not self.title.strip():
            raise ConfigError(f"{where}.title: must not be empty")
        if not 1 <= len(self.modules) <= 8:
            raise ConfigError(f"{where}.modules: expected 1-8 modules, got {len(self.modules)}")
        seen: set[str] = set()
        for i, m in enumerate(self.modules):
            _check_rel(m.path, f"{where}.modules[{i}].path")
            if not m.path.endswith(".py"):
                raise ConfigError(f"{where}.modules[{i}].path: {m.path!r} must be a .py file")
            if m.path in seen:
                raise ConfigError(f"{where}.modules[{i}].path: {m.path!r} listed twice")
            seen.add(m.path)
            if not m.summary.strip():
                raise ConfigError(f"{where}.modules[{i}].summary: must not be empty")
        for i, k in enumerate(self.mistakes):
            if k.path not in seen:
                raise ConfigError(f"{where}.mistakes[{i}].path: {k.path!r} is not a module; "
                                  f"modules: {', '.join(sorted(seen))}")
            if not k.find or k.find == k.replace:
                raise ConfigError(f"{where}.mistakes[{i}].find: must be non-empty and differ "
                                  "from replace")


def _check_rel(path: str, where: str) -> None:
    p = PurePosixPath(path)
    if not path or p.is_absolute() or ".." in p.parts or str(p) != path or "\\" in path:
        raise ConfigError(f"{where}: {path!r} must be a normalised relative path inside the "
                          "workspace")


@dataclass
class Task:
    """A loaded built-in task. All file dicts map workspace path -> text."""

    name: str
    title: str
    spec: str
    modules: list[ModuleSpec]
    reference: dict[str, str]
    tests: dict[str, str]
    acceptance: dict[str, str]
    needs_block_device: bool
    test_timeout_s: float
    root: Path
    mistakes: list[Mistake] = field(default_factory=list)

    # ---- paths and overlays ------------------------------------------------------------
    @property
    def module_paths(self) -> list[str]:
        return [m.path for m in self.modules]

    @property
    def test_paths(self) -> list[str]:
        """The folder(s) to hand pytest for the reference (agent-style) tests."""
        return [TESTS_DIR]

    @property
    def acceptance_paths(self) -> list[str]:
        """The folder(s) to hand pytest for the hidden acceptance tests."""
        return [ACCEPTANCE_DIR]

    def acceptance_overlay(self) -> dict[str, bytes]:
        """Hidden tests as a gate overlay (``GateRequest.overlay``): workspace path -> bytes."""
        return {p: t.encode() for p, t in self.acceptance.items()}

    def reference_files(self, with_tests: bool = True, with_acceptance: bool = False,
                        mistakes: list[Mistake] | None = None) -> dict[str, str]:
        """The reference workspace as files, optionally with seeded ``mistakes`` applied."""
        files = dict(self.reference)
        for k in mistakes or []:
            files[k.path] = apply_mistake(files[k.path], k)
        if with_tests:
            files.update(self.tests)
        if with_acceptance:
            files.update(self.acceptance)
        return files

    def materialise(self, dest: str | Path, **kw) -> Path:
        """Write :meth:`reference_files` under ``dest`` (created); returns ``dest``."""
        dest = Path(dest)
        for rel, text in self.reference_files(**kw).items():
            p = dest / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        return dest

    # ---- the text roles see -----------------------------------------------------------
    def shared_prefix(self, system_prompt: str, spec: SpecPlace = "prompt") -> str:
        """The leading text all sessions of a fleet share: system prompt, then the spec, or with
        ``spec = "file"`` the spec's opening section (its title and statement, the text before
        its first level-2 heading) and a line saying the whole spec is the workspace's
        :data:`SPEC_FILE`."""
        if spec == "prompt":
            return f"{system_prompt.rstrip()}\n\n{self.spec.strip()}\n"
        head = self.spec_sections()[0]
        statement = head[1].strip() if head[0] == "" else ""
        return (f"{system_prompt.rstrip()}\n\n{statement}\n\n" + SPEC_FILE_LINE)

    def spec_sections(self) -> list[tuple[str, str]]:
        """The spec cut at level-2 headings: [(heading, text including the heading)].

        Text before the first ``## `` heading comes first with heading ``""``.
        """
        out: list[tuple[str, str]] = []
        head = ""
        buf: list[str] = []
        for line in self.spec.splitlines(keepends=True):
            if line.startswith("## "):
                if buf and ("".join(buf).strip() or head):
                    out.append((head, "".join(buf)))
                head, buf = line[3:].strip(), [line]
            else:
                buf.append(line)
        if buf:
            out.append((head, "".join(buf)))
        return out

    def module_section(self, path: str) -> str:
        """The spec section whose heading names module ``path`` ('' if none)."""
        for head, text in self.spec_sections():
            if path in head:
                return text
        return ""

    def interfaces(self) -> dict[str, str]:
        """Each module's public interface from the reference, via ``ast``: signatures,
        docstrings and public constants, bodies replaced by ``...`` (the contract role's output)."""
        return {m.path: public_interface(self.reference[m.path]) for m in self.modules}

    def approx_tokens(self, text: str | None = None) -> int:
        """Rough token count (4 characters per token) of ``text`` or the spec."""
        return len(self.spec if text is None else text) // 4


# ---- helpers ---------------------------------------------------------------------------


def apply_mistake(text: str, mistake: Mistake) -> str:
    """``text`` with the mistake applied; ConfigError unless ``find`` occurs exactly once."""
    n = text.count(mistake.find)
    if n != 1:
        raise ConfigError(f"mistake in {mistake.path}: 'find' text occurs {n} times "
                          f"(must be exactly once): {mistake.find!r}")
    return text.replace(mistake.find, mistake.replace)


def _stub(node: ast.stmt) -> ast.stmt:
    """A def/class with bodies reduced to docstring + ``...``; private members dropped."""
    body: list[ast.stmt] = []
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        doc = ast.get_docstring(node, clean=False)
        if doc:
            body.append(ast.Expr(ast.Constant(doc)))
        body.append(ast.Expr(ast.Constant(...)))
    elif isinstance(node, ast.ClassDef):
        doc = ast.get_docstring(node, clean=False)
        if doc:
            body.append(ast.Expr(ast.Constant(doc)))
        for item in node.body:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                if item.name.startswith("_") and not (item.name.startswith("__")
                                                      and item.name.endswith("__")):
                    continue
                body.append(_stub(item))
            elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                if not item.target.id.startswith("_"):
                    body.append(item)
            elif isinstance(item, ast.Assign) and all(
                    isinstance(t, ast.Name) and not t.id.startswith("_") for t in item.targets):
                body.append(item)
            elif isinstance(item, ast.ClassDef) and not item.name.startswith("_"):
                body.append(_stub(item))
        if not body:
            body.append(ast.Expr(ast.Constant(...)))
    else:
        return node
    new = copy.copy(node)
    new.body = body
    return new


def public_interface(source: str) -> str:
    """Public signatures of a module (see :meth:`Task.interfaces`)."""
    tree = ast.parse(source)
    out: list[ast.stmt] = []
    doc = ast.get_docstring(tree, clean=False)
    if doc:
        out.append(ast.Expr(ast.Constant(doc)))
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            out.append(node)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if not node.name.startswith("_"):
                out.append(_stub(node))
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            if names and all((n.isupper() and not n.startswith("_")) or n == "__all__"
                             for n in names):
                out.append(node)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if node.target.id.isupper() and not node.target.id.startswith("_"):
                out.append(node)
    return ast.unparse(ast.Module(body=out, type_ignores=[])) + "\n"


def _read_tree(folder: Path, prefix: str) -> dict[str, str]:
    files: dict[str, str] = {}
    if not folder.is_dir():
        return files
    for p in sorted(folder.rglob("*")):
        if not p.is_file() or _SKIP_PARTS & set(p.parts) or p.suffix in _SKIP_SUFFIXES:
            continue
        rel = p.relative_to(folder).as_posix()
        try:
            files[f"{prefix}{rel}"] = p.read_text()
        except UnicodeDecodeError:
            raise ConfigError(f"{p}: task files must be UTF-8 text") from None
    return files


def task_dir(name_or_path: str | Path) -> Path:
    """The folder of a task given by name (``kvblock-store``) or by path."""
    p = Path(name_or_path)
    if (p / "task.toml").is_file():
        return p
    if p.name == "task.toml" and p.is_file():
        return p.parent
    cand = TASKS_DIR / str(name_or_path)
    if (cand / "task.toml").is_file():
        return cand
    raise ConfigError(f"task: no task {str(name_or_path)!r} in fleets/tasks/; available: "
                      + ", ".join(list_tasks()))


def list_tasks() -> list[str]:
    """Names of the built-in tasks (folders of ``fleets/tasks`` holding a ``task.toml``)."""
    if not TASKS_DIR.is_dir():
        return []
    return sorted(p.parent.name for p in TASKS_DIR.glob("*/task.toml"))


def load_task(name_or_path: str | Path) -> Task:
    """Load and validate a task; ConfigError naming the field (``task.modules[1].path``)."""
    root = task_dir(name_or_path)
    toml = root / "task.toml"
    try:
        cfg = from_dict(TaskConfig, load_toml(toml), "task")
    except ConfigError as e:
        raise ConfigError(f"{toml}: {e}") from None
    if cfg.name != root.name:
        raise ConfigError(f"{toml}: task.name: {cfg.name!r} must equal the folder name "
                          f"{root.name!r}")
    spec_path = root / "spec.md"
    if not spec_path.is_file():
        raise ConfigError(f"{root}: spec.md is missing")
    spec = spec_path.read_text()
    reference = _read_tree(root / "reference", "")
    tests = _read_tree(root / TESTS_DIR, f"{TESTS_DIR}/")
    acceptance = _read_tree(root / ACCEPTANCE_DIR, f"{ACCEPTANCE_DIR}/")
    task = Task(name=cfg.name, title=cfg.title, spec=spec, modules=list(cfg.modules),
                reference=reference, tests=tests, acceptance=acceptance,
                needs_block_device=cfg.needs_block_device, test_timeout_s=cfg.test_timeout_s,
                root=root, mistakes=list(cfg.mistakes))
    _validate_files(task, toml)
    return task


def _validate_files(task: Task, toml: Path) -> None:
    for i, m in enumerate(task.modules):
        if m.path not in task.reference:
            raise ConfigError(f"{toml}: task.modules[{i}].path: {m.path!r} has no file in "
                              "reference/")
        if m.path not in task.spec:
            raise ConfigError(f"{toml}: task.modules[{i}].path: {m.path!r} is not mentioned in "
                              "spec.md")
        try:
            ast.parse(task.reference[m.path])
        except SyntaxError as e:
            raise ConfigError(f"{toml}: reference/{m.path}: syntax error: {e}") from None
    extra = sorted(set(task.reference) - set(task.module_paths))
    if extra:
        raise ConfigError(f"{toml}: task.modules: reference/ holds files that are not modules: "
                          + ", ".join(extra))
    for kind, files in (("tests", task.tests), ("acceptance", task.acceptance)):
        if not any(PurePosixPath(p).name.startswith("test_") for p in files):
            raise ConfigError(f"{task.root}: {kind}/ holds no test_*.py file")
    names_t = {PurePosixPath(p).name for p in task.tests} - {"conftest.py"}
    names_a = {PurePosixPath(p).name for p in task.acceptance} - {"conftest.py"}
    clash = sorted(names_t & names_a)
    if clash:
        raise ConfigError(f"{task.root}: acceptance/ and tests/ share file names {clash} "
                          "(pytest would refuse to import both)")
    for i, k in enumerate(task.mistakes):
        try:
            apply_mistake(task.reference[k.path], k)
        except ConfigError as e:
            raise ConfigError(f"{toml}: task.mistakes[{i}].find: {e}") from None
