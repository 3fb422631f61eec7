"""Built-in tasks: loading/validation, and each task's tests pass on the reference and fail on
every seeded mistake (so the tests can fail, and the oracle's mistakes drive later rounds)."""
from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from adev.config import ConfigError
from adev.gate.base import parse_junit
from adev.tasks import SPEC_FILE_LINE, Mistake, Task, apply_mistake, list_tasks, load_task, public_interface

TASKS = list_tasks()
DEVICE_BYTES = 64 * 1024 * 1024


def _count_tests(files: dict[str, str]) -> int:
    return sum(len(re.findall(r"^def test_\w+\(", t, re.M)) for t in files.values())


def _run_pytest(task: Task, dest: Path, mistakes: list[Mistake] | None = None):
    """Materialise the reference (+tests, +acceptance) under ``dest`` and run pytest there.

    Returns (results per suite {"tests": [...], "acceptance": [...]}, wall seconds, output)."""
    task.materialise(dest, with_tests=True, with_acceptance=True, mistakes=mistakes)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ADEV_", "PYTEST_"))}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # bare pytest, as in the gate guest
    if task.needs_block_device:
        dev = dest.parent / f"{dest.name}-device.img"
        with open(dev, "wb") as fh:
            fh.truncate(DEVICE_BYTES)
        env["ADEV_BLOCK_DEVICE"] = str(dev)
    junit = dest.parent / f"{dest.name}-junit.xml"
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         f"--junitxml={junit}", *task.test_paths, *task.acceptance_paths],
        cwd=dest, env=env, capture_output=True, text=True, timeout=task.test_timeout_s)
    wall = time.monotonic() - t0
    results = parse_junit(junit.read_bytes()) if junit.exists() else []
    by_suite: dict[str, list] = {"tests": [], "acceptance": []}
    for r in results:
        suite = "acceptance" if r.nodeid.startswith("acceptance/") else "tests"
        by_suite[suite].append(r)
    return by_suite, wall, proc.stdout + proc.stderr


def test_at_least_three_tasks_one_needs_a_block_device():
    assert len(TASKS) >= 3, TASKS
    assert any(load_task(n).needs_block_device for n in TASKS)


@pytest.mark.parametrize("name", TASKS)
def test_task_shape(name):
    t = load_task(name)
    assert t.name == name and t.title
    assert 3 <= len(t.modules) <= 5
    # the shared leading text: the spec alone is at least 3K tokens (4 chars per token)
    assert t.approx_tokens() >= 3000, t.approx_tokens()
    assert 15 <= _count_tests(t.tests) <= 30, _count_tests(t.tests)
    assert 10 <= _count_tests(t.acceptance) <= 20, _count_tests(t.acceptance)
    assert all(p.startswith("tests/") for p in t.tests)
    overlay = t.acceptance_overlay()
    assert overlay and all(p.startswith("acceptance/") and isinstance(b, bytes)
                           for p, b in overlay.items())
    assert len(t.mistakes) >= len(t.modules) - 1
    for m in t.modules:
        assert m.path in t.module_section(m.path), f"no spec section for {m.path}"
    assert t.shared_prefix("SYSTEM").startswith("SYSTEM\n\n# ")
    # with the spec as a workspace file: its opening section only, and where the rest is
    short = t.shared_prefix("SYSTEM", "file")
    head = t.spec_sections()[0][1].strip()
    assert short == f"SYSTEM\n\n{head}\n\n{SPEC_FILE_LINE}" and "SPEC.md" in SPEC_FILE_LINE
    assert len(short) < len(t.shared_prefix("SYSTEM")) / 3
    assert not any(m.path in short for m in t.modules)   # no module section in the leading text


@pytest.mark.parametrize("name", TASKS)
def test_interfaces_are_public_stubs(name):
    t = load_task(name)
    ifaces = t.interfaces()
    assert list(ifaces) == t.module_paths
    for path, text in ifaces.items():
        tree = ast.parse(text)  # valid Python
        src = ast.parse(t.reference[path])
        public = {n.name for n in src.body
                  if isinstance(n, ast.FunctionDef | ast.ClassDef) and not n.name.startswith("_")}
        stubbed = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
        assert public == stubbed, path
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                assert isinstance(node.body[-1], ast.Expr) and node.body[-1].value.value is ...
                assert not node.name.startswith("_") or node.name.startswith("__")


@pytest.mark.parametrize("name", TASKS)
def test_reference_passes_all_tests(name, tmp_path):
    t = load_task(name)
    suites, wall, out = _run_pytest(t, tmp_path / "ws")
    for suite, expected in (("tests", t.tests), ("acceptance", t.acceptance)):
        outcomes = [r.outcome for r in suites[suite]]
        # parametrised tests yield several results per function
        assert len(outcomes) >= _count_tests(expected), (suite, out[-3000:])
        assert set(outcomes) == {"passed"}, (suite, out[-3000:])
    # generous bound: the target is < 5 s natively, the machine is shared
    assert wall < 60, wall


