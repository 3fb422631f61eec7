"""MooncakeTier logic that does not need a master: key format, sampled tier attribution, load batching."""
import time

from adev.emulator.store import MooncakeTier, StoreSettings, block_key


def tier(settings=None):
    return MooncakeTier(settings or StoreSettings(master="127.0.0.1:1", model_name="M", payload_bytes=1024,
                                                  segment_bytes=1 << 24, master_http="127.0.0.1:2"))


def test_keys_like_vllms_connector():
    t = tier()
    assert t.keys([0xABC]) == ["M@tp_rank:0@0000000000000abc"] == [block_key("M", 0xABC)]


def test_chunk_objects_have_their_own_keys_size_and_batches():
    t = tier(StoreSettings(master="127.0.0.1:1", model_name="M", payload_bytes=1024,
                           segment_bytes=1 << 24, batch_keys=128, chunk_blocks=16))
    # a chunk key names C and its last block's hash; one object holds 16 blocks' payload; a put
    # batch holds 128 blocks = 8 objects, a load call the default 1,024 blocks = 64 objects
    assert t.keys([0xABC]) == ["M@tp_rank:0@c16@0000000000000abc"]
    assert (t.obj_bytes, t.batch, t.load_batch) == (16 * 1024, 8, 64)
    try:
        tier(StoreSettings(master="127.0.0.1:1", model_name="M", payload_bytes=1,
                           segment_bytes=1 << 24, chunk_blocks=0))
    except ValueError as e:
        assert "chunk_blocks" in str(e)
    else:
        raise AssertionError("chunk_blocks 0 accepted")


async def test_sampled_tier_query_is_exact_for_runs_and_cheap():
    t = tier()
    keys = [f"k{i}" for i in range(1000)]
    truth = {k: ("disk" if 130 <= i < 700 else "ram") for i, k in enumerate(keys)}
    truth["k999"] = None  # vanished between lookup and query
    asked = []

    async def fake_query(ks):
        asked.extend(ks)
        return {k: truth[k] for k in ks}

    t.tier_query.query = fake_query
    got = await t.tier_query.sampled(keys)
    assert got == [truth[k] for k in keys]
    assert len(asked) < 200  # sampled: ~1/16 of the keys plus the strides around tier changes


async def test_save_puts_every_missing_key_in_one_batch_and_counts_each_refusal():
    """vLLM's connector: one ``batch_is_exist``, then one put of every missing key (the default
    ``batch_keys = 0``), each refused key (-200) counted; a save that finds every key present puts
    nothing; with ``batch_keys`` set, a refused batch ends the save and the rest is skipped."""
    from adev.emulator.store import REFUSED

    def store(batch_keys=0):
        t = tier(StoreSettings(master="127.0.0.1:1", model_name="M", payload_bytes=1024,
                               segment_bytes=1 << 24, master_http=None, batch_keys=batch_keys))
        ops = []

        async def fake_call(op, fn, *args):
            if args:                                  # batch_is_exist(keys)
                ops.append(("exists", list(args[0])))
                return [1 if k in ("k1", "k9") else 0 for k in args[0]]
            b = fn.__defaults__[0]
            ops.append(("put", list(b)))
            return [0, 0] + [REFUSED] * (len(b) - 2)  # the first two fit
        t._call = fake_call
        return t, ops

    t, ops = store()
    keys = [f"k{i}" for i in range(8)]
    res = await t.save(keys)
    assert ops == [("exists", keys), ("put", [k for k in keys if k != "k1"])]
    assert (res.present, res.offered, res.put, res.refused, res.skipped) == (1, 7, 2, 5, 0)
    ops.clear()
    res = await t.save(["k1", "k9"])
    assert ops == [("exists", ["k1", "k9"])] and (res.present, res.put, res.offered) == (2, 0, 0)
    t, ops = store(batch_keys=3)
    res = await t.save(keys)
    assert [o[0] for o in ops] == ["exists", "put"] and ops[1][1] == ["k0", "k2", "k3"]
    assert (res.offered, res.put, res.refused, res.skipped) == (3, 2, 1, 4)


async def test_load_renews_leases_before_each_later_batch():
    """Real I/O is not time-scaled but the lease is: every batch after the first is preceded by a
    ``batch_is_exist`` on exactly its keys (which renews their leases) so a long load cannot
    outlive the lease its lookup granted."""
    t = tier(StoreSettings(master="127.0.0.1:1", model_name="M", payload_bytes=1024,
                           segment_bytes=1 << 24, master_http=None, load_batch_keys=128))
    ops = []

    async def fake_call(op, fn, *args):
        if op == "load" and args:  # exists(batch, op="load")
            ops.append(("renew", list(args[0])))
            return [1] * len(args[0])
        ops.append(("get", None))
        return [1024] * len(fn.__defaults__[0])  # every block of the batch read in full

    t._call = fake_call
    keys = [f"k{i}" for i in range(300)]
    res = await t.load(keys)
    assert [o[0] for o in ops] == ["get", "renew", "get", "renew", "get"]
    assert ops[1][1] == keys[128:256] and ops[3][1] == keys[256:300]
    assert res.loaded == 300


