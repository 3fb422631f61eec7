"""Mutation score of the unit tests over adev's formulas and the emulator's model (a benchmark,
not a pass/fail check).

Runs mutmut 3 (https://github.com/boxed/mutmut) on a copy of the working tree: every mutant of
the chosen modules (an operator swapped, a constant changed, a call argument dropped...) is run
against the unit tests (``-m "not integration"``) that cover the mutated function; a mutant is
*killed* when a test fails (or the run times out), *survived* when every test passes, *no tests*
when no unit test reaches the function. Printed per module:

    score = killed / (killed + survived + no tests)

and, with ``--survivors``, each survivor's diff (as ``mutmut show`` prints it), to be killed with
a test or argued equivalent. The working tree is not touched: the copy lives in ``--workdir``
(a temp dir by default, removed at the end unless ``--keep``); rerun there with
``python -m mutmut results`` / ``show NAME``.

    python bench/bench_mutation.py                       # adev/analysis/ + engine, pool, store
    python bench/bench_mutation.py adev/analysis/windows.py --tests tests/analysis --survivors

Slow: thousands of mutants; each runs the covering tests in a forked worker
(``--max-children`` at a time, default: the CPU count). A mutant that makes a loop spin is ended
by mutmut's time limit (counted as killed): ``(T + C) x M`` wall seconds and twice that in CPU
seconds, where ``T`` is the covering tests' time in the unmutated run; ``--timeout-constant C``
and ``--timeout-multiplier M`` (mutmut's defaults: 1 and 15) shorten it for modules whose
mutants spin (the engine's driver loop), e.g. ``--timeout-constant 5 --timeout-multiplier 2``.
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODULES = ["adev/analysis/", "adev/emulator/engine.py", "adev/emulator/pool.py",
                   "adev/emulator/store.py"]
# mutmut's exit-code meaning (mutmut.stats.status_by_exit_code), folded into three outcomes
KILLED = {1, 3, 36, 37, -24, 24, 152, 255}
SURVIVED = {0}
NO_TESTS = {5, 33}


def copy_tree(dst: Path) -> None:
    """Copy the working tree's files (tracked and untracked-but-not-ignored) to ``dst``."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=ROOT, check=True, capture_output=True).stdout
    for rel in filter(None, out.decode().split("\0")):
        src = ROOT / rel
        if not src.is_file():
            continue
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst / rel)


def mutmut_config(modules: list[str], tests: list[str], top: list[str],
                  pytest_args: list[str] = (), timeout: tuple[float, float] | None = None) -> str:
    """The ``[tool.mutmut]`` section: mutate only ``modules``, run the unit tests under ``tests``;
    every other top-level entry (stacks/, results/ notebooks, ...) is copied next to the mutants
    because tests read them. ``timeout``: mutmut's ``(timeout_constant, timeout_multiplier)``
    (None: mutmut's defaults)."""
    globs = [m.rstrip("/") + "/*" if not m.endswith(".py") else m for m in modules]
    q = lambda xs: "[" + ", ".join(json.dumps(x) for x in xs) + "]"  # noqa: E731
    return ("\n[tool.mutmut]\n"
            f"source_paths = {q(['adev/'])}\n"
            f"only_mutate = {q(globs)}\n"
            f"also_copy = {q(top)}\n"
            f"pytest_add_cli_args = "
            f"{q(['-m', 'not integration', '-p', 'no:cacheprovider', *pytest_args])}\n"
            f"pytest_add_cli_args_test_selection = {q(tests)}\n"
            + ("" if timeout is None else
               f"timeout_constant = {float(timeout[0])!r}\n"
               f"timeout_multiplier = {float(timeout[1])!r}\n"))


