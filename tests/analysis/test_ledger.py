"""Reuse ledger: incremental hashing (= cold), storage, classification."""
from __future__ import annotations

import json

import numpy as np
import pytest

from adev.analysis.hashing import (
    ALGOS,
    block_keys,
    none_hash_sha256_cbor,
    sha256_cbor_chain,
)
from adev.analysis.ledger import (
    CROSS_SESSION,
    HASH_DTYPE,
    NEW,
    SAME_SESSION,
    TOUCH_DTYPE,
    LedgerWriter,
    classify,
    read_ledger,
    reuse_profile,
)
from tests.analysis.test_hashing import vllm_sha256_cbor_reference

cbor2 = pytest.importorskip("cbor2")


@pytest.mark.parametrize("algo", ALGOS)
def test_incremental_equals_cold(tmp_path, algo):
    rng = np.random.default_rng(0)
    base = rng.integers(0, 151936, 1000, dtype=np.uint32)
    w = LedgerWriter(tmp_path, algo=algo)
    w.add(0.0, "s", "c0", base[:333])                 # 20 full blocks
    w.add(1.0, "s", "c1", base)                       # extends: only blocks 20.. hashed
    assert w.blocks_hashed == 20 + (62 - 20)
    edited = base.copy()
    edited[500] += 1                                  # diverges inside block 31
    w.add(2.0, "s", "c2", edited)
    assert w.blocks_hashed == 62 + (62 - 31)
    w.add(3.0, "other", "c3", base.tolist())          # a new session hashes everything
    w.close()
    led = read_ledger(tmp_path)
    for call, toks in ((0, base[:333]), (1, base), (2, edited), (3, base)):
        got = led.touches["key"][led.touches["call"] == call]
        assert np.array_equal(got, block_keys(toks, algo=algo))
    k1 = block_keys(base, algo=algo)
    k2 = block_keys(edited, algo=algo)
    assert np.array_equal(k1[:31], k2[:31]) and not np.any(k1[31:] == k2[31:])


def test_classification_and_distances(tmp_path):
    blk = [np.arange(i * 16, i * 16 + 16, dtype=np.uint32) for i in range(4)]
    w = LedgerWriter(tmp_path)
    w.add(10.0, "A", "a1", np.concatenate(blk[:2]))       # 2 new
    w.add(15.0, "A", "a2", np.concatenate(blk[:3]))       # 2 same (d=5), 1 new
    w.add(16.0, "B", "b1", np.concatenate(blk[:1]))       # 1 cross (d=1)
    w.add(100.0, "A", "a3", np.concatenate(blk[:4]))      # b0: cross (prev B, d=84);
    w.close()                                              # b1, b2: same (85); b3 new
    led = read_ledger(tmp_path)
    c = classify(led.touches, lease_ttl_s=60.0)
    by = list(zip(led.touches["call"].tolist(), led.touches["pos"].tolist(), c.cls.tolist(),
                  np.nan_to_num(c.distance, nan=-1).tolist(), c.aged.tolist(), strict=True))
    assert by == [
        (0, 0, NEW, -1, False), (0, 1, NEW, -1, False),
        (1, 0, SAME_SESSION, 5.0, False), (1, 1, SAME_SESSION, 5.0, False), (1, 2, NEW, -1, False),
        (2, 0, CROSS_SESSION, 1.0, False),
        (3, 0, CROSS_SESSION, 84.0, True), (3, 1, SAME_SESSION, 85.0, True),
        (3, 2, SAME_SESSION, 85.0, True), (3, 3, NEW, -1, False)]
    p = reuse_profile(led, lease_ttl_s=60.0)
    assert p.touches == 10 and p.unique_blocks == 4 and p.sessions == 2 and p.calls == 4
    assert p.share_new == pytest.approx(0.4)
    assert p.share_same_session == pytest.approx(0.4)
    assert p.share_cross_session == pytest.approx(0.2)
    assert p.aged_share == pytest.approx(0.3)
    assert p.distance_max_s == 85.0
    assert p.distance_p50_s == pytest.approx(np.percentile([5, 5, 1, 84, 85, 85], 50))
    # a time slice keeps whole-history classification
    q = reuse_profile(led, lease_ttl_s=60.0, t0=50.0)
    assert q.touches == 4 and q.share_new == pytest.approx(0.25)
    assert reuse_profile(led).aged_share is None


