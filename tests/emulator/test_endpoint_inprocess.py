"""The endpoint in-process (no store): counting rules, output shapes, the openai package."""
from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from aiohttp import web

from adev.client.scrape import parse_metrics, total
from adev.emulator.planning import build_output, deltas
from adev.emulator.policies.base import PolicyReply, ToolCall
from adev.emulator.server import Endpoint
from adev.emulator.tokenizer import IM_END, Tokenizer
from tests.emulator.helpers import free_port, make_stack, prompt_messages, tmpdir, write_profile

MODEL = "Qwen3-Coder-30B-A3B-Instruct"


class ToolPolicy:
    name = "tooltest"

    def reply(self, req):
        return PolicyReply(content="Let me look.", tool_calls=[
            ToolCall("bash", json.dumps({"cmd": "ls -la /tmp", "timeout": 30})),
            ToolCall("read_file", json.dumps({"path": "a.py"}))])


@pytest.fixture
async def endpoint():
    started = []

    async def make(configuration="gpu-only", time_scale=50.0, **prof):
        w = tmpdir()
        st = make_stack(write_profile(w, **prof), configuration, time_scale)
        ep = Endpoint(st, "coder", None, None)
        await ep.start()
        runner = web.AppRunner(ep.app(), access_log=None)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        started.append(runner)
        return ep, f"http://127.0.0.1:{port}"

    yield make
    for r in started:
        await r.cleanup()


def m(samples, name, **lab):
    v = total(samples, name, **lab)
    return 0.0 if v is None else v


async def test_prefix_hit_counting_rules(endpoint):
    ep, url = await endpoint()
    async with httpx.AsyncClient(timeout=30) as c:
        body = {"model": MODEL, "messages": prompt_messages(1000), "max_tokens": 5}
        r1 = (await c.post(url + "/v1/chat/completions", json=body)).json()
        s1 = parse_metrics((await c.get(url + "/metrics")).text)
        r2 = (await c.post(url + "/v1/chat/completions", json=body)).json()
        s2 = parse_metrics((await c.get(url + "/metrics")).text)
    p = r1["usage"]["prompt_tokens"]
    assert r1["usage"]["prompt_tokens_details"] is None          # nothing cached: field absent
    want = (p - 1) // 16 * 16
    assert r2["usage"]["prompt_tokens_details"]["cached_tokens"] == want
    d = lambda n, **k: m(s2, n, **k) - m(s1, n, **k)  # noqa: E731
    assert d("vllm:prefix_cache_queries_total") == p
    assert d("vllm:prefix_cache_hits_total") == want
    assert d("vllm:prompt_tokens_total") == p
    assert d("vllm:prompt_tokens_by_source_total", source="local_cache_hit") == want
    assert d("vllm:prompt_tokens_by_source_total", source="local_compute") == p - want
    assert d("vllm:prompt_tokens_cached_total") == want
    assert d("vllm:generation_tokens_total") == 5
    assert d("vllm:request_success_total", finished_reason="stop") == 1
    assert m(s2, "vllm:external_prefix_cache_queries_total") == 0   # no connector
    a = r2["adev"]
    assert a["tokens"] == {"gpu": want, "store_ram": 0, "store_disk": 0, "kv_transfer": 0,
                           "computed": p - want}
    assert sum(a["tokens"].values()) == p
    assert a["t_arrival_mono"] <= a["t_first_token_mono"] <= a["t_end_mono"]
    # metric names and labels as vLLM exports them
    assert f'vllm:time_to_first_token_seconds_count{{engine="0",model_name="{MODEL}"}}' in s2
    assert any(k.startswith("vllm:cache_config_info{block_size=\"16\"") for k in s2)


async def test_recompute_counts_no_hits(endpoint):
    ep, url = await endpoint("recompute")
    async with httpx.AsyncClient(timeout=30) as c:
        body = {"model": MODEL, "messages": prompt_messages(500), "max_tokens": 3}
        await c.post(url + "/v1/chat/completions", json=body)
        r = (await c.post(url + "/v1/chat/completions", json=body)).json()
        s = parse_metrics((await c.get(url + "/metrics")).text)
    assert r["usage"]["prompt_tokens_details"] is None
    assert m(s, "vllm:prefix_cache_hits_total") == 0
    assert m(s, "vllm:prompt_tokens_by_source_total", source="local_compute") == 2 * r["usage"]["prompt_tokens"]


