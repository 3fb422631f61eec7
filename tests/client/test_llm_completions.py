"""LLMClient.completion: vLLM's /v1/completions with token-id prompts, streamed and not."""
from __future__ import annotations

import asyncio

import numpy as np

from adev.client.llm import Endpoint, LLMClient
from adev.clock import RunClock
from adev.records import RunDir
from tests.replay.fake_vllm import FakeVLLM


def test_completion_streamed_and_not(tmp_path):
    async def go():
        srv = await FakeVLLM("p0").start()
        rd = RunDir.create("r", base=tmp_path)
        try:
            async with LLMClient([Endpoint("p0", srv.url, model="m")], clock=RunClock(),
                                 run_dir=rd) as c:
                r = await c.completion("p0", np.arange(40), max_tokens=5, min_tokens=5,
                                       ignore_eos=True, session_id="s", call_id="c1")
                p = await c.completion("p0", [1, 2, 3], max_tokens=1, stream=False,
                                       call_id="c2",
                                       extra_body={"kv_transfer_params": {
                                           "do_remote_decode": True}})
        finally:
            await srv.stop()
            rd.close()
        return srv, r, p, rd
    srv, r, p, rd = asyncio.run(go())
    b0, b1 = srv.bodies
    assert b0["prompt"] == list(range(40)) and b0["max_tokens"] == 5
    assert b0["min_tokens"] == 5 and b0["ignore_eos"] is True and b0["stream"] is True
    assert b0["stream_options"] == {"include_usage": True}
    assert r.content == "yyyyy" and r.completion_tokens == 5 and r.prompt_tokens == 40
    assert r.record.t_first_content is not None and r.record.t_end >= r.record.t_first_content
    assert b1["stream"] is False and "stream_options" not in b1
    assert p.content == "x" and p.kv_transfer_params["remote_engine_id"] == "p0"
    assert p.record.t_first_content is not None
    recs = rd.read("calls")
    assert [x["call_id"] for x in recs] == ["c1", "c2"] and recs[0]["status"] == "ok"
