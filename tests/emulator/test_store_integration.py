"""Real Mooncake master + emulator processes: issue 2's "Must show" for the store tier."""
from __future__ import annotations

import asyncio
import shutil
import time

import httpx
import pytest

from adev.analysis.counters import EVICTED_KEYS, value
from adev.client.scrape import total
from tests.emulator.helpers import Emulator, Master, make_stack, prompt_messages, tmpdir, write_profile

pytestmark = pytest.mark.integration
MODEL = "Qwen3-Coder-30B-A3B-Instruct"


def v(samples, name, **lab):
    x = total(samples, name, **lab)
    return 0.0 if x is None else x


def evicted_keys(m) -> float:
    """Keys the master has evicted from RAM: this Mooncake names the counter without ``_total``
    (read through the names the analysis reads it by)."""
    x = value(m.metrics(), EVICTED_KEYS)
    assert x is not None, "the master exports no evicted-key counter"
    return x


@pytest.fixture
def workdir():
    w = tmpdir()
    procs = []
    yield w, procs
    for p in reversed(procs):   # endpoints before their master: a store client whose master is
        (p.stop if isinstance(p, Emulator) else p.kill)()   # gone stalls its shut-down
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
    # the real read (lookup through the end of the load) took time on this host, in model seconds
    assert r3["adev"]["read_path_host_s"] > 0
    assert v(mm1, "mem_cache_hit_bytes_total") - v(mm0, "mem_cache_hit_bytes_total") >= ext / 16 * (1572864 // 64)
    assert v(s4, "adev_emulator_store_hit_blocks_total", tier="ram") >= ext / 16

    # a prompt larger than the whole GPU pool is refused, as vLLM refuses it
    r = httpx.post(e.base_url + "/chat/completions", timeout=60,
                   json={"model": MODEL, "messages": prompt_messages(50000, "e"), "max_tokens": 4})
    assert r.status_code == 400 and "KV cache" in r.json()["error"]["message"]


def _a_evicted_from_ram(workdir, store=None):
    """A RAM + disk stack with prompt A written to disk and out of RAM: (master, emulator, A).
    RAM = Mooncake's 16 MiB minimum segment (~680 blocks of 24 KiB); prompts of 8K tokens (500
    blocks); a small GPU pool so that A must come back from the store."""
    w, procs = workdir
    prof = write_profile(w, gpu_pool_tokens=9000)
    m = Master(lease_ms=200, offload=True, workdir=w, store=store).start()
    procs.append(m)
    e = Emulator(make_stack(prof, "store-ram+disk", 20.0, ram_gb=1.0), "coder", m, w).start()
    procs.append(e)
    A = prompt_messages(8000, "a")
    chat(e, A)
    # other traffic evicts A from RAM; evicted objects are offloaded to disk on the client's 1 s
    # heartbeat (slow on a loaded machine): wait until the master has evicted over twice its RAM
    # (~680 blocks), so none of A's 500 blocks is left in RAM.
    deadline = time.monotonic() + 90
    i = 0
    while time.monotonic() < deadline:
        chat(e, prompt_messages(8000, "bcdefgh"[i % 7]))
        i += 1
        time.sleep(1.0)
        if i >= 2 and evicted_keys(m) >= 1500:
            break
    return m, e, A


def test_ram_evicted_then_served_from_disk(workdir):
    m, e, A = _a_evicted_from_ram(workdir)
    mm0 = m.metrics()
    r = chat(e, A)
    mm1 = m.metrics()
    print("A after eviction from RAM:", r["adev"]["tokens"])
    assert v(mm1, "file_cache_hit_bytes_total") > v(mm0, "file_cache_hit_bytes_total")
    assert r["adev"]["tokens"]["store_disk"] > 0
    assert v(e.metrics(), "adev_emulator_store_hit_blocks_total", tier="disk") > 0


def test_promotion_on_hit_brings_a_disk_read_back_to_ram(workdir):
    """Mooncake's promotion on hit (``store.promotion_on_hit``): a block read from disk is copied
    back to RAM by the holding client's heartbeat, so its next read is a RAM read."""
    m, e, A = _a_evicted_from_ram(workdir, {"promotion_on_hit": True, "promotion_threshold": 1})
    r1 = chat(e, A)
    assert r1["adev"]["tokens"]["store_disk"] > 0
    # the client's 1 s heartbeat copies the read objects back; nothing else runs meanwhile
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and v(m.metrics(), "master_promotion_completed_total") == 0:
        time.sleep(0.5)
    time.sleep(1.5)
    chat(e, prompt_messages(8000, "z"))   # evicts A from the GPU pool (not from RAM: 8K tokens)
    r2 = chat(e, A)
    print("A from disk, then after promotion:", r1["adev"]["tokens"], r2["adev"]["tokens"])
    assert v(m.metrics(), "master_promotion_completed_bytes_total") > 0
    assert r2["adev"]["tokens"]["store_ram"] > r1["adev"]["tokens"]["store_ram"]
    assert r2["adev"]["tokens"]["store_disk"] < r1["adev"]["tokens"]["store_disk"]


def test_disk_writes_at_put_give_every_object_a_disk_copy_while_it_stays_in_ram(workdir):
    """``store.disk_writes = "put"``: the master without ``--offload_on_evict`` has the client's
    heartbeat write every put object to disk; nothing was evicted, and each key has both a
    memory and a local-disk replica."""
    w, procs = workdir
    prof = write_profile(w, gpu_pool_tokens=9000)
    m = Master(lease_ms=200, offload=True, workdir=w, store={"disk_writes": "put"}).start()
    procs.append(m)
    e = Emulator(make_stack(prof, "store-ram+disk", 20.0, ram_gb=1.0), "coder", m, w).start()
    procs.append(e)
    chat(e, prompt_messages(2000, "a"))
    base = f"http://127.0.0.1:{m.http}"
    keys = [k for k in httpx.get(base + "/get_all_keys", timeout=5).text.split() if "@" in k]
    assert keys
    deadline = time.monotonic() + 30
    while True:     # the 1 s heartbeat writes them (slow on a loaded machine)
        data = httpx.get(base + "/batch_query_keys?keys=" + ",".join(keys[:8]), timeout=5).json()
        reps = [data["data"][k] for k in keys[:8]]
        if all(r["local_disk_values"] for r in reps) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert all(r["values"] and r["local_disk_values"] for r in reps)
    assert evicted_keys(m) == 0


def test_disk_only_charges_every_hit_at_the_disk_tier(workdir):
    w, procs = workdir
    prof = write_profile(w, gpu_pool_tokens=9000)
    m = Master(lease_ms=500, offload=True, workdir=w, configuration="disk-only")
    m.start()
    procs.append(m)
    e = Emulator(make_stack(prof, "disk-only", 20.0, ram_gb=32.0), "coder", m, w).start()
    procs.append(e)
    A = prompt_messages(4000, "a")
    chat(e, A)
    chat(e, prompt_messages(8000, "b"))   # evicts A from the GPU pool
    time.sleep(0.5)
    s0 = e.metrics()
    r = chat(e, A)
    s1 = e.metrics()
    t = r["adev"]["tokens"]
    print("disk-only repeat:", t, "read path", r["adev"]["read_path_s"])
    assert t["store_ram"] == 0 and t["store_disk"] > 0
    ext = v(s1, "vllm:external_prefix_cache_hits_total") - v(s0, "vllm:external_prefix_cache_hits_total")
    assert ext == t["store_disk"]
    q = v(s1, "vllm:external_prefix_cache_queries_total") - v(s0, "vllm:external_prefix_cache_queries_total")
    assert q == r["usage"]["prompt_tokens"] - t["gpu"]
    # modelled load at the disk device's own rate (local-raid0: 0.2 ms + bytes / 7.49 GB/s, the
    # device behind a lone staged load's 5.45 GB/s with the 20 GB/s RAM hop after it), lookup 0.2 ms
    blocks = t["store_disk"] // 16
    device = 1 / (1 / 5.45e9 - 1 / 20e9)
    assert r["adev"]["load_s"] == pytest.approx(0.0002 + blocks * 1572864 / device, rel=1e-6)


def test_disk_only_writes_a_burst_larger_than_mooncakes_minimum_segment_in_full(workdir):
    """Direct disk puts every block through a RAM segment of the RAM store's size: a burst of
    saves larger than Mooncake's 16 MiB minimum segment (four 8K-token prompts: 2,000 blocks of
    24 KiB, 49 MB) is written in full, none refused; a 16 MiB staging segment refuses most of it
    (objects not yet on disk cannot be evicted, and the offload heartbeat writes once a second)."""
    w, procs = workdir
    prof = write_profile(w, gpu_pool_tokens=40000)
    m = Master(lease_ms=500, offload=True, workdir=w, configuration="disk-only")
    m.start()
    procs.append(m)
    e = Emulator(make_stack(prof, "disk-only", 20.0, ram_gb=32.0), "coder", m, w).start()
    procs.append(e)

    async def burst():
        async with httpx.AsyncClient(timeout=120) as c:
            rs = await asyncio.gather(*[c.post(e.base_url + "/chat/completions", json={
                "model": MODEL, "messages": prompt_messages(8000, t), "max_tokens": 1})
                for t in "pqrs"])
        return [r.json() for r in rs]

    rs = asyncio.run(burst())
    want = sum(r["usage"]["prompt_tokens"] // 16 for r in rs)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        s = e.metrics()
        done = v(s, "adev_emulator_store_put_blocks_total") + v(s, "adev_emulator_store_put_refused_blocks_total") \
            + v(s, "adev_emulator_store_put_skipped_blocks_total")
        if done >= want:
            break
        time.sleep(0.2)
    print("disk-only burst: put", v(s, "adev_emulator_store_put_blocks_total"), "of", want)
    assert v(s, "adev_emulator_store_put_refused_blocks_total") == 0
    assert v(s, "adev_emulator_store_put_skipped_blocks_total") == 0
    assert v(s, "adev_emulator_store_put_blocks_total") == want


async def _store_lease_run(w, lease_ms):
    """The emulator's store path (MooncakeTier.save: batch_is_exist then batch_put_from) with a reuse
    lookup right after each save, as the next request of a session does when it follows quickly."""
    from adev.emulator.store import MooncakeTier, StoreSettings
    m = Master(lease_ms=lease_ms, offload=False, workdir=w).start()
    st = MooncakeTier(StoreSettings(master=m.addr, model_name=MODEL, payload_bytes=1572864 // 64,
                                    segment_bytes=int(1.1e9 / 64)))   # ~700 blocks
    try:
        await st.start()
        put = refused = 0
        for i in range(70):                      # 70 x 20 blocks = 1,400 blocks offered
            keys = st.keys([i * 1000 + j for j in range(20)])
            r = await st.save(keys)
            put, refused = put + r.put, refused + r.refused
            assert await st.exists(keys) is not None   # the reuse lookup (grants leases)
            await asyncio.sleep(0.02)
        return put, refused, v(m.metrics(), "master_put_start_alloc_failures_total")
    finally:
        await st.close()
        m.kill()


async def test_long_lease_small_ram_refuses_short_lease_does_not(workdir):
    w, _ = workdir
    lp, lr, lm = await _store_lease_run(w, 60_000)
    sp, sr, sm = await _store_lease_run(w, 5)
    print(f"long lease: refused {lr}/{lp + lr} blocks (master alloc failures {lm:.0f}); "
          f"short lease: refused {sr}/{sp + sr} (master {sm:.0f})")
    assert lr > 0 and lm >= lr
    assert sr <= 0.05 * (sp + sr)
    assert lr > 5 * max(sr, 1)


def test_endpoint_counts_refusals_like_the_master(workdir):
    """Refusals show up in the endpoint's own counters and in the master's, and agree."""
    w, procs = workdir
    prof = write_profile(w, gpu_pool_tokens=60000)
    m = Master(lease_ms=60_000, offload=False, workdir=w).start()
    procs.append(m)
    # RAM of ~700 blocks; two sessions growing by ~1K tokens per turn to ~10K tokens each
    e = Emulator(make_stack(prof, "store-ram", 50.0, ram_gb=1.1), "coder", m, w).start()
    procs.append(e)
    sessions = [prompt_messages(1000, t) for t in "pq"]
    results = []
    for turn in range(10):
        for i, s in enumerate(sessions):
            results.append(chat(e, s, max_tokens=2))
            s.append({"role": "assistant", "content": "ok"})
            s.append({"role": "user", "content": prompt_messages(1000, "xy"[i])[0]["content"] + f" {turn}"})
            time.sleep(0.05)
    time.sleep(0.5)
    se, sm = e.metrics(), m.metrics()
    refused = v(se, "adev_emulator_store_put_refused_blocks_total")
    print(f"endpoint refused {refused:.0f} blocks ({v(se, 'adev_emulator_store_put_refused_bytes_total'):.0f} "
          f"model-scale bytes), skipped {v(se, 'adev_emulator_store_put_skipped_blocks_total'):.0f}; "
          f"master alloc failures {v(sm, 'master_put_start_alloc_failures_total'):.0f}")
    assert refused > 0
    assert refused == v(sm, "master_put_start_alloc_failures_total")
    assert v(se, "adev_emulator_store_put_refused_bytes_total") == refused * 1572864


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


@pytest.mark.parametrize("placement,segments", [("local", 1), ("random", 2)])
def test_puts_land_in_the_putting_endpoints_own_segment(workdir, placement, segments):
    """Placement "local": every block a request saves goes to its endpoint's own segment (reads of
    same-session reuse are then local copies, not TCP transfers); "random" (Mooncake's default)
    spreads them over both endpoints' segments."""
    w, procs = workdir
    prof = write_profile(w)
    m = Master(lease_ms=500, offload=False, workdir=w).start()
    procs.append(m)
    st = make_stack(prof, "store-ram", 10.0, ram_gb=8.0, endpoints=("coder", "reasoner"), placement=placement)
    eps = [Emulator(st, n, m, w).start() for n in ("coder", "reasoner")]
    procs.extend(eps)
    chat(eps[0], prompt_messages(3000, "p"))
    keys: list[str] = []
    for _ in range(100):   # puts run in the background after the prefill
        keys = [k for k in httpx.get(f"http://127.0.0.1:{m.http}/get_all_keys", timeout=5).text.split() if k]
        if len(keys) >= 150:
            break
        time.sleep(0.1)
    assert len(keys) >= 150
    data = httpx.get(f"http://127.0.0.1:{m.http}/batch_query_keys", params={"keys": ",".join(keys)},
                     timeout=5).json()["data"]
    owners = {v["transport_endpoint_"] for k in keys for v in data[k]["values"]}
    assert len(owners) == segments, owners