@pytest.mark.parametrize("name,index", [(n, i) for n in TASKS
                                        for i in range(len(load_task(n).mistakes))])
def test_each_seeded_mistake_fails_the_tests(name, index, tmp_path):
    t = load_task(name)
    mistake = t.mistakes[index]
    suites, _, out = _run_pytest(t, tmp_path / "ws", mistakes=[mistake])
    failed = {s: [r.nodeid for r in rs if r.outcome in ("failed", "error")]
              for s, rs in suites.items()}
    assert failed["tests"], f"reference tests miss mistake {mistake.note!r}\n{out[-2000:]}"
    assert failed["acceptance"], f"acceptance tests miss mistake {mistake.note!r}"


# ---- validation --------------------------------------------------------------------------


@pytest.fixture
def task_copy(tmp_path):
    src = load_task(TASKS[0]).root
    dest = tmp_path / src.name
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _edit_toml(folder: Path, old: str, new: str) -> None:
    p = folder / "task.toml"
    text = p.read_text()
    assert old in text, old
    p.write_text(text.replace(old, new, 1))


def test_load_by_path_equals_load_by_name(task_copy):
    a, b = load_task(task_copy), load_task(task_copy.name)
    assert a.reference == b.reference and a.spec == b.spec and a.mistakes == b.mistakes


@pytest.mark.parametrize("old,new,field", [
    ("test_timeout_s = ", "test_timeout_s = -", "task.test_timeout_s"),
    ("needs_block_device = ", "needs_block_device = 'yes' #", "task.needs_block_device"),
    ("[[modules]]\npath = \"", "[[modules]]\npath = \"../", "task.modules[0].path"),
    ("[[modules]]\npath", "[[modules]]\ncolour = 1\npath", "task.modules[0].colour"),
    ("title = ", "flavour = 'x'\ntitle = ", "task.flavour"),
    ("name = \"", "name = \"x", "task.name"),
    ("[[mistakes]]\npath = \"", "[[mistakes]]\npath = \"nowhere/", "task.mistakes[0].path"),
    ("[[mistakes]]\npath = \"", "[[mistakes]]\npath = \"", "task.mistakes[0].find"),
])
def test_bad_task_toml_names_the_field(task_copy, old, new, field):
    if field == "task.mistakes[0].find":
        text = (task_copy / "task.toml").read_text()
        i = text.index("[[mistakes]]")
        j = text.index("find = ", i)
        k = text.index("\n", j)
        (task_copy / "task.toml").write_text(text[:j] + "find = 'no such text anywhere'"
                                             + text[k:])
    else:
        _edit_toml(task_copy, old, new)
    with pytest.raises(ConfigError) as e:
        load_task(task_copy)
    assert field in str(e.value), str(e.value)


def test_missing_module_file_and_spec_are_reported(task_copy):
    t = load_task(task_copy)
    (task_copy / "reference" / t.modules[1].path).unlink()
    with pytest.raises(ConfigError, match=r"task\.modules\[1\]\.path"):
        load_task(task_copy)


def test_clashing_test_file_names_rejected(task_copy):
    t = load_task(task_copy)
    name = Path(next(p for p in t.tests if "test_" in p)).name
    (task_copy / "acceptance" / name).write_text("def test_x():\n    pass\n")
    with pytest.raises(ConfigError, match="share file names"):
        load_task(task_copy)


def test_unknown_task_lists_available():
    with pytest.raises(ConfigError) as e:
        load_task("no-such-task")
    assert all(n in str(e.value) for n in TASKS)


def test_apply_mistake_requires_unique_match():
    m = Mistake(path="m.py", find="x", replace="y")
    assert apply_mistake("a x b", m) == "a y b"
    with pytest.raises(ConfigError):
        apply_mistake("x x", m)
    with pytest.raises(ConfigError):
        apply_mistake("none", m)


def test_public_interface_hides_private_names():
    src = ('"""Doc."""\nimport os\n_PRIVATE = 1\nLIMIT = 2\n'
           'def _helper():\n    return 1\n'
           'def api(a: int, b: str = "x") -> int:\n    """Do it."""\n    return a\n'
           'class K:\n    """K."""\n    n: int = 0\n'
           '    def _p(self):\n        pass\n    def q(self) -> None:\n        x = 1\n')
    text = public_interface(src)
    assert "_PRIVATE" not in text and "_helper" not in text and "_p" not in text
    assert "LIMIT = 2" in text and "def api(a: int, b: str='x') -> int:" in text
    assert "x = 1" not in text and "def q(self) -> None:" in text
