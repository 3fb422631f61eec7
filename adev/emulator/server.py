"""The emulated vLLM-compatible endpoint (aiohttp).

    python -m adev.emulator.server --config STACK_JSON --endpoint NAME --port PORT \\
        --master HOST:PORT [--disk-dir DIR] [--master-http HOST:PORT]

STACK_JSON is ``dataclasses.asdict(StackConfig)`` as JSON (a path, or the JSON text itself).
``--master-http`` (optional, additive to contract 2) is the master's HTTP metrics/admin address,
used to attribute store hits to RAM or disk; without it, ``stack.store.metrics_url`` or
``stack.store.metrics_port`` is used when set.

Routes: ``POST /v1/chat/completions`` (stream and not, tools, streaming tool-call deltas,
``usage.prompt_tokens_details.cached_tokens``, ``stream_options.include_usage``, ``return_token_ids``),
``POST /tokenize``, ``POST /detokenize``, ``POST /reset_prefix_cache``, ``GET /metrics``, ``GET /health``, ``GET /v1/models``.
Every chat completion carries the contract-1 ``"adev"`` extension field.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from adev import event_loop
from adev.config import (ConfigError, ModelProfile, StackConfig, from_dict, load_model_profile,
                         load_tier_profile)
from adev.emulator.engine import Engine, EngineConfig, Request, TierCost
from adev.emulator.metrics import Metrics
from adev.emulator.policies.base import PolicyReply, PolicyRequest, load_policy
from adev.emulator.tokenizer import IM_END, Tokenizer

log = logging.getLogger("adev.emulator.server")

STORE_CONFIGS = ("store-ram", "store-ram+disk", "disk-only")
DISK_CONFIGS = ("store-ram+disk", "disk-only")


def _dumps(obj: Any) -> bytes:
    """Compact JSON (orjson: the first stream event carries every prompt token id)."""
    return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY)


def _json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=_dumps(body), status=status, content_type="application/json")


async def _json_object(request: web.Request) -> dict[str, Any] | web.Response:
    """The request's JSON object body, or the 400 that answers a body that is not one."""
    try:
        body = orjson.loads(await request.read())  # bytes straight in: no decode to str first
    except Exception:  # noqa: BLE001
        return error_response("request body is not valid JSON")
    if not isinstance(body, dict):
        return error_response("request body must be a JSON object")
    return body


def error_response(message: str, status: int = 400, etype: str = "BadRequestError",
                   param: str | None = None) -> web.Response:
    """vLLM's error JSON shape."""
    body = {"error": {"message": message, "type": etype, "param": param, "code": status}}
    return _json_response(body, status=status)


# ------------------------------------------------------------------------------------------
# Output plan: the tokens a reply is made of, and how they stream


@dataclass
class OutputPlan:
    ids: list[int]
    kinds: list[int]          # per token: segment index
    pieces: list[str]         # per token: text ('' for specials / tool framing)
    segments: list[tuple[str, int]]  # (kind, tool index) per segment: reasoning|content|tool_head|tool_args|tool_tail|eos
    tool_calls: list[dict[str, Any]]
    finish_reason: str


