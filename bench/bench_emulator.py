"""Emulator benchmark (prints figures; not a test).

The stack is started with :func:`adev.stack.running_stack` and driven through THE LLM client
(:class:`adev.client.llm.LLMClient`), as a fleet drives it. Observed TTFT = the client's
``t_first_content - t_sent`` (model seconds on the run clock: wall x S).

1. Idle-engine TTFT vs the model: fresh prompts on an idle endpoint at S=1 and S=10 (store-ram);
   observed and endpoint-reported TTFT against
   modelled = lookup latency + uncached tokens / prefill rate + decode step(1, prompt).
2. Load at S=10 (``--load-time-scale``): a real Mooncake master + two endpoints (coder,
   reasoner), default profile (166,512-token GPU pool, 65,536 context, store-ram+disk, 32 GB RAM
   tier), 18 and 12 concurrent streaming sessions whose contexts grow ~2.2K tokens per turn up to 65,536 tokens,
   replies of U(0.5, 1.5) x 850 tokens (the default fleet's median reply; ``--reply-tokens``,
   ``--spread``), think time Exp(5 model s); observed vs the endpoint's own modelled
   TTFT (``adev.ttft_s``): error p50/p99 (target p99 < 5%), split into where the wall time went.
3. CPU used by the stack processes (``adev.stack.process_usage``) at each width (target < 1 core
   at width 12), per request and per 1M prompt tokens; the master's counters.

    .venv/bin/python bench/bench_emulator.py [--seconds 60] [--quick]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from adev import event_loop  # noqa: E402
from adev.client.llm import Endpoint, LLMClient  # noqa: E402
from adev.client.scrape import scrape_sync, total  # noqa: E402
from adev.clock import RunClock  # noqa: E402
from adev.config import StackConfig, load_model_profile  # noqa: E402
from adev.stack import process_usage, running_stack, small_config  # noqa: E402
from tests.emulator.helpers import prompt_messages  # noqa: E402  (prompts of n tokens)


def pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = min(len(xs) - 1, max(0, int(round(q / 100 * (len(xs) - 1)))))
    return xs[k]


def observed(rec: dict) -> float | None:
    """Client-observed TTFT in model seconds (send -> first content)."""
    if rec.get("t_first_content") is None or rec.get("t_sent") is None:
        return None
    return rec["t_first_content"] - rec["t_sent"]


async def idle_ttft(S: float, sizes: list[int], base: Path) -> list[tuple[int, float, float, float]]:
    prof = load_model_profile("qwen3-coder-30b-a3b")
    cfg = small_config(base / f"idle-{S:g}", time_scale=S, configuration="store-ram",
                       endpoints=["coder"], store={"ram_gb": 4.0})
    out = []
    async with running_stack(cfg) as info:
        eps = [Endpoint(n, u) for n, u in info.endpoints.items()]
        async with LLMClient(eps, clock=RunClock(time_scale=S)) as llm:
            await llm.discover()
            await llm.chat("coder", prompt_messages(50, "z"), max_tokens=2)  # warm-up
            for i, n in enumerate(sizes):
                res = await llm.chat("coder", prompt_messages(n, "abcdefghij"[i % 10]), max_tokens=2)
                rec = res.record
                p = rec.prompt_tokens
                srv = rec.server
                uncached = srv["tokens"]["computed"]
                modelled = (0.0005 + prof.prefill_time.chunk_s(uncached, p - uncached) + prof.decode_step_base_s
                            + prof.decode_step_per_seq_s + prof.decode_step_per_ktoken_s * p / 1000)
                out.append((p, observed(rec.__dict__), srv["ttft_s"], modelled))
                await asyncio.sleep(0.3)
    return out


class Session:
    def __init__(self, sid: int, rng: random.Random) -> None:
        self.sid = sid
        self.rng = rng
        self.reset()

    def reset(self) -> None:
        self.msgs = [{"role": "system", "content": f"session {self.sid} " + prompt_messages(
            self.rng.randint(1500, 6000), chr(97 + self.sid % 26))[0]["content"]}]

    def grow(self, reply: str) -> None:
        self.msgs.append({"role": "assistant", "content": reply})
        n = max(200, int(self.rng.gauss(2200, 600)))
        r = self.rng
        words = " ".join("".join(chr(97 + r.randrange(26)) for _ in range(4)) for _ in range(n))
        self.msgs.append({"role": "user", "content": words})


async def load_run(llm: LLMClient, info, S: float, width: int, seconds: float, reply: int,
                   spread: float, seed: int = 1):
    rng = random.Random(seed)
    names = list(info.endpoints)
    recs: list[dict] = []
    stop_at = time.monotonic() + seconds
    u0 = process_usage(info)
    t_start = time.monotonic()

    async def session(i: int) -> None:
        s = Session(i, random.Random(seed * 1000 + i))
        await asyncio.sleep(rng.random() * 2.0)
        while time.monotonic() < stop_at:
            n_out = max(1, round(reply * s.rng.uniform(1 - spread, 1 + spread)))
            res = await llm.chat(names[i % len(names)], s.msgs, max_tokens=n_out,
                                 session_id=f"s{i}", call_id=f"s{i}/{len(recs)}")
            recs.append(dict(res.record.__dict__))
            if res.prompt_tokens + 2 * 2200 + 1000 > 65536:
                s.reset()
            else:
                s.grow(res.content)
            await asyncio.sleep(s.rng.expovariate(1 / 5.0) / S)  # think / tool time, model seconds

    await asyncio.gather(*(session(i) for i in range(width)))
    wall = time.monotonic() - t_start
    u1 = process_usage(info)
    per = {k: (u1[k]["cpu_s"] - u0[k]["cpu_s"]) / wall for k in u1 if k in u0}
    return recs, sum(per.values()), per, wall


MASTER_COUNTERS = ("master_attempted_evictions_total", "master_successful_evictions_total",
                   "master_evicted_key_count", "master_put_start_alloc_failures_total",
                   "master_batch_put_start_failed_items_total", "mem_cache_hit_nums_", "file_cache_hit_nums_")


async def load(a, base: Path) -> None:
    S = a.load_time_scale
    cfg = small_config(base / "load", time_scale=S, configuration=a.configuration,
                       payload_scale=a.payload_scale, endpoints=["coder", "reasoner"],
                       store={"ram_gb": 32.0, "lease_ttl_s": 5.0, "placement": a.placement})
    async with running_stack(cfg) as info:
        eps = [Endpoint(n, u) for n, u in info.endpoints.items()]
        async with LLMClient(eps, clock=RunClock(time_scale=S), pool_size=64) as llm:
            await llm.discover()
            await llm.warm(18)
            for width in ((18, 12) if not a.quick else (12,)):
                recs, cpu, per, wall = await load_run(llm, info, S, width, a.seconds,
                                                      a.reply_tokens, a.spread)
                report(recs, cpu, per, wall, S, width, a.verbose,
                       f"{a.reply_tokens} x U(1 +- {a.spread:g}) tokens")
        samples = scrape_sync(info.master_metrics_url)
        print("   master counters (cumulative):", {n: total(samples, n) for n in MASTER_COUNTERS})


def report(res: list[dict], cpu: float, per: dict, wall: float, S: float, width: int,
           verbose: bool, reply_desc: str) -> None:
    ok = [r for r in res if observed(r) and r["server"] and r["server"]["ttft_s"]]
    from adev.analysis.figures import ttft_model_error  # the report's figure, defined once
    errs = list(ttft_model_error([observed(r) for r in ok], [r["server"]["ttft_s"] for r in ok]))
    aerr = [abs(x) for x in errs]
    wall_ms = [(observed(r) - r["server"]["ttft_s"]) / S * 1000 for r in ok]
    srv_err = [((r["server"]["t_first_token_mono"] - r["server"]["t_arrival_mono"]) * S
                - r["server"]["ttft_s"]) / r["server"]["ttft_s"] for r in ok]
    big = [x for r, x in zip(ok, errs, strict=True) if r["server"]["ttft_s"] >= 1.0]
    prompts = [r["prompt_tokens"] for r in res]
    cached = [r["cached_tokens"] or 0 for r in res]
    tiers = {k: sum(r["server"]["tokens"][k] for r in res) for k in ("gpu", "store_ram", "store_disk", "computed")}
    print(f"== S={S:g}, 2 endpoints, width {width}, replies {reply_desc}, {wall:.0f} s wall "
          f"({wall * S:.0f} model s): "
          f"{len(res)} requests, prompt tokens p50 {pct(prompts, 50)} max {max(prompts)}")
    print(f"   TTFT error observed vs modelled: p50 {pct(errs, 50) * 100:+.2f}%  p99 {pct(errs, 99) * 100:+.2f}%  "
          f"|err| p50 {pct(aerr, 50) * 100:.2f}%  p99 {pct(aerr, 99) * 100:.2f}%  max {max(aerr) * 100:.2f}%   "
          f"[target p99 < 5%]")
    print(f"   same, requests with modelled TTFT >= 1 s ({len(big)}): p50 {pct(big, 50) * 100:+.2f}%  "
          f"p99 {pct(big, 99) * 100:+.2f}%")
    print(f"   observed - modelled in wall ms: p50 {pct(wall_ms, 50):.2f}  p99 {pct(wall_ms, 99):.2f};  "
          f"endpoint's own stamps vs modelled: p50 {pct(srv_err, 50) * 100:+.2f}%  p99 {pct(srv_err, 99) * 100:+.2f}%")
    print_late(ok, errs, S)
    print(f"   modelled TTFT p50 {pct([r['server']['ttft_s'] for r in ok], 50):.3f}s  "
          f"p99 {pct([r['server']['ttft_s'] for r in ok], 99):.3f}s; preemptions "
          f"{sum(r['server']['preemptions'] for r in res)}; cached share "
          f"{sum(cached) / max(1, sum(prompts)):.3f}; tokens by tier {tiers}")
    if verbose:
        for r in sorted(ok, key=lambda r: -abs(observed(r) - r["server"]["ttft_s"]))[:6]:
            sv = r["server"]
            print("   worst:", {k: (round(x, 4) if isinstance(x, float) else x) for k, x in sv.items()
                                if not k.endswith("_mono") and k != "request_id"},
                  "observed", round(observed(r), 4), "prompt", r["prompt_tokens"])
    print(f"   CPU of the stack processes: {cpu:.3f} cores ({', '.join(f'{k} {v:.3f}' for k, v in per.items())}); "
          f"host load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores   [target < 1 core at width 12]")
    served = sum(tiers.values())
    print(f"   stack CPU per unit of work: {cpu * wall / max(1, len(res)) * 1000:.1f} ms per request, "
          f"{cpu * wall / max(1, served) * 1e6:.1f} s per 1M prompt tokens "
          f"({cpu * wall / max(1, tiers['store_ram'] + tiers['store_disk']) * 1e6:.1f} s per 1M store-served)")


def print_late(ok: list[dict], errs: list[float], S: float) -> None:
    """Where the requests over the 5% target lost their time, in wall ms: at the endpoint (its
    first token after its modelled time: a real store read slower than the tier profile, or the
    endpoint's loop busy or without a CPU) or on the hops (client send -> endpoint arrival, first
    token sent -> client; extension stamps). Split by whether the request read store hits."""
    late = [(r, e) for r, e in zip(ok, errs, strict=True) if e > 0.05]
    for label, group in (("read store hits", [(r, e) for r, e in late if r["server"]["store_hit_blocks"]]),
                         ("no store hits", [(r, e) for r, e in late if not r["server"]["store_hit_blocks"]])):
        if not group:
            continue
        srv = [((r["server"]["t_first_token_mono"] - r["server"]["t_arrival_mono"]) * S
                - r["server"]["ttft_s"]) / S * 1e3 for r, _ in group]
        hops = [(observed(r) - (r["server"]["t_first_token_mono"] - r["server"]["t_arrival_mono"]) * S)
                / S * 1e3 for r, _ in group]
        mod = [r["server"]["ttft_s"] / S * 1e3 for r, _ in group]
        print(f"   over 5%, {label}: {len(group)} of {len(ok)} requests; endpoint late p50 "
              f"{pct(srv, 50):.2f} p99 {pct(srv, 99):.2f} wall ms, hops p50 {pct(hops, 50):.2f} "
              f"p99 {pct(hops, 99):.2f} wall ms; their modelled TTFT p50 {pct(mod, 50):.1f} wall ms")


def print_growth(S: float, rows: list[tuple[int, float, float, float]]) -> None:
    """How TTFT grows with uncached tokens: least-squares lines through (prompt tokens, observed)
    and (prompt tokens, modelled). The slope ratio is the prefill rate's error as a client sees
    it; the intercepts' difference is the fixed per-request cost outside the model (HTTP hops,
    process wake-ups, the real store lookup), in model ms and in wall ms."""
    import numpy as np
    x = np.array([r[0] for r in rows], dtype=float)
    if len(x) < 2:
        return
    so, io = np.polyfit(x, [r[1] for r in rows], 1)
    sm, im = np.polyfit(x, [r[3] for r in rows], 1)
    print(f"S={S:>4}: TTFT growth with uncached tokens, observed vs modelled slope "
          f"{(so / sm - 1) * 100:+.2f}% (implied prefill rate {1 / so:,.0f} vs modelled "
          f"{1 / sm:,.0f} tokens/s)   [target within 5%]; fixed cost outside the model "
          f"{(io - im) * 1e3:+.1f} model ms = {(io - im) / S * 1e3:+.2f} wall ms per request")


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="wall seconds per load run")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip-idle", action="store_true")
    ap.add_argument("--skip-load", action="store_true")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--reply-tokens", type=int, default=850,
                    help="load: median reply length (default: the default fleet's median reply)")
    ap.add_argument("--spread", type=float, default=0.5,
                    help="load: reply lengths are U(1 - spread, 1 + spread) x the median")
    ap.add_argument("--configuration", default="store-ram+disk")
    ap.add_argument("--payload-scale", type=int, default=StackConfig().payload_scale)
    ap.add_argument("--placement", default="local", choices=("local", "random"))
    ap.add_argument("--load-time-scale", type=float, default=10.0,
                    help="time scale S of the load runs (bench/bench_store_io.py prints the largest S "
                         "at which this host's real store reads keep pace with the tier profiles)")
    ap.add_argument("--client-realtime", action="store_true",
                    help="schedule this process's event loop SCHED_FIFO (fleet.client_realtime; "
                         "root or CAP_SYS_NICE)")
    a = ap.parse_args()
    if a.client_realtime:
        event_loop.set_realtime("--client-realtime")
    print(f"({event_loop.describe()})")
    os.environ.setdefault("PYTHONHASHSEED", "0")
    base = Path(tempfile.mkdtemp(prefix="adev-bench-emu-"))
    try:
        if not a.skip_idle:
            print("== idle-engine TTFT: observed (client) and endpoint-reported vs modelled, model seconds")
            for S, sizes in ((1.0, [1000, 4000, 12000] if a.quick else [1000, 4000, 16000, 32000]),
                             (10.0, [1000, 8000, 32000, 64000])):
                rows = await idle_ttft(S, sizes, base)
                print(f"   (host load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
                for p, obs, rep, mod in rows:
                    print(f"S={S:>4}: prompt {p:>6} tok  modelled {mod:8.4f}s  reported {rep:8.4f}s "
                          f"({(rep - mod) / mod * 100:+6.2f}%)  "
                          f"observed {obs:8.4f}s ({(obs - mod) / mod * 100:+6.2f}%)")
                print_growth(S, rows)
        if not a.skip_load:
            await load(a, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(event_loop.run(main()))