def test_ownership_view_differs_from_last_toucher(tmp_path):
    """Ownership: same-session when this session touched the block before, cross-session when it
    had not and another had. Last toucher: by whoever touched the block last."""
    blk = [np.arange(i * 16, i * 16 + 16, dtype=np.uint32) for i in range(4)]
    w = LedgerWriter(tmp_path)
    w.add(10.0, "A", "a1", np.concatenate(blk[:2]))       # b0 b1 new
    w.add(15.0, "A", "a2", np.concatenate(blk[:3]))       # b0 b1 same/same; b2 new
    w.add(16.0, "B", "b1", np.concatenate(blk[:1]))       # b0: B never had it, A had: cross/cross
    w.add(100.0, "A", "a3", np.concatenate(blk[:4]))      # b0: A had it (own), last toucher B
    w.add(120.0, "B", "b2", np.concatenate(blk[:2]))      # b0: B had it, last A; b1: B never
    w.close()
    led = read_ledger(tmp_path)
    c = classify(led.touches)
    assert c.owner_cls.tolist() == [NEW, NEW, SAME_SESSION, SAME_SESSION, NEW, CROSS_SESSION,
                                    SAME_SESSION, SAME_SESSION, SAME_SESSION, NEW,
                                    SAME_SESSION, CROSS_SESSION]
    assert c.cls.tolist() == [NEW, NEW, SAME_SESSION, SAME_SESSION, NEW, CROSS_SESSION,
                              CROSS_SESSION, SAME_SESSION, SAME_SESSION, NEW,
                              CROSS_SESSION, CROSS_SESSION]
    p = reuse_profile(led)
    # 12 touches: ownership same 6, cross 2; last toucher same 4, cross 4
    assert p.owner_share_same_session == pytest.approx(6 / 12)
    assert p.owner_share_cross_session == pytest.approx(2 / 12)
    assert p.share_same_session == pytest.approx(4 / 12)
    assert p.share_cross_session == pytest.approx(4 / 12)
    # a slice keeps whole-history ownership: from t=100, 6 touches, b0 of a3 and b2 own
    q = reuse_profile(led, t0=100.0)
    assert q.touches == 6
    assert q.owner_share_same_session == pytest.approx(4 / 6)
    assert q.owner_share_cross_session == pytest.approx(1 / 6)


def test_aged_reuse_boundary_is_strictly_above_the_lease_ttl(tmp_path):
    """A block reused exactly one lease TTL after its last touch is not aged (its lease has just
    expired at that instant but aged means distance > TTL); a hair later it is."""
    blk = [np.arange(i * 16, i * 16 + 16, dtype=np.uint32) for i in range(2)]
    w = LedgerWriter(tmp_path)
    w.add(10.0, "A", "a1", np.concatenate(blk[:2]))     # 2 new
    w.add(15.0, "A", "a2", np.concatenate(blk[:1]))     # b0: same, d=5.0 == TTL -> not aged
    w.add(15.25, "B", "b1", np.concatenate(blk[:2]))    # b0: d=0.25; b1: d=5.25 > TTL -> aged
    w.close()
    led = read_ledger(tmp_path)
    c = classify(led.touches, lease_ttl_s=5.0)
    assert np.nan_to_num(c.distance, nan=-1).tolist() == [-1, -1, 5.0, 0.25, 5.25]
    assert c.aged.tolist() == [False, False, False, False, True]
    assert reuse_profile(led, lease_ttl_s=5.0).aged_share == pytest.approx(1 / 5)
    assert reuse_profile(led, lease_ttl_s=5.25).aged_share == 0.0


