"""The engine's scheduler without a clock (as vLLM's tests/v1/core/test_scheduler.py): build a
scheduler and requests, step at model times, assert on what ran, how long it took and what was
cached or served. Every expected figure is worked out by hand in the comments.

The test model (``config``), chosen so the arithmetic stays readable:

    prefill     1000 tokens/s                  -> 1 ms per uncached token
    decode step 0.010 + 0.001 n + 0.00001 ctx  (n sequences, ctx context tokens in the batch)
    RAM tier    lookup 1 ms, 1e9 B/s, 1 MB blocks   -> load_s(b) = 0.001 + 0.001 b
    disk tier   lookup 2 ms, 0.25e9 B/s             -> load_s(b) = 0.002 + 0.004 b
    block 16 tokens, 64 tokens per step (chunked prefill), time scale 10 (so a formula that
    divides a model duration by the time scale shows), horizon 0.3 wall s = 3 model s.
"""
from __future__ import annotations

import pytest

from adev.config import PrefillTime
from adev.emulator.metrics import Metrics
from adev.emulator.pool import block_hashes
from adev.emulator.scheduler import Scheduler
from adev.emulator.state import DECODE, DONE, LOADING, WAITING, EngineConfig, Request, TierCost

BS = 16


def config(**over) -> EngineConfig:
    c = dict(block_size=BS, capacity_blocks=100, prefill_tokens_per_s=1000.0, decode_step_base_s=0.010,
             decode_step_per_seq_s=0.001, decode_step_per_ktoken_s=0.01, max_num_seqs=8,
             max_num_batched_tokens=64, time_scale=10.0, bytes_per_block=1_000_000,
             ram_tier=TierCost("ram", 0.001, 1e9), disk_tier=TierCost("disk", 0.002, 0.25e9))
    c.update(over)
    return EngineConfig(**c)


def make(has_store: bool = False, **over) -> Scheduler:
    cfg = config(**over)
    return Scheduler(cfg, Metrics("m", BS, cfg.capacity_blocks, cfg.prefix_caching, 65536), has_store)


def request(rid: str, prompt: list[int], n_out: int, t: float = 0.0) -> Request:
    r = Request(rid=rid, prompt=prompt, out_ids=[7] * n_out, finish_reason="stop")
    r.t_arrival = t
    return r


def value(s: Scheduler, name: str, **labels) -> float:
    v = s.m.registry.get_sample_value(name, {**s.m.labels, **labels})
    return 0.0 if v is None else v


def tokens(base: int, n: int) -> list[int]:
    return list(range(base, base + n))


def run_until_done(s: Scheduler, t: float) -> float:
    """Step until nothing is left; returns the model time reached."""
    while s.active or s.waiting:
        out = s.step(t)
        if out.idle:
            if not (s.active or s.waiting):
                break
            nxt = s.next_ready(t)
            assert nxt is not None, "stuck"
            t = nxt
            continue
        t = out.end
    return t


def serve_from_store(s: Scheduler, r: Request, tiers: list[str], loaded: int | None = None,
                     now: float = 0.0) -> float | None:
    """What the driver's read path does, without I/O: every lookup key beyond the GPU hit that
    ``tiers`` covers is a hit held by that tier; ``loaded`` of them arrive (None: all)."""
    hit = r.gpu_hit_tokens // BS
    n_keys = s.lookup_end(r) - hit
    exists = [1] * len(tiers) + [0] * (n_keys - len(tiers))
    n_ext = s.lookup_done(r, n_keys, exists)
    s.hits_found(r, hit, tiers[:n_ext])
    n = n_ext if loaded is None else loaded
    return s.load_done(r, r.t_admit, hit, tiers[:n_ext], n, n < n_ext, now)


# ---------------------------------------------------------------------------- prefill
def test_chunked_prefill_of_a_cold_prompt_then_first_token():
    s = make()
    a = request("a", tokens(1000, 100), 3)
    s.add(a)
    # 100 uncached tokens, 64 per step: 64 ms, then 36 ms
    out = s.step(0.0)
    assert out.admitted == ["a"] and out.prefill == {"a": 64} and out.decode == []
    assert out.duration == pytest.approx(0.064)
    out = s.step(out.end)
    assert out.prefill == {"a": 36} and out.end == pytest.approx(0.100)
    assert a.state == DECODE and a.t_prefill_done == pytest.approx(0.100)
    # first token: decode step(1 seq, 100 ctx) = 0.010 + 0.001 + 0.001 = 0.012
    out = s.step(out.end)
    assert out.prefill == {} and out.decode == ["a"] and out.tokens == {"a": 1}
    assert a.t_first == pytest.approx(0.112)
    # the last two tokens in one macro step: ctx 101 then 102 -> 0.01201 + 0.01202
    out = s.step(out.end)
    assert out.tokens == {"a": 2} and out.finished == ["a"]
    assert out.ends == pytest.approx([0.12401, 0.13603])
    assert a.state == DONE and a.t_end == pytest.approx(0.13603)
    assert a.tokens_split(BS) == {"gpu": 0, "store_ram": 0, "store_disk": 0, "kv_transfer": 0,
                                  "computed": 100}
    assert value(s, "vllm:time_to_first_token_seconds_sum") == pytest.approx(0.112)
    assert value(s, "vllm:prompt_tokens_by_source_total", source="local_compute") == 100
    assert value(s, "vllm:generation_tokens_total") == 3
    # inter-token latencies: the two decode steps after the first token
    assert value(s, "vllm:inter_token_latency_seconds_sum") == pytest.approx(0.12401 - 0.112 + 0.13603 - 0.12401)


def test_prefill_shares_the_step_budget_with_decodes():
    s = make()
    a = request("a", tokens(1000, 30), 50)
    s.add(a)
    t = s.step(0.0).end                      # a: 30 tokens, 0.030
    t = s.step(t).end                        # a's first token: 0.010 + 0.001 + 0.0003 -> 0.0413
    assert t == pytest.approx(0.0413)
    b = request("b", tokens(2000, 100), 5, t)
    s.add(b)
    out = s.step(t)
    # budget 64 - 1 decode = 63 prefill tokens; step = 63 ms + decode(1, ctx 31) = 0.063 + 0.01131
    assert out.prefill == {"b": 63} and out.decode == ["a"] and out.tokens == {"a": 1}
    assert out.duration == pytest.approx(0.07431)


def test_prefill_chunks_cost_more_the_more_tokens_precede_them():
    # 1 ms per token + 0.01 ms per token per earlier token
    s = make(prefill=PrefillTime(0.001, 0.00001))
    a = request("a", tokens(1000, 100), 1)
    s.add(a)
    # step 1: 64 tokens from position 0: 0.064 + 1e-5 * 64 * 63 / 2 = 0.064 + 0.02016 = 0.08416
    out = s.step(0.0)
    assert out.prefill == {"a": 64} and out.duration == pytest.approx(0.08416)
    # step 2: 36 tokens after 64: 0.036 + 1e-5 * (36 * 64 + 36 * 35 / 2) = 0.036 + 0.02934 = 0.06534
    out = s.step(out.end)
    assert out.prefill == {"a": 36} and out.duration == pytest.approx(0.06534)
    t = run_until_done(s, out.end)
    # c, a fresh 20-token prompt arriving with b, goes first (ties by prompt length): 20 tokens
    # from position 0, 0.020 + 1e-5 * 20 * 19 / 2 = 0.0219. b shares a's 6 cached blocks (96
    # tokens) and adds 50: the step's other 44 tokens follow 96,
    # 0.044 + 1e-5 * (44 * 96 + 44 * 43 / 2) = 0.044 + 0.0517 = 0.0957
    b = request("b", tokens(1000, 100) + tokens(5000, 50), 1, t)
    c = request("c", tokens(9000, 20), 1, t)
    s.add(b)
    s.add(c)
    out = s.step(t)
    assert b.gpu_hit_tokens == 96 and out.prefill == {"c": 20, "b": 44}
    assert out.duration == pytest.approx(0.0219 + 0.0957)


