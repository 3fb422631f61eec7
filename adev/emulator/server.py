"""The emulated vLLM-compatible endpoint (aiohttp).

    python -m adev.emulator.server --config STACK_JSON --endpoint NAME --port PORT \\
        --master HOST:PORT [--disk-dir DIR] [--master-http HOST:PORT]

STACK_JSON is ``dataclasses.asdict(StackConfig)`` as JSON (a path, or the JSON text itself).
``--master-http`` (optional) is the master's HTTP metrics/admin address, used to attribute store
hits to RAM or disk; without it, ``stack.store.metrics_url`` or ``stack.store.metrics_port`` is
used when set.

Routes (vLLM's shapes): ``POST /v1/chat/completions`` and ``POST /v1/completions``
(:mod:`adev.emulator.completions`), ``POST /tokenize``, ``POST /detokenize``,
``POST /reset_prefix_cache``, ``GET /metrics``, ``GET /health``, ``GET|POST /ping``,
``GET /version``, ``GET /v1/models``. Every completion carries the ``"adev"`` extension object
(:class:`adev.emulator.schema.EndpointExtension`).
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
from pathlib import Path
from typing import Any

from aiohttp import web

from adev import event_loop
from adev.config import (
    DISK_CONFIGS,
    SERIAL_STAGINGS,
    ConfigError,
    KvRole,
    ModelProfile,
    StackConfig,
    from_dict,
    load_tier_profile,
)
from adev.emulator import completions
from adev.emulator.disagg import Transfer, load_link_profile
from adev.emulator.engine import Engine, EngineConfig, Request, TierCost
from adev.emulator.http import bad_request_response, error_response, json_object, json_response
from adev.emulator.metrics import Metrics
from adev.emulator.params import BadRequest, Sampling
from adev.emulator.planning import OutputPlan, build_output
from adev.emulator.policies import load_policy
from adev.emulator.policies.base import PolicyInputError, PolicyRequest
from adev.emulator.schema import EndpointExtension, TokenSplit
from adev.emulator.state import device_read_rate
from adev.emulator.tokenizer import Tokenizer
from adev.vllm_release import counts_waiting_lookups

log = logging.getLogger("adev.emulator.server")

STORE_CONFIGS = ("store-ram", "store-ram+disk", "disk-only")


class Endpoint:
    def __init__(self, stack: StackConfig, name: str, master: str | None, disk_dir: str | None,
                 master_http: str | None = None) -> None:
        self.stack = stack
        self.name = name
        self.profile: ModelProfile = stack.model_profile()
        self.model = self.profile.name
        p = self.profile
        conf = stack.configuration
        self.tok = Tokenizer()
        self.metrics = Metrics(self.model, p.block_size, p.gpu_pool_blocks, conf != "recompute", p.max_model_len)
        self.seed = zlib.crc32(f"{stack.seed}:{name}".encode())
        self.policy = load_policy(stack.policy, stack, self.seed)
        spec = next((e for e in stack.endpoints if e.name == name), None)
        self.kv_role: KvRole = spec.kv_role if spec is not None else "both"
        # names a request's "model" may give (vLLM's --served-model-name): the profile's name,
        # and the endpoint's configured model name when it has one
        self.served = {self.model} | ({spec.model} if spec is not None and spec.model else set())
        self.port: int | None = None  # set by serve(); named in a producer's kv_transfer_params
        link = load_link_profile(stack.kv_link)
        ram = load_tier_profile(stack.store.ram_tier)
        disk = load_tier_profile(stack.store.disk_tier)
        self.store = None
        if conf in STORE_CONFIGS:
            from adev.emulator.store import MooncakeTier, StoreSettings
            from adev.stack.commands import master_lease_ms
            if not master:
                raise ConfigError(f"stack.configuration: {conf!r} needs a Mooncake master (--master HOST:PORT)")
            n_eps = max(1, len(stack.endpoints))
            scale = stack.payload_scale
            # disk-only: the segment Mooncake needs to put through to disk is a staging buffer of
            # the RAM store's size, large enough to hold what arrives between two offload
            # heartbeats (a write not yet on disk cannot be evicted), so it refuses no write the
            # direct path would have made; hits are still charged at the disk tier
            seg = int(stack.store.ram_gb * 1e9 / scale / n_eps)
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
                lease_s=master_lease_ms(stack) / 1000.0,
                chunk_blocks=stack.store.chunk_blocks))
            self.store.on_error = lambda op: self.metrics.store_error(op).inc()
        S = stack.time_scale
        # the stack's held clock (model time waits for slow store reads), when it has one
        from adev.clock import open_held_clock
        from adev.stack.state import state_dir_path
        held = open_held_clock(state_dir_path(stack.state_dir)) if stack.model_clock == "held" else None
        # the disk tier's device, shared by the stack's endpoints through the state directory of
        # the held clock it is timed on (the stack starts both afresh); without one, the engine's own
        from adev.emulator.disk_device import DEVICE_FILE, DiskDevice
        device = None
        if conf in DISK_CONFIGS and held is not None:
            device = DiskDevice(held.path.parent / DEVICE_FILE)
        self.engine = Engine(EngineConfig(
            block_size=p.block_size, capacity_blocks=p.gpu_pool_blocks,
            prefill_tokens_per_s=p.prefill_tokens_per_s, prefill=p.prefill_time,
            decode_step_base_s=p.decode_step_base_s,
            decode_step_per_seq_s=p.decode_step_per_seq_s, decode_step_per_ktoken_s=p.decode_step_per_ktoken_s,
            max_num_seqs=p.max_num_seqs, max_num_batched_tokens=p.max_num_batched_tokens, time_scale=S,
            bytes_per_block=p.bytes_per_block, prefix_caching=conf != "recompute",
            ram_tier=TierCost(ram.name, ram.lookup_latency_s, ram.read_bytes_per_s),
            disk_tier=TierCost(disk.name, disk.lookup_latency_s, device_read_rate(
                disk.read_bytes_per_s, ram.read_bytes_per_s, stack.store.staging)),
            disk_only=conf == "disk-only", load_threads=stack.store.load_threads,
            staging_serial=stack.store.staging in SERIAL_STAGINGS,
            staging_shared=stack.store.staging == "shared",
            pressure_skip=stack.store.pressure_skip,
            count_waiting_lookups=bool(counts_waiting_lookups(stack.vllm_version)),
            kv_link=TierCost(link.name, link.latency_s, link.bytes_per_s),
            stream_interval=stack.stream_interval), self.metrics, self.store,
            clock=held if held is not None else time.monotonic,
            slot=[e.name for e in stack.endpoints].index(name) if held is not None else 0,
            device=device)
        if self.store is not None:
            from adev.emulator.leases import ModelLeases, lease_split
            if lease_split(stack.store.lease_ttl_s, S, stack.model_clock) > 1:  # model-time leases
                leases = self.store.leases = ModelLeases(
                    stack.store.lease_ttl_s, master_lease_ms(stack) / 1000.0, self.engine.now,
                    self.store.renew)
                leases.on_renewed = self.metrics.store_lease_renewed.inc
                leases.on_lapse = self.metrics.store_lease_lapses.inc
        self.created = int(time.time())

    async def start(self) -> None:
        if self.store is not None:
            await self.store.start(wait_s=10.0)
            if self.store.leases is not None:
                self.store.leases.start()
        self.engine.start()

    async def close(self) -> None:
        self.engine.device.close()
        if self.store is not None:
            if self.store.leases is not None:
                await self.store.leases.close()
            await self.store.close()

    # ------------------------------------------------------------------ admission
    def check_request(self, body: dict[str, Any]) -> None:
        """What every completion request passes first: a live engine, a served model name."""
        if self.engine.dead is not None:
            raise BadRequest("engine is dead", status=503, etype="ServiceUnavailableError")
        model = body.get("model")
        if model and model not in self.served:  # no name or "" is the served model, as in vLLM
            raise BadRequest(f"The model `{model}` does not exist.", "model", 404, "NotFoundError")

    def prompt_ids(self, body: dict[str, Any]) -> list[int]:
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) for m in msgs):
            raise BadRequest("messages: expected a non-empty list of message objects", "messages")
        tools = body.get("tools")
        if tools is not None and not isinstance(tools, list):
            raise BadRequest("tools: expected a list of tool objects", "tools")
        if body.get("tool_choice") == "none":
            tools = None
        return self.tok.apply_chat_template(msgs, tools, True)

    def check_len(self, n: int, max_tokens: int | None, param: str = "messages") -> None:
        p = self.profile
        if n > p.max_model_len:
            raise BadRequest(f"This model's maximum context length is {p.max_model_len} tokens. However, your "
                             f"request has {n} input tokens. Please reduce the length of the input messages.",
                             param)
        if max_tokens is not None and n + max_tokens > p.max_model_len:
            raise BadRequest(f"This model's maximum context length is {p.max_model_len} tokens. However, you "
                             f"requested {n + max_tokens} tokens ({n} in the messages, {max_tokens} in the "
                             f"completion). Please reduce the length of the messages or completion.",
                             "max_tokens")
        need = -(-n // p.block_size)
        if need > p.gpu_pool_blocks:
            raise BadRequest(f"The prompt ({n} tokens, {need} blocks of {p.block_size}) is larger than the KV "
                             f"cache ({p.gpu_pool_blocks} blocks = {p.gpu_pool_blocks * p.block_size} tokens); "
                             "it can never be scheduled.", param)

    def plan(self, preq: PolicyRequest, sp: Sampling, rid: str) -> OutputPlan:
        """The policy's reply under the request's limits. Under ``ignore_eos`` without
        ``max_tokens`` the limit is the rest of the context (vLLM's default max_tokens)."""
        try:
            reply = self.policy.reply(preq)
        except PolicyInputError as e:
            raise BadRequest(str(e), "adev") from None
        except Exception as e:  # noqa: BLE001 (a policy bug must not kill the endpoint)
            log.exception("policy failed")
            raise BadRequest(f"policy error: {type(e).__name__}: {e}", status=500,
                             etype="InternalServerError") from None
        limit = sp.max_tokens
        if limit is None and sp.ignore_eos:
            limit = max(1, self.profile.max_model_len - preq.prompt_tokens)
        return build_output(self.tok, reply, limit, rid, sp.ignore_eos, sp.min_tokens)

    def submit(self, rid: str, prompt: list[int], plan: OutputPlan, t_arrival: float,
               transfer: Transfer, hold_slot: int | None = None) -> Request:
        r = Request(rid=rid, prompt=prompt, out_ids=plan.ids, finish_reason=plan.finish_reason,
                    remote_prefill=transfer == "consume", writer_holds=True, hold_slot=hold_slot)
        self.engine.submit(r, t_arrival)
        return r

    def new_id(self, prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex}"

    # ------------------------------------------------------------------ response parts
    def adev_field(self, r: Request, t_first_mono: float | None, t_end_mono: float,
                   sent: tuple[float | None, float | None] = (None, None),
                   transfer: Transfer = "none") -> EndpointExtension:
        """The extension object. ``sent``: when the stream's first bytes (headers, then the first
        event) and its first token event were handed to the connection (None when not
        streamed)."""
        bs = self.profile.block_size
        t_admit = r.t_admit if r.t_admit is not None else r.t_arrival
        t_ready = r.t_ready if r.t_ready is not None else t_admit
        prefill_end = r.t_prefill_done if r.t_prefill_done is not None else t_ready
        ram, disk, kv = r.ram_blocks * bs, r.disk_blocks * bs, r.kv_transfer_tokens
        # positional, in the schema's field order: a third of the cost of keywords (the request
        # path); tests/emulator/test_schema.py checks every field against its meaning
        return EndpointExtension(
            r.rid, r.arrival_mono, t_first_mono, t_end_mono, sent[0], sent[1],  # id, stamps
            t_admit - r.t_arrival, r.lookup_s, r.load_s, r.lookup_s + r.load_s,  # queue, reads
            r.read_host_s, r.transfer_s, max(0.0, prefill_end - t_ready),          # .., prefill
            (r.t_first - r.t_arrival) if r.t_first is not None else None,          # ttft_s
            TokenSplit(r.gpu_hit_tokens, ram, disk, kv,
                       len(r.prompt) - r.gpu_hit_tokens - ram - disk - kv),
            r.store_keys_looked_up, r.store_hit_blocks, r.put_blocks, r.put_refused_blocks,
            r.store_errors, r.preemptions, self.stack.configuration, self.stack.time_scale,
            self.kv_role, transfer, r.disk_wait_s, r.load_wait_s)

    def usage(self, rs: list[Request], completion: list[int] | None = None) -> dict[str, Any]:
        """``usage`` over the requests of one response; ``completion`` overrides the tokens
        generated so far (continuous usage). ``prompt_tokens_details.cached_tokens`` = local +
        external cached tokens, present only when non-zero (``--enable-prompt-tokens-details``)."""
        bs = self.profile.block_size
        p = sum(len(r.prompt) for r in rs)
        g = sum(completion) if completion is not None else sum(r.n_gen for r in rs)
        out: dict[str, Any] = {"prompt_tokens": p, "total_tokens": p + g, "completion_tokens": g}
        if completion is None:
            cached = sum(len(r.prompt) - r.tokens_split(bs)["computed"] for r in rs)
            out["prompt_tokens_details"] = {"cached_tokens": cached} if cached else None
        return out

    # ------------------------------------------------------------------ routes
    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await completions.chat(self, request)

    async def complete(self, request: web.Request) -> web.StreamResponse:
        return await completions.complete(self, request)

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await json_object(request)
        if isinstance(body, web.Response):
            return body
        if "messages" in body:
            try:
                msgs = body["messages"]
                if not isinstance(msgs, list):
                    raise BadRequest("messages: expected a list", "messages")
                ids = self.tok.apply_chat_template(msgs, body.get("tools"),
                                                   bool(body.get("add_generation_prompt", True)))
            except BadRequest as e:
                return bad_request_response(e)
        elif isinstance(body.get("prompt"), str):
            ids = self.tok.encode_with_specials(body["prompt"])
        else:
            return error_response("give either 'prompt' (a string) or 'messages'", param="prompt")
        return json_response({"count": len(ids), "max_model_len": self.profile.max_model_len,
                              "tokens": ids, "token_strs": None})

    async def detokenize(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            ids = body["tokens"]
            if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
                raise ValueError
        except Exception:  # noqa: BLE001
            return error_response("tokens: expected a list of integers", param="tokens")
        return json_response({"prompt": self.tok.decode(ids)})

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
        """``/health`` and ``/ping`` (vLLM answers both alike: 200 with an empty body, 503 when
        the engine is dead)."""
        if self.engine.dead is not None:
            return web.Response(status=503)
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        """``{"version": "<stack.vllm_version>+adev.emulator"}``: the vLLM release the endpoint
        counts its prefix cache as (:mod:`adev.vllm_release`), with a PEP 440 local label, so
        clients that compare versions see that release."""
        return json_response({"version": f"{self.stack.vllm_version}+adev.emulator"})

    async def models(self, request: web.Request) -> web.Response:
        card = {"id": self.model, "object": "model", "created": self.created, "owned_by": "vllm",
                "root": self.model, "parent": None, "max_model_len": self.profile.max_model_len,
                "permission": []}
        return json_response({"object": "list", "data": [card]})

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.complete)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/detokenize", self.detokenize)
        app.router.add_post("/reset_prefix_cache", self.reset_prefix_cache)
        app.router.add_get("/metrics", self.metrics_route)
        app.router.add_get("/health", self.health)
        app.router.add_get("/ping", self.health)
        app.router.add_post("/ping", self.health)
        app.router.add_get("/version", self.version)
        app.router.add_get("/v1/models", self.models)
        return app


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
    ep.port = port
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
    except TimeoutError:
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
