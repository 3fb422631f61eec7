"""One replay run in a process of its own, for ``adev replay --jobs N``.

The held clock a client stamps its requests with is one per process (:mod:`adev.clock`'s stamp
source), so runs made at once each need their own process. The parent
(:func:`adev.replay.experiment.run_matrix`) writes the arguments of
:func:`adev.replay.experiment.run_one` to a pickle file in the output folder (the trace and the
sessions once per matrix, in a second file the job names as ``inputs``) and starts

    python -m adev.replay.worker JOB.pkl

which runs them and exits 0 (the run directory is ``out_dir/label``), or
:data:`adev.replay.cli.STOPPED` when SIGINT or SIGTERM stopped it (its stack stops on the way
out). Its log lines go to stderr, as the parent's do.
"""
from __future__ import annotations

import pickle
import sys
from pathlib import Path
from typing import Any


def main(argv: list[str]) -> int:
    from .cli import STOPPED, run_stoppable
    from .experiment import run_one
    job: dict[str, Any] = pickle.loads(Path(argv[0]).read_bytes())
    inputs = job.pop("inputs", None)   # the arguments every run of the matrix shares
    if inputs is not None:
        job.update(pickle.loads(Path(inputs).read_bytes()))

    def log(*a: Any, **kw: Any) -> None:
        print(*a, file=sys.stderr, flush=True)
    got = run_stoppable(run_one(**job, log=log))
    return 0 if got is not None else STOPPED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