# ---------------------------------------------------------------------------- GPU prefix hits
def test_gpu_prefix_hits_are_not_prefilled_again():
    s = make()
    shared = tokens(1000, 100)
    a = request("a", shared, 1)
    s.add(a)
    t = run_until_done(s, 0.0)
    # a: 64 + 36 ms prefill, first (and last) token at 0.100 + 0.012
    assert t == pytest.approx(0.112)
    # a's 6 full blocks (101 tokens // 16, 96 tokens) are cached and free (a has finished)
    assert s.pool.cached_blocks == 6 and s.pool.used_blocks == 0
    assert all(s.pool.contains(h) for h in a.hashes[:6])
    # b extends a's prompt by 50 tokens
    b = request("b", shared + tokens(5000, 50), 1, t)
    s.add(b)
    out = s.step(t)
    # hit = min(6 cached, (150 - 1) // 16 = 9) = 6 blocks = 96 tokens; b computes 150 - 96 = 54
    assert b.gpu_hit_tokens == 96 and out.prefill == {"b": 54}
    assert out.duration == pytest.approx(0.054)
    out = s.step(out.end)
    # first token: decode(1, 150) = 0.010 + 0.001 + 0.0015 = 0.0125
    # TTFT = 54 / 1000 + 0.0125 = 0.0665
    assert b.t_first - b.t_arrival == pytest.approx(0.0665)
    assert b.tokens_split(BS) == {"gpu": 96, "store_ram": 0, "store_disk": 0, "kv_transfer": 0,
                                  "computed": 54}
    # b's one token ended it: its 151 tokens fill 9 blocks, a's 6 and 3 new ones, all cached and
    # free now (the 10th, partial, was anonymous and is empty again)
    assert s.pool.cached_blocks == 9 and s.pool.used_blocks == 0
    # counted at first admission: queries = 100 + 150 prompt tokens, hits = 96
    assert value(s, "vllm:prefix_cache_queries_total") == 250
    assert value(s, "vllm:prefix_cache_hits_total") == 96
    assert value(s, "vllm:prompt_tokens_by_source_total", source="local_cache_hit") == 96
    assert value(s, "vllm:prompt_tokens_by_source_total", source="local_compute") == 100 + 54


def test_recompute_has_no_hits():
    s = make(prefix_caching=False)
    p = tokens(1000, 100)
    s.add(request("a", p, 1))
    t = run_until_done(s, 0.0)
    b = request("b", p, 1, t)
    s.add(b)
    run_until_done(s, t)
    # no prefix cache: b computes all 100 tokens again: TTFT = 0.100 + 0.012
    assert b.gpu_hit_tokens == 0 and b.t_first - b.t_arrival == pytest.approx(0.112)