def test_crash_tail_and_resume(tmp_path):
    w = LedgerWriter(tmp_path)
    w.add(1.0, "s", "c0", np.arange(48, dtype=np.uint32))
    w.close()
    with open(tmp_path / "ledger" / "touches.bin", "ab") as fh:
        fh.write(b"\x01" * 11)                         # a torn record
    led = read_ledger(tmp_path)
    assert len(led.touches) == 3 and led.torn_bytes == 11
    w = LedgerWriter(tmp_path)                         # resumes, cuts the torn tail
    w.add(2.0, "s2", "c1", np.arange(32, dtype=np.uint32))
    w.close()
    led = read_ledger(tmp_path)
    assert len(led.touches) == 5 and led.torn_bytes == 0
    assert led.touches["call"].tolist() == [0, 0, 0, 1, 1]
    assert led.sessions == {0: "s", 1: "s2"}
    assert (tmp_path / "ledger" / "touches.bin").stat().st_size == 5 * TOUCH_DTYPE.itemsize
    with pytest.raises(ValueError, match="algo"):
        LedgerWriter(tmp_path, algo="sha256_cbor")
    calls = [json.loads(x) for x in (tmp_path / "ledger" / "calls.jsonl").read_text().splitlines()]
    assert [c["n_blocks"] for c in calls] == [3, 2]


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="allowed values"):
        LedgerWriter(tmp_path, algo="md5")
    with pytest.raises(ValueError, match="block_size"):
        LedgerWriter(tmp_path, block_size=0)
    w = LedgerWriter(tmp_path)
    with pytest.raises(ValueError, match="flat"):
        w.add(0.0, "s", "c", [[1, 2]])
    w.close()
    with pytest.raises(ValueError, match="closed"):
        w.add(0.0, "s", "c", [1, 2])


def test_sha256_cbor_ledger_keeps_full_digests(tmp_path):
    toks = np.arange(40, dtype=np.uint32)
    with LedgerWriter(tmp_path, algo="sha256_cbor", hash_seed="7") as w:
        w.add(0.0, "s", "c", toks)
    led = read_ledger(tmp_path)
    ref = vllm_sha256_cbor_reference(toks, 16, "7")
    assert led.meta["none_hash"] == none_hash_sha256_cbor("7").hex()
    assert set(led.digests().values()) == set(ref)
    assert led.touches["key"].tolist() == [int.from_bytes(d[:8], "little") for d in ref]


def test_direct_cbor_encoder_at_every_width_boundary():
    from adev.analysis.hashing import _cbor_encode_direct, _cbor_tokens
    vals = [0, 1, 23, 24, 25, 255, 256, 257, 65535, 65536, 65537, 2**18, 2**24 + 5, 2**32 - 1]
    out, lens = _cbor_encode_direct(np.array(vals, dtype=np.uint32))
    for v, row, n in zip(vals, out, lens, strict=True):
        assert bytes(row[:n]) == cbor2.dumps(v), v
    # ids above the lookup table go through the direct encoder; below, through the table
    for toks in ([5, 300, 70000, 2**18 + 1], [5, 300, 70000]):
        enc, offs = _cbor_tokens(np.array(toks, dtype=np.uint32))
        assert enc == b"".join(cbor2.dumps(v) for v in toks)
        assert offs.tolist() == [0] + np.cumsum([len(cbor2.dumps(v)) for v in toks]).tolist()


def test_block_keys_defaults_and_bad_algo():
    toks = np.arange(70, dtype=np.uint32)
    assert len(block_keys(toks)) == 4                                # 16-token blocks
    assert np.array_equal(block_keys(toks), block_keys(toks, 16, "fast"))
    assert np.array_equal(block_keys(toks, algo="sha256_cbor"),
                          block_keys(toks, 16, "sha256_cbor", hash_seed="0"))
    ref = vllm_sha256_cbor_reference(toks, 16, "0")
    assert block_keys(toks, algo="sha256_cbor").tolist() == [
        int.from_bytes(d[:8], "little") for d in ref]
    assert len(block_keys(toks, 7)) == 10 and len(block_keys(toks[:15])) == 0
    with pytest.raises(ValueError, match=r"^algo: 'md5' is not allowed; allowed values: "
                                         r"fast, sha256_cbor$"):
        block_keys(toks, algo="md5")


def test_lookup_table_built_fresh_and_its_upper_edge(monkeypatch):
    from adev.analysis import hashing as L
    monkeypatch.setattr(L, "_enc_table", None)           # as in a fresh process
    monkeypatch.setattr(L, "_len_table", None)
    toks = [0, 23, 24, 255, 256, 65535, 65536, L._TABLE_MAX - 1]
    enc, _ = L._cbor_tokens(np.array(toks, dtype=np.uint32))
    assert enc == b"".join(cbor2.dumps(v) for v in toks)
    assert L._enc_table.shape == (L._TABLE_MAX, 5) and L._len_table[L._TABLE_MAX - 1] == 5
    edge = [7, L._TABLE_MAX]                             # the first id past the table
    assert L._cbor_tokens(np.array(edge, dtype=np.uint32))[0] == b"".join(map(cbor2.dumps, edge))


