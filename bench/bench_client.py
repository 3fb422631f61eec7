"""Client overhead at N concurrent sessions (default 18) against the embedded stack.

Each synthetic session sends ``--calls`` chat calls back to back, the way a session's context
grows: the shared leading text (system prompt + a task spec), then ~``--grow`` tokens of new text
per call (reference code of the task), streamed with tools, ``include_usage`` and
``return_token_ids``, through THE client (:class:`adev.client.llm.LLMClient`). The emulator runs
the length policy with a small ``max_tokens`` so the figures are about the client, not decoding.

Two scenarios (``--scenario``, default both):
- ``paced``: every call decodes U(0.5, 1.5) x ``--paced-max-tokens`` output tokens (median 850,
  the median reply length of the default fleet's calls), so the 18 sessions call at the rate
  their decoding allows and drift apart, as a fleet's sessions do (``--spread 0`` keeps them in
  lock step: every call of a round ends in the same decode step);
- ``stress``: every call decodes ``--max-tokens`` (16) tokens and sessions call back to back
  with no think time: about 20x a fleet's call rate, which saturates this 2-core host (the stack's
  own CPU is printed alongside).

``--stack-cpus 0 --client-cpus 1`` runs the stack and this client on separate cores
(``stack.cpus`` / ``fleet.client_cpus``), as load generators are usually kept apart from the
system under test. ``--client-realtime`` schedules this client's event loop SCHED_FIFO
(``fleet.client_realtime``): on a shared host the kernel otherwise often wakes it on a CPU busy
with the stack and lets it wait there for milliseconds, which land in its first-byte stamps.

Printed figures (wall milliseconds, from the CallRecords and the emulator's contract-1 stamps,
all on the host's CLOCK_MONOTONIC):
- dispatch delay = t_sent - t_scheduled (client queueing + request build + pool wait), p50/p99;
  target p99 < 10 ms;
- first byte - the server's send stamp of the stream's first bytes
  (``adev.t_first_byte_sent_mono``: the headers and the role-only chunk, with the prompt's token
  ids, handed to the connection; the client stamps the first socket read of the answer),
  p50/p99; target p99 < 2 ms (the issue's figure: the client's first-byte stamp vs the
  emulator's own send stamp);
- first content - the server's send stamp of the first token event
  (``adev.t_first_token_sent_mono``), p50/p99: the same gap for the event that is TTFT;
- context: the server's own delay from deciding the first token (``t_first_token_mono``) to
  sending it, and the stack's and the client's CPU.

    .venv/bin/python bench/bench_client.py [--sessions 18] [--calls 8] [--stack FILE]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from adev import event_loop  # noqa: E402
from adev.client.llm import Endpoint, LLMClient  # noqa: E402
from adev.clock import RunClock  # noqa: E402
from adev.records import RunDir  # noqa: E402
from adev.session.roles import load_roles  # noqa: E402
from adev.tasks import list_tasks, load_task  # noqa: E402
from adev.session.tools import schemas  # noqa: E402


def pct(xs, q):
    return float(np.percentile(np.asarray(xs), q)) if xs else float("nan")


async def session(llm: LLMClient, endpoint: str, sid: int, calls: int, lead: str,
                  chunks: list[str], max_tokens: int, tools, jitter_ms: float = 0.0,
                  spread: float = 0.0) -> None:
    import random
    rng = random.Random(sid)
    msgs = [{"role": "system", "content": lead},
            {"role": "user", "content": f"## Role: implementer\nsession {sid}"}]
    for i in range(calls):
        if jitter_ms:  # tool execution between calls: sessions drift apart as real ones do
            await asyncio.sleep(rng.uniform(0, jitter_ms) / 1e3)
        n_out = max_tokens if spread <= 0 else max(1, round(max_tokens * rng.uniform(
            1 - spread, 1 + spread)))  # reply lengths vary, as a fleet's do
        res = await llm.chat(endpoint, msgs, tools=tools, max_tokens=n_out, seed=sid,
                             session_id=f"b{sid}", call_id=f"b{sid}/{i}", role="bench",
                             round=1, step=i)
        msgs.append({"role": "assistant", "content": res.content})
        msgs.append({"role": "user", "content": chunks[(sid + i) % len(chunks)]})


async def main_async(a) -> None:
    for scenario in (("paced", "stress") if a.scenario == "both" else (a.scenario,)):
        await run_scenario(a, scenario)


async def run_scenario(a, scenario: str) -> None:
    max_tokens = a.paced_max_tokens if scenario == "paced" else a.max_tokens
    from adev.config import load_stack
    from adev.stack import process_usage, running_stack, small_config
    tmp = Path(tempfile.mkdtemp(prefix="adev-bench-client-"))
    if a.stack:
        cfg = load_stack(a.stack, policy="length", cpus=a.stack_cpus)
    else:
        cfg = small_config(tmp / "stack", policy="length", time_scale=a.time_scale,
                           cpus=a.stack_cpus or [])
    task = load_task(a.task or list_tasks()[0])
    lead = task.shared_prefix(load_roles().system_prompt)
    code = "\n".join(task.reference.values())
    step = a.grow * 4  # ~4 characters per token
    chunks = [code[i:i + step] for i in range(0, max(1, len(code) - step), step)] or [code]
    try:
        async with running_stack(cfg) as info:
            rd = RunDir.create("bench", base=tmp)
            clock = RunClock(time_scale=info.time_scale)
            eps = [Endpoint(n, u) for n, u in info.endpoints.items()]
            ledger = None
            if not a.no_ledger:  # as in a fleet: token ids to the reuse ledger (contract 5)
                from adev.analysis.ledger_worker import LedgerProcess
                ledger = LedgerProcess(rd)
            async with LLMClient(eps, clock=clock, run_dir=rd, pool_size=4 * a.sessions,
                                 ledger=ledger) as llm:
                await llm.discover()
                await llm.warm(a.sessions)  # as a fleet does: a connection per session
                names = list(info.endpoints)
                tools = schemas(["list_files", "read_file", "write_file", "finish"])
                lags: list[float] = []
                stop = asyncio.Event()

                async def probe() -> None:  # event-loop lag: oversleep of a 1 ms sleep
                    while not stop.is_set():
                        t = time.monotonic()
                        await asyncio.sleep(0.001)
                        lags.append((time.monotonic() - t - 0.001) * 1e3)
                pr = asyncio.create_task(probe())
                u0 = process_usage(info)
                with event_loop.quiet_gc():  # as a fleet runs its sessions
                    t0, c0 = time.monotonic(), time.process_time()
                    await asyncio.gather(*(session(llm, names[i % len(names)], i, a.calls, lead,
                                                   chunks, max_tokens, tools, a.jitter_ms,
                                                   a.spread if scenario == "paced" else 0.0)
                                           for i in range(a.sessions)))
                    wall, cpu = time.monotonic() - t0, time.process_time() - c0
                u1 = process_usage(info)
                stack_cores = sum(u1[k]["cpu_s"] - u0[k]["cpu_s"] for k in u1 if k in u0) / wall
                stop.set()
                await pr
                load = os.getloadavg()
            if ledger is not None:
                ledger.close()
            recs = [r for r in rd.read("calls") if r["status"] == "ok"]
            s = info.time_scale
            disp = [(r["t_sent"] - r["t_scheduled"]) / s * 1e3 for r in recs]
            def gap(client_key: str, server_key: str) -> list[float]:
                return [((r[client_key] / s + clock.t0) - r["server"][server_key]) * 1e3
                        for r in recs if r.get(client_key) and (r.get("server") or {}).get(
                            server_key)]
            fb = gap("t_first_byte", "t_first_byte_sent_mono")
            fc = gap("t_first_content", "t_first_token_sent_mono")
            srv = [(r["server"]["t_first_token_sent_mono"] - r["server"]["t_first_token_mono"])
                   * 1e3 for r in recs if (r.get("server") or {}).get("t_first_token_sent_mono")]
            pts = [r["prompt_tokens"] for r in recs]
            if a.verbose:
                for r in recs:
                    sv = r.get("server") or {}
                    lag = (((r["t_first_content"] / s + clock.t0) - sv["t_first_token_sent_mono"])
                           * 1e3 if r.get("t_first_content") and sv.get("t_first_token_sent_mono")
                           else None)
                    fbl = (((r["t_first_byte"] / s + clock.t0) - sv["t_first_byte_sent_mono"]) * 1e3
                           if r.get("t_first_byte") and sv.get("t_first_byte_sent_mono") else None)
                    print(f"    {r['call_id']:>8} first byte lag "
                          f"{fbl if fbl is None else round(fbl, 3)} ms, t_first_byte "
                          f"{r['t_first_byte'] / s:.4f} prompt {r['prompt_tokens']:>6} cached "
                          f"{r['cached_tokens']} dispatch "
                          f"{(r['t_sent'] - r['t_scheduled']) / s * 1e3:8.3f} ms, first content "
                          f"lag {lag if lag is None else round(lag, 3)} ms, t_first_content "
                          f"{r['t_first_content'] / s:.3f}")
            pin = (f", stack on cores {cfg.cpus}, client on {sorted(os.sched_getaffinity(0))}"
                   if cfg.cpus or a.client_cpus else ", unpinned")
            print(f"bench_client, scenario {scenario}{pin} (max_tokens {max_tokens}"
                  f"{f' x U(1 +- {a.spread:g})' if scenario == 'paced' and a.spread > 0 else ''}, "
                  f"{'no ledger, no token ids' if a.no_ledger else 'with ledger'}, "
                  f"think time U(0, {a.jitter_ms:g}) ms): "
                  f"{a.sessions} concurrent sessions x {a.calls} calls = {len(recs)} "
                  f"calls in {wall:.1f} s wall (time scale {s:g}); prompt tokens p50 "
                  f"{pct(pts, 50):.0f} max {max(pts)}; failed attempts "
                  f"{sum(r['status'] != 'ok' for r in rd.read('calls'))}")
            print(f"  dispatch delay (t_sent - t_scheduled), wall ms: p50 {pct(disp, 50):.3f}  "
                  f"p99 {pct(disp, 99):.3f}  max {max(disp):.3f}   [target p99 < 10 ms]")
            print(f"  first byte - server's send of the first event, wall ms: p50 "
                  f"{pct(fb, 50):.3f}  p99 {pct(fb, 99):.3f}  max {max(fb):.3f}   "
                  f"[target p99 < 2 ms]")
            print(f"  first content - server's send of the first token event, wall ms: p50 "
                  f"{pct(fc, 50):.3f}  p99 {pct(fc, 99):.3f}  max {max(fc):.3f}")
            print(f"  server's own delay, first token decided -> sent, wall ms: p50 "
                  f"{pct(srv, 50):.3f}  p99 {pct(srv, 99):.3f}")
            print(f"  context: stack {stack_cores:.2f} cores, client {cpu / wall:.2f} cores "
                  f"(of {os.cpu_count()}); client process CPU {cpu / len(recs) * 1e3:.2f} ms per call "
                  f"({cpu:.2f} s for {len(recs)} calls); event-loop lag (1 ms sleep oversleep) "
                  f"p50 {pct(lags, 50):.2f} p99 {pct(lags, 99):.2f} ms; host load average "
                  f"{load[0]:.1f} on {os.cpu_count()} CPUs")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=18)
    ap.add_argument("--calls", type=int, default=8)
    ap.add_argument("--grow", type=int, default=2000, help="new tokens per call (approx.)")
    ap.add_argument("--scenario", choices=("paced", "stress", "both"), default="both")
    ap.add_argument("--max-tokens", type=int, default=16, help="stress scenario's reply length")
    ap.add_argument("--paced-max-tokens", type=int, default=850,
                    help="paced scenario's median reply length (tokens decoded per call)")
    ap.add_argument("--spread", type=float, default=0.5,
                    help="paced: each reply's length is U(1 - spread, 1 + spread) x the median")
    ap.add_argument("--time-scale", type=float, default=10.0)
    ap.add_argument("--task", default=None)
    ap.add_argument("--stack", default=None, help="stack file (default: a fresh small stack)")
    ap.add_argument("--verbose", action="store_true", help="print every call's dispatch delay")
    ap.add_argument("--jitter-ms", type=float, default=0.0,
                    help="uniform think time before each call (0 = all sessions in lock step, "
                         "the worst case)")
    ap.add_argument("--no-ledger", action="store_true",
                    help="no reuse ledger (then the client asks for no token ids)")
    ap.add_argument("--stack-cpus", metavar="LIST",
                    help="cores of the stack's processes (stack.cpus), e.g. 0")
    ap.add_argument("--client-cpus", metavar="LIST",
                    help="cores of this process (fleet.client_cpus), e.g. 1")
    ap.add_argument("--client-realtime", action="store_true",
                    help="schedule this process's event loop SCHED_FIFO (fleet.client_realtime; "
                         "root or CAP_SYS_NICE)")
    a = ap.parse_args()
    from adev.config import parse_cpu_list
    a.stack_cpus = parse_cpu_list(a.stack_cpus, "--stack-cpus") if a.stack_cpus else None
    if a.client_cpus:
        os.sched_setaffinity(0, set(parse_cpu_list(a.client_cpus, "--client-cpus")))
    if a.client_realtime:
        event_loop.set_realtime("--client-realtime")
    os.environ.setdefault("PYTHONHASHSEED", "0")
    print(f"({event_loop.describe()})")
    event_loop.run(main_async(a))


if __name__ == "__main__":
    main()
