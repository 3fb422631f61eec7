"""The held model clock with the real Mooncake store: a read slower than its tier profile holds
model time, so the endpoint's stamps and a client on the stack's clock see the modelled TTFT.

Two endpoints share one master: the coder computes and saves a prompt, the reasoner finds it in the
store and reads it from the coder's segment (Mooncake's TCP transport: 20-140 wall us per key on a
2-core host, where the RAM profile allows a few us at S = 10). The prompt is 2,000 blocks so that
even a fast host's read falls well behind the profile (0.46-0.60 model s late on the 2-core host,
0.8-1.2 s with both cores busy); a host fast enough to keep up fails the first assertion, which
says so, rather than passing on noise.
"""
from __future__ import annotations

import dataclasses
import json
import math
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from adev.clock import CLIENT_SLOT, HeldClock
from adev.config import load_model_profile
from tests.emulator.helpers import Emulator, Master, make_stack, prompt_messages, tmpdir, write_profile

pytestmark = pytest.mark.integration

S = 10.0
_CLIENT = httpx.Client(timeout=120)  # one client: a new one per call costs an SSL context


def ttft(e: Emulator, msgs, clock) -> tuple[float, float, dict]:
    """(TTFT on ``clock`` x S, TTFT on the wall x S, the response's adev field)."""
    c = _CLIENT
    model = c.get(e.base_url + "/models").json()["data"][0]["id"]
    body = {"model": model, "messages": msgs, "max_tokens": 2, "stream": True,
            "stream_options": {"include_usage": True}}
    first = wfirst = last = None
    t0, w0 = clock(), time.monotonic()
    with c.stream("POST", e.base_url + "/chat/completions", json=body) as r:
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            d = json.loads(line[6:])
            for ch in d.get("choices", []):
                if first is None and ch["delta"].get("content"):
                    first, wfirst = clock(), time.monotonic()
            if "adev" in d:
                last = d["adev"]
    return (first - t0) * S, (wfirst - w0) * S, last


def test_a_late_store_read_holds_model_time_for_endpoint_and_client():
    w = tmpdir()
    clock = HeldClock.create(w / "clock")
    stack = dataclasses.replace(make_stack(write_profile(w), "store-ram", S, ram_gb=4.0,
                                           endpoints=("coder", "reasoner")), state_dir=str(w),
                                model_clock="held")
    m = Master(lease_ms=int(5000 / S), offload=False, workdir=w).start()
    eps = []
    try:
        eps = [Emulator(stack, n, m, w).start() for n in ("coder", "reasoner")]
        msgs = prompt_messages(32000, "h")
        ttft(eps[0], msgs, clock)                 # computed and saved by the coder
        time.sleep(2.0)                           # the saves end
        held0 = clock.held_s()
        obs, wall, a = ttft(eps[1], msgs, clock)  # the reasoner reads it from the store
        late = a["read_path_host_s"] - a["read_path_s"]
        assert a["tokens"]["store_ram"] > 0
        assert late > 0.15, f"the real read kept up with the profile ({late:.3f} model s late)"
        # model time stood still while it did: at least the lag of this read was held
        assert (clock.held_s() - held0) * S >= late * 0.9
        # the endpoint's own stamps are on the held clock, which also stood still while it
        # prepared the request (parsing, tokenizing): they give the modelled TTFT up to wake-ups
        own = (a["t_first_token_mono"] - a["t_arrival_mono"]) * S
        assert own == pytest.approx(a["ttft_s"], abs=0.05)
        # a client on the held clock sees that plus its HTTP hops; on the wall, the lag too
        assert obs - a["ttft_s"] < 0.5 * late
        assert wall - a["ttft_s"] > 0.9 * late
    finally:
        for e in eps:
            e.stop()
        m.kill()
        clock.close()


def _complete(e: Emulator, msgs) -> dict:
    r = _CLIENT.post(e.base_url + "/chat/completions",
                     json={"model": "", "messages": msgs, "max_tokens": 2})
    assert r.status_code == 200, r.text
    return r.json()["adev"]


def test_two_endpoints_disk_reads_queue_at_one_device():
    """Direct disk, three endpoints on one held clock: the coder computes and saves two prompts
    of one length; with model time held, the two others each send one of them at the same model
    instant and load it from the disk tier. The stack's one disk device serves the two reads one
    after the other: one waits nothing, the other the first's transfer time, blocks x bytes per
    block / the device's rate (the tier's 5.45 GB/s is a lone staged load's, behind the 20 GB/s
    RAM hop: the device reads at 1 / (1 / 5.45 - 1 / 20) = 7.49 GB/s, the direct path's rate)."""
    w = tmpdir()
    clock = HeldClock.create(w / "clock")
    prof = write_profile(w)
    stack = dataclasses.replace(make_stack(prof, "disk-only", S, ram_gb=4.0,
                                           endpoints=("coder", "r1", "r2")), state_dir=str(w),
                                model_clock="held")
    m = Master(lease_ms=int(5000 / S), offload=True, workdir=w, configuration="disk-only").start()
    eps = []
    try:
        eps = [Emulator(stack, n, m, w).start() for n in ("coder", "r1", "r2")]
        a, b = prompt_messages(6000, "a"), prompt_messages(6000, "b")
        _complete(eps[0], a)
        _complete(eps[0], b)                  # both computed and saved by the coder
        time.sleep(2.0)                       # the saves end
        clock.set_hold(CLIENT_SLOT, clock())  # model time stands still while both are sent
        with ThreadPoolExecutor(2) as ex:
            fa, fb = ex.submit(_complete, eps[1], a), ex.submit(_complete, eps[2], b)
            time.sleep(1.5)                   # both received and read (real I/O: milliseconds)
            clock.set_hold(CLIENT_SLOT, math.inf)
            got = [fa.result(), fb.result()]
        blocks = [g["tokens"]["store_disk"] // 16 for g in got]
        assert blocks[0] == blocks[1] > 300
        busy = blocks[0] * load_model_profile(prof).bytes_per_block / (1 / (1 / 5.45e9 - 1 / 20e9))
        waits = sorted(g["disk_wait_s"] for g in got)
        assert waits[0] == pytest.approx(0.0, abs=1e-6)
        assert waits[1] == pytest.approx(busy, rel=1e-3)
        # the wait is part of the modelled load: load = disk lookup latency + wait + transfer
        for g in got:
            assert g["load_s"] == pytest.approx(0.0002 + g["disk_wait_s"] + busy, rel=1e-3)
    finally:
        for e in eps:
            e.stop()
        m.kill()
        clock.close()
