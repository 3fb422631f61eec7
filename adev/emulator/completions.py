"""``POST /v1/chat/completions`` and ``POST /v1/completions`` of the emulated endpoint.

Both take vLLM's sampling fields (:mod:`adev.emulator.params`): ``max_tokens`` /
``max_completion_tokens``, ``min_tokens``, ``ignore_eos``, ``stream``, ``stream_options``
(``include_usage``, ``continuous_usage_stats``), ``return_token_ids``, and disaggregated
prefill's ``kv_transfer_params`` (:mod:`adev.emulator.disagg`). An unknown ``model`` is answered
404 with vLLM's ``NotFoundError`` body.

``/v1/completions`` takes ``prompt`` as a string (tokenized, special-token strings parsed), a
list of token ids (sent to the engine as they are: its blocks are exactly those ids), or a list
of either (one choice per prompt, ``index`` = the prompt's position). The ``adev`` extension
object describes the first prompt's request.
"""
from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from adev.clock import HOLD_HEADER, SENT_HEADER, hold_slot_from_header
from adev.emulator.disagg import Transfer, producer_params, transfer_kind
from adev.emulator.engine import Request
from adev.emulator.http import bad_request_response, json_object, json_response, sse
from adev.emulator.params import BadRequest, Sampling, parse_prompts, parse_sampling
from adev.emulator.planning import OutputPlan, deltas, message_parts, text_of
from adev.emulator.policies.base import PolicyRequest

if TYPE_CHECKING:
    from adev.emulator.server import Endpoint


def _extension(body: dict[str, Any]) -> dict[str, Any] | None:
    ext = body.get("adev")
    return ext if isinstance(ext, dict) else None


def _sampling(ep: Endpoint, body: dict[str, Any], chat: bool) -> tuple[Sampling, Transfer]:
    ep.check_request(body)
    sp = parse_sampling(body, chat)
    transfer = transfer_kind(body, ep.kv_role)
    if transfer == "produce":  # prefill only: the first token, then the KV goes to a decoder
        sp.max_tokens, sp.ignore_eos, sp.min_tokens = 1, False, 0
    return sp, transfer


async def _written(request: web.Request, resp: web.Response) -> web.Response:
    """Send a whole answer from the handler (so a hold released after it covers the write)."""
    await resp.prepare(request)
    await resp.write_eof()
    return resp


async def _drain(ep: Endpoint, r: Request) -> float | None:
    """Wait for the request to finish; when its first token came (the engine's clock)."""
    t_first = None
    while True:
        n, _ = await r.queue.get()
        if n == 0:
            return t_first
        if t_first is None:
            t_first = ep.engine.clock()
        ep.engine.written(r, end=False)  # a whole answer: nothing leaves before the end
        ep.engine.unread(r)


# ------------------------------------------------------------------------------------ chat


async def chat(ep: Endpoint, request: web.Request) -> web.StreamResponse:
    # hold first, then stamp: the host's time between the two would otherwise be model time
    with ep.engine.preparing(request):  # preparing it takes no model time (held clock)
        t_arrival = ep.engine.arrival(request.headers.get(SENT_HEADER))
        slot = hold_slot_from_header(request.headers.get(HOLD_HEADER))
        ep.engine.received(slot)
        body = await json_object(request)
        if isinstance(body, web.Response):
            return body
        try:
            sp, transfer = _sampling(ep, body, chat=True)
            prompt = ep.prompt_ids(body)
            ep.check_len(len(prompt), sp.max_tokens)
            rid = ep.new_id("chatcmpl")
            seed = body.get("seed")
            preq = PolicyRequest(model=ep.model, messages=body["messages"], tools=body.get("tools"),
                                 max_tokens=sp.max_tokens, seed=seed if isinstance(seed, int) else None,
                                 prompt_tokens=len(prompt), ignore_eos=sp.ignore_eos,
                                 min_tokens=sp.min_tokens, extension=_extension(body))
            plan = ep.plan(preq, sp, rid)
        except BadRequest as e:
            return bad_request_response(e)
        r = ep.submit(rid, prompt, plan, t_arrival, transfer, slot)
    try:
        if sp.stream:
            return await _chat_stream(ep, request, r, plan, sp, transfer)
        return await _written(request, await _chat_complete(ep, r, plan, sp, transfer))
    except (asyncio.CancelledError, ConnectionResetError):
        ep.engine.abort(r)
        ep.engine.gave_up(r)
        raise
    finally:
        ep.engine.written(r)