async def test_preemption_when_running_requests_exceed_pool(endpoint):
    # pool of 100 blocks; 9 requests of ~200 tokens (13 blocks) generating 300 tokens cannot all fit
    # (at S=20 each decodes for ~0.2 s of wall: all 9 overlap however slowly the client sends them)
    ep, url = await endpoint(gpu_pool_tokens=1600, time_scale=20.0)
    async with httpx.AsyncClient(timeout=60) as c:
        async def one(i):
            body = {"model": MODEL, "messages": prompt_messages(200, chr(97 + i)), "max_tokens": 300}
            return (await c.post(url + "/v1/chat/completions", json=body)).json()
        rs = await asyncio.gather(*(one(i) for i in range(9)))
        s = parse_metrics((await c.get(url + "/metrics")).text)
    assert all(r["usage"]["completion_tokens"] == 300 for r in rs)
    assert m(s, "vllm:num_preemptions_total") >= 1
    assert sum(r["adev"]["preemptions"] for r in rs) == m(s, "vllm:num_preemptions_total")
    assert max(r["adev"]["queue_s"] for r in rs) > 0   # queueing shows


async def test_errors_in_vllm_shape(endpoint):
    ep, url = await endpoint(gpu_pool_tokens=1600, max_model_len=4000)
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(url + "/v1/chat/completions", json={"model": MODEL, "messages": prompt_messages(2000)})
        assert r.status_code == 400
        e = r.json()["error"]
        assert e["code"] == 400 and e["type"] == "BadRequestError" and "KV cache" in e["message"]
        r = await c.post(url + "/v1/chat/completions", json={"model": MODEL, "messages": prompt_messages(5000)})
        assert r.status_code == 400 and "maximum context length is 4000" in r.json()["error"]["message"]
        r = await c.post(url + "/v1/chat/completions", json={"model": MODEL})
        assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
        # unknown fields are ignored
        r = await c.post(url + "/v1/chat/completions", json={"model": MODEL, "messages": prompt_messages(10),
                                                              "max_tokens": 2, "frobnicate": True})
        assert r.status_code == 200


async def test_tokenize_detokenize_models_health(endpoint):
    ep, url = await endpoint()
    async with httpx.AsyncClient(timeout=30) as c:
        msgs = prompt_messages(100)
        t = (await c.post(url + "/tokenize", json={"model": MODEL, "messages": msgs,
                                                    "add_generation_prompt": True})).json()
        chat = (await c.post(url + "/v1/chat/completions", json={"model": MODEL, "messages": msgs, "max_tokens": 1,
                                                                 "return_token_ids": True})).json()
        assert t["tokens"] == chat["prompt_token_ids"] and t["count"] == chat["usage"]["prompt_tokens"]
        assert t["max_model_len"] == 65536
        d = (await c.post(url + "/detokenize", json={"tokens": t["tokens"]})).json()
        assert msgs[0]["content"] in d["prompt"]
        p = (await c.post(url + "/tokenize", json={"prompt": "hello world"})).json()
        assert p["count"] == 2
        mo = (await c.get(url + "/v1/models")).json()
        assert mo["data"][0]["id"] == MODEL and mo["data"][0]["max_model_len"] == 65536
        assert (await c.get(url + "/health")).status_code == 200


def test_output_plan_tool_deltas_and_truncation():
    tok = Tokenizer()
    reply = ToolPolicy().reply(None)
    plan = build_output(tok, reply, None, "r1")
    assert plan.finish_reason == "tool_calls" and plan.ids[-1] == IM_END
    started: set[int] = set()
    ds = []
    for a in range(0, len(plan.ids), 3):  # stream in chunks of 3 tokens
        ds += deltas(plan, a, min(a + 3, len(plan.ids)), started)
    content = "".join(d.get("content", "") for d in ds)
    assert content == "Let me look."
    calls: dict[int, dict] = {}
    for d in ds:
        for tc in d.get("tool_calls", []):
            c = calls.setdefault(tc["index"], {"name": None, "args": "", "id": None})
            if "id" in tc:
                assert c["id"] is None and tc["type"] == "function" and tc["function"]["arguments"] == ""
                c["id"], c["name"] = tc["id"], tc["function"]["name"]
            else:
                assert set(tc) == {"index", "function"}
                c["args"] += tc["function"]["arguments"]
    assert [calls[i]["name"] for i in (0, 1)] == ["bash", "read_file"]
    assert json.loads(calls[0]["args"]) == {"cmd": "ls -la /tmp", "timeout": 30}
    # max_tokens cuts: finish_reason length, no EOS, cut calls are dropped
    cut = build_output(tok, reply, 5, "r2")
    assert cut.finish_reason == "length" and len(cut.ids) == 5 and cut.tool_calls == []
    # padding to the policy's target length
    pad = build_output(tok, PolicyReply(content="hi", output_tokens=50), None, "r3")
    assert len(pad.ids) == 50 and pad.finish_reason == "stop"


