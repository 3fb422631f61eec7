"""The LLM client against the real emulated endpoint (embedded stack): discovery, stamps on the
shared monotonic clock, usage and cached tokens, ``EndpointExtension``, token ids to the ledger."""
from __future__ import annotations

import msgspec
import pytest

from adev.client.llm import Endpoint, LLMClient
from adev.clock import stack_run_clock
from adev.emulator.schema import EndpointExtension, decode
from adev.records import RunDir
from adev.session.tools import schemas

pytestmark = pytest.mark.integration

ADEV_KEYS = {f.name for f in msgspec.structs.fields(EndpointExtension)}


class Ledger:
    def __init__(self):
        self.adds = []

    def add(self, t, session_id, call_id, token_ids):
        self.adds.append((session_id, call_id, len(token_ids)))


async def test_client_on_emulator(embedded_stack, tmp_path):
    info = embedded_stack(endpoints=["coder"])
    rd = RunDir.create("r", base=tmp_path)
    clock = stack_run_clock(info)  # the stack's held clock: server stamps compare directly
    led = Ledger()
    text = "The prefix cache keeps whole blocks of sixteen tokens. " * 300
    async with LLMClient([Endpoint("coder", info.endpoints["coder"])], clock=clock, run_dir=rd,
                         ledger=led) as c:
        await c.discover()
        ep = c.endpoints["coder"]
        assert ep.model == info.model and ep.max_model_len == info.profile.max_model_len
        assert ep.server_version == "0.26.0+adev.emulator"   # stack.vllm_version's default
        msgs = [{"role": "system", "content": text}, {"role": "user", "content": "go"}]
        r1 = await c.chat("coder", msgs, tools=schemas(["read_file", "finish"]), max_tokens=24,
                          session_id="s", call_id="c1")
        r2 = await c.chat("coder", msgs, tools=schemas(["read_file", "finish"]), max_tokens=24,
                          session_id="s", call_id="c2")
    assert r1.prompt_tokens > 3000 and r1.completion_tokens == 24
    # the same prompt again: served from the GPU prefix cache, whole blocks of (prompt - 1)
    assert r2.cached_tokens == (r2.prompt_tokens - 1) // 16 * 16
    recs = rd.read("calls")
    assert [r["status"] for r in recs] == ["ok", "ok"]
    for rec in recs:
        srv = rec["server"]
        assert ADEV_KEYS == set(srv), ADEV_KEYS ^ set(srv)
        decode(msgspec.json.encode(srv))  # every field of the type its definition says
        assert sum(srv["tokens"].values()) == rec["prompt_tokens"]
        assert rec["t_scheduled"] <= rec["t_sent"] <= rec["t_first_byte"] <= \
            rec["t_first_content"] <= rec["t_end"]
        # server stamps are on the same monotonic clock: arrival after send, and the client
        # sees the first content after the server sent it
        assert clock.to_model(srv["t_arrival_mono"]) >= rec["t_sent"] - 1e-3
        assert rec["t_first_content"] >= clock.to_model(srv["t_first_token_mono"]) - 1e-3
        assert rec["t_end"] >= clock.to_model(srv["t_end_mono"]) - 1e-3
        # the server's send stamps: first event, then the first token event, each before the
        # client saw it
        assert srv["t_arrival_mono"] <= srv["t_first_byte_sent_mono"] <= \
            srv["t_first_token_mono"] <= srv["t_first_token_sent_mono"] <= srv["t_end_mono"]
        assert rec["t_first_byte"] >= clock.to_model(srv["t_first_byte_sent_mono"]) - 1e-3
        assert rec["t_first_content"] >= clock.to_model(srv["t_first_token_sent_mono"]) - 1e-3
        assert rec["n_prompt_blocks"] == rec["prompt_tokens"] // 16
    assert led.adds == [("s", "c1", recs[0]["prompt_tokens"]),
                        ("s", "c2", recs[1]["prompt_tokens"])]