def outcomes(work: Path, modules: list[str]) -> dict[str, Counter]:
    """Per mutated source file: Counter of killed / survived / no tests (+ survivor names)."""
    res: dict[str, Counter] = {}
    for meta in sorted((work / "mutants").rglob("*.py.meta")):
        src = meta.relative_to(work / "mutants").as_posix()[:-len(".meta")]
        if not any(src == m or src.startswith(m.rstrip("/") + "/") for m in modules):
            continue
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        c: Counter = Counter()
        for name, code in codes.items():
            if code in KILLED:
                c["killed"] += 1
            elif code in SURVIVED:
                c["survived"] += 1
                c["survivor:" + name] = 1
            elif code in NO_TESTS:
                c["no tests"] += 1
                c["survivor:" + name] = 1
            else:
                c["not run"] += 1
        res[src] = c
    return res


def read_codes(work: Path) -> dict[str, dict[str, int | None]]:
    """Every meta file's ``exit_code_by_key`` under ``work/mutants``, by the meta file's path."""
    return {meta.relative_to(work).as_posix(): json.loads(meta.read_text())["exit_code_by_key"]
            for meta in sorted((work / "mutants").rglob("*.py.meta"))}


def merge_codes(before: dict[str, int | None], after: dict[str, int | None],
                rechecked: set[str]) -> dict[str, int | None]:
    """One meta file's results after a recheck: a rechecked mutant takes its new result (its old
    one if the rerun left it unrun); any other mutant keeps its earlier result, which mutmut resets
    to not run when the test files changed. Mutants are those of ``after`` (the current source)."""
    out: dict[str, int | None] = {}
    for key, new in after.items():
        old = before.get(key)
        if key in rechecked:
            out[key] = new if new is not None else old
        else:
            out[key] = old if old is not None else new
    return out


def write_merged(work: Path, before: dict[str, dict[str, int | None]],
                 rechecked: set[str]) -> None:
    """Rewrite each meta file under ``work/mutants`` with :func:`merge_codes` of the results read
    ``before`` the recheck and those mutmut left, so ``mutmut results`` shows them too."""
    for rel, after in read_codes(work).items():
        merged = merge_codes(before.get(rel, {}), after, rechecked)
        if merged != after:
            meta_path = work / rel
            meta = json.loads(meta_path.read_text())
            meta["exit_code_by_key"] = merged
            meta_path.write_text(json.dumps(meta, indent=4))


def select(names: list[str], only: list[str]) -> list[str]:
    """The mutant names matching any of the ``only`` globs (all of them without globs)."""
    return [n for n in names if not only or any(fnmatch.fnmatchcase(n, g) for g in only)]


