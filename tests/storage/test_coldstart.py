"""Cold recovery: summary arithmetic (hand-made rows), the profile's predicted speed-up, the
emulator's reset of the GPU prefix cache; integration: the embedded stack's tiers beat recompute
by a factor that grows with the context length."""
from __future__ import annotations

import json

import pytest

from adev.config import PrefillTime, TierProfile
from adev.emulator.pool import PrefixPool
from adev.emulator.tokenizer import Tokenizer
from adev.storage.coldstart import Reactivation, make_messages, profile_speedup, summarize


def row(conf, tier, L, ttft, i=0, bw=None, fl=1):
    return Reactivation(configuration=conf, tier=tier, context_tokens=L, session=i, ttft_s=ttft,
                        ttft_client_s=ttft, tokens=None, lookup_s=None, load_s=None,
                        read_bw_bytes_per_s=bw, host_read_bw_bytes_per_s=None,
                        reads_in_flight=fl, evicted=True)


def test_summary_speedup_is_recompute_over_tier_medians():
    rows = [row("gpu-only", "recompute", 1025, 0.08), row("gpu-only", "recompute", 1025, 0.10, 1),
            row("store-ram", "ram", 1025, 0.02, bw=18e9), row("store-ram", "ram", 1025, 0.03, 1,
                                                              bw=20e9, fl=2),
            row("disk-only", "disk", 1025, 0.045)]
    (s,) = summarize(rows)
    assert s.recompute_ttft_s == pytest.approx(0.09)
    assert s.tiers["ram"]["ttft_s"] == pytest.approx(0.025)
    assert s.tiers["ram"]["speedup"] == pytest.approx(0.09 / 0.025)
    assert s.tiers["ram"]["read_bw_bytes_per_s"] == pytest.approx(19e9)
    assert s.tiers["ram"]["reads_in_flight"] == 2
    assert s.tiers["disk"]["speedup"] == pytest.approx(2.0)


def test_profile_speedup_hand_worked():
    ram = TierProfile("ram", 0.0005, 20e9, 20e9)
    # L = 16385: 1024 blocks of 1,572,864 B read at 20 GB/s plus the 1 token left to compute
    back = 0.0005 + 1024 * 1_572_864 / 20e9 + 1 / 14850
    flat = PrefillTime(1 / 14850)
    assert profile_speedup(16385, ram, flat, 16, 1_572_864) == pytest.approx(
        (16385 / 14850) / back)
    assert profile_speedup(16385, ram, flat, 16, 1_572_864) == pytest.approx(13.6, abs=0.05)
    # with attention: 1e-5 s per token + 1e-9 s per token per earlier token. Recompute of 16,385
    # tokens: 0.16385 + 1e-9 * 16385 * 16384 / 2 = 0.16385 + 0.134226 = 0.298076 s; read back
    # 1,024 blocks (0.0805306 s + lookup 0.0005) and compute the last token after 16,384:
    # 1e-5 + 1e-9 * 16384 = 2.6384e-5 s
    att = PrefillTime(1e-5, 1e-9)
    assert profile_speedup(16385, ram, att, 16, 1_572_864) == pytest.approx(
        0.298076 / (0.0005 + 0.0805306 + 2.6384e-5), rel=1e-5)


def test_messages_have_about_the_asked_tokens_and_differ_by_seed():
    tok = Tokenizer()
    for n in (256, 4096):
        got = len(tok.apply_chat_template(make_messages(n, 1), None, True))
        assert abs(got - n) <= 2
    assert make_messages(64, 1) != make_messages(64, 2)


def test_pool_reset_drops_cached_blocks_unless_held():
    p = PrefixPool(8)
    p.allocate(2)
    held = p.register([11, 12])
    assert not p.reset()  # a request still holds them: refused, like vLLM
    p.release(held, 0)
    assert p.cached_blocks == 2 and p.reset()
    assert p.cached_blocks == 0 and p.lookup([11, 12], 33) == 0 and p.available == 8


@pytest.mark.integration
def test_coldstart_embedded_tiers_beat_recompute_more_with_length(tmp_path, capsys):
    from adev.cli import main
    out = tmp_path / "cold.json"
    rc = main(["storage", "coldstart", "--contexts", "1024,8192", "--out", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0
    doc = json.loads(out.read_text())
    rows = doc["rows"]
    assert {r["configuration"] for r in rows} == {"gpu-only", "store-ram", "disk-only"}
    for r in rows:
        assert r["evicted"] is True, r       # the reset took the context off the GPU
        L = r["context_tokens"]
        if r["tier"] != "recompute":           # every full block read back from its tier
            key = "store_ram" if r["tier"] == "ram" else "store_disk"
            assert r["tokens"][key] == (L - 1) // 16 * 16, r
            assert r["read_bw_bytes_per_s"] > 0 and r["reads_in_flight"] == 1
        else:
            assert r["tokens"]["computed"] == L
    short, long_ = doc["summary"]
    for t in ("ram", "disk"):
        assert short["tiers"][t]["speedup"] > 1.0
        assert long_["tiers"][t]["speedup"] > short["tiers"][t]["speedup"]
    assert "tier profiles" in printed and "local-raid0" in printed and "speed-up" in printed
    assert "14850 tok/s for a 19,200-token prompt, attention by position" in printed


async def test_emulator_reset_prefix_cache_route():
    """POST /reset_prefix_cache on an in-process gpu-only endpoint: the same prompt hits the GPU
    cache before the reset and not after it."""
    import httpx
    from aiohttp import web

    from adev.emulator.server import Endpoint
    from tests.emulator.helpers import free_port, make_stack, tmpdir, write_profile
    ep = Endpoint(make_stack(write_profile(tmpdir()), "gpu-only", 50.0), "coder", None, None)
    await ep.start()
    runner = web.AppRunner(ep.app(), access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(timeout=30) as c:
            model = (await c.get(url + "/v1/models")).json()["data"][0]["id"]
            body = {"model": model, "messages": make_messages(1024, 7), "max_tokens": 2}
            first = (await c.post(url + "/v1/chat/completions", json=body)).json()
            again = (await c.post(url + "/v1/chat/completions", json=body)).json()
            r = await c.post(url + "/reset_prefix_cache")
            cold = (await c.post(url + "/v1/chat/completions", json=body)).json()
    finally:
        await runner.cleanup()
    assert r.status_code == 200 and r.content == b""
    assert first["adev"]["tokens"]["gpu"] == 0
    assert again["adev"]["tokens"]["gpu"] == 1024  # (1025 - 1) // 16 full blocks
    assert cold["adev"]["tokens"]["gpu"] == 0 and cold["adev"]["tokens"]["computed"] == 1025
