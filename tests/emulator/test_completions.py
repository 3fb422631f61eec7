"""The HTTP surface in-process: /v1/completions, ignore_eos / min_tokens, unknown models,
/version and /ping, continuous usage, the replay policy and disaggregated prefill."""
from __future__ import annotations

import json

import httpx
import pytest
from aiohttp import web

from adev.emulator.server import Endpoint
from adev.emulator.tokenizer import IM_END
from tests.emulator.helpers import free_port, make_stack, prompt_messages, tmpdir, write_profile

MODEL = "Qwen3-Coder-30B-A3B-Instruct"


@pytest.fixture
async def endpoint():
    started = []

    async def make(configuration="gpu-only", time_scale=100.0, policy="length", kv_role="both",
                   name="coder", model=None, **prof):
        w = tmpdir()
        st = make_stack(write_profile(w, **prof), configuration, time_scale)
        st = type(st)(**{**st.__dict__, "policy": policy,
                         "endpoints": [type(st.endpoints[0])(name, model=model, kv_role=kv_role)]})
        ep = Endpoint(st, name, None, None)
        await ep.start()
        runner = web.AppRunner(ep.app(), access_log=None)
        await runner.setup()
        port = free_port()
        ep.port = port
        await web.TCPSite(runner, "127.0.0.1", port).start()
        started.append(runner)
        return ep, f"http://127.0.0.1:{port}"

    yield make
    for r in started:
        await r.cleanup()