async def test_load_skips_renewal_while_the_lease_is_fresh():
    """With the real lease known, a later batch renews only once half of it has passed since the
    last grant: a fast load costs no extra lookups; a slow one renews (and restarts the clock)."""
    import time
    t = tier(StoreSettings(master="127.0.0.1:1", model_name="M", payload_bytes=1024,
                           segment_bytes=1 << 24, master_http=None, load_batch_keys=100, lease_s=10.0))
    ops = []

    async def fake_call(op, fn, *args):
        if op == "load" and args:
            ops.append("renew")
            return [1] * len(args[0])
        ops.append("get")
        return [1024] * len(fn.__defaults__[0])

    t._call = fake_call
    keys = [f"k{i}" for i in range(300)]
    assert (await t.load(keys, granted_at=time.monotonic())).loaded == 300
    assert ops == ["get", "get", "get"]
    ops.clear()
    assert (await t.load(keys, granted_at=time.monotonic() - 6.0)).loaded == 300
    assert ops == ["get", "renew", "get", "get"]  # stale once; the renewal's grant is fresh


async def test_load_rereads_a_batch_that_outlived_the_scaled_lease():
    """A batch failing with LEASE_EXPIRED (-707) at block k is renewed (batch_is_exist on the
    rest) and re-read from k, at most LEASE_RETRIES times; other failures end the load."""
    from adev.emulator.store import LEASE_EXPIRED, LEASE_RETRIES
    t = tier(StoreSettings(master="127.0.0.1:1", model_name="M", payload_bytes=1024,
                           segment_bytes=1 << 24, master_http=None, load_batch_keys=100, lease_s=10.0))
    ops = []
    script = iter([[1024] * 30 + [LEASE_EXPIRED] * 70] * (LEASE_RETRIES + 1))

    async def fake_call(op, fn, *args):
        if op == "load" and args:
            ops.append(("renew", args[0][0], len(args[0])))
            return [1] * len(args[0])
        b = fn.__defaults__[0]
        ops.append(("get", b[0], len(b)))
        return next(script)[:len(b)]

    t._call = fake_call
    keys = [f"k{i}" for i in range(100)]
    res = await t.load(keys, granted_at=time.monotonic())
    # each attempt reads 30 more blocks; the failure after LEASE_RETRIES renewals ends the load
    assert res.lease_retries == LEASE_RETRIES == 2
    assert ops == [("get", "k0", 100), ("renew", "k30", 70), ("get", "k30", 70),
                   ("renew", "k60", 40), ("get", "k60", 40)]
    assert res.loaded == 90 and res.error


async def _tiers_asked(n, tier_of):
    t = tier()
    keys = [f"k{i}" for i in range(n)]
    asked = []

    async def fake_query(ks):
        asked.append(list(ks))
        return {k: tier_of(int(k[1:])) for k in ks}

    t.tier_query.query = fake_query
    got = await t.tier_query.sampled(keys)
    assert got == [tier_of(i) for i in range(n)]
    return asked


async def test_sampled_tier_query_counts_by_hand():
    # 1000 keys, stride 16: keys 0, 16, .., 992 and 999 (64); then every key strictly inside a
    # stride whose ends differ: 129..143 and 689..703 (15 each), 993..998 (6): 100 keys in all
    def truth(i: int) -> str | None:
        return None if i == 999 else ("disk" if 130 <= i < 700 else "ram")

    asked = await _tiers_asked(1000, truth)
    assert len(asked) == 2 and len(asked[0]) == 64 and asked[0][-1] == "k999"
    assert asked[1] == [f"k{i}" for i in [*range(129, 144), *range(689, 704), *range(993, 999)]]
    # up to 2 strides (32 keys): one full query
    assert await _tiers_asked(32, lambda i: "ram") == [[f"k{i}" for i in range(32)]]
    # 40 keys of one tier: keys 0, 16, 32, 39 only
    assert await _tiers_asked(40, lambda i: "disk") == [["k0", "k16", "k32", "k39"]]


def test_lease_is_stale_after_half_of_it():
    t = tier(StoreSettings(master="127.0.0.1:1", model_name="M", payload_bytes=1024,
                           segment_bytes=1 << 24, lease_s=10.0))
    now = time.monotonic()
    assert not t._lease_stale(now - 4.0)       # 4 s < 10 / 2
    assert t._lease_stale(now - 6.0)
    assert t._lease_stale(None)
    t0 = tier(StoreSettings(master="127.0.0.1:1", model_name="M", payload_bytes=1024,
                            segment_bytes=1 << 24, lease_s=0.0))
    assert t0._lease_stale(now)                # no lease known: always renew


def test_lease_is_not_stale_at_exactly_half(monkeypatch):
    import adev.emulator.store as store
    monkeypatch.setattr(store.time, "monotonic", lambda: 100.0)
    t = tier(StoreSettings(master="127.0.0.1:1", model_name="M", payload_bytes=1024,
                           segment_bytes=1 << 24, lease_s=10.0))
    assert not t._lease_stale(95.0) and t._lease_stale(94.5)
