"""A scripted vLLM-like server for unit tests: ``/v1/completions`` (token-id prompts, streamed
or not, ``kv_transfer_params`` handed back by a producer), ``/v1/models``. Not an emulator: it
answers exactly ``max_tokens`` tokens at once and records every request body."""
from __future__ import annotations

import json

from aiohttp import web


class FakeVLLM:
    def __init__(self, name: str):
        self.name = name
        self.bodies: list[dict] = []
        self.runner = None
        self.url = ""

    async def start(self) -> FakeVLLM:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_get("/v1/models", self.models)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/v1"
        return self

    async def stop(self) -> None:
        await self.runner.cleanup()

    async def models(self, request):
        return web.json_response({"object": "list", "data": [
            {"id": "m", "object": "model", "max_model_len": 65536}]})

    async def completions(self, request):
        body = await request.json()
        self.bodies.append(body)
        n = int(body.get("max_tokens") or 16)
        usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": n,
                 "total_tokens": len(body["prompt"]) + n}
        kv = body.get("kv_transfer_params") or {}
        if not body.get("stream"):
            out = {"id": "c", "object": "text_completion", "model": "m",
                   "choices": [{"index": 0, "text": "x" * n, "finish_reason": "length"}],
                   "usage": usage}
            if kv.get("do_remote_decode"):
                out["kv_transfer_params"] = {"do_remote_prefill": True,
                                             "do_remote_decode": False,
                                             "remote_engine_id": self.name,
                                             "remote_block_ids": [1, 2]}
            return web.json_response(out)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(n):
            ch = {"id": "c", "object": "text_completion", "model": "m", "choices": [
                {"index": 0, "text": "y", "finish_reason": "length" if i == n - 1 else None}]}
            await resp.write(b"data: " + json.dumps(ch).encode() + b"\n\n")
        await resp.write(b"data: " + json.dumps({"id": "c", "choices": [], "usage": usage})
                         .encode() + b"\n\ndata: [DONE]\n\n")
        await resp.write_eof()
        return resp
