"""The LLM client against a scripted local aiohttp server (stamps, parsing, retries, cancel)."""
from __future__ import annotations

import asyncio
import json
import math
import time

import pytest
from aiohttp import web

from adev.client.llm import Endpoint, LLMClient
from adev.client.retry import ContextLengthError, LLMError, RetryPolicy
from adev.client.stamps import StampedHandler
from adev.client.stream import StreamState
from adev.clock import RunClock
from adev.records import RunDir

SECRET = "sk-test-SECRET-123456"


def _sse(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


async def _until(event: asyncio.Event, what: str, timeout_s: float = 20.0) -> None:
    try:
        await asyncio.wait_for(event.wait(), timeout_s)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what}") from None


class FakeServer:
    """Answers /v1/chat/completions from a queue of behaviours.

    Synchronisation is by events, not sleeps: ``client_rx`` is set by the client's connection
    when response bytes arrive (the fixture hooks it), so a response pauses after its first
    chunk only once the client has that chunk; ``models_together`` concurrent ``GET /v1/models``
    are held until all have arrived (each then needs a connection of its own)."""

    def __init__(self):
        self.behaviours: list[str] = []
        self.bodies: list[dict] = []
        self.auth: list[str] = []
        self.peers: set = set()  # client (host, port) of every request: one per connection
        self.runner = None
        self.url = ""
        self.release = asyncio.Event()
        self.client_rx = asyncio.Event()
        self.models_together = 1
        self.version: str | None = None   # GET /version's answer; None: the route is absent (404)
        self._models_in = 0
        self._models_all_in = asyncio.Event()

    async def start(self):
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/version", self.version_route)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/v1"

    async def stop(self):
        self.release.set()
        await self.runner.cleanup()

    async def version_route(self, request):
        if self.version is None:
            raise web.HTTPNotFound()
        return web.json_response({"version": self.version})

    async def models(self, request):
        self.peers.add(request.transport.get_extra_info("peername"))
        self._models_in += 1
        if self._models_in >= self.models_together:
            self._models_all_in.set()
        await _until(self._models_all_in, f"{self.models_together} concurrent /v1/models")
        return web.json_response({"object": "list", "data": [
            {"id": "m1", "object": "model", "max_model_len": 4096}]})

    async def chat(self, request):
        self.peers.add(request.transport.get_extra_info("peername"))
        body = await request.json()
        self.bodies.append(body)
        self.auth.append(request.headers.get("Authorization", ""))
        b = self.behaviours.pop(0) if self.behaviours else "ok"
        if b == "503":
            return web.json_response({"error": {"message": "overloaded", "code": 503}},
                                     status=503)
        if b == "400ctx":
            return web.json_response({"error": {"message": "This model's maximum context "
                                                "length is 4096 tokens.", "code": 400}},
                                     status=400)
        if b == "400":
            return web.json_response({"error": {"message": "bad temperature", "code": 400}},
                                     status=400)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        self.client_rx.clear()
        await resp.prepare(request)
        base = {"id": "c1", "object": "chat.completion.chunk", "model": "m1"}
        if b == "bigids":  # token ids and content in the first event, more content later
            await resp.write(_sse({**base, "prompt_token_ids": list(range(5000)), "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": "A"}}]}))
            await _until(self.client_rx, "the client to receive the first event")
            await asyncio.sleep(0.05)  # the model's pause: modelled time, not synchronisation
            await resp.write(_sse({**base, "choices": [{"index": 0, "delta": {"content": "B"},
                                                        "finish_reason": "stop"}]}))
            await resp.write(_sse({**base, "choices": [], "usage": {
                "prompt_tokens": 5000, "completion_tokens": 2}}))
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp
        await resp.write(_sse({**base, "prompt_token_ids": list(range(40)),
                               "choices": [{"index": 0, "delta": {"role": "assistant"}}]}))
        # role-only chunk first; content 50 ms (modelled) after the client has the first bytes
        await _until(self.client_rx, "the client to receive the role chunk")
        await asyncio.sleep(0.05)
        if b == "drop":
            request.transport.close()
            return resp
        if b == "slow":
            try:
                await asyncio.wait_for(self.release.wait(), 30)
            except TimeoutError:
                pass
        t_first = time.monotonic()
        await resp.write(_sse({**base, "choices": [{"index": 0, "delta": {
            "reasoning_content": "think"}}]}))
        await resp.write(_sse({**base, "choices": [{"index": 0, "delta": {"content": "Hel"}}]}))
        await resp.write(_sse({**base, "choices": [{"index": 0, "delta": {"content": "lo"}}]}))
        await resp.write(_sse({**base, "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "t1", "type": "function",
             "function": {"name": "read_file", "arguments": ""}}]}}]}))
        await resp.write(_sse({**base, "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": '{"path": '}}]}}]}))
        await resp.write(_sse({**base, "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": '"a.py"}'}}]}, "finish_reason":
            "tool_calls"}]}))
        await resp.write(_sse({**base, "choices": [], "usage": {
            "prompt_tokens": 40, "completion_tokens": 7, "total_tokens": 47,
            "prompt_tokens_details": {"cached_tokens": 32}},
            "adev": {"request_id": "r1", "t_first_token_mono": t_first, "read_path_s": 0.01}}))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