def build_output(tok: Tokenizer, reply: PolicyReply, max_tokens: int | None, rid: str) -> OutputPlan:
    ids: list[int] = []
    kinds: list[int] = []
    pieces: list[str] = []
    segments: list[tuple[str, int]] = []

    def add(kind: str, idx: int, text: str) -> None:
        if not text:
            return
        i, p = tok.encode_pieces(text)
        segments.append((kind, idx))
        s = len(segments) - 1
        ids.extend(i)
        pieces.extend(p)
        kinds.extend([s] * len(i))

    tool_calls = []
    reasoning = reply.reasoning or ""
    content = reply.content or ""
    for j, tc in enumerate(reply.tool_calls):
        tool_calls.append({"id": f"chatcmpl-tool-{uuid.uuid4().hex[:24]}", "type": "function",
                           "function": {"name": tc.name, "arguments": tc.arguments}})
    # natural length (without padding)
    natural = len(tok.encode(reasoning)) + len(tok.encode(content)) + 1
    for tc in reply.tool_calls:
        natural += len(tok.encode(tok.render_tool_call(tc.name, tc.arguments)))
    target = reply.output_tokens
    if target is not None and target > natural:
        pad = target - natural
        filler = _filler(tok, pad, rid)
        reasoning = (reasoning + ("\n" if reasoning else "")) + filler if reasoning else filler
    add("reasoning", 0, reasoning)
    add("content", 0, content)
    for j, tc in enumerate(reply.tool_calls):
        head = ("\n" if (content or j) else "") + f'<tool_call>\n{{"name": {json.dumps(tc.name)}, "arguments": '
        add("tool_head", j, head)
        add("tool_args", j, tc.arguments)
        add("tool_tail", j, "}\n</tool_call>")
    finish = "tool_calls" if reply.tool_calls else "stop"
    # cut to the policy's target (then end with EOS), pad exactly when still short
    if target is not None and target >= 1 and len(ids) + 1 > target:
        del ids[target - 1:], kinds[target - 1:], pieces[target - 1:]
    while target is not None and len(ids) + 1 < target:  # filler tokenization granularity
        segments.append(("reasoning", 0))
        ids.append(tok.encode(" x")[0])
        kinds.append(len(segments) - 1)
        pieces.append(" x")
    segments.append(("eos", 0))
    ids.append(IM_END)
    kinds.append(len(segments) - 1)
    pieces.append("")
    if max_tokens is not None and max_tokens >= 0 and len(ids) > max_tokens:
        del ids[max_tokens:], kinds[max_tokens:], pieces[max_tokens:]
        finish = "length"
    if tool_calls:  # calls cut off by max_tokens are not calls
        seen = {segments[k][1] for k in kinds if segments[k][0] == "tool_tail"}
        tool_calls = [tc for j, tc in enumerate(tool_calls) if j in seen]
    return OutputPlan(ids, kinds, pieces, segments, tool_calls, finish)


def _filler(tok: Tokenizer, n: int, rid: str) -> str:
    words = ("so", "then", "we", "check", "the", "next", "step", "and", "it", "is", "fine", "ok")
    x = zlib.crc32(rid.encode())
    out = []
    for i in range(max(0, n)):
        out.append(words[(x + i * 7) % len(words)])
    return " " + " ".join(out) if out else ""


def deltas(plan: OutputPlan, a: int, b: int, started_tools: set[int]) -> list[dict[str, Any]]:
    """OpenAI/vLLM deltas for output tokens [a, b)."""
    out: list[dict[str, Any]] = []
    i = a
    while i < b:
        s = plan.kinds[i]
        j = i
        while j < b and plan.kinds[j] == s:
            j += 1
        kind, idx = plan.segments[s]
        text = "".join(plan.pieces[i:j])
        if kind == "reasoning" and text:
            out.append({"reasoning_content": text})
        elif kind == "content" and text:
            out.append({"content": text})
        elif kind in ("tool_head", "tool_args"):
            tc = plan.tool_calls[idx] if idx < len(plan.tool_calls) else None
            if tc is not None:
                if idx not in started_tools:
                    started_tools.add(idx)
                    out.append({"tool_calls": [{"index": idx, "id": tc["id"], "type": "function",
                                                "function": {"name": tc["function"]["name"], "arguments": ""}}]})
                if kind == "tool_args" and text:
                    out.append({"tool_calls": [{"index": idx, "function": {"arguments": text}}]})
        i = j
    return out


# ------------------------------------------------------------------------------------------


