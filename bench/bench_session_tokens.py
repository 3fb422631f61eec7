"""Token flows of oracle sessions over many seeds: prompt tokens per call, per round, and the
last call of each session (the issue's target: over 20 seeds the median session's last call
carries >= 30K prompt tokens and the largest come near the 65,536 context).

Two modes:
- ``--mode stack`` (default): real sessions on an embedded stack (oracle policy, real local
  gate), ``--width`` at a time; token counts are the emulator's ``usage``.
- ``--mode inprocess``: the same loop and oracle with an in-process model whose prompt tokens are
  counted with the emulator's tokenizer and chat template (same counts, no timing model);
  fast, for tuning prompts.

    .venv/bin/python bench/bench_session_tokens.py [--seeds 20] [--task kvblock-store]
        [--mode stack|inprocess] [--width 5]
"""
from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from adev.clock import RunClock  # noqa: E402
from adev.emulator.policies.oracle import OraclePolicy  # noqa: E402
from adev.gate.local import LocalGate  # noqa: E402
from adev.records import RunDir  # noqa: E402
from adev.session.loop import SessionContext, run_session  # noqa: E402
from adev.tasks import list_tasks, load_task  # noqa: E402


def _q(xs, q):
    return float(np.percentile(np.asarray(xs, dtype=float), q))


def report(rd: RunDir, outcomes, wall: float) -> None:
    calls = [c for c in rd.read("calls") if c["status"] == "ok"]
    by_sess: dict[str, list] = {}
    for c in calls:
        by_sess.setdefault(c["session_id"], []).append(c)
    last = [cs[-1]["prompt_tokens"] for cs in by_sess.values()]
    print(f"{len(outcomes)} sessions in {wall:.0f} s wall; rounds used: "
          + ", ".join(f"{r}: {n}" for r, n in sorted(Counter(o.rounds for o in outcomes).items()))
          + "; status: " + ", ".join(f"{k}: {v}" for k, v in
                                     Counter(o.status for o in outcomes).items())
          + "; acceptance: " + ", ".join(f"{k}: {v}" for k, v in
                                         Counter(o.acceptance for o in outcomes).items()))
    pts = [c["prompt_tokens"] for c in calls]
    print(f"prompt tokens per call: n={len(pts)} p10={_q(pts, 10):.0f} p50={_q(pts, 50):.0f} "
          f"p90={_q(pts, 90):.0f} max={max(pts)}")
    print(f"last call per session: min={min(last)} p50={_q(last, 50):.0f} max={max(last)} "
          f"[target: median >= 30000, max near 65536]")
    for r in sorted({c["round"] for c in calls}):
        cs = [c for c in calls if c["round"] == r]
        firsts = [next(c for c in v if c["round"] == r) for v in by_sess.values()
                  if any(c["round"] == r for c in v)]
        cached = [f["cached_tokens"] or 0 for f in firsts]
        print(f"round {r}: {len(cs)} calls; prompt p50={_q([c['prompt_tokens'] for c in cs], 50):.0f} "
              f"max={max(c['prompt_tokens'] for c in cs)}; first call of the round: prompt p50="
              f"{_q([f['prompt_tokens'] for f in firsts], 50):.0f}, cached p50={_q(cached, 50):.0f}")
    elided = sum(1 for o in outcomes if o.reason and "context" in o.reason)
    print(f"sessions ended by the context rule: {elided}")


async def run_inprocess(a, task, seeds, base: Path):
    from adev.emulator.tokenizer import Tokenizer
    from tests.session.fakes import PolicyLLM

    tok = Tokenizer()

    class TokLLM(PolicyLLM):
        def count_tokens(self, messages, tools, text):
            return len(tok.apply_chat_template(messages, tools))

    rd = RunDir.create("tokens", base=base)
    clock = RunClock()
    llm = TokLLM(OraclePolicy(), run_dir=rd, clock=clock, max_model_len=65536)
    ctx = SessionContext(run_dir=rd, clock=clock, llm=llm, gate=LocalGate())
    sem = asyncio.Semaphore(a.width)

    async def one(s):
        async with sem:
            return await run_session(ctx, task, s, f"{task.name}-s{s}")
    t0 = time.monotonic()
    outs = await asyncio.gather(*(one(s) for s in seeds))
    return rd, outs, time.monotonic() - t0


async def run_stack(a, task, seeds, base: Path):
    from adev.client.llm import Endpoint, LLMClient
    from adev.config import load_stack
    from adev.stack import running_stack, small_config
    cfg = (load_stack(a.stack, policy="oracle") if a.stack else
           small_config(base / "stack", policy="oracle", store={"ram_gb": 8.0}))
    async with running_stack(cfg) as info:
        rd = RunDir.create("tokens", base=base)
        clock = RunClock(time_scale=info.time_scale)
        async with LLMClient([Endpoint(n, u) for n, u in info.endpoints.items()], clock=clock,
                             run_dir=rd, pool_size=64) as llm:
            await llm.discover()
            ctx = SessionContext(run_dir=rd, clock=clock, llm=llm, gate=LocalGate())
            sem = asyncio.Semaphore(a.width)

            async def one(s):
                async with sem:
                    return await run_session(ctx, task, s, f"{task.name}-s{s}")
            t0 = time.monotonic()
            outs = await asyncio.gather(*(one(s) for s in seeds))
            return rd, outs, time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--task", default=None, help="default: the first built-in task")
    ap.add_argument("--mode", choices=["stack", "inprocess"], default="stack")
    ap.add_argument("--width", type=int, default=5, help="sessions at a time")
    ap.add_argument("--stack", default=None, help="stack file (stack mode)")
    a = ap.parse_args()
    task = load_task(a.task or list_tasks()[0])
    base = Path(tempfile.mkdtemp(prefix="adev-bench-tokens-"))
    try:
        runner = run_stack if a.mode == "stack" else run_inprocess
        rd, outs, wall = asyncio.run(runner(a, task, list(range(a.seeds)), base))
        print(f"task {task.name}, mode {a.mode}, seeds 0..{a.seeds - 1}")
        report(rd, outs, wall)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
