"""What planning reads from a run's records: a hand-made run of three calls."""
from __future__ import annotations

import pytest

from adev.config import ConfigError
from adev.records import CallRecord, RunDir
from adev.storage.runstats import prefill_time_per_token, run_kv

BPT = 98_304  # qwen3-coder-30b-a3b


def make(tmp_path, server: bool = True, profile: bool = True):
    (tmp_path / "r1").mkdir()
    rd = RunDir(tmp_path / "r1")
    stack = {"profile": "qwen3-coder-30b-a3b", "payload_scale": 64, "store": {"lease_ttl_s": 5}}
    rd.write_json("manifest.json", {"run_id": "r1", "time_scale": 10.0,
                                    "config": {"stack": stack} if profile else {}})

    def call(sid, cid, t, first, end, prompt, cached, gpu, ram=0):
        srv = {"tokens": {"gpu": gpu, "store_ram": ram, "store_disk": 0,
                          "computed": prompt - gpu - ram}} if server else None
        rd.append(CallRecord(run_id="r1", session_id=sid, call_id=cid, endpoint="coder",
                             t_sent=t, t_first_content=first, t_end=end, prompt_tokens=prompt,
                             cached_tokens=cached, server=srv))
    call("s1", "c1", 0.0, 0.5, 1.0, 1000, 0, 0)            # uncached: 0.5 s / 1000 tokens
    call("s1", "c2", 10.0, 10.1, 11.0, 3000, 992, 992)     # GPU hit: not used for t_prefill
    call("s2", "c3", 20.0, 20.3, 3600.0, 2000, 0, 0)       # uncached: 0.3 s / 2000 tokens
    call("s2", "c4", 30.0, 30.1, 31.0, 2000, 1024, 0, 1024)  # store hit: not used either
    rd.close()
    return tmp_path / "r1"


def test_prefill_time_is_median_of_uncached_calls(tmp_path):
    t, n = prefill_time_per_token(make(tmp_path))
    assert n == 2
    assert t == pytest.approx((0.5 / 1000 + 0.3 / 2000) / 2)  # median of two = their mean


def test_kv_per_session_and_new_kv_per_hour(tmp_path):
    k = run_kv(make(tmp_path))
    assert k.sessions == 2 and k.bytes_per_token == BPT
    assert k.kv_per_session_max_bytes == 3000 * BPT
    assert k.kv_per_session_mean_bytes == (3000 + 2000) / 2 * BPT
    # computed: 1000 + 2008 + 2000 + 976 = 5984 tokens over 0 .. 3600 s = one hour
    assert k.computed_tokens == 5984 and k.span_s == 3600.0
    assert k.new_kv_bytes_per_hour == pytest.approx(5984 * BPT)
    assert k.computed_source.startswith("emulator")


def test_without_extension_fields_uses_cached_tokens(tmp_path):
    k = run_kv(make(tmp_path, server=False))
    assert k.computed_tokens == 1000 + 2008 + 2000 + 976
    assert k.computed_source == "prompt_tokens - cached_tokens"


def test_missing_profile_and_missing_run(tmp_path):
    with pytest.raises(ConfigError, match="names no model profile"):
        run_kv(make(tmp_path, profile=False))
    assert run_kv(tmp_path / "r1", bytes_per_token=10).bytes_per_token == 10
    with pytest.raises(ConfigError, match="not found"):
        run_kv(tmp_path / "nope")


def test_kv_per_session_is_the_largest_working_set_with_a_reuse_ledger(tmp_path):
    from adev.analysis.ledger import LedgerWriter
    rd = RunDir.create("r2", base=tmp_path)
    rd.write_json("manifest.json", {"run_id": "r2", "time_scale": 10.0, "config": {
        "stack": {"profile": "qwen3-coder-30b-a3b", "store": {"lease_ttl_s": 5}}}})
    lead = list(range(16))                        # one block every agent's prompt begins with
    a1, b1 = lead + list(range(100, 148)), lead + list(range(200, 248))   # 4 blocks each
    a2, b2 = a1 + list(range(300, 332)), b1 + list(range(400, 416))       # 6 and 5 blocks
    c1, c2 = list(range(500, 532)), list(range(500, 580))                 # one conversation
    led = LedgerWriter(rd, block_size=16)
    for t, (sid, cid, tok) in enumerate([("s1", "a1", a1), ("s1", "b1", b1), ("s2", "c1", c1),
                                         ("s1", "a2", a2), ("s1", "b2", b2), ("s2", "c2", c2)]):
        led.add(float(t), sid, cid, tok)
        rd.append(CallRecord(run_id="r2", session_id=sid, call_id=cid, endpoint="coder",
                             t_sent=float(t), t_end=t + 0.5, prompt_tokens=len(tok),
                             completion_tokens=1))
    led.close()
    rd.close()
    k = run_kv(rd.path)
    # s1: a1 64; b1 64 + a1's 3 blocks past the shared one = 112; a2 96 + b1's 3 = 144; b2 80
    # (a has no later call): 144. s2: its largest prompt, 80. Largest prompts would give 96, 80
    assert k.kv_per_session_source == "largest working set (reuse ledger)"
    assert (k.kv_per_session_max_bytes, k.kv_per_session_mean_bytes) == (144 * BPT, 112 * BPT)
