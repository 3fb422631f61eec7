"""What the local gate's sandbox costs: the same pytest suite through ``local`` (confined) and
``local-unconfined``, alternating, ``--runs`` times each.

The suite is a built-in task's reference solution with its own tests (``--task``, default
``kvblock-store``, whose block device exercises the output folder), so the figure is what a
session's gate round pays. Printed: the median wall seconds of a gate run in each mode
(``GateResult.real_duration_s``, from process start to exit, plus the set-up around it measured
here: copy, cgroup, teardown) and the ratio confined / unconfined.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_gate_sandbox.py [--runs 5] [--task NAME]
"""
from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--task", default="kvblock-store")
    a = ap.parse_args()
    from adev.gate.base import GateRequest
    from adev.gate.registry import make_gate
    from adev.session.tasks import load_task

    task = load_task(a.task)
    ws = task.materialise(Path(tempfile.mkdtemp(prefix="adev-bench-gate-")))
    gates = {"local": make_gate("local"), "local-unconfined": make_gate("local-unconfined")}
    for g in gates.values():
        await g.start()
    wall: dict[str, list[float]] = {n: [] for n in gates}
    tests: dict[str, list[float]] = {n: [] for n in gates}
    for _ in range(a.runs):
        for name, g in gates.items():
            t0 = time.monotonic()
            res = await g.run(GateRequest("bench", ws, test_paths=task.test_paths,
                                          needs_nvme=task.needs_block_device))
            wall[name].append(time.monotonic() - t0)
            tests[name].append(res.real_duration_s)
            if res.verdict != "pass":
                why = res.error or res.output_tail[-500:]
                raise SystemExit(f"{name}: verdict {res.verdict}: {why}")
    for name in gates:
        print(f"{name:17s} gate run median {statistics.median(wall[name]):.3f} s "
              f"(pytest process {statistics.median(tests[name]):.3f} s), n={a.runs}")
    ratio = statistics.median(wall["local"]) / statistics.median(wall["local-unconfined"])
    print(f"confined / unconfined: {ratio:.2f}x")
    shutil.rmtree(ws, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
