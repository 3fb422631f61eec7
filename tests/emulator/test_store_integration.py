"""Real Mooncake master + emulator processes: issue 2's "Must show" for the store tier."""
from __future__ import annotations

import shutil
import time

import httpx
import pytest

from adev.client.scrape import total
from tests.emulator.helpers import Emulator, Master, make_stack, prompt_messages, tmpdir, write_profile

pytestmark = pytest.mark.integration
MODEL = "Qwen3-Coder-30B-A3B-Instruct-FP8"


def v(samples, name, **lab):
    x = total(samples, name, **lab)
    return 0.0 if x is None else x


@pytest.fixture
def workdir():
    w = tmpdir()
    procs = []
    yield w, procs
    for p in procs:
        (p.stop if isinstance(p, Emulator) else p.kill)()
    shutil.rmtree(w, ignore_errors=True)


def chat(e, msgs, max_tokens=4, **kw):
    r = httpx.post(e.base_url + "/chat/completions", timeout=120,
                   json={"model": MODEL, "messages": msgs, "max_tokens": max_tokens, **kw})
    assert r.status_code == 200, r.text
    return r.json()


def test_gpu_hit_then_store_ram_and_pool_refusal(workdir):
    w, procs = workdir
    # GPU pool 48K tokens (one 40K prompt); RAM tier holding two 40K prompts (9 GB at model scale =
    # 140 MB real at payload scale 64).
    prof = write_profile(w, gpu_pool_tokens=48000)
    m = Master(lease_ms=300, offload=False, workdir=w).start()
    procs.append(m)
    e = Emulator(make_stack(prof, "store-ram", 20.0, ram_gb=9.0), "coder", m, w).start()
    procs.append(e)
    A, B = prompt_messages(40000, "a"), prompt_messages(40000, "b")

    r1 = chat(e, A)
    p = r1["usage"]["prompt_tokens"]
    s1 = e.metrics()
    r2 = chat(e, A)
    s2 = e.metrics()
    want = (p - 1) // 16 * 16
    assert r2["usage"]["prompt_tokens_details"]["cached_tokens"] == want
    assert v(s2, "vllm:prefix_cache_hits_total") - v(s1, "vllm:prefix_cache_hits_total") == want
    assert r2["adev"]["tokens"]["gpu"] == want

    # other traffic evicts A from the GPU pool; A comes back from the store (RAM)
    chat(e, B)
    time.sleep(0.5)
    mm0, s3 = m.metrics(), e.metrics()
    r3 = chat(e, A)
    mm1, s4 = m.metrics(), e.metrics()
    ext = v(s4, "vllm:external_prefix_cache_hits_total") - v(s3, "vllm:external_prefix_cache_hits_total")
    print("A after B:", r3["adev"]["tokens"], "external hits", ext)
    assert ext > 0.5 * p
    assert r3["usage"]["prompt_tokens_details"]["cached_tokens"] == want
    assert r3["adev"]["tokens"]["store_ram"] == ext and r3["adev"]["read_path_s"] > 0
    assert r3["adev"]["store_hit_blocks"] * 16 == ext
    assert v(mm1, "mem_cache_hit_bytes_total") - v(mm0, "mem_cache_hit_bytes_total") >= ext / 16 * (1572864 // 64)
    assert v(s4, "adev_emulator_store_hit_blocks_total", tier="ram") >= ext / 16

    # a prompt larger than the whole GPU pool is refused, as vLLM refuses it
    r = httpx.post(e.base_url + "/chat/completions", timeout=60,
                   json={"model": MODEL, "messages": prompt_messages(50000, "e"), "max_tokens": 4})
    assert r.status_code == 400 and "KV cache" in r.json()["error"]["message"]


def test_ram_evicted_then_served_from_disk(workdir):
    w, procs = workdir
    # RAM = Mooncake's 16 MiB minimum segment (~680 blocks of 24 KiB); prompts of 8K tokens (500
    # blocks); a small GPU pool so that A must come back from the store.
    prof = write_profile(w, gpu_pool_tokens=9000)
    m = Master(lease_ms=200, offload=True, workdir=w).start()
    procs.append(m)
    e = Emulator(make_stack(prof, "store-ram+disk", 20.0, ram_gb=1.0), "coder", m, w).start()
    procs.append(e)
    A = prompt_messages(8000, "a")
    chat(e, A)
    # other traffic evicts A from RAM; evicted objects are offloaded to disk on the client's 1 s
    # heartbeat (slow on a loaded machine): wait until the master has evicted at least A's size.
    deadline = time.monotonic() + 90
    i = 0
    while time.monotonic() < deadline:
        chat(e, prompt_messages(8000, "bcdefgh"[i % 7]))
        i += 1
        time.sleep(1.0)
        if i >= 2 and v(m.metrics(), "master_evicted_key_count_total") >= 600:
            break
    mm0 = m.metrics()
    r = chat(e, A)
    mm1 = m.metrics()
    print("A after eviction from RAM:", r["adev"]["tokens"])
    assert v(mm1, "file_cache_hit_bytes_total") > v(mm0, "file_cache_hit_bytes_total")
    assert r["adev"]["tokens"]["store_disk"] > 0
    assert v(e.metrics(), "adev_emulator_store_hit_blocks_total", tier="disk") > 0


def _lease_run(w, lease_ms):
    prof = write_profile(w, gpu_pool_tokens=120000)
    m = Master(lease_ms=lease_ms, offload=False, workdir=w).start()
    # Two endpoints sharing a RAM tier of ~2,800 blocks (4.4 GB at model scale); 40 distinct 2K-token
    # prompts (125 blocks each, 5,000 in all). Each prompt is computed on one endpoint (put) and then
    # reused on the other, whose lookup (batch_is_exist, as vLLM's connector) grants a lease on every
    # block. With a lease longer than the run, RAM fills with leased blocks and later puts are
    # refused; with a short lease, blocks stay evictable.
    st = make_stack(prof, "store-ram", 50.0, ram_gb=4.4, endpoints=("coder", "reasoner"))
    x = Emulator(st, "coder", m, w).start()
    y = Emulator(st, "reasoner", m, w).start()
    try:
        hits = 0
        for i in range(40):
            msgs = [{"role": "user", "content": f"prompt {i} " + prompt_messages(2000, chr(97 + i % 26))[0]["content"]}]
            before = v(x.metrics(), "adev_emulator_store_put_blocks_total") + \
                v(x.metrics(), "adev_emulator_store_put_refused_blocks_total")
            chat(x, msgs, max_tokens=2)
            deadline = time.monotonic() + 5  # the save is asynchronous: let it finish
            while time.monotonic() < deadline:
                sx = x.metrics()
                if v(sx, "adev_emulator_store_put_blocks_total") + v(sx, "adev_emulator_store_put_refused_blocks_total") \
                        - before >= 120:
                    break
                time.sleep(0.02)
            r = chat(y, msgs, max_tokens=2)
            hits += r["adev"]["store_hit_blocks"]
        assert hits > 0
        time.sleep(0.5)
        time.sleep(0.5)
        ex, ey = x.metrics(), y.metrics()
        return {k: ex.get(k, 0.0) + ey.get(k, 0.0) for k in set(ex) | set(ey)}, m.metrics()
    finally:
        x.stop()
        y.stop()
        m.kill()


def test_long_lease_small_ram_refuses_short_lease_does_not(workdir):
    w, _ = workdir
    long_e, long_m = _lease_run(w, 60_000)
    short_e, short_m = _lease_run(w, 5)
    lr = v(long_e, "adev_emulator_store_put_refused_blocks_total")
    sr = v(short_e, "adev_emulator_store_put_refused_blocks_total")
    lm = v(long_m, "master_put_start_alloc_failures_total")
    sm = v(short_m, "master_put_start_alloc_failures_total")
    offered_long = lr + v(long_e, "adev_emulator_store_put_blocks_total")
    offered_short = sr + v(short_e, "adev_emulator_store_put_blocks_total")
    print(f"long lease: refused {lr:.0f}/{offered_long:.0f} blocks, master alloc failures {lm:.0f}; "
          f"short lease: refused {sr:.0f}/{offered_short:.0f}, master {sm:.0f}")
    assert lr > 0 and lm > 0
    assert sr <= 0.05 * offered_short
    assert lr > 5 * max(sr, 1)


def test_master_killed_mid_run_counts_failures_and_recovers(workdir):
    w, procs = workdir
    prof = write_profile(w, gpu_pool_tokens=40000)
    m = Master(lease_ms=50, offload=False, workdir=w).start()
    procs.append(m)
    e = Emulator(make_stack(prof, "store-ram", 20.0, ram_gb=2.0), "coder", m, w).start()
    procs.append(e)
    ok = chat(e, prompt_messages(2000, "a"))
    assert ok["adev"]["put_blocks"] == 0 or True  # puts are async; checked through the counters below
    time.sleep(0.3)
    s0 = e.metrics()
    assert v(s0, "adev_emulator_store_put_blocks_total") > 0
    m.kill()
    time.sleep(1.5)
    served = [chat(e, prompt_messages(1000 + 10 * i, "b")) for i in range(4)]
    s1 = e.metrics()
    assert all(r["choices"][0]["finish_reason"] in ("stop", "length") for r in served)
    errors = sum(v(s1, "adev_emulator_store_errors_total", op=o) for o in ("lookup", "put", "load", "connect"))
    assert errors > 0
    assert sum(r["adev"]["store_errors"] for r in served) > 0
    assert v(s1, "adev_emulator_store_up") == 0
    puts_down = v(s1, "adev_emulator_store_put_blocks_total")
    m.start()  # a new master on the same address
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and v(e.metrics(), "adev_emulator_store_up") != 1:
        time.sleep(0.3)
    assert v(e.metrics(), "adev_emulator_store_up") == 1
    chat(e, prompt_messages(3000, "c"))
    time.sleep(0.5)
    r = chat(e, prompt_messages(3000, "c") + [{"role": "user", "content": "again"}])
    s2 = e.metrics()
    assert v(s2, "adev_emulator_store_put_blocks_total") > puts_down
    assert r["adev"]["store_errors"] == 0