@pytest.mark.integration
async def test_openai_package_streaming_tools_usage(endpoint):
    import openai
    ep, url = await endpoint()
    ep.policy = ToolPolicy()
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused")
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {
        "cmd": {"type": "string"}}}}}]
    msgs = prompt_messages(300)
    r = await client.chat.completions.create(model=MODEL, messages=msgs, tools=tools)
    assert r.choices[0].finish_reason == "tool_calls"
    assert [tc.function.name for tc in r.choices[0].message.tool_calls] == ["bash", "read_file"]
    assert json.loads(r.choices[0].message.tool_calls[0].function.arguments)["cmd"] == "ls -la /tmp"
    assert r.usage.prompt_tokens_details is None or r.usage.prompt_tokens_details.cached_tokens >= 0
    assert r.model_extra["adev"]["tokens"]["computed"] > 0
    stream = await client.chat.completions.create(model=MODEL, messages=msgs, tools=tools, stream=True,
                                                  stream_options={"include_usage": True},
                                                  extra_body={"return_token_ids": True})
    chunks = [c async for c in stream]
    first = chunks[0]
    assert first.choices[0].delta.role == "assistant" and not first.choices[0].delta.tool_calls
    assert first.model_extra.get("prompt_token_ids")
    args: dict[int, str] = {}
    names = {}
    finish = None
    token_ids = []
    for c in chunks:
        for ch in c.choices:
            token_ids += (ch.model_extra or {}).get("token_ids") or []
            finish = ch.finish_reason or finish
            for tc in ch.delta.tool_calls or []:
                if tc.function and tc.function.name:
                    names[tc.index] = tc.function.name
                args[tc.index] = args.get(tc.index, "") + (tc.function.arguments or "")
    assert finish == "tool_calls" and names == {0: "bash", 1: "read_file"}
    assert json.loads(args[1]) == {"path": "a.py"}
    last = chunks[-1]
    assert last.choices == [] and last.usage.completion_tokens == len(token_ids)
    assert last.usage.prompt_tokens_details.cached_tokens == (last.usage.prompt_tokens - 1) // 16 * 16
    assert last.model_extra["adev"]["ttft_s"] > 0


def test_store_load_threads_and_staging_reach_the_engine():
    import dataclasses

    from adev.config import load_tier_profile
    st = make_stack(write_profile(tmpdir()), "gpu-only", 10.0)
    cfg = Endpoint(st, "coder", None, None).engine.cfg
    # the defaults: vLLM's one receiving thread, Mooncake's staging of a batch before its copy
    assert (cfg.load_threads, cfg.staging_serial, cfg.staging_shared) == (1, True, False)
    # the device's own rate behind the 20 GB/s hop: local RAID0's 5.45 GB/s staged -> 7.49 GB/s
    assert cfg.disk_tier.read_bytes_per_s == pytest.approx(7.4914e9, rel=1e-4)
    shared = dataclasses.replace(st, store=dataclasses.replace(st.store, staging="shared"))
    cfg = Endpoint(shared, "coder", None, None).engine.cfg
    assert (cfg.staging_serial, cfg.staging_shared) == (True, True)
    assert cfg.disk_tier.read_bytes_per_s == pytest.approx(7.4914e9, rel=1e-4)
    st = dataclasses.replace(st, store=dataclasses.replace(st.store, load_threads=0, staging="overlap"))
    cfg = Endpoint(st, "coder", None, None).engine.cfg
    assert (cfg.load_threads, cfg.staging_serial) == (0, False)
    assert cfg.disk_tier.read_bytes_per_s == load_tier_profile(st.store.disk_tier).read_bytes_per_s