@pytest.mark.parametrize("algo", ALGOS)
def test_block_keys_of_lists_and_short_prompts(algo):
    toks = list(range(100000, 100040))
    keys = block_keys(toks, algo=algo)
    assert keys.dtype == np.uint64 and len(keys) == 2
    assert np.array_equal(keys, block_keys(np.array(toks, dtype=np.uint32), algo=algo))
    short = block_keys(toks[:15], algo=algo)
    assert short.dtype == np.uint64 and len(short) == 0


def test_resume_keeps_session_indices_and_forget_drops_state(tmp_path):
    a, b = np.arange(64, dtype=np.uint32), np.arange(1000, 1048, dtype=np.uint32)
    w = LedgerWriter(tmp_path)
    w.add(1.0, "A", "a1", a)
    w.add(2.0, "B", "b1", b)
    w.close()
    w = LedgerWriter(tmp_path)
    w.add(3.0, "B", "b2", b)        # B keeps index 1 after the resume; C gets the next one
    w.add(4.0, "C", "c1", a)
    assert w.blocks_hashed == 3 + 4  # no incremental state survives a reopen
    w.add(5.0, "C", "c2", a)
    assert w.blocks_hashed == 7      # C's state: nothing new to hash
    w.forget("C")
    w.add(6.0, "C", "c3", a)
    assert w.blocks_hashed == 11     # forgotten: hashed from scratch
    w.close()
    led = read_ledger(tmp_path)
    by_call = {int(c): int(s) for c, s in zip(led.touches["call"], led.touches["session"], strict=True)}
    assert by_call == {0: 0, 1: 1, 2: 1, 3: 2, 4: 2, 5: 2}
    assert led.sessions == {0: "A", 1: "B", 2: "C"}
    with pytest.raises(ValueError) as e:
        LedgerWriter(tmp_path, block_size=8)
    assert str(e.value) == (f"ledger at {tmp_path / 'ledger'}: block_size is 16, this writer was "
                            "asked for 8")


def test_reader_skips_bad_lines_and_torn_digests(tmp_path):
    from adev.analysis.ledger import has_ledger
    assert not has_ledger(tmp_path)
    w = LedgerWriter(tmp_path, algo="sha256_cbor")
    w.add(1.0, "A", "a1", np.arange(32, dtype=np.uint32))
    w.add(2.0, "B", "b1", np.arange(100, 116, dtype=np.uint32))
    w.close()
    assert has_ledger(tmp_path) and has_ledger(type("RD", (), {"path": tmp_path})())
    d = tmp_path / "ledger"
    lines = (d / "calls.jsonl").read_text().splitlines()
    (d / "calls.jsonl").write_text(lines[0] + "\n{corrupt\n" + lines[1] + "\n")
    with open(d / "hashes.bin", "ab") as fh:
        fh.write(b"\x07" * 5)                            # a torn digest record
    led = read_ledger(tmp_path)
    assert [c["call_id"] for c in led.calls] == ["a1", "b1"]   # the bad line skipped, not the rest
    dg = led.digests()
    ref = vllm_sha256_cbor_reference(np.arange(32)) + vllm_sha256_cbor_reference(np.arange(100, 116))
    assert dg == {int.from_bytes(x[:8], "little"): x for x in ref}


def test_classification_cached_per_lease_ttl(tmp_path):
    w = LedgerWriter(tmp_path)
    w.add(0.0, "A", "a1", np.arange(16, dtype=np.uint32))
    w.add(10.0, "A", "a2", np.arange(16, dtype=np.uint32))
    w.close()
    led = read_ledger(tmp_path)
    assert led.classified().aged.tolist() == [False, False]
    assert led.classified(5.0).aged.tolist() == [False, True]
    assert led.classified(20.0).aged.tolist() == [False, False]
    assert led.classified(5.0) is led.classified(5.0)


