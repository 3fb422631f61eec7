"""A tiny in-memory task (two modules) for fast session unit tests."""
from __future__ import annotations

from pathlib import Path

from adev.tasks import Mistake, ModuleSpec, Task

OPS = '''"""Arithmetic operations."""


def add(a: int, b: int) -> int:
    """Sum of a and b."""
    return a + b


def mul(a: int, b: int) -> int:
    """Product of a and b."""
    return a * b
'''

FMT = '''"""Formatting of results."""
from calc.ops import add


def show_sum(a: int, b: int) -> str:
    """'a + b = s'."""
    return f"{a} + {b} = {add(a, b)}"
'''

TEST_OPS = '''from calc.ops import add, mul


def test_add():
    assert add(2, 3) == 5


def test_mul():
    assert mul(2, 3) == 6
'''

TEST_FMT = '''from calc.fmt import show_sum


def test_show_sum():
    assert show_sum(1, 2) == "1 + 2 = 3"
'''

ACCEPT = '''from calc.ops import add, mul


def test_accept_ops():
    assert add(-1, 1) == 0 and mul(0, 5) == 0
'''

SPEC = """# Task: calc

Build a tiny calculator package.

## Module calc/ops.py

`add(a, b)` and `mul(a, b)` on integers.

## Module calc/fmt.py

`show_sum(a, b)` formats `a + b = s`.
"""


def tiny_task(**kw) -> Task:
    t = Task(name="calc", title="A tiny calculator", spec=SPEC,
             modules=[ModuleSpec("calc/ops.py", "add and mul"),
                      ModuleSpec("calc/fmt.py", "formatting")],
             reference={"calc/ops.py": OPS, "calc/fmt.py": FMT},
             tests={"tests/test_ops.py": TEST_OPS, "tests/test_fmt.py": TEST_FMT},
             acceptance={"acceptance/test_accept.py": ACCEPT},
             needs_block_device=False, test_timeout_s=60.0, root=Path("."),
             mistakes=[Mistake("calc/ops.py", "return a * b", "return a + b", "mul adds"),
                       Mistake("calc/fmt.py", "{a} + {b}", "{a}+{b}", "drops the spaces")])
    for k, v in kw.items():
        setattr(t, k, v)
    return t
