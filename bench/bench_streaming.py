"""CPU cost and client inter-token times of the engine's stream interval (prints figures; not a test).

One endpoint in this process (gpu-only, time scale S) and, in a child process, ``--width``
concurrent streaming clients (httpx), each sending ``--requests`` requests of ``--tokens`` output
tokens over its own prompt, once per stream interval (``EngineConfig.stream_interval``): 0 (a macro step's tokens in one
event: the baseline), 1 (one event per decode step, the default, as vLLM) and 4. Per interval:

- CPU: the endpoint's (this process's) CPU time per request and per 1K tokens, and its ratio to
  interval 0 measured in the same run; the client process's CPU per request;
- events per request (content chunks) and the client's inter-event times: gaps between
  consecutive content chunks, wall x S (model seconds), mean, p50 and p99, against the engine's
  own modelled inter-token latency (``vllm:inter_token_latency_seconds``, sum / count); with one
  event per token the two means agree when this host keeps pace.

    .venv/bin/python bench/bench_streaming.py [--width 12] [--requests 2] [--tokens 850] [--time-scale 10]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402
from aiohttp import web  # noqa: E402

from adev import event_loop  # noqa: E402
from adev.client.scrape import parse_metrics, total  # noqa: E402
from adev.emulator.server import Endpoint  # noqa: E402
from tests.emulator.helpers import free_port, make_stack, prompt_messages, tmpdir, write_profile  # noqa: E402


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(q / 100 * (len(xs) - 1)))))] if xs else float("nan")


async def one(http: httpx.AsyncClient, url: str, model: str, msgs: list[dict], n: int,
              gaps: list[float], S: float) -> int:
    body = {"model": model, "messages": msgs, "max_tokens": n, "stream": True}
    events, last = 0, None
    async with http.stream("POST", url + "/v1/chat/completions", json=body) as resp:
        async for line in resp.aiter_lines():
            if not line.startswith("data: {"):
                continue
            ch = json.loads(line[6:]).get("choices") or []
            if ch and (ch[0].get("delta") or {}).get("content"):
                now = time.monotonic()
                if last is not None:
                    gaps.append((now - last) * S)
                last = now
                events += 1
    return events


async def clients(a) -> None:
    """The client process: ``--width`` streams of ``--requests`` requests; prints its figures."""
    gaps: list[float] = []
    events: list[int] = []
    async with httpx.AsyncClient(timeout=600) as http:
        model = (await http.get(a.client + "/v1/models")).json()["data"][0]["id"]

        async def client(i: int) -> None:
            for j in range(a.requests):
                msgs = prompt_messages(2000, chr(97 + (i * a.requests + j) % 26) + str(i))
                events.append(await one(http, a.client, model, msgs, a.tokens, gaps, a.time_scale))

        c0 = time.process_time()
        await asyncio.gather(*(client(i) for i in range(a.width)))
        cpu = time.process_time() - c0
    print(json.dumps({"gaps": gaps, "events": events, "cpu": cpu}))


async def run(interval: int, a, base: Path) -> dict:
    st = make_stack(write_profile(base), "gpu-only", a.time_scale)
    ep = Endpoint(st, "coder", None, None)
    ep.engine.cfg.stream_interval = interval
    await ep.start()
    runner = web.AppRunner(ep.app(), access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    url = f"http://127.0.0.1:{port}"
    try:
        c0, w0 = time.process_time(), time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--client", url, "--width", str(a.width), "--requests", str(a.requests),
            "--tokens", str(a.tokens), "--time-scale", str(a.time_scale), stdout=asyncio.subprocess.PIPE)
        out, _ = await proc.communicate()
        cpu, wall = time.process_time() - c0, time.monotonic() - w0
        got = json.loads(out.decode().strip().splitlines()[-1])
        async with httpx.AsyncClient() as http:
            samples = parse_metrics((await http.get(url + "/metrics")).text)
    finally:
        await runner.cleanup()
        await ep.engine.stop()
    n_req = a.width * a.requests
    gaps = got["gaps"]
    itl_sum = total(samples, "vllm:inter_token_latency_seconds_sum") or 0.0
    itl_n = total(samples, "vllm:inter_token_latency_seconds_count") or 1.0
    return {"cpu": cpu, "client_cpu": got["cpu"], "wall": wall, "n": n_req, "events": sum(got["events"]) / n_req,
            "gaps": gaps, "mean_gap": sum(gaps) / max(1, len(gaps)), "model_itl": itl_sum / itl_n}


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=12, help="concurrent streaming clients")
    ap.add_argument("--requests", type=int, default=2, help="requests per client")
    ap.add_argument("--tokens", type=int, default=850, help="output tokens per request")
    ap.add_argument("--time-scale", type=float, default=10.0)
    ap.add_argument("--client", help=argparse.SUPPRESS)  # the client process: the endpoint's URL
    a = ap.parse_args()
    if a.client:
        await clients(a)
        return 0
    print(f"({event_loop.describe()}; width {a.width}, {a.requests} requests each, {a.tokens} tokens, "
          f"S={a.time_scale:g})")
    base = tmpdir()
    try:
        res = {iv: await run(iv, a, base) for iv in (0, 1, 4)}
    finally:
        shutil.rmtree(base, ignore_errors=True)
    ref = res[0]["cpu"] / res[0]["n"]
    for iv, r in res.items():
        per = r["cpu"] / r["n"]
        print(f"stream_interval {iv}: endpoint CPU {per * 1e3:.1f} ms per request, "
              f"{r['cpu'] / (r['n'] * a.tokens) * 1e6:.1f} ms per 1K tokens ({per / ref:.2f}x interval 0), "
              f"{r['cpu'] / r['wall']:.2f} cores over {r['wall']:.1f} s wall; client CPU "
              f"{r['client_cpu'] / r['n'] * 1e3:.1f} ms per request; {r['events']:.0f} content events "
              f"per request; client inter-event time mean {r['mean_gap'] * 1e3:.1f} p50 "
              f"{pct(r['gaps'], 50) * 1e3:.1f} p99 {pct(r['gaps'], 99) * 1e3:.1f} model ms "
              f"(the engine's modelled inter-token latency: mean {r['model_itl'] * 1e3:.1f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(event_loop.run(main()))