class Ledger:
    def __init__(self):
        self.adds = []

    def add(self, t, session_id, call_id, token_ids):
        self.adds.append((t, session_id, call_id, list(token_ids)))


@pytest.fixture
async def server(monkeypatch):
    s = FakeServer()
    received = StampedHandler.data_received

    def data_received(self, data):
        received(self, data)
        s.client_rx.set()
    monkeypatch.setattr(StampedHandler, "data_received", data_received)
    await s.start()
    yield s
    await s.stop()


def _client(tmp_path, url, **kw):
    rd = RunDir.create("r", base=tmp_path)
    led = Ledger()
    c = LLMClient([Endpoint("coder", url, model="m1", api_key=SECRET)], clock=RunClock(),
                  run_dir=rd, ledger=led,
                  retry=kw.pop("retry", RetryPolicy(max_attempts=3, backoff_s=0.01)), **kw)
    return c, rd, led


async def test_stream_parse_stamps_usage_ledger(server, tmp_path):
    c, rd, led = _client(tmp_path, server.url)
    async with c:
        res = await c.chat("coder", [{"role": "user", "content": "hi"}], max_tokens=10,
                           seed=5, session_id="s", call_id="s/1", role="architect", round=1)
    assert res.content == "Hello" and res.reasoning == "think"
    assert len(res.tool_calls) == 1
    tc = res.tool_calls[0]
    assert (tc.id, tc.name, json.loads(tc.arguments)) == ("t1", "read_file", {"path": "a.py"})
    assert (res.prompt_tokens, res.completion_tokens, res.cached_tokens) == (40, 7, 32)
    body = server.bodies[0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["return_token_ids"] is True and body["seed"] == 5 and body["model"] == "m1"
    (rec,) = rd.read("calls")
    assert rec["status"] == "ok" and rec["attempt"] == 0 and rec["n_tool_calls"] == 1
    assert rec["t_scheduled"] <= rec["t_sent"] <= rec["t_first_byte"] <= rec["t_first_content"] \
        <= rec["t_end"]
    # the role-only chunk is not content: first content comes >= 50 ms after first byte
    assert rec["t_first_content"] - rec["t_first_byte"] >= 0.04
    assert rec["server"]["request_id"] == "r1" and rec["n_prompt_blocks"] == 2
    assert rec["finish_reason"] == "tool_calls"
    # ledger got the ids; the record does not hold them
    assert led.adds == [(rec["t_sent"], "s", "s/1", list(range(40)))]
    raw = (rd.path / "calls.jsonl").read_text()
    assert "prompt_token_ids" not in raw and SECRET not in raw
    assert server.auth[0] == f"Bearer {SECRET}"
    assert SECRET not in repr(c.endpoints)


async def test_first_byte_stamp_guard_of_the_aiohttp_protocol_patch(server, tmp_path):
    """The chat pool swaps aiohttp's private ``TCPConnector._factory`` for the stamped protocol
    (aiohttp has no public hook at the socket read; pyproject pins the tested range). This fails
    when an aiohttp release stops honouring the swap: no stamped protocol, no socket stamp."""
    c, rd, _ = _client(tmp_path, server.url)
    async with c:
        await c.chat("coder", [{"role": "user", "content": "hi"}], call_id="g")
        conns = [p for k in c._pool().connector._conns.values() for p, _ in k]
        assert conns and all(isinstance(p, StampedHandler) for p in conns)
        assert all(p.t_first_rx is not None for p in conns)
    assert server.client_rx.is_set()                # the stamped data_received ran
    (rec,) = rd.read("calls")
    assert rec["t_sent"] <= rec["t_first_byte"] < rec["t_first_content"]


async def test_retry_503_then_ok_records_each_attempt(server, tmp_path):
    server.behaviours = ["503", "503", "ok"]
    c, rd, _ = _client(tmp_path, server.url)
    async with c:
        res = await c.chat("coder", [{"role": "user", "content": "x"}], call_id="c")
    assert res.content == "Hello"
    recs = rd.read("calls")
    assert [(r["attempt"], r["status"]) for r in recs] == [(0, "error"), (1, "error"), (2, "ok")]
    assert "503" in recs[0]["error"]


async def test_retry_gives_up(server, tmp_path):
    server.behaviours = ["503"] * 5
    c, rd, _ = _client(tmp_path, server.url)
    async with c:
        with pytest.raises(LLMError, match="giving up after 3 attempts"):
            await c.chat("coder", [{"role": "user", "content": "x"}])
    assert [r["status"] for r in rd.read("calls")] == ["error"] * 3


async def test_drop_mid_stream_is_retried(server, tmp_path):
    server.behaviours = ["drop", "ok"]
    c, rd, _ = _client(tmp_path, server.url)
    async with c:
        res = await c.chat("coder", [{"role": "user", "content": "x"}])
    assert res.content == "Hello"
    recs = rd.read("calls")
    assert [r["status"] for r in recs] == ["error", "ok"]


async def test_4xx_not_retried_and_context_error(server, tmp_path):
    server.behaviours = ["400ctx", "400"]
    c, rd, _ = _client(tmp_path, server.url)
    async with c:
        with pytest.raises(ContextLengthError):
            await c.chat("coder", [{"role": "user", "content": "x"}])
        with pytest.raises(LLMError) as ei:
            await c.chat("coder", [{"role": "user", "content": "x"}])
        assert not isinstance(ei.value, ContextLengthError) and ei.value.status == 400
    assert [r["status"] for r in rd.read("calls")] == ["error", "error"]


async def test_connection_refused_retried(tmp_path):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    c, rd, _ = _client(tmp_path, f"http://127.0.0.1:{port}/v1")
    async with c:
        with pytest.raises(LLMError):
            await c.chat("coder", [{"role": "user", "content": "x"}])
    recs = rd.read("calls")
    assert len(recs) == 3 and all(r["status"] == "error" for r in recs)


async def test_cancel_records_cancelled(server, tmp_path, monkeypatch):
    server.behaviours = ["slow"]
    parsed = asyncio.Event()   # the client has parsed the role chunk (its first SSE line)
    feed = StreamState.feed

    def feeding(self, line):
        parsed.set()
        return feed(self, line)
    monkeypatch.setattr(StreamState, "feed", feeding)
    c, rd, _ = _client(tmp_path, server.url)
    async with c:
        t = asyncio.create_task(c.chat("coder", [{"role": "user", "content": "x"}]))
        await _until(parsed, "the client to parse the role chunk")
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
    (rec,) = rd.read("calls")
    assert rec["status"] == "cancelled" and rec["t_first_byte"] is not None
    assert rec["t_first_content"] is None


async def test_discover_and_pool_reuse(server, tmp_path):
    c, _, _ = _client(tmp_path, server.url)
    c.endpoints["coder"].model = None
    c.endpoints["reasoner"] = Endpoint("reasoner", server.url)
    async with c:
        await c.discover()
        assert c.endpoints["coder"].model == "m1" and c.max_model_len("coder") == 4096
        await c.chat("coder", [{"role": "user", "content": "x"}])
        await c.chat("reasoner", [{"role": "user", "content": "x"}])
        assert len(c._clients) == 1  # one client per base URL
        with pytest.raises(LLMError, match="unknown endpoint"):
            await c.chat("nope", [])
    # a server without GET /version: discovery goes on, the release stays unknown
    assert c.endpoints["coder"].server_version is None


async def test_discover_reads_the_servers_release(server, tmp_path):
    server.version = "0.24.0"
    c, _, _ = _client(tmp_path, server.url)
    async with c:
        await c.discover()
    assert c.endpoints["coder"].server_version == "0.24.0"
    d = c.described()["coder"]
    assert d == {"base_url": server.url, "model": c.endpoints["coder"].model,
                 "max_model_len": c.endpoints["coder"].max_model_len, "server_version": "0.24.0"}


async def test_large_token_id_event_parsed_after_stream(server, tmp_path):
    server.behaviours = ["bigids"]
    c, rd, led = _client(tmp_path, server.url)
    async with c:
        res = await c.chat("coder", [{"role": "user", "content": "x"}], call_id="c")
    assert res.content == "AB" and res.prompt_tokens == 5000 and res.cached_tokens is None
    (rec,) = rd.read("calls")
    # the first event carried content: first content is stamped at its arrival, not later
    assert rec["t_first_content"] - rec["t_first_byte"] < 0.04
    assert rec["n_prompt_blocks"] == 5000 // 16 and led.adds[0][3] == list(range(5000))


class JsonLedger(Ledger):
    def __init__(self):
        super().__init__()
        self.raw = []

    def add_json(self, t, session_id, call_id, ids_json):
        self.raw.append((session_id, call_id, ids_json))


async def test_large_token_ids_go_unparsed_to_a_ledger_with_add_json(server, tmp_path):
    server.behaviours = ["bigids"]
    rd = RunDir.create("r", base=tmp_path)
    led = JsonLedger()
    async with LLMClient([Endpoint("coder", server.url, model="m1")], clock=RunClock(),
                         run_dir=rd, ledger=led) as c:
        res = await c.chat("coder", [{"role": "user", "content": "x"}], session_id="s",
                           call_id="c")
    assert res.content == "AB" and res.prompt_tokens == 5000
    assert led.adds == [] and [(a, b) for a, b, _ in led.raw] == [("s", "c")]
    assert json.loads(led.raw[0][2]) == list(range(5000))  # the event's array, byte for byte
    (rec,) = rd.read("calls")
    assert rec["n_prompt_blocks"] == 5000 // 16


async def test_token_ids_asked_only_for_a_ledger(server, tmp_path):
    async with LLMClient([Endpoint("coder", server.url, model="m1")], clock=RunClock()) as c:
        res = await c.chat("coder", [{"role": "user", "content": "x"}])
    assert "return_token_ids" not in server.bodies[-1] and res.content == "Hello"
    async with LLMClient([Endpoint("coder", server.url, model="m1")], clock=RunClock(),
                         return_token_ids=True) as c:
        await c.chat("coder", [{"role": "user", "content": "x"}])
    assert server.bodies[-1]["return_token_ids"] is True


async def test_warm_opens_connections_that_calls_then_reuse(server, tmp_path):
    c, _, _ = _client(tmp_path, server.url)
    async with c:
        server.models_together = 5
        assert await c.warm(5) == 5
        assert len(server.peers) == 5  # five connections opened before any call
        await asyncio.gather(*(c.chat("coder", [{"role": "user", "content": "x"}])
                               for _ in range(5)))
        assert len(server.peers) == 5  # the calls found them in the pool: no new connection


async def test_warm_against_a_dead_endpoint_costs_nothing(tmp_path):
    c, _, _ = _client(tmp_path, "http://127.0.0.1:9/v1")
    async with c:
        assert await c.warm(3) == 0


async def test_first_byte_is_stamped_at_the_socket_read_and_reset_per_request(server, tmp_path):
    """t_first_byte comes from the connection's first data_received of each request (not from
    the task that later parses it): a pooled connection re-arms it for every request."""
    c, rd, _ = _client(tmp_path, server.url, pool_size=1)
    async with c:
        await c.chat("coder", [{"role": "user", "content": "a"}], call_id="c1")
        await c.chat("coder", [{"role": "user", "content": "b"}], call_id="c2")
        proto = next(iter(c._pool().connector._conns.values()))[0][0]
    assert len(server.peers) == 1  # both calls on one connection
    r1, r2 = rd.read("calls")
    for r in (r1, r2):
        assert r["t_sent"] <= r["t_first_byte"] < r["t_first_content"] <= r["t_end"]
    assert r2["t_first_byte"] > r1["t_end"]  # re-armed, not the first request's stamp
    # the role-only chunk comes 50 ms before the content: the first byte is the first read
    assert r1["t_first_content"] - r1["t_first_byte"] >= 0.04
    assert proto.t_first_rx is not None and type(proto).__name__ == "StampedHandler"


async def test_on_a_held_clock_the_first_tokens_are_stamped_before_their_hold_is_released(
        tmp_path, monkeypatch):
    """The endpoint holds the request's slot at the answer's first tokens until the client has
    read them; the client stamps them before it releases that hold, so host time spent after
    the release (here: one wall second) is not in the first-token stamp."""
    import adev.clock as clock_mod
    from adev.clock import HOLD_HEADER, HeldClock, RequestHolds
    from tests.test_clock import Wall

    w = Wall()
    HeldClock.create(tmp_path / "clock")
    client_clock, server_clock = HeldClock(tmp_path / "clock", w), HeldClock(tmp_path / "clock", w)
    monkeypatch.setattr(clock_mod, "_source", client_clock)
    monkeypatch.setattr(clock_mod, "_request_holds", None)
    release = RequestHolds.release

    def slow_release(self, slot):
        release(self, slot)
        w.t += 1.0   # the host's time after the hold is released: model time runs on
    monkeypatch.setattr(RequestHolds, "release", slow_release)

    async def chat(request):
        slot = int(request.headers[HOLD_HEADER])
        await request.read()
        server_clock.set_hold(slot, math.inf)   # the endpoint has the request
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        base = {"id": "c1", "object": "chat.completion.chunk", "model": "m1"}

        def sse(obj) -> bytes:   # compact, as the endpoints write it
            return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"
        await resp.write(sse({**base, "choices": [{"index": 0, "delta": {"role": "assistant"}}]}))
        server_clock.set_hold(slot, 105.0)      # first tokens at 105, held until read
        w.t = 110.0
        await resp.write(sse({**base, "choices": [{"index": 0, "delta": {"content": "Hi"},
                                                    "finish_reason": "stop"}]}))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/v1"
    rd = RunDir.create("r", base=tmp_path)
    try:
        async with LLMClient([Endpoint("coder", url, model="m1")], clock=RunClock(),
                             run_dir=rd) as c:
            res = await c.chat("coder", [{"role": "user", "content": "hi"}], max_tokens=2)
    finally:
        await runner.cleanup()
    assert res.content == "Hi"
    (rec,) = rd.read("calls")
    assert rec["t_sent"] == pytest.approx(0.0)
    assert rec["t_first_content"] == pytest.approx(5.0)   # 105 on the held clock, not 106
    assert rec["t_end"] == pytest.approx(6.0)