async def _chat_complete(ep: Endpoint, r: Request, plan: OutputPlan, sp: Sampling,
                         transfer: Transfer) -> web.Response:
    t_first = await _drain(ep, r)
    t_end = ep.engine.clock()
    k = r.n_gen
    reasoning, content = message_parts(plan, k)
    msg: dict[str, Any] = {"role": "assistant", "content": content if content or not plan.tool_calls else None,
                           "refusal": None, "annotations": None, "audio": None, "function_call": None,
                           "tool_calls": plan.tool_calls, "reasoning_content": reasoning or None}
    choice: dict[str, Any] = {"index": 0, "message": msg, "logprobs": None, "finish_reason": r.finish_reason,
                              "stop_reason": None}
    if sp.return_token_ids:
        choice["token_ids"] = plan.ids[:k]
    body: dict[str, Any] = {"id": r.rid, "object": "chat.completion", "created": int(time.time()),
                            "model": ep.model, "choices": [choice], "usage": ep.usage([r]),
                            "prompt_logprobs": None, "kv_transfer_params": _kv_out(ep, r, transfer)}
    if sp.return_token_ids:
        body["prompt_token_ids"] = r.prompt
    body["adev"] = ep.adev_field(r, t_first, t_end, transfer=transfer)
    return json_response(body)


def _kv_out(ep: Endpoint, r: Request, transfer: Transfer) -> dict[str, Any] | None:
    if transfer != "produce":
        return None
    return producer_params(ep.name, ep.stack.host, ep.port, len(r.prompt), ep.profile.block_size)


