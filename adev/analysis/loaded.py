"""Runs named on a command line, loaded for reports: a run directory, or a folder of run
directories (a night of a campaign), each read with its window table and summary."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd

from .aggregate import RunSummary, summarise
from .run import Run, load_run
from .windows import window_table

def is_run_dir(p: Path) -> bool:
    return p.is_dir() and ((p / "manifest.json").exists() or (p / "calls.jsonl").exists())


def expand(paths: Sequence[str | Path]) -> list[Path]:
    """Run directories named by ``paths`` (a folder of runs expands to its run directories)."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if is_run_dir(p):
            out.append(p)
        elif p.is_dir():
            subs = sorted(q for q in p.iterdir() if is_run_dir(q))
            if not subs:
                raise FileNotFoundError(f"{p}: neither a run directory nor a folder of runs")
            out.extend(subs)
        else:
            raise FileNotFoundError(f"run directory not found: {p}")
    seen, uniq = set(), []
    for p in out:
        if p.resolve() not in seen:
            seen.add(p.resolve())
            uniq.append(p)
    return uniq


@dataclass
class Loaded:
    run: Run
    table: pd.DataFrame
    summary: RunSummary


def load_all(paths: Sequence[str | Path], with_reuse: bool = True) -> list[Loaded]:
    out = []
    for p in expand(paths):
        run = load_run(p)
        t = window_table(run)
        out.append(Loaded(run, t, summarise(run, t, with_reuse=with_reuse)))
    return out
