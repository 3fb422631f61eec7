"""Emulator benchmark (prints figures; not a test).

1. Idle-engine TTFT vs the model: fresh prompts on an idle endpoint at S=1 and S=10; observed
   TTFT (client: send -> first content chunk, x S) against
   modelled = lookup latency + uncached tokens / prefill rate + decode step(1, prompt).
2. Load: a real Mooncake master + two endpoints (coder, reasoner) at S=10, default profile
   (166,512-token GPU pool, 65,536 context, store-ram+disk, 32 GB RAM tier at payload scale 64),
   18 concurrent streaming sessions whose contexts grow ~2.2K tokens per turn up to 65,536 tokens;
   observed vs the endpoint's own modelled TTFT (``adev.ttft_s``): error p50/p99.
3. CPU used by the stack processes (master + 2 endpoints, psutil) at width 12.

    .venv/bin/python bench/bench_emulator.py [--seconds 60] [--quick]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import sys
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from adev.client.scrape import total  # noqa: E402
from adev.config import StackConfig, load_model_profile  # noqa: E402
from tests.emulator.helpers import Emulator, Master, make_stack, prompt_messages, tmpdir, write_profile  # noqa: E402

MODEL = "Qwen3-Coder-30B-A3B-Instruct-FP8"


async def stream_once(client: httpx.AsyncClient, base: str, messages, max_tokens: int, S: float):
    body = {"model": MODEL, "messages": messages, "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True}}
    t0 = time.monotonic()
    t_first = None
    last = None
    content = []
    async with client.stream("POST", base + "/chat/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            d = json.loads(line[6:])
            for ch in d.get("choices", []):
                delta = ch.get("delta", {})
                if t_first is None and (delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls")):
                    t_first = time.monotonic()
                content.append(delta.get("content") or "")
            if "adev" in d:
                last = d
    return {"ttft_obs": (t_first - t0) * S if t_first else None, "adev": last["adev"], "usage": last["usage"],
            "text": "".join(content), "t0": t0}


async def idle_ttft(S: float, sizes: list[int], w: Path) -> list[tuple[int, float, float, float]]:
    prof = load_model_profile("qwen3-coder-30b-a3b")
    m = Master(lease_ms=int(5000 / S), offload=False, workdir=w).start()
    e = Emulator(make_stack(write_profile(w), "store-ram", S, ram_gb=4.0), "coder", m, w).start()
    out = []
    try:
        async with httpx.AsyncClient(timeout=600) as c:
            await stream_once(c, e.base_url, prompt_messages(50, "z"), 2, S)  # warm-up
            for i, n in enumerate(sizes):
                msgs = prompt_messages(n, "abcdefghij"[i % 10])
                r = await stream_once(c, e.base_url, msgs, 2, S)
                p = r["usage"]["prompt_tokens"]
                uncached = r["adev"]["tokens"]["computed"]
                modelled = (0.0005 + uncached / prof.prefill_tokens_per_s + prof.decode_step_base_s
                            + prof.decode_step_per_seq_s + prof.decode_step_per_ktoken_s * p / 1000)
                out.append((p, r["ttft_obs"], r["adev"]["ttft_s"], modelled))
                await asyncio.sleep(0.3)
    finally:
        e.stop()
        m.kill()
    return out


MASTER_COUNTERS = ("master_attempted_evictions_total", "master_successful_evictions_total",
                   "master_evicted_key_count", "master_put_start_alloc_failures_total",
                   "master_batch_put_start_failed_items_total", "mem_cache_hit_nums_", "file_cache_hit_nums_")


def master_counters(m: Master) -> dict[str, float | None]:
    samples = m.metrics()   # the project's one scraper (adev.client.scrape)
    return {n: total(samples, n) for n in MASTER_COUNTERS}


class Session:
    def __init__(self, sid: int, rng: random.Random) -> None:
        self.sid = sid
        self.rng = rng
        self.reset()

    def reset(self) -> None:
        self.msgs = [{"role": "system", "content": f"session {self.sid} " + prompt_messages(
            self.rng.randint(1500, 6000), chr(97 + self.sid % 26))[0]["content"]}]
        self.turn = 0

    def grow(self, reply: str) -> None:
        self.msgs.append({"role": "assistant", "content": reply})
        n = max(200, int(self.rng.gauss(2200, 600)))
        words = " ".join(f"{chr(97 + self.rng.randrange(26))}{chr(97 + self.rng.randrange(26))}"
                         f"{chr(97 + self.rng.randrange(26))}{chr(97 + self.rng.randrange(26))}" for _ in range(n))
        self.msgs.append({"role": "tool", "content": words})
        self.turn += 1


async def load_run(S: float, width: int, seconds: float, w: Path, endpoints: list[Emulator], master: Master,
                   seed: int = 1):
    rng = random.Random(seed)
    results = []
    procs = [psutil.Process(master.proc.pid)] + [psutil.Process(e.proc.pid) for e in endpoints]
    stop_at = time.monotonic() + seconds
    cpu0 = [p.cpu_times() for p in procs]
    t_start = time.monotonic()

    async def session(i: int) -> None:
        s = Session(i, random.Random(seed * 1000 + i))
        ep = endpoints[i % len(endpoints)]
        async with httpx.AsyncClient(timeout=600) as c:
            await asyncio.sleep(rng.random() * 2.0)
            while time.monotonic() < stop_at:
                max_tokens = s.rng.randint(50, 400)
                r = await stream_once(c, ep.base_url, s.msgs, max_tokens, S)
                results.append(r)
                if r["usage"]["prompt_tokens"] + 2 * 2200 + 1000 > 65536:
                    s.reset()
                else:
                    s.grow(r["text"])
                await asyncio.sleep(s.rng.expovariate(1 / 5.0) / S)  # think / tool time, model seconds

    await asyncio.gather(*(session(i) for i in range(width)))
    wall = time.monotonic() - t_start
    cpu1 = [p.cpu_times() for p in procs]
    cpu = sum((b.user + b.system) - (a.user + a.system) for a, b in zip(cpu0, cpu1)) / wall
    per = [((b.user + b.system) - (a.user + a.system)) / wall for a, b in zip(cpu0, cpu1)]
    return results, cpu, per, wall


def pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = min(len(xs) - 1, max(0, int(round(q / 100 * (len(xs) - 1)))))
    return xs[k]


async def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60.0, help="wall seconds per load run")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--skip-idle", action="store_true")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--configuration", default="store-ram+disk")
    ap.add_argument("--payload-scale", type=int, default=StackConfig().payload_scale)
    ap.add_argument("--placement", default="local", choices=("local", "random"))
    a = ap.parse_args()
    w = tmpdir()
    try:
        print("== idle-engine TTFT: observed (client) and endpoint-reported vs modelled, model seconds")
        for S, sizes in () if a.skip_idle else ((1.0, [1000, 4000, 12000] if a.quick else [1000, 4000, 16000, 32000]),
                         (10.0, [1000, 8000, 32000, 64000])):
            rows = await idle_ttft(S, sizes, w)
            print(f"   (host load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
            for p, obs, rep, mod in rows:
                print(f"S={S:>4}: prompt {p:>6} tok  modelled {mod:8.4f}s  reported {rep:8.4f}s "
                      f"({(rep - mod) / mod * 100:+6.2f}%)  observed {obs:8.4f}s ({(obs - mod) / mod * 100:+6.2f}%)")

        S = 10.0
        m = Master(lease_ms=int(5000 / S), offload=True, workdir=w).start()
        st = make_stack(write_profile(w), a.configuration, S, ram_gb=32.0, endpoints=("coder", "reasoner"),
                        payload_scale=a.payload_scale, placement=a.placement)
        eps = [Emulator(st, n, m, w).start() for n in ("coder", "reasoner")]
        try:
            for width in ((18, 12) if not a.quick else (12,)):
                res, cpu, per, wall = await load_run(S, width, a.seconds, w, eps, m)
                ok = [r for r in res if r["ttft_obs"] and r["adev"]["ttft_s"]]
                errs = [(r["ttft_obs"] - r["adev"]["ttft_s"]) / r["adev"]["ttft_s"] for r in ok]
                aerr = [abs(x) for x in errs]
                wall_ms = [(r["ttft_obs"] - r["adev"]["ttft_s"]) / S * 1000 for r in ok]
                serr = [((r["adev"]["t_first_token_mono"] - r["adev"]["t_arrival_mono"]) * S - r["adev"]["ttft_s"])
                        / r["adev"]["ttft_s"] for r in ok]
                big = [x for r, x in zip(ok, errs) if r["adev"]["ttft_s"] >= 1.0]
                prompts = [r["usage"]["prompt_tokens"] for r in res]
                cached = [((r["usage"].get("prompt_tokens_details") or {}).get("cached_tokens") or 0) for r in res]
                tiers = {k: sum(r["adev"]["tokens"][k] for r in res) for k in ("gpu", "store_ram", "store_disk", "computed")}
                print(f"== S=10, 2 endpoints, width {width}, {wall:.0f} s wall ({wall * S:.0f} model s): "
                      f"{len(res)} requests, prompt tokens p50 {pct(prompts, 50)} max {max(prompts)}")
                print(f"   TTFT error observed vs modelled: p50 {pct(errs, 50) * 100:+.2f}%  p99 {pct(errs, 99) * 100:+.2f}%  "
                      f"|err| p50 {pct(aerr, 50) * 100:.2f}%  p99 {pct(aerr, 99) * 100:.2f}%  max {max(aerr) * 100:.2f}%")
                print(f"   same, requests with modelled TTFT >= 1 s ({len(big)}): p50 {pct(big, 50) * 100:+.2f}%  "
                      f"p99 {pct(big, 99) * 100:+.2f}%")
                print(f"   observed - modelled in wall ms (client + HTTP + CPU starvation): p50 {pct(wall_ms, 50):.1f}  "
                      f"p99 {pct(wall_ms, 99):.1f};  endpoint's own stamps vs modelled: p50 {pct(serr, 50) * 100:+.2f}%  "
                      f"p99 {pct(serr, 99) * 100:+.2f}%")
                print(f"   modelled TTFT p50 {pct([r['adev']['ttft_s'] for r in res], 50):.3f}s  "
                      f"p99 {pct([r['adev']['ttft_s'] for r in res], 99):.3f}s; preemptions "
                      f"{sum(r['adev']['preemptions'] for r in res)}; cached share "
                      f"{sum(cached) / max(1, sum(prompts)):.3f}; tokens by tier {tiers}")
                if a.verbose:
                    for r in sorted(res, key=lambda r: -r["adev"]["ttft_s"])[:6]:
                        ad = r["adev"]
                        print("   worst:", {k: (round(x, 3) if isinstance(x, float) else x) for k, x in ad.items()
                                            if k not in ("request_id", "t_arrival_mono", "t_first_token_mono", "t_end_mono")},
                              "obs", round(r["ttft_obs"], 3), "prompt", r["usage"]["prompt_tokens"])
                print(f"   CPU of the stack processes: {cpu:.3f} cores (master {per[0]:.3f}, "
                      f"endpoints {', '.join(f'{x:.3f}' for x in per[1:])}); host load average "
                      f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
                served = sum(tiers.values())
                print(f"   stack CPU per unit of work: {cpu * wall / max(1, len(res)) * 1000:.1f} ms per request, "
                      f"{cpu * wall / max(1, served) * 1e6:.1f} s per 1M prompt tokens "
                      f"({cpu * wall / max(1, tiers['store_ram'] + tiers['store_disk']) * 1e6:.1f} s per 1M store-served)")
                print("   master counters (cumulative):", master_counters(m))
        except BaseException:
            for f in sorted(w.glob("emulator-*.log")):
                lines = [ln for ln in f.read_text(errors="replace").splitlines() if not ln[:1] in "IW"]
                print(f"--- {f.name} (tail)\n" + "\n".join(lines[-40:]))
            raise
        finally:
            for e in eps:
                e.stop()
            m.kill()
    finally:
        shutil.rmtree(w, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