class Endpoint:
    def __init__(self, stack: StackConfig, name: str, master: str | None, disk_dir: str | None,
                 master_http: str | None = None) -> None:
        self.stack = stack
        self.name = name
        self.profile: ModelProfile = load_model_profile(stack.profile)
        self.model = self.profile.name
        p = self.profile
        conf = stack.configuration
        self.tok = Tokenizer()
        self.metrics = Metrics(self.model, p.block_size, p.gpu_pool_blocks, conf != "recompute", p.max_model_len)
        self.seed = zlib.crc32(f"{stack.seed}:{name}".encode())
        self.policy = load_policy(stack.policy, stack, self.seed)
        ram = load_tier_profile(stack.store.ram_tier)
        disk = load_tier_profile(stack.store.disk_tier)
        self.store = None
        if conf in STORE_CONFIGS:
            from adev.emulator.store import MooncakeTier, StoreSettings
            if not master:
                raise ConfigError(f"stack.configuration: {conf!r} needs a Mooncake master (--master HOST:PORT)")
            n_eps = max(1, len(stack.endpoints))
            scale = stack.payload_scale
            seg = 0 if conf == "disk-only" else int(stack.store.ram_gb * 1e9 / scale / n_eps)
            ddir = None
            if conf in DISK_CONFIGS:
                ddir = disk_dir or (str(Path(stack.store.disk_dir) / name) if stack.store.disk_dir else None)
                if not ddir:
                    raise ConfigError(f"stack.configuration: {conf!r} needs --disk-dir or stack.store.disk_dir")
            http = master_http
            if not http and stack.store.metrics_url:
                from urllib.parse import urlparse
                u = urlparse(stack.store.metrics_url)
                http = u.netloc or None
            if not http and stack.store.metrics_port:
                http = f"{master.rsplit(':', 1)[0]}:{stack.store.metrics_port}"
            self.store = MooncakeTier(StoreSettings(
                master=master, model_name=self.model, payload_bytes=max(1, p.bytes_per_block // scale),
                segment_bytes=seg, disk_dir=ddir, master_http=http if conf == "store-ram+disk" else None,
                host=stack.host, prefer_local=stack.store.placement == "local",
                lease_s=stack.store.lease_ttl_s / stack.time_scale))
            self.store.on_error = lambda op: self.metrics.store_error(op).inc()
        S = stack.time_scale
        # the stack's held clock (model time waits for slow store reads), when it has one
        from adev.clock import open_held_clock
        from adev.stack.state import state_dir_path
        held = open_held_clock(state_dir_path(stack.state_dir)) if stack.model_clock == "held" else None
        self.engine = Engine(EngineConfig(
            block_size=p.block_size, capacity_blocks=p.gpu_pool_blocks,
            prefill_tokens_per_s=p.prefill_tokens_per_s, decode_step_base_s=p.decode_step_base_s,
            decode_step_per_seq_s=p.decode_step_per_seq_s, decode_step_per_ktoken_s=p.decode_step_per_ktoken_s,
            max_num_seqs=p.max_num_seqs, max_num_batched_tokens=p.max_num_batched_tokens, time_scale=S,
            bytes_per_block=p.bytes_per_block, prefix_caching=conf != "recompute",
            ram_tier=TierCost(ram.name, ram.lookup_latency_s, ram.read_bytes_per_s),
            disk_tier=TierCost(disk.name, disk.lookup_latency_s, disk.read_bytes_per_s),
            disk_only=conf == "disk-only"), self.metrics, self.store,
            **({"clock": held, "slot": [e.name for e in stack.endpoints].index(name)} if held else {}))
        self.created = int(time.time())

    async def start(self) -> None:
        if self.store is not None:
            await self.store.start(wait_s=10.0)
        self.engine.start()

    async def close(self) -> None:
        if self.store is not None:
            await self.store.close()

    # ------------------------------------------------------------------ helpers
    def _prompt_ids(self, body: dict[str, Any]) -> list[int]:
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) for m in msgs):
            raise _BadRequest("messages: expected a non-empty list of message objects", "messages")
        tools = body.get("tools")
        if tools is not None and not isinstance(tools, list):
            raise _BadRequest("tools: expected a list of tool objects", "tools")
        if body.get("tool_choice") == "none":
            tools = None
        return self.tok.apply_chat_template(msgs, tools, True)

    def _check_len(self, n: int, max_tokens: int | None) -> None:
        p = self.profile
        if n > p.max_model_len:
            raise _BadRequest(f"This model's maximum context length is {p.max_model_len} tokens. However, your "
                              f"request has {n} input tokens. Please reduce the length of the input messages.",
                              "messages")
        if max_tokens is not None and n + max_tokens > p.max_model_len:
            raise _BadRequest(f"This model's maximum context length is {p.max_model_len} tokens. However, you "
                              f"requested {n + max_tokens} tokens ({n} in the messages, {max_tokens} in the "
                              f"completion). Please reduce the length of the messages or completion.",
                              "max_tokens")
        need = -(-n // p.block_size)
        if need > p.gpu_pool_blocks:
            raise _BadRequest(f"The prompt ({n} tokens, {need} blocks of {p.block_size}) is larger than the KV "
                              f"cache ({p.gpu_pool_blocks} blocks = {p.gpu_pool_blocks * p.block_size} tokens); "
                              "it can never be scheduled.", "messages")

    def adev_field(self, r: Request, t_first_mono: float | None, t_end_mono: float,
                   sent: tuple[float | None, float | None] = (None, None)) -> dict[str, Any]:
        """Contract 1. ``sent``: when the stream's first bytes (headers, then the first event)
        and its first token event were handed to the connection (``t_first_byte_sent_mono``,
        ``t_first_token_sent_mono``; None for a non-streamed response)."""
        bs = self.profile.block_size
        t_admit = r.t_admit if r.t_admit is not None else r.t_arrival
        t_ready = r.t_ready if r.t_ready is not None else t_admit
        prefill_end = r.t_prefill_done if r.t_prefill_done is not None else t_ready
        return {
            "request_id": r.rid,
            "t_arrival_mono": r.arrival_mono,
            "t_first_token_mono": t_first_mono,
            "t_end_mono": t_end_mono,
            "t_first_byte_sent_mono": sent[0],
            "t_first_token_sent_mono": sent[1],
            "queue_s": t_admit - r.t_arrival,
            "lookup_s": r.lookup_s,
            "load_s": r.load_s,
            "read_path_s": r.lookup_s + r.load_s,
            "read_path_host_s": r.read_host_s,
            "prefill_s": max(0.0, prefill_end - t_ready),
            "ttft_s": (r.t_first - r.t_arrival) if r.t_first is not None else None,
            "tokens": r.tokens_split(bs),
            "store_keys_looked_up": r.store_keys_looked_up,
            "store_hit_blocks": r.store_hit_blocks,
            "put_blocks": r.put_blocks,
            "put_refused_blocks": r.put_refused_blocks,
            "store_errors": r.store_errors,
            "preemptions": r.preemptions,
            "configuration": self.stack.configuration,
            "time_scale": self.stack.time_scale,
        }

    def usage(self, r: Request) -> dict[str, Any]:
        split = r.tokens_split(self.profile.block_size)
        cached = len(r.prompt) - split["computed"]
        return {"prompt_tokens": len(r.prompt), "total_tokens": len(r.prompt) + r.n_gen,
                "completion_tokens": r.n_gen,
                "prompt_tokens_details": {"cached_tokens": cached} if cached else None}

    # ------------------------------------------------------------------ routes
    async def chat(self, request: web.Request) -> web.StreamResponse:
        t_arrival = self.engine.clock()
        self.engine.hold_now(request)  # preparing it takes no model time (on a held clock)
        try:
            got = await self._prepare(request, t_arrival)
        finally:
            self.engine.release(request)
        if isinstance(got, web.Response):
            return got
        r, plan, body = got
        stream = bool(body.get("stream"))
        want_ids = bool(body.get("return_token_ids"))
        so = body.get("stream_options") or {}
        include_usage = bool(so.get("include_usage")) if isinstance(so, dict) else False
        try:
            if stream:
                return await self._stream(request, r, plan, want_ids, include_usage)
            return await self._complete(r, plan, want_ids)
        except (asyncio.CancelledError, ConnectionResetError):
            self.engine.abort(r)
            raise

    async def _prepare(self, request: web.Request, t_arrival: float):
        """Read, check and tokenize a chat request, get the policy's reply and submit it to the
        engine: (request, output plan, body), or the error response."""
        body = await _json_object(request)
        if isinstance(body, web.Response):
            return body
        if self.engine.dead is not None:
            return error_response("engine is dead", 503, "ServiceUnavailableError")
        try:
            prompt = self._prompt_ids(body)
            max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
            if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool)
                                           or max_tokens < 1):
                raise _BadRequest("max_tokens: expected a positive integer", "max_tokens")
            self._check_len(len(prompt), max_tokens)
        except _BadRequest as e:
            return error_response(str(e), param=e.param)
        rid = f"chatcmpl-{uuid.uuid4().hex}"
        seed = body.get("seed")
        preq = PolicyRequest(model=self.model, messages=body["messages"], tools=body.get("tools"),
                             max_tokens=max_tokens, seed=seed if isinstance(seed, int) else None,
                             prompt_tokens=len(prompt))
        try:
            reply = self.policy.reply(preq)
        except Exception as e:  # noqa: BLE001 (a policy bug must not kill the endpoint)
            log.exception("policy failed")
            return error_response(f"policy error: {type(e).__name__}: {e}", 500, "InternalServerError")
        plan = build_output(self.tok, reply, max_tokens, rid)
        r = Request(rid=rid, prompt=prompt, out_ids=plan.ids, finish_reason=plan.finish_reason)
        self.engine.submit(r, t_arrival)
        return r, plan, body

    async def _complete(self, r: Request, plan: OutputPlan, want_ids: bool) -> web.Response:
        t_first = None
        while True:
            n, _ = await r.queue.get()
            if n == 0:
                break
            if t_first is None:
                t_first = self.engine.clock()
        t_end = self.engine.clock()
        k = r.n_gen
        reasoning = "".join(p for p, s in zip(plan.pieces[:k], plan.kinds[:k]) if plan.segments[s][0] == "reasoning")
        content = "".join(p for p, s in zip(plan.pieces[:k], plan.kinds[:k]) if plan.segments[s][0] == "content")
        msg: dict[str, Any] = {"role": "assistant", "content": content if content or not plan.tool_calls else None,
                               "refusal": None, "annotations": None, "audio": None, "function_call": None,
                               "tool_calls": plan.tool_calls,
                               "reasoning_content": reasoning or None}
        choice: dict[str, Any] = {"index": 0, "message": msg, "logprobs": None, "finish_reason": r.finish_reason,
                                  "stop_reason": None}
        if want_ids:
            choice["token_ids"] = plan.ids[:k]
        body: dict[str, Any] = {"id": r.rid, "object": "chat.completion", "created": int(time.time()),
                                "model": self.model, "choices": [choice], "usage": self.usage(r),
                                "prompt_logprobs": None, "kv_transfer_params": None}
        if want_ids:
            body["prompt_token_ids"] = r.prompt
        body["adev"] = self.adev_field(r, t_first, t_end)
        return _json_response(body)

    async def _stream(self, request: web.Request, r: Request, plan: OutputPlan, want_ids: bool,
                      include_usage: bool) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        created = int(time.time())
        base = {"id": r.rid, "object": "chat.completion.chunk", "created": created, "model": self.model}

        def chunk(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> bytes:
            d = dict(base)
            ch: dict[str, Any] = {"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}
            if "token_ids" in extra:
                ch["token_ids"] = extra.pop("token_ids")
            d["choices"] = [ch]
            d.update(extra)
            return b"data: " + _dumps(d) + b"\n\n"

        first = {"role": "assistant", "content": ""}
        first_event = chunk(first, **({"prompt_token_ids": r.prompt} if want_ids else {}))
        t_byte_sent = self.engine.clock()  # before the headers go: no byte of the answer precedes it
        await resp.prepare(request)
        await resp.write(first_event)
        t_token_sent = None
        started: set[int] = set()
        sent = 0
        t_first = None
        while True:
            n, _ = await r.queue.get()
            if n == 0:
                break
            a, b = sent, min(sent + n, len(plan.ids))
            sent = b
            if t_first is None:
                t_first = self.engine.clock()
            ds = deltas(plan, a, b, started)
            done_now = b >= r.n_out
            parts = []
            if not ds:
                ds = [{}] if (want_ids or done_now) else []
            for i, d in enumerate(ds):
                last = i == len(ds) - 1
                kw: dict[str, Any] = {}
                if want_ids and last:
                    kw["token_ids"] = plan.ids[a:b]
                elif want_ids:
                    kw["token_ids"] = []
                parts.append(chunk(d, r.finish_reason if (last and done_now) else None, **kw))
            if parts:
                if t_token_sent is None:
                    t_token_sent = self.engine.clock()
                await resp.write(b"".join(parts))
        t_end = self.engine.clock()
        tail = []
        if sent < r.n_out or r.finish_reason in ("abort",) or sent == 0:
            # ended early (preempted past the pool, aborted) or nothing emitted: close the choice
            tail.append(chunk({}, r.finish_reason))
        adev = self.adev_field(r, t_first, t_end, (t_byte_sent, t_token_sent))
        if include_usage:
            d = dict(base)
            d["choices"] = []
            d["usage"] = self.usage(r)
            d["adev"] = adev
            tail.append(b"data: " + _dumps(d) + b"\n\n")
        else:
            d = dict(base)
            d["choices"] = []
            d["adev"] = adev
            tail.append(b"data: " + _dumps(d) + b"\n\n")
        tail.append(b"data: [DONE]\n\n")
        await resp.write(b"".join(tail))
        await resp.write_eof()
        return resp

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await _json_object(request)
        if isinstance(body, web.Response):
            return body
        if "messages" in body:
            try:
                msgs = body["messages"]
                if not isinstance(msgs, list):
                    raise _BadRequest("messages: expected a list", "messages")
                ids = self.tok.apply_chat_template(msgs, body.get("tools"),
                                                   bool(body.get("add_generation_prompt", True)))
            except _BadRequest as e:
                return error_response(str(e), param=e.param)
        elif isinstance(body.get("prompt"), str):
            ids = self.tok.encode_with_specials(body["prompt"])
        else:
            return error_response("give either 'prompt' (a string) or 'messages'", param="prompt")
        return _json_response({"count": len(ids), "max_model_len": self.profile.max_model_len,
                                  "tokens": ids, "token_strs": None})

    async def detokenize(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            ids = body["tokens"]
            if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
                raise ValueError
        except Exception:  # noqa: BLE001
            return error_response("tokens: expected a list of integers", param="tokens")
        return _json_response({"prompt": self.tok.decode(ids)})

    async def reset_prefix_cache(self, request: web.Request) -> web.Response:
        """vLLM's ``POST /reset_prefix_cache`` (served there with ``VLLM_SERVER_DEV_MODE=1``):
        drops the GPU prefix cache (not the store); 200 with an empty body, like vLLM, which does
        not report a refused reset (here: while requests hold blocks; logged)."""
        if not self.engine.pool.reset():
            log.warning("reset_prefix_cache refused: %d blocks in use", self.engine.pool.used_blocks)
        return web.Response(status=200)

    async def metrics_route(self, request: web.Request) -> web.Response:
        running, waiting = self.engine.counts()
        m = self.metrics
        m.num_requests_running.set(running)
        m.num_requests_waiting.set(waiting)
        m.kv_cache_usage_perc.set(self.engine.pool.usage())
        m.store_up.set(1 if (self.store is not None and self.store.up) else 0)
        return web.Response(body=m.render(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    async def health(self, request: web.Request) -> web.Response:
        if self.engine.dead is not None:
            return web.Response(status=503)
        return web.Response(status=200)

    async def models(self, request: web.Request) -> web.Response:
        card = {"id": self.model, "object": "model", "created": self.created, "owned_by": "vllm",
                "root": self.model, "parent": None, "max_model_len": self.profile.max_model_len,
                "permission": []}
        return _json_response({"object": "list", "data": [card]})

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/detokenize", self.detokenize)
        app.router.add_post("/reset_prefix_cache", self.reset_prefix_cache)
        app.router.add_get("/metrics", self.metrics_route)
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        return app


class _BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def load_stack_json(arg: str) -> StackConfig:
    text = arg
    if not arg.lstrip().startswith("{"):
        text = Path(arg).read_text()
    data = json.loads(text)
    return from_dict(StackConfig, data, "stack")


async def serve(stack: StackConfig, name: str, port: int, master: str | None, disk_dir: str | None,
                master_http: str | None = None, ready: asyncio.Event | None = None,
                stop: asyncio.Event | None = None) -> None:
    ep = Endpoint(stack, name, master, disk_dir, master_http)
    await ep.start()
    # At shutdown, requests still in the engine (a cancelled fleet leaves many) are cut after 3 s
    # instead of aiohttp's default 60 s: the stack is going away and clients record the error.
    runner = web.AppRunner(ep.app(), access_log=None, shutdown_timeout=3.0)
    await runner.setup()
    site = web.TCPSite(runner, stack.host, port)
    await site.start()
    log.info("endpoint %s serving %s on %s:%d", name, ep.model, stack.host, port)
    if ready is not None:
        ready.set()
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    with event_loop.quiet_gc():  # the set-up (tokenizer, pools, store client) never rescanned
        await stop.wait()
    await runner.cleanup()
    try:  # bounded: process exit does not need the store client's goodbye
        await asyncio.wait_for(ep.close(), 10.0)
    except asyncio.TimeoutError:
        log.warning("endpoint %s: store client did not close within 10 s; exiting anyway", name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m adev.emulator.server",
                                 description="Emulated vLLM-compatible endpoint (adev embedded stack).")
    ap.add_argument("--config", required=True, help="StackConfig as JSON (path or JSON text)")
    ap.add_argument("--endpoint", required=True, help="endpoint name (one of stack.endpoints)")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--master", default=None, help="Mooncake master RPC address HOST:PORT")
    ap.add_argument("--disk-dir", default=None, help="offload directory for the disk tier (this endpoint)")
    ap.add_argument("--master-http", default=None, help="Mooncake master HTTP (metrics) HOST:PORT")
    ap.add_argument("--log-level", default=os.environ.get("ADEV_EMULATOR_LOG", "WARNING"))
    a = ap.parse_args(argv)
    logging.basicConfig(level=a.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        stack = load_stack_json(a.config)
        names = [e.name for e in stack.endpoints]
        if a.endpoint not in names:
            raise ConfigError(f"--endpoint: {a.endpoint!r} is not in stack.endpoints; allowed: {', '.join(names)}")
        event_loop.run(serve(stack, a.endpoint, a.port, a.master, a.disk_dir, a.master_http))
    except ConfigError as e:
        print(f"adev.emulator.server: {e}", file=sys.stderr)
        sys.stdout.flush()
        os._exit(2)
    except OSError as e:
        print(f"adev.emulator.server: {e}", file=sys.stderr)
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # Mooncake's threads must not hold the interpreter at exit


if __name__ == "__main__":
    sys.exit(main())