def score(c: Counter) -> float:
    """killed / (killed + survived + no tests)."""
    n = c["killed"] + c["survived"] + c["no tests"]
    return c["killed"] / n if n else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("modules", nargs="*", default=DEFAULT_MODULES,
                    help="files or folders to mutate (default: %(default)s)")
    ap.add_argument("--tests", nargs="+", default=["tests/"],
                    help="test paths the unit tests are collected from (default: tests/)")
    ap.add_argument("--pytest-args", default="",
                    help="more pytest arguments, e.g. '--ignore=tests/analysis/test_report.py'")
    ap.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--timeout-constant", type=float, metavar="C",
                    help="mutmut's timeout_constant: a mutant's wall limit is (T + C) x M seconds, "
                         "T the covering tests' time (mutmut's default: 1)")
    ap.add_argument("--timeout-multiplier", type=float, metavar="M",
                    help="mutmut's timeout_multiplier (default: 15)")
    ap.add_argument("--workdir", type=Path, help="where the copy goes (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the workdir")
    ap.add_argument("--survivors", action="store_true", help="print each survivor's diff")
    ap.add_argument("--recheck", action="store_true",
                    help="with an existing --workdir: copy the working tree's tests/ there again "
                         "(run with the --tests and --pytest-args given now) and rerun only the "
                         "mutants that survived (or had no tests); the other mutants keep their "
                         "earlier results")
    ap.add_argument("--only", nargs="+", default=[], metavar="GLOB",
                    help="with --recheck: rerun only the survivors whose mutant name matches a "
                         "glob, e.g. 'adev.emulator.engine.*_save__*'")
    a = ap.parse_args(argv)
    timeout = None
    if a.timeout_constant is not None or a.timeout_multiplier is not None:
        timeout = (1.0 if a.timeout_constant is None else a.timeout_constant,
                   15.0 if a.timeout_multiplier is None else a.timeout_multiplier)
        if timeout[0] < 0 or timeout[1] <= 0:
            print(f"bench_mutation: --timeout-constant must be >= 0 and --timeout-multiplier > 0, "
                  f"got {timeout[0]} and {timeout[1]}", file=sys.stderr)
            return 2
    for m in a.modules:
        if not (ROOT / m).exists():
            print(f"bench_mutation: module {m!r} not found under {ROOT}", file=sys.stderr)
            return 2
    work = a.workdir or Path(tempfile.mkdtemp(prefix="adev-mutation-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        fresh = not (work / "pyproject.toml").exists()
        if fresh:
            copy_tree(work)
        if fresh or a.recheck:
            # a recheck runs the tests named now (--tests), e.g. a new test file
            top = sorted(p.name + ("/" if p.is_dir() else "") for p in work.iterdir()
                         if p.name not in ("adev", "tests", "pyproject.toml", "mutants"))
            shutil.copy2(ROOT / "pyproject.toml", work / "pyproject.toml")
            with open(work / "pyproject.toml", "a") as f:
                f.write(mutmut_config(a.modules, a.tests, top, shlex.split(a.pytest_args), timeout))
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["MPLBACKEND"] = "Agg"
        cmd = [sys.executable, "-m", "mutmut", "run", "--max-children", str(a.max_children)]
        before: dict[str, dict[str, int | None]] = {}
        rechecked: list[str] = []
        if a.recheck:
            shutil.copytree(ROOT / "tests", work / "tests", dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
            before = read_codes(work)
            rechecked = select(sorted(k.split(":", 1)[1] for c in outcomes(work, a.modules).values()
                                      for k in c if k.startswith("survivor:")), a.only)
            cmd += rechecked
        rc = 0
        if a.recheck and not rechecked:
            print("bench_mutation: no survivors to recheck", flush=True)
        else:
            print("$", " ".join(cmd), f"  (in {work})", flush=True)
            rc = subprocess.run(cmd, cwd=work, env=env, stdout=subprocess.DEVNULL).returncode
        if a.recheck:
            write_merged(work, before, set(rechecked))
        res = outcomes(work, a.modules)
        if rc != 0 and not res:
            print(f"bench_mutation: mutmut exited {rc}; see {work}", file=sys.stderr)
            return 1
        print(f"\n{'module':44} {'mutants':>7} {'killed':>7} {'survived':>8} {'no tests':>8}"
              f" {'score':>6}")
        tot: Counter = Counter()
        for src, c in res.items():
            n = c["killed"] + c["survived"] + c["no tests"] + c["not run"]
            tot.update({k: c[k] for k in ("killed", "survived", "no tests", "not run")})
            print(f"{src:44} {n:7d} {c['killed']:7d} {c['survived']:8d} {c['no tests']:8d}"
                  f" {score(c):6.1%}")
        n = sum(tot.values())
        print(f"{'total':44} {n:7d} {tot['killed']:7d} {tot['survived']:8d} {tot['no tests']:8d}"
              f" {score(tot):6.1%}")
        if a.survivors:
            for c in res.values():
                for k in sorted(k for k in c if k.startswith("survivor:")):
                    name = k.split(":", 1)[1]
                    show = subprocess.run([sys.executable, "-m", "mutmut", "show", name], cwd=work,
                                          env=env, capture_output=True, text=True).stdout
                    print(f"\n## {name}\n{show.strip()}")
        return 0
    finally:
        if a.workdir is None and not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
