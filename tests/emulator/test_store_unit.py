"""MooncakeTier logic that does not need a master: key format, sampled tier attribution."""
from adev.emulator.store import MooncakeTier, StoreSettings, block_key


def tier(settings=None):
    return MooncakeTier(settings or StoreSettings(master="127.0.0.1:1", model_name="M", payload_bytes=1024,
                                                  segment_bytes=1 << 24, master_http="127.0.0.1:2"))


def test_keys_like_vllms_connector():
    t = tier()
    assert t.keys([0xABC]) == ["M@tp_rank:0@0000000000000abc"] == [block_key("M", 0xABC)]


async def test_sampled_tier_query_is_exact_for_runs_and_cheap():
    t = tier()
    keys = [f"k{i}" for i in range(1000)]
    truth = {k: ("disk" if 130 <= i < 700 else "ram") for i, k in enumerate(keys)}
    truth["k999"] = None  # vanished between lookup and query
    asked = []

    async def fake_query(ks):
        asked.extend(ks)
        return {k: truth[k] for k in ks}

    t._query = fake_query
    got = await t._tiers(keys)
    assert got == [truth[k] for k in keys]
    assert len(asked) < 200  # sampled: ~1/16 of the keys plus the strides around tier changes
