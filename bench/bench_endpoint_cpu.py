"""Endpoint CPU on the event loop, per operation (prints figures; not a test).

At time scale S every wall millisecond an emulated endpoint's loop is held is S model
milliseconds of lateness for whatever first token was due meanwhile, so the per-request and
per-scrape work it does synchronously is measured here, each against its baseline in the same run:

- ``/metrics`` render: ``Metrics.render`` (compiled layout, ``adev.emulator.metrics.Exposition``)
  vs prometheus_client's ``generate_latest`` on the same registry (byte-identical output);
- block hashes of a prompt: ``adev.emulator.pool.block_hashes`` vs the same chained hash with a
  slice per block (the previous implementation);
- the tokenizer's cache key of an assistant turn whose tool call writes a whole file: orjson vs
  ``json.dumps(sort_keys=True)``.

    .venv/bin/python bench/bench_endpoint_cpu.py [--tokens 60000] [--repeat 200]
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client import generate_latest  # noqa: E402

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
    a = ap.parse_args()
    rng = random.Random(1)

    m = Metrics("Qwen3-Coder-30B-A3B-Instruct-FP8", 16, 10407, True, 65536)
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


if __name__ == "__main__":
    main()
