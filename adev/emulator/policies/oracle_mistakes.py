"""The oracle's seeded mistakes: a task's own (``task.toml`` ``mistakes``, which its tests catch)
or, for a task without any, one public function left as ``raise NotImplementedError``."""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Mistake:
    path: str
    find: str
    replace: str
    note: str


def mistake_pool(task: Any) -> list[Mistake]:
    pool = [Mistake(k.path, k.find, k.replace, k.note) for k in (getattr(task, "mistakes", None)
                                                                   or [])]
    if pool:
        return pool
    for m in task.modules:  # fallback: leave one public function unimplemented
        fb = stub_mistake(m.path, task.reference[m.path])
        if fb:
            pool.append(fb)
    return pool


def stub_mistake(path: str, source: str) -> Mistake | None:
    lines = source.splitlines(keepends=True)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_") and node.body:
            body = node.body[1:] if (isinstance(node.body[0], ast.Expr) and isinstance(
                getattr(node.body[0], "value", None), ast.Constant)) else node.body
            if not body:
                continue
            a, b = body[0].lineno - 1, body[-1].end_lineno
            find = "".join(lines[a:b])
            if source.count(find) != 1:
                continue
            indent = lines[a][:len(lines[a]) - len(lines[a].lstrip())]
            return Mistake(path, find, f"{indent}raise NotImplementedError('TODO')\n",
                            f"leaves {node.name}() unimplemented")
    return None


def apply_mistake(text: str, m: Mistake) -> str:
    return text.replace(m.find, m.replace, 1) if m.find in text else text