async def _chat_stream(ep: Endpoint, request: web.Request, r: Request, plan: OutputPlan,
                       sp: Sampling, transfer: Transfer) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    base = {"id": r.rid, "object": "chat.completion.chunk", "created": int(time.time()), "model": ep.model}
    want_ids = sp.return_token_ids

    def chunk(delta: dict[str, Any] | None, finish: str | None = None, gen: int = 0,
              **extra: Any) -> bytes:
        d = dict(base)
        ch: dict[str, Any] = {"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}
        if "token_ids" in extra:
            ch["token_ids"] = extra.pop("token_ids")
        d["choices"] = [ch]
        d.update(extra)
        if sp.continuous_usage:
            d["usage"] = ep.usage([r], [gen])
        return sse(d)

    first = {"role": "assistant", "content": ""}
    first_event = chunk(first, prompt_token_ids=r.prompt) if want_ids else chunk(first)
    t_byte_sent = ep.engine.clock()  # before the headers go: no byte of the answer precedes it
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
            t_first = ep.engine.clock()
        ds = deltas(plan, a, b, started)
        done_now = b >= r.n_out
        if not ds:
            ds = [{}] if (want_ids or done_now or sp.continuous_usage) else []
        parts = []
        for i, d in enumerate(ds):
            last = i == len(ds) - 1
            kw: dict[str, Any] = {}
            if want_ids:
                kw["token_ids"] = plan.ids[a:b] if last else []
            parts.append(chunk(d, r.finish_reason if (last and done_now) else None, b, **kw))
        if parts:
            if t_token_sent is None:
                t_token_sent = ep.engine.clock()
            await resp.write(b"".join(parts))
        else:
            ep.engine.unread(r)
        ep.engine.written(r, end=False)
    t_end = ep.engine.clock()
    tail = []
    if sent < r.n_out or r.finish_reason == "abort" or sent == 0:
        # ended early (preempted past the pool, aborted) or nothing emitted: close the choice
        tail.append(chunk({}, r.finish_reason, sent))
    d = dict(base)
    d["choices"] = []
    if sp.include_usage:
        d["usage"] = ep.usage([r])
    d["adev"] = ep.adev_field(r, t_first, t_end, (t_byte_sent, t_token_sent), transfer)
    tail.append(sse(d))
    tail.append(b"data: [DONE]\n\n")
    await resp.write(b"".join(tail))
    await resp.write_eof()
    return resp


# ------------------------------------------------------------------------------ completions


async def complete(ep: Endpoint, request: web.Request) -> web.StreamResponse:
    # hold first, then stamp: the host's time between the two would otherwise be model time
    with ep.engine.preparing(request):  # preparing it takes no model time (held clock)
        t_arrival = ep.engine.arrival(request.headers.get(SENT_HEADER))
        slot = hold_slot_from_header(request.headers.get(HOLD_HEADER))
        ep.engine.received(slot)
        body = await json_object(request)
        if isinstance(body, web.Response):
            return body
        try:
            sp, transfer = _sampling(ep, body, chat=False)
            prompts = parse_prompts(body, ep.profile.vocab_size)
            rid = ep.new_id("cmpl")
            seed = body.get("seed")
            jobs: list[tuple[list[int], OutputPlan]] = []
            for i, p in enumerate(prompts):
                ids = ep.tok.encode_with_specials(p) if isinstance(p, str) else p
                ep.check_len(len(ids), sp.max_tokens, "prompt")
                preq = PolicyRequest(model=ep.model, messages=[], max_tokens=sp.max_tokens,
                                     seed=seed if isinstance(seed, int) else None, prompt_tokens=len(ids),
                                     prompt=p if isinstance(p, str) else None, ignore_eos=sp.ignore_eos,
                                     min_tokens=sp.min_tokens, extension=_extension(body))
                jobs.append((ids, ep.plan(preq, sp, f"{rid}-{i}")))
        except BadRequest as e:
            return bad_request_response(e)
        # the client's request slot goes with the first prompt's answer (the one it reads first)
        rs = [ep.submit(f"{rid}-{i}", ids, plan, t_arrival, transfer, None if i else slot)
              for i, (ids, plan) in enumerate(jobs)]
    plans = [plan for _, plan in jobs]
    try:
        if sp.stream:
            return await _complete_stream(ep, request, rid, rs, plans, sp, transfer)
        return await _written(request, await _complete_body(ep, rid, rs, plans, sp, transfer))
    except (asyncio.CancelledError, ConnectionResetError):
        for r in rs:
            ep.engine.abort(r)
            ep.engine.gave_up(r)
        raise
    finally:
        for r in rs:
            ep.engine.written(r)


async def _complete_body(ep: Endpoint, rid: str, rs: list[Request], plans: list[OutputPlan],
                         sp: Sampling, transfer: Transfer) -> web.Response:
    firsts = await asyncio.gather(*(_drain(ep, r) for r in rs))
    t_end = ep.engine.clock()
    choices = []
    for i, (r, plan) in enumerate(zip(rs, plans, strict=True)):
        c: dict[str, Any] = {"index": i, "text": text_of(plan, 0, r.n_gen), "logprobs": None,
                             "finish_reason": r.finish_reason, "stop_reason": None,
                             "prompt_logprobs": None}
        if sp.return_token_ids:
            c["prompt_token_ids"] = r.prompt
            c["token_ids"] = plan.ids[:r.n_gen]
        choices.append(c)
    body = {"id": rid, "object": "text_completion", "created": int(time.time()), "model": ep.model,
            "choices": choices, "usage": ep.usage(rs), "system_fingerprint": None,
            "kv_transfer_params": _kv_out(ep, rs[0], transfer),
            "adev": ep.adev_field(rs[0], firsts[0], t_end, transfer=transfer)}
    return json_response(body)


async def _complete_stream(ep: Endpoint, request: web.Request, rid: str, rs: list[Request],
                           plans: list[OutputPlan], sp: Sampling,
                           transfer: Transfer) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    base = {"id": rid, "object": "text_completion", "created": int(time.time()), "model": ep.model}
    merged: asyncio.Queue[tuple[int, int]] = asyncio.Queue()

    async def pump(i: int, r: Request) -> None:
        while True:
            n, _ = await r.queue.get()
            merged.put_nowait((i, n))
            if n == 0:
                return

    def chunk(i: int, a: int, b: int, finish: str | None) -> bytes:
        r, plan = rs[i], plans[i]
        c: dict[str, Any] = {"index": i, "text": text_of(plan, a, b), "logprobs": None,
                             "finish_reason": finish, "stop_reason": None}
        if sp.return_token_ids:
            if a == 0:
                c["prompt_token_ids"] = r.prompt
            c["token_ids"] = plan.ids[a:b]
        d = dict(base)
        d["choices"] = [c]
        if sp.continuous_usage:
            d["usage"] = ep.usage([r], [b])
        return sse(d)

    pumps = [asyncio.create_task(pump(i, r)) for i, r in enumerate(rs)]
    t_byte_sent = ep.engine.clock()
    await resp.prepare(request)
    t_token_sent = None
    t_first: float | None = None
    sent = [0] * len(rs)
    open_ = len(rs)
    try:
        while open_:
            i, n = await merged.get()
            r = rs[i]
            if n == 0:
                open_ -= 1
                if sent[i] < r.n_out or r.finish_reason == "abort" or sent[i] == 0:
                    await resp.write(chunk(i, sent[i], sent[i], r.finish_reason))
                continue
            a, b = sent[i], min(sent[i] + n, len(plans[i].ids))
            sent[i] = b
            if i == 0 and t_first is None:
                t_first = ep.engine.clock()
            await resp.write(chunk(i, a, b, r.finish_reason if b >= r.n_out else None))
            ep.engine.written(r, end=False)
            if t_token_sent is None:
                t_token_sent = ep.engine.clock()
    finally:
        for t in pumps:
            t.cancel()
    t_end = ep.engine.clock()
    d = dict(base)
    d["choices"] = []
    if sp.include_usage:
        d["usage"] = ep.usage(rs)
    d["adev"] = ep.adev_field(rs[0], t_first, t_end, (t_byte_sent, t_token_sent), transfer)
    await resp.write(sse(d) + b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp
