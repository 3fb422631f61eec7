"""Endpoint CPU on the event loop, per operation (prints figures; not a test).

At time scale S every wall millisecond an emulated endpoint's loop is held is S model
milliseconds of lateness for whatever first token was due meanwhile, so the per-request and
per-scrape work it does synchronously is measured here, each against its baseline in the same run:

- ``/metrics`` render: ``Metrics.render`` (compiled layout, ``adev.emulator.metrics.Exposition``)
  vs prometheus_client's ``generate_latest`` on the same registry (byte-identical output);
- block hashes of a prompt: ``adev.emulator.pool.block_hashes`` vs the same chained hash with a
  slice per block (the previous implementation);
- the tokenizer's cache key of an assistant turn whose tool call writes a whole file: orjson vs
  ``json.dumps(sort_keys=True)``;
- the per-request extension object (``adev.emulator.schema.EndpointExtension``, built by
  ``Endpoint.adev_field`` and serialised with orjson) vs a hand-made dict of the same fields
  (how the server built it before the schema), serialised the same way;
- with ``--requests N``: the whole request path, as the endpoint process's CPU (user + system,
  from ``/proc``) per chat completion over N sequential requests (non-streamed and streamed, 2,000
  prompt tokens seen before, 50 output tokens, time scale 1,000, ``gpu-only``). ``--baseline DIR``
  runs a second endpoint from another checkout (e.g. the previous commit, ``git archive``) and
  sends the requests to the two in turn, so before and after see the same host load.

    .venv/bin/python bench/bench_endpoint_cpu.py [--tokens 60000] [--repeat 200]
        [--requests 1000 [--baseline DIR]]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client import generate_latest  # noqa: E402

from adev.config import StackConfig, from_dict  # noqa: E402
from adev.emulator.engine import Request  # noqa: E402
from adev.emulator.http import dumps  # noqa: E402
from adev.emulator.metrics import Metrics, observe_n  # noqa: E402
from adev.emulator.pool import _MASK, NONE_HASH, block_hashes  # noqa: E402
from adev.emulator.tokenizer import _key  # noqa: E402


def per_call_ms(fn, repeat: int) -> float:
    fn()
    t = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t) / repeat * 1e3


def sliced_hashes(tokens: list[int], bs: int = 16) -> list[int]:
    """The baseline: one slice and one tuple per block."""
    out, h = [], NONE_HASH
    for i in range(0, len(tokens) - len(tokens) % bs, bs):
        h = hash((h, tuple(tokens[i:i + bs]))) & _MASK
        out.append(h)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=60000, help="prompt length for the hashes")
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--requests", type=int, default=0, help="also measure the request path")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="another checkout whose endpoint runs alongside (--requests)")
    a = ap.parse_args()
    if a.requests:
        bench_requests(a.requests, a.baseline)
        return
    rng = random.Random(1)

    m = Metrics("Qwen3-Coder-30B-A3B-Instruct", 16, 10407, True, 65536)
    for _ in range(5000):  # a served endpoint's histograms and counters
        m.ttft.observe(rng.random() * 30)
        observe_n(m.itl, rng.random() * 0.1, 50)
        m.prefix_cache_hits.inc(rng.randrange(40000))
    assert m.render() == generate_latest(m.registry) and m._exposition.fast
    lines = m.render().count(b"\n")
    fast = per_call_ms(m.render, a.repeat)
    base = per_call_ms(lambda: generate_latest(m.registry), a.repeat)
    print(f"/metrics render ({lines} lines): compiled {fast:.3f} ms, generate_latest {base:.3f} ms "
          f"per scrape: {base / fast:.1f}x")

    toks = [rng.randrange(151643) for _ in range(a.tokens)]
    assert block_hashes(toks) == sliced_hashes(toks)
    fast = per_call_ms(lambda: block_hashes(toks), max(10, a.repeat // 10))
    base = per_call_ms(lambda: sliced_hashes(toks), max(10, a.repeat // 10))
    print(f"block hashes of a {a.tokens}-token prompt: {fast:.2f} ms, sliced baseline {base:.2f} ms: "
          f"{base / fast:.1f}x")

    body = "".join(chr(97 + rng.randrange(26)) + (" " if rng.random() < 0.2 else "") for _ in range(40000))
    calls = [{"id": "call_1", "type": "function",
              "function": {"name": "write_file", "arguments": json.dumps({"path": "a.py", "content": body})}}]
    fast = per_call_ms(lambda: _key(calls), a.repeat)
    base = per_call_ms(lambda: json.dumps(calls, sort_keys=True), a.repeat)
    print(f"cache key of an assistant turn writing a 40 KB file: orjson {fast * 1e3:.1f} us, "
          f"json.dumps {base * 1e3:.1f} us: {base / fast:.1f}x")


    bench_extension(a.repeat * 20)


def dict_extension(ep, r: Request, t_first: float, t_end: float) -> dict:
    """The baseline: the extension as a hand-made dict (the same fields and values)."""
    bs = ep.profile.block_size
    t_admit = r.t_admit if r.t_admit is not None else r.t_arrival
    t_ready = r.t_ready if r.t_ready is not None else t_admit
    prefill_end = r.t_prefill_done if r.t_prefill_done is not None else t_ready
    return {"request_id": r.rid, "t_arrival_mono": r.arrival_mono, "t_first_token_mono": t_first,
            "t_end_mono": t_end, "t_first_byte_sent_mono": None, "t_first_token_sent_mono": None,
            "queue_s": t_admit - r.t_arrival, "lookup_s": r.lookup_s, "load_s": r.load_s,
            "read_path_s": r.lookup_s + r.load_s, "read_path_host_s": r.read_host_s,
            "transfer_s": r.transfer_s, "prefill_s": max(0.0, prefill_end - t_ready),
            "ttft_s": (r.t_first - r.t_arrival) if r.t_first is not None else None,
            "tokens": r.tokens_split(bs), "store_keys_looked_up": r.store_keys_looked_up,
            "store_hit_blocks": r.store_hit_blocks, "put_blocks": r.put_blocks,
            "put_refused_blocks": r.put_refused_blocks, "store_errors": r.store_errors,
            "preemptions": r.preemptions, "configuration": ep.stack.configuration,
            "time_scale": ep.stack.time_scale, "kv_role": ep.kv_role, "transfer": "none"}


def bench_extension(repeat: int) -> None:
    from adev.emulator.server import Endpoint
    ep = Endpoint(from_dict(StackConfig, {"configuration": "gpu-only", "policy": "length"}, "stack"),
                  "coder", None, None)
    r = Request(rid="chatcmpl-0123456789abcdef", prompt=[1] * 4000, out_ids=[2] * 300, finish_reason="stop",
                t_arrival=1.5, arrival_mono=1234.5, t_admit=1.6, t_ready=1.7, t_prefill_done=2.0,
                t_first=2.1, gpu_hit_tokens=2048, ram_blocks=64, lookup_s=0.0005, load_s=0.01,
                read_host_s=0.02, store_keys_looked_up=100, store_hit_blocks=64, n_gen=300)
    assert dumps(ep.adev_field(r, 1300.0, 1301.0)) == dumps(dict_extension(ep, r, 1300.0, 1301.0))
    fast = base = float("inf")
    for _ in range(7):  # alternated, best of 7: the host is shared, noise only adds
        fast = min(fast, per_call_ms(lambda: dumps(ep.adev_field(r, 1300.0, 1301.0)), repeat))
        base = min(base, per_call_ms(lambda: dumps(dict_extension(ep, r, 1300.0, 1301.0)), repeat))
    print(f"extension object, built and serialised: msgspec Struct {fast * 1e3:.2f} us, dict "
          f"{base * 1e3:.2f} us: {base / fast:.2f}x")


def _cpu_s(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def _start(code: Path, cfg: Path) -> tuple[object, str]:
    import subprocess

    from tests.emulator.helpers import free_port
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "adev.emulator.server", "--config", str(cfg),
                             "--endpoint", "coder", "--port", str(port)], cwd=str(code),
                            env=dict(os.environ, PYTHONPATH=str(code)))
    return proc, f"http://127.0.0.1:{port}"


def bench_requests(n: int, baseline: Path | None) -> None:
    """Endpoint CPU per chat completion, this checkout's endpoint against ``baseline``'s, the
    two driven alternately (one request each in turn) so that both see the same host load."""
    import tempfile

    import httpx

    from tests.emulator.helpers import prompt_messages
    work = Path(tempfile.mkdtemp(prefix="adev-req-"))
    cfg = work / "stack.json"
    cfg.write_text(json.dumps({"configuration": "gpu-only", "policy": "length", "time_scale": 1000.0,
                               "endpoints": [{"name": "coder"}]}))
    codes = {"this checkout": Path(__file__).resolve().parents[1]}
    if baseline is not None:
        codes["baseline " + str(baseline)] = baseline
    eps = {k: _start(c, cfg) for k, c in codes.items()}
    try:
        with httpx.Client(timeout=30) as c:
            for _, url in eps.values():
                for _ in range(100):
                    try:
                        if c.get(url + "/health").status_code == 200:
                            break
                    except httpx.HTTPError:
                        time.sleep(0.1)
            body = {"messages": prompt_messages(2000), "max_tokens": 50}
            for stream in (False, True):
                b = {**body, "stream": stream}
                for _proc, url in eps.values():
                    for _ in range(20):  # warm: template cache, prefix cache
                        c.post(url + "/v1/chat/completions", json=b).raise_for_status()
                cpu0 = {k: _cpu_s(p.pid) for k, (p, _) in eps.items()}
                for _ in range(n):
                    for _proc, url in eps.values():
                        c.post(url + "/v1/chat/completions", json=b).raise_for_status()
                per = {k: (_cpu_s(p.pid) - cpu0[k]) / n * 1e6 for k, (p, _) in eps.items()}
                kind = "streamed" if stream else "not streamed"
                line = ", ".join(f"{k} {v:.0f} us" for k, v in per.items())
                ratio = ""
                if len(per) == 2:
                    this, base = per.values()
                    ratio = f": baseline / this {base / this:.2f}x"
                print(f"request path ({kind}, {n} requests each, alternated): endpoint CPU per "
                      f"request {line}{ratio}")
    finally:
        for proc, _ in eps.values():
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