def events(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            out.append(json.loads(line[6:]))
    assert text.rstrip().endswith("data: [DONE]")
    return out


async def test_ignore_eos_gives_exactly_max_tokens(endpoint):
    ep, url = await endpoint(policy="oracle")   # the oracle's natural replies are shorter
    async with httpx.AsyncClient(timeout=60) as c:
        body = {"model": MODEL, "messages": prompt_messages(50), "max_tokens": 700}
        plain = (await c.post(url + "/v1/chat/completions", json=body)).json()
        eos = (await c.post(url + "/v1/chat/completions", json={**body, "ignore_eos": True})).json()
        mn = (await c.post(url + "/v1/chat/completions",
                           json={**body, "min_tokens": 500, "return_token_ids": True})).json()
    assert plain["usage"]["completion_tokens"] < 700      # the premise: it stops early
    assert eos["usage"]["completion_tokens"] == 700
    assert eos["choices"][0]["finish_reason"] == "length"
    # min_tokens: EOS no earlier than token 501 (EOS counts as a completion token)
    assert mn["usage"]["completion_tokens"] == 501
    assert mn["choices"][0]["token_ids"][-1] == IM_END and mn["choices"][0]["finish_reason"] == "stop"


async def test_completions_token_ids_go_straight_to_the_engine(endpoint):
    ep, url = await endpoint()
    prompt = list(range(1000, 1000 + 333))
    async with httpx.AsyncClient(timeout=60) as c:
        body = {"model": MODEL, "prompt": prompt, "max_tokens": 7, "return_token_ids": True}
        r1 = (await c.post(url + "/v1/completions", json=body)).json()
        r2 = (await c.post(url + "/v1/completions", json=body)).json()
    ch = r1["choices"][0]
    assert r1["object"] == "text_completion" and r1["id"].startswith("cmpl-")
    assert ch["prompt_token_ids"] == prompt and len(ch["token_ids"]) == 7
    assert r1["usage"] == {"prompt_tokens": 333, "completion_tokens": 7, "total_tokens": 340,
                           "prompt_tokens_details": None}
    # the second request hits the blocks of exactly these ids: (333 - 1) // 16 whole blocks
    assert r2["usage"]["prompt_tokens_details"] == {"cached_tokens": 320}
    assert r2["adev"]["tokens"]["gpu"] == 320 and r2["adev"]["tokens"]["computed"] == 13


async def test_completions_string_batch_and_stream(endpoint):
    ep, url = await endpoint()
    async with httpx.AsyncClient(timeout=60) as c:
        r = (await c.post(url + "/v1/completions", json={
            "model": MODEL, "prompt": ["hello world", "<|im_start|>user\nhi<|im_end|>"],
            "max_tokens": 4})).json()
        s = await c.post(url + "/v1/completions", json={
            "model": MODEL, "prompt": [5, 6, 7, 8], "max_tokens": 9, "stream": True,
            "ignore_eos": True, "return_token_ids": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    assert [ch["index"] for ch in r["choices"]] == [0, 1]
    # "hello world": 2 pieces; <|im_start|> "user" "\n" "hi" <|im_end|>: 5 tokens
    assert r["usage"]["prompt_tokens"] == 2 + 5 and r["usage"]["completion_tokens"] == 8
    ev = events(s.text)
    toks = [e for e in ev if e["choices"]]
    assert all(e["object"] == "text_completion" for e in ev)
    assert toks[0]["choices"][0]["prompt_token_ids"] == [5, 6, 7, 8]
    assert sum(len(e["choices"][0]["token_ids"]) for e in toks) == 9
    # continuous usage: every token chunk carries the running completion count
    running = [e["usage"]["completion_tokens"] for e in toks]
    assert running == sorted(running) and running[-1] == 9
    assert all(e["usage"]["prompt_tokens"] == 4 for e in toks)
    assert toks[-1]["choices"][0]["finish_reason"] == "length"
    assert ev[-1]["choices"] == [] and ev[-1]["usage"]["completion_tokens"] == 9
    assert ev[-1]["adev"]["tokens"]["computed"] == 4


async def test_chat_stream_continuous_usage(endpoint):
    ep, url = await endpoint()
    async with httpx.AsyncClient(timeout=60) as c:
        s = await c.post(url + "/v1/chat/completions", json={
            "model": MODEL, "messages": prompt_messages(40), "max_tokens": 30, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
        plain = await c.post(url + "/v1/chat/completions", json={
            "model": MODEL, "messages": prompt_messages(40), "max_tokens": 30, "stream": True,
            "stream_options": {"continuous_usage_stats": True}})   # without include_usage: none
    ev = events(s.text)
    assert ev[0]["choices"][0]["delta"]["role"] == "assistant" and ev[0]["usage"]["completion_tokens"] == 0
    assert all("usage" in e for e in ev)
    assert ev[-1]["usage"]["completion_tokens"] == 30
    assert not any("usage" in e for e in events(plain.text))


async def test_unknown_model_version_ping_and_bad_prompts(endpoint):
    ep, url = await endpoint()
    async with httpx.AsyncClient(timeout=30) as c:
        for path, body in (("/v1/chat/completions", {"messages": prompt_messages(5)}),
                           ("/v1/completions", {"prompt": "hi"})):
            r = await c.post(url + path, json={**body, "model": "gpt-4o"})
            assert r.status_code == 404
            assert r.json() == {"error": {"message": "The model `gpt-4o` does not exist.",
                                          "type": "NotFoundError", "param": "model", "code": 404}}
        # no model field, or "": served, as vLLM serves them
        assert (await c.post(url + "/v1/completions", json={"prompt": "hi", "max_tokens": 1})).status_code == 200
        assert (await c.post(url + "/v1/completions", json={"model": "", "prompt": "hi",
                                                            "max_tokens": 1})).status_code == 200
        v = (await c.get(url + "/version")).json()
        assert v == {"version": "0.26.0+adev.emulator"}   # stack.vllm_version's default
        assert (await c.get(url + "/ping")).status_code == 200
        assert (await c.post(url + "/ping")).status_code == 200
        r = await c.post(url + "/v1/completions", json={"model": "qc", "prompt": "x"})
        assert r.status_code == 404
        _, url2 = await endpoint(model="qc")   # a configured served name is accepted too
        r = await c.post(url2 + "/v1/completions", json={"model": "qc", "prompt": "x", "max_tokens": 1})
        assert r.status_code == 200 and r.json()["model"] == MODEL
        r = await c.post(url + "/v1/completions", json={"model": MODEL, "prompt": [1, 999999]})
        assert r.status_code == 400 and "out of vocabulary" in r.json()["error"]["message"]
        r = await c.post(url + "/v1/completions", json={"model": MODEL, "prompt": []})
        assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"
        r = await c.post(url + "/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 3,
                                                        "min_tokens": 5})
        assert r.status_code == 400 and r.json()["error"]["param"] == "min_tokens"


async def test_replay_policy_lengths_and_recorded_ids(endpoint):
    ep, url = await endpoint(policy="replay")
    rec = [11, 12, 13, 14, 15, IM_END]
    async with httpx.AsyncClient(timeout=60) as c:
        a = (await c.post(url + "/v1/completions", json={
            "model": MODEL, "prompt": [1, 2, 3], "max_tokens": 123, "ignore_eos": True})).json()
        b = (await c.post(url + "/v1/completions", json={
            "model": MODEL, "prompt": [1, 2, 3], "return_token_ids": True,
            "adev": {"recorded_output": {"token_ids": rec}}})).json()
        d = (await c.post(url + "/v1/chat/completions", json={
            "model": MODEL, "messages": prompt_messages(20), "max_tokens": 6, "ignore_eos": True,
            "return_token_ids": True, "adev": {"recorded_output": {"token_ids": rec}}})).json()
        e = await c.post(url + "/v1/completions", json={"model": MODEL, "prompt": [1, 2, 3]})
    assert a["usage"]["completion_tokens"] == 123 and a["choices"][0]["finish_reason"] == "length"
    assert b["choices"][0]["token_ids"] == rec and b["choices"][0]["finish_reason"] == "stop"
    # ignore_eos: the recorded EOS is an ordinary token, padded to exactly max_tokens
    assert d["choices"][0]["token_ids"][:6] == rec and d["usage"]["completion_tokens"] == 6
    assert e.status_code == 400 and "no recorded output" in e.json()["error"]["message"]


async def test_disaggregated_prefill_then_decode(endpoint):
    prod, purl = await endpoint(name="prefill", kv_role="producer")
    cons, curl = await endpoint(name="decode", kv_role="consumer")
    body = {"model": MODEL, "prompt": list(range(2000, 2000 + 4000)), "max_tokens": 50}
    async with httpx.AsyncClient(timeout=60) as c:
        p = (await c.post(purl + "/v1/completions", json={
            **body, "max_tokens": 1, "kv_transfer_params": {"do_remote_decode": True}})).json()
        kv = p["kv_transfer_params"]
        d = (await c.post(curl + "/v1/completions", json={**body, "kv_transfer_params": kv})).json()
        # a producer-only endpoint ignores do_remote_prefill: a plain request
        x = (await c.post(purl + "/v1/completions", json={**body, "kv_transfer_params": kv})).json()
    assert p["usage"]["completion_tokens"] == 1 and p["adev"]["transfer"] == "produce"
    assert kv["do_remote_prefill"] is True and kv["do_remote_decode"] is False
    assert kv["remote_engine_id"] == "prefill" and len(kv["remote_block_ids"]) == 250
    a = d["adev"]
    assert d["usage"]["completion_tokens"] == 50 and a["transfer"] == "consume"
    assert a["tokens"]["kv_transfer"] == 3999 and a["tokens"]["computed"] == 1
    # 4000 tokens x 98,304 bytes over the 45 GB/s link + 20 us (stacks/profiles/links/rdma-400g)
    assert a["transfer_s"] == pytest.approx(2e-5 + 4000 * 98304 / 45e9)
    assert a["prefill_s"] < 0.001          # one token computed, not 4000
    assert x["adev"]["transfer"] == "none" and x["adev"]["tokens"]["kv_transfer"] == 0