def test_reuse_profile_slices_and_per_class_distances(tmp_path):
    blk = [np.arange(i * 16, i * 16 + 16, dtype=np.uint32) for i in range(4)]
    w = LedgerWriter(tmp_path)
    w.add(10.0, "A", "a1", np.concatenate(blk[:2]))       # 2 new
    w.add(15.0, "A", "a2", np.concatenate(blk[:3]))       # 2 same (d=5), 1 new
    w.add(16.0, "B", "b1", np.concatenate(blk[:1]))       # 1 cross (d=1)
    w.add(50.0, "B", "b2", blk[0][:10])                   # no full block: no touch, not a call
    w.add(100.0, "A", "a3", np.concatenate(blk[:4]))      # cross (84), same (85, 85), new
    w.close()
    led = read_ledger(tmp_path)
    p = reuse_profile(led, lease_ttl_s=60.0)
    assert (p.touches, p.calls, p.sessions, p.unique_blocks) == (10, 4, 2, 4)
    same, cross = [5, 5, 85, 85], [1, 84]
    assert p.by_class == {
        "same_session": {"p50_s": 45.0, "p99_s": pytest.approx(np.percentile(same, 99)),
                         "max_s": 85.0},
        "cross_session": {"p50_s": 42.5, "p99_s": pytest.approx(np.percentile(cross, 99)),
                          "max_s": 84.0}}
    assert p.distance_p99_s == pytest.approx(np.percentile(same + cross, 99))
    # [15, 100): calls a2 and b1 -- 3 distinct blocks, classified against the whole history
    q = reuse_profile(led, lease_ttl_s=60.0, t0=15.0, t1=100.0)
    assert (q.touches, q.calls, q.sessions, q.unique_blocks) == (4, 2, 2, 3)
    assert (q.share_new, q.share_same_session, q.share_cross_session) == (0.25, 0.5, 0.25)
    assert q.aged_share == 0.0 and (q.distance_p50_s, q.distance_max_s) == (5.0, 5.0)
    assert q.by_class["same_session"]["max_s"] == 5.0
    assert q.by_class["cross_session"] == {"p50_s": 1.0, "p99_s": 1.0, "max_s": 1.0}
    r = reuse_profile(led, lease_ttl_s=60.0, t0=16.0, t1=100.0)     # t0 inclusive, t1 exclusive
    assert (r.touches, r.calls, r.sessions, r.unique_blocks, r.share_cross_session) == (1, 1, 1, 1,
                                                                                        1.0)
    s = reuse_profile(led, lease_ttl_s=60.0, t1=15.0)
    assert (s.touches, s.calls, s.share_new) == (2, 1, 1.0)
    u = reuse_profile(led, lease_ttl_s=60.0, t0=100.0)
    assert (u.touches, u.aged_share, u.distance_max_s) == (4, 0.75, 85.0)
    e = reuse_profile(led, lease_ttl_s=60.0, t0=16.5, t1=17.0)
    assert (e.touches, e.calls, e.sessions, e.unique_blocks) == (0, 0, 0, 0)
    assert e.share_new is None and e.aged_share is None and e.distance_p50_s is None
    assert e.by_class["same_session"] == {"p50_s": None, "p99_s": None, "max_s": None}


M64 = (1 << 64) - 1