# ---------------------------------------------------------------------------- store hits
def test_store_hits_from_ram_and_disk():
    s = make(has_store=True)
    saved: list[int] = []
    s.on_save = lambda r, n: saved.append(n)
    r = request("r", tokens(1000, 100), 1)
    s.add(r)
    out = s.step(0.0)
    assert out.idle and out.loading == ["r"] and r.state == LOADING
    # lookup: blocks 0..5 ((100 - 1) // 16 = 6); three in RAM, three on disk
    assert s.lookup_end(r) == 6
    ready = serve_from_store(s, r, ["ram"] * 3 + ["disk"] * 3)
    # lookup_s = RAM lookup 0.001; load_s = RAM (0.001 + 3 x 0.001) + disk (0.002 + 3 x 0.004);
    # the disk blocks' CPU staging at the RAM tier's rate (3 x 0.001, no lookup) overlaps the
    # slower disk read: 0.018
    assert (r.lookup_s, r.load_s) == pytest.approx((0.001, 0.018))
    assert ready == pytest.approx(0.019) and s.next_ready(0.0) == pytest.approx(0.019)
    assert s.step(0.0).idle                  # nothing runs before the load has ended
    out = s.step(ready)
    # the store served 6 x 16 = 96 tokens: 4 left to prefill (4 ms)
    assert out.prefill == {"r": 4} and out.end == pytest.approx(0.023)
    s.step(out.end)
    # TTFT = 0.019 + 0.004 + decode(1, 100) 0.012 = 0.035
    assert r.t_first == pytest.approx(0.035)
    assert r.tokens_split(BS) == {"gpu": 0, "store_ram": 48, "store_disk": 48, "kv_transfer": 0,
                                  "computed": 4}
    # vLLM's counters in tokens: queries = prompt - GPU hit, hits = 6 blocks x 16
    assert value(s, "vllm:external_prefix_cache_queries_total") == 100
    assert value(s, "vllm:external_prefix_cache_hits_total") == 96
    assert value(s, "adev_emulator_store_hit_blocks_total", tier="ram") == 3
    assert value(s, "adev_emulator_store_hit_blocks_total", tier="disk") == 3
    assert value(s, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer") == 96
    assert value(s, "vllm:prompt_tokens_cached_total") == 96
    assert value(s, "adev_emulator_read_path_seconds_sum") == pytest.approx(0.019)
    # the prefill step completed the prompt's 6 full blocks: one save up to block 6 (the worker's
    # existence check then finds the ones the store served)
    assert saved == [6]


def test_store_hits_after_a_gpu_hit_and_the_blocks_offered_back():
    s = make(has_store=True)
    saved: list = []
    s.on_save = lambda r, n: saved.append(n if r is a else (r.rid, n))
    shared = tokens(1000, 64)
    a = request("a", shared, 1)
    s.add(a)
    s.step(0.0)
    serve_from_store(s, a, [])               # a: nothing in the store
    t = run_until_done(s, 0.0)
    # a: lookup 0.001, then 64 tokens (64 ms), first token decode(1, 64) = 0.01164
    assert a.t_first == pytest.approx(0.001 + 0.064 + 0.01164)
    assert saved == [4]                      # the step saved up to the 4th full block
    b = request("b", shared + tokens(5000, 100), 1, t)
    s.add(b)
    s.step(t)
    # GPU hit: a's 4 blocks (64 tokens); lookup from block 4 to (164 - 1) // 16 = 10: 6 keys;
    # the store holds the first 5 of them in RAM
    assert b.gpu_hit_tokens == 64 and s.lookup_end(b) - 4 == 6
    ready = serve_from_store(s, b, ["ram"] * 5, now=t)
    # ready = t + 0.001 + (0.001 + 5 x 0.001); computed = 164 - 64 - 80 = 20 tokens
    assert ready == pytest.approx(t + 0.007)
    out = s.step(ready)
    assert out.prefill == {"b": 20} and out.duration == pytest.approx(0.020)
    s.step(out.end)
    # TTFT = 0.007 + 0.020 + decode(1, 164) = 0.010 + 0.001 + 0.00164
    assert b.t_first - b.t_arrival == pytest.approx(0.007 + 0.020 + 0.01264)
    assert b.tokens_split(BS) == {"gpu": 64, "store_ram": 80, "store_disk": 0, "kv_transfer": 0,
                                  "computed": 20}
    # external queries: a 64 + b (164 - 64); b's step offers its 10 full blocks (164 // 16)
    assert value(s, "vllm:external_prefix_cache_queries_total") == 64 + 100
    assert saved[1] == ("b", 10)


def test_each_prefill_step_offers_the_blocks_it_completed():
    """vLLM's connector saves per scheduler step: a 150-token prompt prefilled in steps of 64
    tokens (the budget) asks for saves up to blocks 4 (64 tokens), 8 (128) and 9 (150 // 16); a
    70-token prompt's second step (64 -> 70 tokens) completes no new block and asks for nothing;
    a request prefilled after a preemption asks for nothing, nor does an engine without a store."""
    s = make(has_store=True)
    saved: list = []
    s.on_save = lambda r, n: saved.append((r.rid, n))
    r = request("r", tokens(1000, 150), 1)
    s.add(r)
    s.step(0.0)
    t = run_until_done(s, serve_from_store(s, r, []))
    assert saved == [("r", 4), ("r", 8), ("r", 9)] and r.save_sched_blocks == 9
    q = request("q", tokens(5000, 70), 1, t)
    s.add(q)
    s.step(t)
    t = run_until_done(s, serve_from_store(s, q, [], now=t))
    assert saved[3:] == [("q", 4)]
    p = request("p", tokens(9000, 40), 1, t)
    p.preemptions = 1
    s.add(p)
    s.step(t)
    run_until_done(s, serve_from_store(s, p, [], now=t))
    n = make(has_store=False)
    n.on_save = s.on_save
    n.add(request("x", tokens(7000, 40), 1))
    run_until_done(n, 0.0)
    assert saved[4:] == []


def test_failed_store_load_is_recomputed_not_counted_as_served():
    s = make(has_store=True)
    r = request("r", tokens(1000, 100), 1)
    s.add(r)
    s.step(0.0)
    # 6 hits (4 RAM, then 2 disk); the load fails after the first 2 blocks
    ready = serve_from_store(s, r, ["ram"] * 4 + ["disk"] * 2, loaded=2)
    # charged: lookup 0.001 + RAM load of 2 blocks (0.001 + 0.002) = 0.004
    assert ready == pytest.approx(0.004)
    assert r.tokens_split(BS) == {"gpu": 0, "store_ram": 32, "store_disk": 0, "kv_transfer": 0,
                                  "computed": 68}
    out = s.step(ready)
    assert out.prefill == {"r": 64}
    out = s.step(out.end)
    assert out.prefill == {"r": 4}
    s.step(out.end)
    # TTFT = 0.004 + 68 ms + decode(1, 100) 0.012 = 0.084
    assert r.t_first == pytest.approx(0.084)
    assert r.store_errors == 1
    # hits were counted at lookup (4 RAM, 2 disk); the failed ones apart: 2 RAM, 2 disk
    assert value(s, "vllm:external_prefix_cache_hits_total") == 96
    assert value(s, "adev_emulator_store_load_failed_blocks_total", tier="ram") == 2
    assert value(s, "adev_emulator_store_load_failed_blocks_total", tier="disk") == 2
    assert value(s, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer") == 32
    assert value(s, "vllm:prompt_tokens_by_source_total", source="local_compute") == 68


def test_failed_lookup_charges_the_lookup_and_recomputes():
    s = make(has_store=True)
    r = request("r", tokens(1000, 100), 1)
    s.add(r)
    s.step(0.0)
    n = s.lookup_done(r, 6, None)
    s.hits_found(r, 0, [])
    ready = s.load_done(r, 0.0, 0, [], 0, False, 0.0)
    assert n == 0 and r.store_errors == 1 and ready == pytest.approx(0.001)
    run_until_done(s, ready)
    # TTFT = 0.001 + 100 ms + 0.012
    assert r.t_first == pytest.approx(0.113)
    assert r.tokens_split(BS)["computed"] == 100


def test_disk_only_charges_every_hit_at_the_disk_tier():
    s = make(has_store=True, disk_only=True)
    r = request("r", tokens(1000, 100), 1)
    s.add(r)
    s.step(0.0)
    ready = serve_from_store(s, r, ["disk"] * 6)
    # lookup = the disk tier's 0.002; load = 0.002 + 6 x 0.004 = 0.026
    assert (r.lookup_s, r.load_s, ready) == pytest.approx((0.002, 0.026, 0.028))
    assert r.tokens_split(BS)["store_disk"] == 96


def test_read_path_overrun_is_counted():
    s = make(has_store=True)
    r = request("r", tokens(1000, 100), 1)
    s.add(r)
    s.step(0.0)
    # modelled ready at 0.001 + 0.001 + 6 x 0.001 = 0.008; the real I/O ended at 0.010
    ready = serve_from_store(s, r, ["ram"] * 6, now=0.010)
    assert ready == pytest.approx(0.008)
    assert value(s, "adev_emulator_read_path_overrun_seconds_total") == pytest.approx(0.002)


def test_abort_during_the_store_read_finishes_when_it_returns():
    s = make(has_store=True)
    r = request("r", tokens(1000, 100), 1)
    s.add(r)
    s.step(0.0)
    s.abort(r, 0.001)
    assert r.state == LOADING
    assert serve_from_store(s, r, ["ram"] * 6, now=0.003) is None
    # finished at max(now 0.003, ready 0.008)
    assert r.state == DONE and r.finish_reason == "abort" and r.t_end == pytest.approx(0.008)
    assert not s.active and s.pool.used_blocks == 0


# ---------------------------------------------------------------------------- queueing, preemption
def test_a_request_that_does_not_fit_waits_for_blocks():
    s = make(capacity_blocks=10, max_num_batched_tokens=1000)
    a = request("a", tokens(1000, 100), 1)
    b = request("b", tokens(2000, 100), 1)
    s.add(a)
    s.add(b)
    out = s.step(0.0)
    # a takes ceil(100 / 16) = 7 of 10 blocks; b needs 7 more and waits
    assert out.admitted == ["a"] and b.state == WAITING
    t = run_until_done(s, out.end)
    # a: 0.100 + 0.012, done at 0.112; b admitted then: queue 0.112, TTFT 0.112 + 0.112
    assert b.t_admit == pytest.approx(0.112)
    assert b.t_first == pytest.approx(0.224) and t == pytest.approx(0.224)
    assert value(s, "vllm:request_queue_time_seconds_sum") == pytest.approx(0.112)


def test_preemption_frees_the_latest_request_and_recomputes_only_its_uncached_tail():
    s = make(capacity_blocks=10, max_num_batched_tokens=1000)
    a = request("a", tokens(1000, 64), 20)
    b = request("b", tokens(2000, 64), 20)
    s.add(a)
    s.add(b)
    # both prefill in one step: 128 ms; 4 + 4 blocks
    out = s.step(0.0)
    assert out.prefill == {"a": 64, "b": 64} and out.end == pytest.approx(0.128)
    # first tokens: one more block each (65 tokens -> 5 blocks): 10 of 10 used
    # decode(2, 128) = 0.010 + 0.002 + 0.00128 = 0.01328
    out = s.step(out.end)
    assert out.tokens == {"a": 1, "b": 1} and a.t_first == pytest.approx(0.14128)
    # no free block: the macro step stops where a 6th block would be needed, 80 tokens each:
    # 15 steps, decode(2, 130 + 2j), j = 0..14 = 15 x 0.012 + 0.00001 x (15 x 130 + 2 x 105)
    out = s.step(out.end)
    assert out.tokens == {"a": 15, "b": 15} and len(out.ends) == 15
    assert out.duration == pytest.approx(0.18 + 0.0216)
    assert out.end == pytest.approx(0.34288)
    # both need a 6th block, none is free: b (admitted last) is preempted; a decodes its last 4
    # tokens: decode(1, 80 + j), j = 0..3 = 4 x 0.011 + 0.00001 x 326 = 0.04726
    out = s.step(out.end)
    assert out.preempted == ["b"] and b.state == WAITING and b.preemptions == 1
    # b's 4 prompt blocks stay cached (free, evictable); its 5th (generated tokens) was anonymous
    assert all(s.pool.contains(h) for h in b.hashes[:4])
    assert out.decode == ["a"] and out.tokens == {"a": 4} and out.finished == ["a"]
    assert out.duration == pytest.approx(0.04726)
    # b comes back: its 4 prompt blocks are still cached (hit capped at (80 - 1) // 16 = 4);
    # it recomputes only the 16 generated tokens of its 5th block (16 ms), not all 80
    out = s.step(out.end)
    assert out.admitted == ["b"] and out.prefill == {"b": 16} and out.duration == pytest.approx(0.016)
    # then its last 4 tokens as a did: ends at 0.34288 + 0.04726 + 0.016 + 0.04726
    out = s.step(out.end)
    assert out.finished == ["b"] and b.n_gen == 20
    assert b.t_end == pytest.approx(0.4534)
    assert b.t_first == pytest.approx(0.14128)   # TTFT is not touched by the preemption
    assert value(s, "vllm:num_preemptions_total") == 1
    # a preempted request is not counted again: queries stay at 64 + 64 prompt tokens
    assert value(s, "vllm:prefix_cache_queries_total") == 128
    assert value(s, "vllm:generation_tokens_total") == 40


def test_a_lone_request_that_outgrows_the_pool_ends_with_length():
    s = make(capacity_blocks=4, max_num_batched_tokens=1000)
    a = request("a", tokens(1000, 60), 100)
    s.add(a)
    run_until_done(s, 0.0)
    # 4 blocks hold 64 tokens: 60 prompt + 4 generated, then no block for the 65th token
    assert a.state == DONE and a.finish_reason == "length" and a.n_gen == 4
    assert value(s, "vllm:request_success_total", finished_reason="length") == 1


def test_macro_step_is_bounded_by_the_wall_horizon():
    # horizon 0.3 wall s x S 10 = 3 model s; decode(1, ~30) ~ 0.0113 s -> 265 steps
    s = make()
    a = request("a", tokens(1000, 30), 1000)
    s.add(a)
    t = s.step(0.0).end                      # prefill
    t = s.step(t).end                        # first token
    out = s.step(t)
    # int(3 / 0.01131) = 265 steps (of 999 left)
    assert len(out.ends) == 265 and out.tokens == {"a": 265}


# ---------------------------------------------------------------------------- edge cases
def test_a_request_preempted_twice_before_its_first_token():
    s = make(capacity_blocks=6, max_num_batched_tokens=1000)
    a = request("a", tokens(1000, 16), 20)
    b = request("b", tokens(2000, 64), 20)
    s.add(a)
    s.add(b)
    # a: 1 block, b: 4 blocks (5 of 6); both prefill in one step: 80 ms
    out = s.step(0.0)
    assert out.prefill == {"a": 16, "b": 64} and out.end == pytest.approx(0.080)
    # first tokens: a needs a 2nd block, b a 5th; 1 free: b (admitted last) is preempted and a
    # decodes alone: decode(1, 16) = 0.01116
    out = s.step(out.end)
    assert out.preempted == ["b"] and out.tokens == {"a": 1} and out.end == pytest.approx(0.09116)
    # b comes back at once: hit (64 - 1) // 16 = 3 cached blocks, needs 1 more (free: 6 - a's 2
    # = 4, of which b's 3 hits are 3): prefill 16 tokens + a's decode(1, 17) = 0.016 + 0.01117
    out = s.step(out.end)
    assert out.admitted == ["b"] and out.prefill == {"b": 16} and out.tokens == {"a": 1}
    assert out.end == pytest.approx(0.11833) and s.pool.used_blocks == 6
    # b's first token needs a 5th block again, none is free: preempted a second time; a runs its
    # last 18 tokens alone (its 3rd block, from its 33rd token, comes out of b's freed ones):
    # decode(1, 18 + j), j = 0..17 = 18 x 0.011 + 0.00001 x (18 x 18 + 153) = 0.20277
    out = s.step(out.end)
    assert out.preempted == ["b"] and out.tokens == {"a": 18} and out.finished == ["a"]
    assert out.duration == pytest.approx(0.20277)
    assert b.preemptions == 2 and b.state == WAITING
    # then b: 16 tokens again (3 blocks still cached) and its first token, decode(1, 64) = 0.01164
    t = run_until_done(s, out.end)
    assert b.t_first == pytest.approx(0.3211 + 0.016 + 0.01164)
    assert b.preemptions == 2 and a.preemptions == 0 and b.n_gen == 20
    assert value(s, "vllm:num_preemptions_total") == 2
    assert t == pytest.approx(b.t_end)


def test_counts_running_and_waiting_with_loading_requests():
    s = make(has_store=True, max_num_seqs=2)
    a, b, c = (request(x, tokens(1000 * i, 40), 2) for i, x in enumerate("abc", 1))
    for r in (a, b, c):
        s.add(r)
    assert s.counts() == (0, 3)
    s.step(0.0)                              # a, b admitted into their store reads; c waits
    assert (a.state, b.state, c.state) == (LOADING, LOADING, WAITING)
    assert s.counts() == (0, 3)              # loading requests count as waiting, as vLLM's
    ready = serve_from_store(s, a, [])       # nothing stored: ready after the RAM lookup
    assert ready == pytest.approx(0.001)
    out = s.step(ready)
    assert out.prefill == {"a": 40}
    assert s.counts() == (1, 2)


def test_idle_step_output():
    s = make(has_store=True)
    s.add(request("r", tokens(1000, 40), 1))
    out = s.step(0.25)
    assert (out.start, out.ends, out.prefill, out.decode) == (0.25, [0.25], {}, [])
    assert out.idle and out.end == 0.25 and out.duration == 0.0
    assert out.loading == ["r"] and out.admitted == ["r"] and out.tokens == {}


def test_abort_a_waiting_request_and_a_running_one():
    s = make(capacity_blocks=4, max_num_batched_tokens=1000)
    a = request("a", tokens(1000, 60), 5)
    b = request("b", tokens(2000, 60), 5)
    s.add(a)
    s.add(b)
    s.step(0.0)                              # a takes all 4 blocks, b waits
    assert a.state == DECODE and b.state == WAITING and s.counts() == (1, 1)
    s.abort(b, 0.5)
    assert b.state == DONE and b.finish_reason == "abort" and b.t_end == 0.5
    assert list(s.waiting) == [] and s.counts() == (1, 0)
    s.abort(a, 0.7)
    assert a.state == DONE and a.finish_reason == "abort" and a.t_end == 0.7
    assert s.counts() == (0, 0) and s.pool.used_blocks == 0
    assert value(s, "vllm:request_success_total", finished_reason="abort") == 2
    # aborting a finished request changes nothing
    c = request("c", tokens(3000, 20), 1)
    s.add(c)
    run_until_done(s, 1.0)
    assert c.finish_reason == "stop" and not c.aborted
    s.abort(c, 2.0)
    assert c.finish_reason == "stop" and not c.aborted and c.t_end < 2.0
    assert value(s, "vllm:request_success_total", finished_reason="abort") == 2


def test_lookup_keys_and_counters_with_8_token_blocks():
    s = Scheduler(config(block_size=8), Metrics("m", 8, 100, True, 65536), True)
    r = request("r", tokens(1000, 41), 1)
    s.add(r)
    s.step(0.0)
    # (41 - 1) // 8 = 5 lookup keys (not (41 - 1) // 16 = 2)
    assert s.lookup_end(r) == 5 and len(r.hashes) >= 5
    assert r.hashes[:5] == block_hashes(r.prompt, 8)[:5]
    assert s.lookup_done(r, 5, [1, 1, 0, 1, 0]) == 2
    assert r.store_keys_looked_up == 5 and r.store_hit_blocks == 2 and r.store_errors == 0
    assert value(s, "adev_emulator_store_keys_looked_up_total") == 5


def test_tiers_without_a_cost_model_charge_nothing():
    s = make(has_store=True, ram_tier=None, disk_tier=None)
    r = request("r", tokens(1000, 100), 1)
    s.add(r)
    s.step(0.0)
    ready = serve_from_store(s, r, ["ram"] * 3 + ["disk"] * 3, now=0.0)
    assert (r.lookup_s, r.load_s, ready) == (0.0, 0.0, 0.0)
    assert (r.ram_blocks, r.disk_blocks) == (3, 3)
    assert r.tokens_split(BS)["computed"] == 4


def test_gpu_hits_and_readmission_with_8_token_blocks_and_the_default_no_store():
    cfg = config(block_size=8, capacity_blocks=100)
    s = Scheduler(cfg, Metrics("m", 8, 100, True, 65536))      # has_store defaults to False
    a = request("a", tokens(1000, 41), 1)
    s.add(a)
    assert a.hashes == block_hashes(a.prompt, 8)               # 5 whole 8-token blocks
    out = s.step(0.0)
    assert a.state == DECODE and out.prefill == {"a": 41}      # no store read
    assert a.t_ready == 0.0 and a.t_admit == 0.0
    run_until_done(s, out.end)
    b = request("b", tokens(1000, 41), 1, 1.0)
    s.add(b)
    s.step(1.0)
    # hit = min(5 cached, (41 - 1) // 8 = 5) blocks = 40 tokens; 1 token computed
    assert b.gpu_hit_tokens == 40 and s.pool.used_blocks == 6  # ceil(41 / 8) blocks held


def test_metrics_of_a_request_that_arrives_late():
    s = make()
    r = request("r", tokens(1000, 30), 3, 2.0)
    s.add(r)
    t = run_until_done(s, 2.5)
    # admitted at 2.5 (arrived at 2.0): prefill 0.030, first token decode(1, 30) = 0.0113,
    # then decode(1, 31) + decode(1, 32) = 0.01131 + 0.01132
    assert r.t_first == pytest.approx(2.5413) and t == pytest.approx(2.56393)
    assert r.t_last_token == pytest.approx(2.56393) and r.t_end == pytest.approx(2.56393)
    assert value(s, "vllm:time_to_first_token_seconds_sum") == pytest.approx(0.5413)
    assert value(s, "vllm:request_queue_time_seconds_sum") == pytest.approx(0.5)
    assert value(s, "vllm:request_prefill_time_seconds_sum") == pytest.approx(0.0413)
    assert value(s, "vllm:e2e_request_latency_seconds_sum") == pytest.approx(0.56393)
    assert value(s, "vllm:request_decode_time_seconds_sum") == pytest.approx(0.02263)


def test_a_prompt_larger_than_the_pool_ends_at_once_and_the_next_is_admitted():
    s = make(capacity_blocks=4)
    big = request("big", tokens(1000, 65), 1)        # 5 blocks > 4
    small = request("small", tokens(2000, 20), 1, t=0.25)
    s.add(big)
    s.add(small)
    out = s.step(0.5)
    assert big.state == DONE and big.finish_reason == "length" and big.t_end == 0.5
    assert out.finished == ["big"] and out.admitted == ["small"] and out.prefill == {"small": 20}
    assert value(s, "vllm:request_success_total", finished_reason="length") == 1
    # ceil(20 / 16) = 2 whole blocks, not 1.25
    assert s.pool.used_blocks == 2


def test_waiting_requests_queue_by_model_arrival_and_ties_by_prompt():
    """The queue follows arrival in model time, not submission: a request submitted later but
    stamped earlier goes first; requests stamped at one time (within 1e-9 s: the float noise
    of a stamp's trip through wall time) go by prompt length, then tokens, in every run; a
    preempted request put back at the front stays there."""
    s = make()
    late = request("late", tokens(0, 40), 1, t=2.0)
    early = request("early", tokens(100, 40), 1, t=1.0)
    long_ = request("long", tokens(200, 48), 1, t=1.0 + 4e-10)
    short = request("short", tokens(300, 20), 1, t=1.0 - 4e-10)
    for r in (late, early, long_, short):
        s.add(r)
    assert [r.rid for r in s.waiting] == ["short", "early", "long", "late"]
    back = request("back", tokens(400, 20), 1, t=3.0)
    back.admitted_once = True
    s.waiting.appendleft(back)               # as a preemption puts it back
    s.add(request("first", tokens(500, 20), 1, t=0.5))
    assert [r.rid for r in s.waiting] == ["back", "first", "short", "early", "long", "late"]


def test_prefill_budget_shared_in_admission_order():
    s = make()                                       # 64 tokens per step
    a, b, c = (request(x, tokens(1000 * i, n), 1, t=i * 1e-6) for i, (x, n) in
               enumerate((("a", 40), ("b", 23), ("c", 30)), 1))
    for r in (a, b, c):
        s.add(r)
    out = s.step(1e-5)
    # 40 + 23 leave 1 token of budget: c gets 1
    assert out.prefill == {"a": 40, "b": 23, "c": 1} and out.duration == pytest.approx(0.064)
    out = s.step(out.end)
    # a, b decode (budget 64 - 2 = 62): c's 29 tokens + decode(2, 63) = 0.029 + 0.01263
    assert out.prefill == {"c": 29} and out.tokens == {"a": 1, "b": 1}
    assert out.duration == pytest.approx(0.04163)
    d = request("d", tokens(5000, 65), 1, out.end - 2e-6)   # d arrived first
    e = request("e", tokens(6000, 10), 1, out.end - 1e-6)
    s.add(d)
    s.add(e)
    out = s.step(out.end)
    # c decodes: budget 63; d takes all of it, e waits for the next step
    assert out.prefill == {"d": 63} and out.tokens == {"c": 1}
    out = s.step(out.end)
    # d's last 2 tokens then e's 10
    assert out.prefill == {"d": 2, "e": 10}


def test_a_one_token_prefill_chunk():
    s = make()
    r = request("r", tokens(1000, 65), 1)
    s.add(r)
    out = s.step(0.0)
    assert out.prefill == {"r": 64}
    out = s.step(out.end)
    assert out.prefill == {"r": 1} and out.duration == pytest.approx(0.001)


def test_commit_skips_requests_aborted_after_planning():
    s = make()
    a = request("a", tokens(1000, 20), 3)
    b = request("b", tokens(2000, 20), 3)
    s.add(a)
    s.add(b)
    s.admit(0.0)
    plan = s.plan(0.0)
    assert [(r.rid, n) for r, n in plan.prefill] == [("a", 20), ("b", 20)]
    s.abort(a, 0.01)
    s.commit(plan)
    assert a.state == DONE and b.state == DECODE and b.n_computed == 20
    plan = s.plan(plan.end)
    assert [r.rid for r in plan.decode] == ["b"]
    c = request("c", tokens(3000, 20), 3)
    s.add(c)
    s.admit(plan.start)
    plan = s.plan(plan.start)
    s.abort(b, plan.start)
    s.commit(plan)
    assert b.n_gen == 0 and c.state == DECODE


def test_generated_blocks_are_cached_at_finish():
    s = make()
    times = []
    s.on_tokens = lambda r, t: times.append((r.rid, t))
    a = request("a", tokens(1000, 10), 30)           # 40 tokens: 2 whole blocks, none at prefill
    s.add(a)
    run_until_done(s, 0.0)
    seq = a.prompt + a.out_ids[:30]
    assert s.pool.cached_blocks == 2
    assert all(s.pool.contains(h) for h in block_hashes(seq, BS))
    assert times[0] == ("a", pytest.approx(a.t_first)) and times[-1] == ("a", pytest.approx(a.t_end))
    b = request("b", tokens(2000, 20), 30)           # 1 block at prefill, 2 more at finish
    s.add(b)
    run_until_done(s, 10.0)
    assert all(s.pool.contains(h) for h in block_hashes(b.prompt + b.out_ids, BS))
    assert s.pool.cached_blocks == 5


def test_abort_of_a_decoding_request_does_not_cache_its_generated_blocks():
    # horizon 0.02 wall s x 10 = 0.2 model s: int(0.2 / decode(1, 17) 0.01117) = 17 steps
    s = make(horizon_wall_s=0.02)
    a = request("a", tokens(1000, 16), 40)
    s.add(a)
    t = s.step(0.0).end                      # prefill: block 0 cached
    t = s.step(t).end                        # first token
    out = s.step(t)
    assert len(out.ends) == 17 and a.n_gen == 18
    s.abort(a, out.end)
    # 34 tokens hold 2 whole blocks; only the prompt's (cached at prefill) stays: an abort
    # caches nothing generated
    assert a.state == DONE and s.pool.cached_blocks == 1 and s.pool.used_blocks == 0
    b = request("b", tokens(1000, 16), 18)
    s.add(b)
    run_until_done(s, 1.0)
    assert b.finish_reason == "stop" and s.pool.cached_blocks == 2    # a finish caches them


def test_one_generated_token_completing_a_block_is_cached():
    s = make()
    r = request("r", tokens(1000, 15), 1)
    s.add(r)
    run_until_done(s, 0.0)
    assert s.pool.cached_blocks == 1 and s.pool.contains(block_hashes(r.prompt + r.out_ids)[0])


def test_macro_steps_follow_the_growing_context_and_a_tiny_horizon():
    s = make()
    a = request("a", tokens(1000, 30), 1000)
    s.add(a)
    t = s.step(0.0).end
    t = s.step(t).end
    out = s.step(t)
    assert len(out.ends) == 265
    # next: n_gen 266, ctx 296: int(3 / (0.011 + 0.00296)) = 214 steps
    out = s.step(out.end)
    assert len(out.ends) == 214
    # horizon 0.001 wall s x 10 = 0.01 model s < one step: one step per plan
    s = make(horizon_wall_s=0.001)
    a = request("a", tokens(1000, 30), 10)
    s.add(a)
    t = s.step(0.0).end
    t = s.step(t).end
    assert len(s.step(t).ends) == 1


def test_next_ready_only_counts_prefills_ready_strictly_later():
    s = make(has_store=True)
    r = request("r", tokens(1000, 100), 1)
    s.add(r)
    s.step(0.0)
    ready = serve_from_store(s, r, ["ram"] * 6)
    assert ready == pytest.approx(0.008)
    assert s.next_ready(0.0) == pytest.approx(0.008) and s.next_ready(ready) is None
    s.step(ready)                            # prefilled: decoding, no longer counted
    assert r.state == DECODE and s.next_ready(0.0) is None
    run_until_done(s, ready)
    assert s.next_ready(0.0) is None


def test_remote_prefill_without_hooks():
    s = make(kv_link=TierCost("link", 0.001, 1e9))
    r = request("r", tokens(1000, 100), 1)
    r.remote_prefill = True
    s.add(r)
    s.step(0.0)
    # 100 tokens x (1 MB / 16) bytes over 1 GB/s + 1 ms = 0.00725; 99 tokens transferred
    assert r.transfer_s == pytest.approx(0.00725) and r.kv_transfer_tokens == 99
    assert r.ready_time == pytest.approx(0.00725) and r.n_computed == 99
    assert value(s, "vllm:external_prefix_cache_queries_total") == 100
    assert value(s, "vllm:external_prefix_cache_hits_total") == 99


def test_readmission_after_preemption_looks_up_the_sequence_in_8_token_blocks():
    cfg = config(block_size=8, capacity_blocks=10, max_num_batched_tokens=1000)
    s = Scheduler(cfg, Metrics("m", 8, 10, True, 65536))
    a = request("a", tokens(1000, 32), 20)
    b = request("b", tokens(2000, 32), 20)
    s.add(a)
    s.add(b)
    out = s.step(0.0)                        # 4 + 4 blocks, 64 ms
    out = s.step(out.end)                    # first tokens: a 5th block each, 10 of 10 used
    assert out.end == pytest.approx(0.064 + 0.01264) and s.pool.used_blocks == 10
    # 5 blocks hold 40 tokens: 7 more each; decode(2, 66 + 2j), j = 0..6
    out = s.step(out.end)
    assert out.tokens == {"a": 7, "b": 7} and out.duration == pytest.approx(0.08904)
    # b is preempted at 40 tokens; a's last 12 tokens need 2 more blocks: the empty one b's
    # anonymous 5th block left, then b's LRU tail (its 4th prompt block) is evicted
    out = s.step(out.end)
    assert out.preempted == ["b"] and out.finished == ["a"] and s.pool.evicted_blocks == 1
    # b comes back with 40 tokens: (40 - 1) // 8 = 4 blocks looked up, 3 still cached: 24
    # tokens hit, 16 recomputed
    out = s.step(out.end)
    assert out.admitted == ["b"] and out.prefill == {"b": 16}
    assert out.duration == pytest.approx(0.016)


def test_remote_prefill_after_a_local_hit_and_a_plain_request_beside_it():
    s = make(kv_link=TierCost("link", 0.001, 1e9), max_num_batched_tokens=1000)
    events: list[float] = []
    s.on_event = events.append
    w = request("w", tokens(1000, 33), 1)             # not remote: prefills all 33 tokens
    s.add(w)
    t1 = run_until_done(s, 0.0)
    assert t1 == pytest.approx(0.033 + 0.01133)
    assert (w.transfer_s, w.kv_transfer_tokens, events) == (0.0, 0, [])
    # x: the same 33 tokens, remote: hit min(2 cached, (33 - 1) // 16 = 2) blocks, 1 token left:
    # transfer 0.001 + 1 x 62500 B / 1e9 B/s, nothing transferred, the token computed here
    x = request("x", tokens(1000, 33), 1, t1)
    x.remote_prefill = True
    s.add(x)
    s.step(t1)
    assert x.transfer_s == pytest.approx(0.0010625) and x.kv_transfer_tokens == 0
    assert x.n_computed == 32 and events == [pytest.approx(t1 + 0.0010625)]
    t2 = run_until_done(s, t1)
    # TTFT = transfer + 1 token (0.001) + decode(1, 33) 0.01133
    assert x.t_first - t1 == pytest.approx(0.0010625 + 0.001 + 0.01133) and t2 == x.t_end
    # y: 100 tokens sharing w's first 2 blocks: 68 left, 67 transferred, 0.001 + 68 x 62500 / 1e9
    y = request("y", tokens(1000, 33) + tokens(5000, 67), 1, t2)
    y.remote_prefill = True
    s.add(y)
    s.step(t2)
    assert y.gpu_hit_tokens == 32 and y.transfer_s == pytest.approx(0.00525)
    assert y.kv_transfer_tokens == 67 and y.n_computed == 99
    run_until_done(s, t2)
    assert y.t_first - t2 == pytest.approx(0.00525 + 0.001 + 0.012)
    assert y.tokens_split(BS) == {"gpu": 32, "store_ram": 0, "store_disk": 0, "kv_transfer": 67,
                                  "computed": 1}


def test_commit_skips_a_decode_aborted_after_planning_and_serves_the_next():
    s = make()
    a = request("a", tokens(1000, 20), 3)
    b = request("b", tokens(2000, 20), 3)
    s.add(a)
    s.add(b)
    t = s.step(0.0).end                      # both prefilled
    s.admit(t)
    plan = s.plan(t)
    assert [r.rid for r in plan.decode] == ["a", "b"]
    s.abort(a, t)
    s.commit(plan)
    assert a.n_gen == 0 and b.n_gen == 1


def test_decode_blocks_are_taken_at_commit_for_the_steps_run():
    s = make()
    r = request("r", tokens(1000, 15), 34)
    s.add(r)
    t = s.step(0.0).end                      # prefill 15 tokens: 1 block
    assert s.pool.used_blocks == 1
    plan = s.plan(t)                         # first token: 16 tokens still fit in 1 block
    assert len(plan.ends) == 1 and s.pool.used_blocks == 1
    s.commit(plan)
    plan = s.plan(plan.end)                  # the other 33 tokens at once (49 tokens, 4 blocks)
    assert len(plan.ends) == 33 and s.pool.used_blocks == 1    # checked, not taken yet
    plan.truncate(plan.ends[4])              # an event cuts it after 5 steps
    s.commit(plan)                           # 15 + 1 + 5 = 21 tokens: 2 blocks, not 4
    assert r.n_gen == 6 and s.pool.used_blocks == 2 and r.n_anon == 2
    plan = s.plan(plan.end)                  # the last 28 tokens: 49 tokens, 4 blocks
    assert len(plan.ends) == 28
    s.commit(plan)
    assert r.n_gen == 34


def test_an_event_at_a_step_end_ends_the_plan_there_whatever_the_float_noise():
    # steps end at 0.1, 0.2, 0.3, 0.4; an event stamped at 0.2 reaches the engine as 0.2 +- 1e-11
    # (its trip through wall time): the plan ends with the step that ends at 0.2 either way
    from adev.emulator.state import Plan
    for te in (0.2 - 1e-11, 0.2, 0.2 + 1e-11):
        p = Plan(0.0, [0.1, 0.2, 0.3, 0.4], [], [])
        p.truncate(te)
        assert p.ends == [0.1, 0.2], te
    p = Plan(0.0, [0.1, 0.2, 0.3, 0.4], [], [])
    p.truncate(0.2 + 1e-6)                  # inside the third step: it ends with that step
    assert p.ends == [0.1, 0.2, 0.3]


def test_running_decodes_keep_their_next_step_blocks_before_a_waiting_request_is_admitted():
    """vLLM gives running requests their next slots before it schedules waiting ones. Pool of 4
    blocks: a (16 prompt tokens, 1 block) decodes and its first token needs a second block; b
    (48 tokens, 3 blocks) waits. Admitting b would leave a's next step no block and preempt b at
    once; b waits instead until a's blocks come back."""
    s = make(capacity_blocks=4, max_num_batched_tokens=1000)
    a = request("a", tokens(1000, 16), 20)
    s.add(a)
    t = s.step(0.0).end                      # a's prefill: 16 ms, 1 block
    assert a.state == DECODE and s.pool.used_blocks == 1
    b = request("b", tokens(5000, 48), 1, t)
    s.add(b)
    out = s.step(t)                          # 3 free blocks, 1 of them a's next step's
    assert out.admitted == [] and out.preempted == [] and out.decode == ["a"]
    assert b.state == WAITING and value(s, "vllm:num_preemptions_total") == 0
    assert s.pool.used_blocks == 2           # a: 16 + 1 tokens


def test_a_waiting_request_is_admitted_only_with_budget_left():
    """vLLM v1 takes its waiting queue only while the step has token budget left after the
    running requests. a (150 tokens) takes every step's 64 until its last chunk; b (20 tokens),
    behind it, is admitted in the step where a's last 22 tokens leave 42, not at its arrival:
    the same chunks and first tokens as when b is admitted at once, but b's wait is queue time."""
    for within in (True, False):
        s = make(admit_within_budget=within)
        a = request("a", tokens(1000, 150), 1, 0.0)
        b = request("b", tokens(5000, 20), 1, 1e-6)
        s.add(a)
        s.add(b)
        out = s.step(1e-5)
        assert out.prefill == {"a": 64}
        assert out.admitted == (["a"] if within else ["a", "b"])
        out = s.step(out.end)                       # a: 86 left, no budget for b
        assert out.prefill == {"a": 64}
        out = s.step(out.end)                       # a's last 22 leave 42: b takes its 20
        assert out.prefill == {"a": 22, "b": 20} and out.duration == pytest.approx(0.042)
        t_admit = 1e-5 + 0.128 if within else 1e-5
        assert b.t_admit == pytest.approx(t_admit)
        out = s.step(out.end)
        # both first tokens: decode(2, 170) = 0.010 + 0.002 + 0.0017 = 0.0137
        assert out.tokens == {"a": 1, "b": 1} and out.duration == pytest.approx(0.0137)
        assert b.t_first == pytest.approx(1e-5 + 0.170 + 0.0137)
        # queue time: b's admission - its arrival; a was admitted 1e-5 after its arrival
        assert value(s, "vllm:request_queue_time_seconds_sum") == pytest.approx(
            1e-5 + (t_admit - 1e-6))


def test_the_gpu_prefix_lookup_comes_at_admission():
    """A waiting request looks the GPU prefix cache up when it is admitted. p (96 tokens) and
    then a (150 tokens, unrelated) are admitted ahead of b (p's prompt + 40 tokens). Within the
    budget, b is admitted in the step where a's last 55 tokens leave 9; p has finished by then
    and its 6 blocks are cached, so b computes 136 - 96 = 40 tokens. Admitted at its arrival
    (``admit_within_budget = False``) b found nothing cached and computes all 136."""
    prompt_p = tokens(1000, 96)
    hits = {}
    for within in (True, False):
        s = make(admit_within_budget=within)
        p = request("p", prompt_p, 1, 0.0)
        a = request("a", tokens(3000, 150), 1, 1e-6)
        b = request("b", prompt_p + tokens(5000, 40), 1, 2e-6)
        for r in (p, a, b):
            s.add(r)
        out = s.step(1e-5)
        assert out.prefill == {"p": 64}
        out = s.step(out.end)                      # p's last 32, a's first 32
        assert out.prefill == {"p": 32, "a": 32}
        out = s.step(out.end)                      # p's first (and last) token, a's next 63
        assert out.finished == ["p"] and out.prefill.get("a") == 63
        if within:
            # decode(1, 96) = 0.01196; a's 63 ms: the step ends 0.20297 after 1e-5
            assert out.duration == pytest.approx(0.063 + 0.01196)
            out = s.step(out.end)                  # a's last 55 leave 9: b is admitted
            assert out.admitted == ["b"] and out.prefill == {"a": 55, "b": 9}
            assert b.t_admit == pytest.approx(1e-5 + 0.128 + 0.07496)
        run_until_done(s, out.end)
        hits[within] = b.tokens_split(BS)
    assert hits[True] == {"gpu": 96, "store_ram": 0, "store_disk": 0, "kv_transfer": 0,
                          "computed": 40}
    assert hits[False] == {"gpu": 0, "store_ram": 0, "store_disk": 0, "kv_transfer": 0,
                           "computed": 136}


def test_requests_in_their_store_read_take_no_budget():
    """vLLM's connector loads a request's store hits while it waits for its KV, so the step's
    budget stays for the next waiting request: two cold requests arriving together with a store
    are both admitted to their reads at once; without a store the first takes the budget."""
    for store in (True, False):
        s = make(has_store=store)
        a, b = (request(x, tokens(base, 150), 1, t)
                for x, base, t in (("a", 1000, 0.0), ("b", 5000, 1e-6)))
        for r in (a, b):
            s.add(r)
        out = s.step(1e-5)
        if store:
            assert out.admitted == ["a", "b"] and a.state == LOADING and b.state == LOADING
            assert s.budget_left(1e-5) == 64
        else:
            assert out.admitted == ["a"] and out.prefill == {"a": 64} and b.state == WAITING


def test_a_request_admitted_behind_a_prefill_hits_the_blocks_it_has_scheduled():
    """vLLM caches a request's blocks when it schedules their chunk, so a request admitted
    later hits a prefill still running. p (96 tokens) takes the first step's 64; b (p's prompt +
    40) is admitted in the second step, where p's last 32 leave 32, and hits p's 6 blocks, the
    last 2 of them computed in that same step: b computes its own 40 tokens, 32 then 8."""
    prompt_p = tokens(1000, 96)
    s = make()
    p = request("p", prompt_p, 1, 0.0)
    b = request("b", prompt_p + tokens(5000, 40), 1, 1e-6)
    s.add(p)
    s.add(b)
    out = s.step(1e-5)
    assert out.admitted == ["p"] and out.prefill == {"p": 64}
    assert s.pool.cached_blocks == 4                  # p's first 64 tokens, scheduled
    out = s.step(out.end)
    assert out.admitted == ["b"] and out.prefill == {"p": 32, "b": 32}
    assert b.gpu_hit_tokens == 96                     # min(6 blocks, (136 - 1) // 16 = 8)
    out = s.step(out.end)                             # p's first token, b's last 8
    assert out.prefill == {"b": 8} and out.tokens == {"p": 1}
    run_until_done(s, out.end)
    assert b.tokens_split(BS)["computed"] == 40
    # p and b hold the 6 shared blocks once: 6 + b's 2 full blocks of its own (136 + 1 tokens)
    assert s.pool.cached_blocks == 8 and s.pool.used_blocks == 0


def _waiting_for_blocks(**over) -> Scheduler:
    """p's 3 blocks (48 tokens) are cached; a (100 tokens) takes the other 7 of 10 blocks; b (p's
    prompt + 52) hits p's 3 blocks but needs 4 more and waits through a's prefill step and a's
    decode step: 2 retries of 100 queried tokens and 48 hit tokens each."""
    s = make(capacity_blocks=10, max_num_batched_tokens=1000, **over)
    p = request("p", tokens(3000, 48), 1)
    s.add(p)
    t = run_until_done(s, 0.0)
    a = request("a", tokens(1000, 100), 1, t)
    b = request("b", tokens(3000, 48) + tokens(5000, 52), 1, t + 1e-6)
    s.add(a)
    s.add(b)
    out = s.step(t + 1e-5)
    assert out.admitted == ["a"] and out.prefill == {"a": 100} and b.state == WAITING
    out = s.step(out.end)
    assert out.tokens == {"a": 1} and out.finished == ["a"] and b.state == WAITING
    run_until_done(s, out.end)
    assert b.gpu_hit_tokens == 48
    return s


def test_a_request_waiting_for_blocks_counts_a_retry_lookup_per_step():
    """vLLM looks a waiting request up again at every step it cannot allocate its blocks, and
    before 0.26 added each lookup to its prefix cache counters; the emulator counts them apart."""
    s = _waiting_for_blocks()
    assert value(s, "adev_emulator_prefix_cache_retry_queries_total") == 200
    assert value(s, "adev_emulator_prefix_cache_retry_hits_total") == 96
    # vLLM's own counters count each request once, at its admission
    assert value(s, "vllm:prefix_cache_queries_total") == 48 + 100 + 100
    assert value(s, "vllm:prefix_cache_hits_total") == 48


def test_as_a_release_before_0_26_the_prefix_cache_counters_add_every_lookup():
    """count_waiting_lookups (stack.vllm_version before 0.26.0): b's two retried lookups go into
    vLLM's counters too, as that release counted them (vLLM#43736)."""
    s = _waiting_for_blocks(count_waiting_lookups=True)
    assert value(s, "adev_emulator_prefix_cache_retry_queries_total") == 200
    assert value(s, "vllm:prefix_cache_queries_total") == 48 + 100 + 100 + 200
    assert value(s, "vllm:prefix_cache_hits_total") == 48 + 96
