"""Replay speed: trace import time, and dispatch delay at 16 in flight on the embedded stack.

1. **Import.** ``adev trace import mooncake`` of the whole Mooncake conversation trace (12,031
   requests), in this process, best of ``--repeat``; target < 5 s. Baseline measured in the same
   run: parsing the same file's lines with orjson and nothing else (the floor of any importer);
   printed as the ratio import / parse. Then writing the trace file and reading it back.
2. **Dispatch delay at 16 in flight.** A slice of that trace (``--sessions`` sessions with at
   least two turns, prompts cut to ``--max-context``) replayed with the long-gap schedule (16 in
   flight, ``--gap`` other completions between a session's turns) against an embedded stack of
   two prefill and two decode replicas (or two colocated replicas on an emulator without
   ``kv_role``), configuration ``store-ram``, on a free model clock (the held clock would hold
   model time across the dispatch, which is what the benchmark measures). Dispatch delay =
   ``t_sent - t_scheduled`` of each call's first request
   (:func:`adev.analysis.figures.dispatch_delay`; the schedule releases a call at
   ``t_scheduled``, so it covers awaiting the prompt's ids, routing, building and
   sending the request), p50/p99 in wall milliseconds; target p99 < 10 ms. Baseline in the same
   run: the same calls sent by the bare client (``LLMClient.completion`` with the ids already
   built, 16 at a time, no schedule or router); printed as the ratio replay / bare.

    .venv/bin/python bench/bench_replay.py [--trace FILE] [--sessions 24] [--repeat 3]
        [--skip-replay]
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from adev.analysis.figures import dispatch_delay, pct  # noqa: E402
from adev.replay.format import read_trace, write_trace  # noqa: E402
from adev.replay.importers import import_mooncake  # noqa: E402

TRACE = Path("/work/shared/traces/mooncake_conversation_trace.jsonl")


def bench_import(path: Path, repeat: int) -> None:
    parse, imp = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        with open(path, "rb") as fh:
            n = sum(1 for line in fh if orjson.loads(line))
        parse.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        tr = import_mooncake(path)
        imp.append(time.perf_counter() - t0)
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        p = write_trace(tr, Path(d) / "t.jsonl")
        t_w = time.perf_counter() - t0
        t0 = time.perf_counter()
        back = read_trace(p)
        t_r = time.perf_counter() - t0
    print(f"import: {n:,} requests -> {len(tr.calls):,} calls, {len(tr.sessions()):,} sessions;"
          f" import best {min(imp):.2f} s (target < 5 s), orjson parse only {min(parse):.2f} s,"
          f" ratio {min(imp) / min(parse):.2f}; write {t_w:.2f} s, read back {t_r:.2f} s "
          f"({len(back.calls):,} calls)")


async def bench_dispatch(path: Path, sessions_n: int, gap: int, max_context: int) -> None:
    import pandas as pd

    from adev.client.llm import Endpoint, LLMClient
    from adev.clock import RunClock
    from adev.records import RunDir
    from adev.replay.cli import default_stack
    from adev.replay.experiment import ReplayOptions, run_one, select_sessions, topology
    from adev.replay.format import prompt_ids
    from adev.stack import running_stack
    tr = import_mooncake(path)
    sessions = select_sessions(tr, sessions=sessions_n, min_turns=2, max_context=max_context)
    calls = [c for cs in sessions for c in cs]
    out = Path(tempfile.mkdtemp(prefix="bench-replay-"))
    # a free model clock (model = wall x S): the dispatch delay is the client's wall time (on
    # the default held clock the replay holds model time across it, so it would read zero)
    stack = default_stack(configuration="store-ram", state_dir=str(out / "stack"),
                          model_clock="free")
    opts = ReplayOptions(experiment="long", gap=gap, max_in_flight=16)
    run = await run_one(tr, sessions, stack, opts, out, "replay", log=lambda *a, **k: None)
    c = pd.DataFrame(RunDir(run).read("calls"))
    ids = c["call_id"].astype(str)
    pre = ids.str.endswith("-prefill")
    first = c[(c["attempt"] == 0) & (pre if pre.any() else True)]
    scale = float(stack.time_scale)
    dd = dispatch_delay(first) / scale * 1e3
    # baseline: the bare client, prompts built beforehand, 16 at a time
    topo = topology(stack)
    async with running_stack(stack) as info:
        clock = RunClock(time_scale=info.time_scale)
        ep = topo.prefill[0]
        bare_rd = RunDir.create("bare", base=out)
        async with LLMClient([Endpoint(ep, info.endpoints[ep])], clock=clock, run_dir=bare_rd,
                             return_token_ids=False) as cl:
            await cl.discover()
            await cl.warm(16)
            built = [(cc, prompt_ids(tr, cc)) for cc in calls]
            sem = asyncio.Semaphore(16)

            async def one(cc, p):
                async with sem:
                    await cl.completion(ep, p, max_tokens=max(1, cc.output_tokens),
                                        min_tokens=max(1, cc.output_tokens), ignore_eos=True,
                                        call_id=f"{cc.session}-{cc.turn}")
            await asyncio.gather(*(one(cc, p) for cc, p in built))
        bare_rd.close()
    b = pd.DataFrame(RunDir(bare_rd.path).read("calls"))
    bd = dispatch_delay(b[b["attempt"] == 0]) / scale * 1e3
    print(f"dispatch delay at 16 in flight ({len(first)} calls, {len(sessions)} sessions, "
          f"{'2P x 2D' if topo.disaggregated else 'colocated'}): replay p50 {pct(dd, 50):.2f} ms,"
          f" p99 {pct(dd, 99):.2f} ms (target < 10 ms); bare client p50 {pct(bd, 50):.2f} ms, "
          f"p99 {pct(bd, 99):.2f} ms; ratio p99 {pct(dd, 99) / max(pct(bd, 99), 1e-9):.2f}")
    print(f"run records: {run}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", default=str(TRACE))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sessions", type=int, default=24)
    ap.add_argument("--gap", type=int, default=16)
    ap.add_argument("--max-context", type=int, default=32768)
    ap.add_argument("--skip-replay", action="store_true")
    a = ap.parse_args()
    p = Path(a.trace)
    if not p.exists():
        print(f"bench_replay: --trace {p}: not found", file=sys.stderr)
        return 2
    bench_import(p, a.repeat)
    if not a.skip_replay:
        asyncio.run(bench_dispatch(p, a.sessions, a.gap, a.max_context))
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