def _mix_ref(x):
    """splitmix64's finaliser on Python ints (the fast chain's documented mixer)."""
    x = (x + 0x9E3779B97F4A7C15) & M64
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def _fast_chain_ref(tokens, bs, first=0, s_prev=0):
    """The fast chain written out on Python ints: h = mix(h ^ word) over the block's words (two
    tokens per 64-bit little-endian word for even block sizes, one per word otherwise), starting
    from the seed; c = mix(h ^ pos * K_POS); S = S_prev + c; key = mix(S ^ pos * K_KEY)."""
    keys, states, s = [], [], s_prev
    for b in range(first, len(tokens) // bs):
        blk = [int(x) for x in tokens[b * bs:(b + 1) * bs]]
        words = ([blk[i] | (blk[i + 1] << 32) for i in range(0, bs, 2)] if bs % 2 == 0 else blk)
        h = 0xE7037ED1A0B428DB
        for wd in words:
            h = _mix_ref(h ^ wd)
        c = _mix_ref(h ^ ((b * 0xD6E8FEB86659FD93) & M64))
        s = (s + c) & M64
        states.append(s)
        keys.append(_mix_ref(s ^ ((b * 0xA0761D6478BD642F) & M64)))
    return keys, states


@pytest.mark.parametrize("bs", [16, 7, 2, 1])
def test_fast_chain_matches_its_definition(bs):
    from adev.analysis.ledger import fast_chain
    toks = np.random.default_rng(bs).integers(0, 2**32, 5 * bs + 3, dtype=np.uint64).astype(np.uint32)
    keys, states = fast_chain(toks, bs)
    rk, rs = _fast_chain_ref(toks, bs)
    assert keys.tolist() == rk and states.tolist() == rs
    # resumed from block 2 with the state of block 1: the same keys
    k2, s2 = fast_chain(toks, bs, 2, int(states[1]))
    assert k2.tolist() == rk[2:] and s2.tolist() == rs[2:]
    nb = len(toks) // bs
    assert fast_chain(toks, bs, nb)[0].tolist() == [] and fast_chain(toks, bs, nb + 3)[1].tolist() == []


def test_sha256_cbor_block_sizes_past_the_one_byte_array_header():
    toks = np.random.default_rng(5).integers(0, 200000, 900, dtype=np.uint32)
    for bs in (23, 255, 256, 300):
        assert sha256_cbor_chain(toks, bs, 0, none_hash_sha256_cbor("0")) == \
            vllm_sha256_cbor_reference(toks, bs, "0")


def test_writer_records_and_metadata(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONHASHSEED", "7")
    d = tmp_path / "not" / "yet"
    w = LedgerWriter(d, algo="sha256_cbor", block_size=1)     # one-token blocks are allowed
    w.add(1.5, "A", "a1", [1, 2, 3])
    w.add(2.5, "B", "b1", [1, 2])
    assert (w.blocks_touched, w.blocks_hashed) == (5, 5)       # B has no state of its own
    assert w.hash_seconds >= 0
    w.close()
    with pytest.raises(ValueError, match="^ledger writer is closed$"):
        w.add(3.0, "A", "a2", [1])
    meta = json.loads((d / "ledger" / "meta.json").read_text())
    none = none_hash_sha256_cbor("7")
    assert {k: meta[k] for k in ("format", "block_size", "algo", "hash_seed", "none_hash")} == \
        {"format": 1, "block_size": 1, "algo": "sha256_cbor", "hash_seed": "7",
         "none_hash": none.hex()}
    assert [tuple(x) for x in meta["touch_dtype"]] == TOUCH_DTYPE.descr
    calls = [json.loads(x) for x in (d / "ledger" / "calls.jsonl").read_text().splitlines()]
    for c in calls:
        assert c.pop("hash_s") >= 0
    assert calls == [{"call": 0, "t": 1.5, "session": 0, "session_id": "A", "call_id": "a1",
                      "n_tokens": 3, "n_blocks": 3, "n_hashed": 3},
                     {"call": 1, "t": 2.5, "session": 1, "session_id": "B", "call_id": "b1",
                      "n_tokens": 2, "n_blocks": 2, "n_hashed": 2}]
    assert (d / "ledger" / "calls.jsonl").read_text().startswith('{"call":0,"t":1.5,')
    led = read_ledger(d)
    assert led.touches["pos"].tolist() == [0, 1, 2, 0, 1]
    assert led.touches["t"].tolist() == [1.5, 1.5, 1.5, 2.5, 2.5]
    assert (d / "ledger" / "hashes.bin").stat().st_size == 5 * 40
    with open(d / "ledger" / "hashes.bin", "ab") as fh:
        fh.write(b"\x01" * 9)
    LedgerWriter(d, algo="sha256_cbor", block_size=1).close()  # reopening cuts the torn record
    assert (d / "ledger" / "hashes.bin").stat().st_size == 5 * 40
    f = LedgerWriter(tmp_path / "fast")
    f.close()
    meta = json.loads((tmp_path / "fast" / "ledger" / "meta.json").read_text())
    assert meta["hash_seed"] is None and meta["none_hash"] is None
    assert not (tmp_path / "fast" / "ledger" / "hashes.bin").exists()
    with pytest.raises(ValueError, match=r"^algo: 'md5' is not allowed; allowed values: fast, "
                                         r"sha256_cbor$"):
        LedgerWriter(tmp_path, algo="md5")


def test_reader_sorts_touches_written_out_of_time_order(tmp_path):
    w = LedgerWriter(tmp_path)
    w.add(3.0, "A", "a1", np.arange(16, dtype=np.uint32))
    w.add(9.0, "B", "b1", np.arange(100, 116, dtype=np.uint32))
    w.add(5.0, "C", "c1", np.arange(200, 232, dtype=np.uint32))   # a late writer, earlier t
    w.forget("nobody")                                             # unknown session: no error
    w.close()
    led = read_ledger(tmp_path)
    assert led.touches["t"].tolist() == [3.0, 5.0, 5.0, 9.0]
    assert led.touches["call"].tolist() == [0, 2, 2, 1] and led.touches["pos"].tolist() == [0, 0, 1, 0]
    (tmp_path / "two").mkdir()
    w = LedgerWriter(tmp_path / "two")
    w.add(2.0, "A", "a1", np.arange(16, dtype=np.uint32))
    w.add(1.0, "A", "a2", np.arange(100, 116, dtype=np.uint32))
    w.close()
    assert read_ledger(tmp_path / "two").touches["t"].tolist() == [1.0, 2.0]


def test_reader_without_touches_and_profile_figures(tmp_path):
    LedgerWriter(tmp_path).close()
    (tmp_path / "ledger" / "touches.bin").unlink()
    led = read_ledger(tmp_path)
    assert len(led.touches) == 0 and led.torn_bytes == 0
    (tmp_path / "p").mkdir()
    w = LedgerWriter(tmp_path / "p")
    w.add(0.0, "A", "a1", np.arange(48, dtype=np.uint32))
    w.add(1.0, "A", "a2", np.arange(16, dtype=np.uint32))          # block 0 again: d = 1
    w.add(2.0, "A", "a3", np.arange(32, dtype=np.uint32))          # block 1 again: d = 2
    w.add(4.0, "B", "b1", np.arange(48, dtype=np.uint32)[:40])     # blocks 0, 1: d = 3, 2
    w.add(6.0, "C", "c1", np.arange(5, dtype=np.uint32))           # no full block
    w.add(8.0, "A", "a4", np.arange(48, dtype=np.uint32))          # 0: 4, 1: 4, 2: 8
    assert w.hash_seconds < 0.5                                     # CPU seconds, from 0
    w.close()
    p = reuse_profile(read_ledger(tmp_path / "p"), lease_ttl_s=60.0)
    assert p.lease_ttl_s == 60.0 and p.sessions == 3 and p.calls == 5   # C touched nothing
    d = sorted([1, 2, 2, 3, 2, 4, 4, 8])
    assert p.distance_p99_s == pytest.approx(np.percentile(d, 99)) and p.distance_p99_s < 8.0
    meta = json.loads((tmp_path / "p" / "ledger" / "meta.json").read_text())
    assert [tuple(x) for x in meta["hash_dtype"]] == HASH_DTYPE.descr


def test_resume_with_the_last_session_first(tmp_path):
    w = LedgerWriter(tmp_path)
    for i, s in enumerate("ABC"):
        w.add(float(i), s, f"{s}1", np.arange(16 * i, 16 * i + 16, dtype=np.uint32))
    w.close()
    w = LedgerWriter(tmp_path)
    w.add(5.0, "C", "C2", np.arange(16, dtype=np.uint32))
    w.add(6.0, "D", "D1", np.arange(16, dtype=np.uint32))
    w.close()
    led = read_ledger(tmp_path)
    assert led.touches["session"].tolist() == [0, 1, 2, 2, 3]


def test_hash_time_recorded_per_call_and_in_total(tmp_path):
    w = LedgerWriter(tmp_path, algo="sha256_cbor")
    rng = np.random.default_rng(1)
    for i in range(2):      # 2 x 500 blocks of sha256: well above the microsecond rounding
        w.add(float(i), f"s{i}", f"c{i}", rng.integers(0, 150000, 8000, dtype=np.uint32))
    total = w.hash_seconds
    w.close()
    calls = read_ledger(tmp_path).calls
    hs = [c["hash_s"] for c in calls]
    assert all(0 < h < 5.0 for h in hs) and all(h == round(h, 6) for h in hs)
    assert total == pytest.approx(sum(hs), abs=2e-6)


def test_reader_keeps_write_order_within_a_time_when_sorting(tmp_path):
    w = LedgerWriter(tmp_path)
    w.add(9.0, "A", "a1", np.arange(16 * 300, dtype=np.uint32))
    w.add(1.0, "B", "b1", np.arange(100000, 100000 + 16 * 300, dtype=np.uint32))
    w.close()
    t = read_ledger(tmp_path).touches
    assert t["call"].tolist() == [1] * 300 + [0] * 300
    assert t["pos"].tolist() == list(range(300)) * 2       # a stable sort
