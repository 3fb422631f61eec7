"""THE LLM client: one async OpenAI-compatible client for every chat call adev makes.

Chat calls go through one keep-alive :class:`aiohttp.ClientSession` whose pool is sized for the
fleet (``pool_size`` connections over all endpoints), created on first use and reused for the
client's life; :meth:`LLMClient.warm` opens a connection per session slot before a fleet starts.
Every call streams with ``stream_options.include_usage`` and (when a ledger is attached, or
``return_token_ids=True``) ``return_token_ids: true``, and is stamped on the run clock
(:class:`adev.clock.RunClock`, model seconds):

- ``t_scheduled``: the call became ready (``chat()`` entered, or the caller's stamp);
- ``t_sent``: the request's first bytes are handed to a connection's socket (aiohttp's
  ``on_request_chunk_sent`` trace signal for the first body chunk, which goes out together with
  the buffered headers; ``on_request_headers_sent`` for a request without a body): after the
  pool wait and any connection set-up;
- ``t_first_byte``: the first bytes of the response were read from the socket (the event loop's
  ``data_received`` on the connection, before any parsing or task switch: what a packet capture
  would show, give or take the loop's wake-up); the headers come with, or just before, the
  role-only chunk that vLLM and the emulator send with the prompt's token ids;
- ``t_first_content``: the first event carrying content, reasoning or a tool-call delta (TTFT);
- ``t_end``: the stream ended (``[DONE]`` or EOF).

``dispatch delay = t_sent - t_scheduled`` (client queueing + request building + pool wait).
Usage and ``prompt_tokens_details.cached_tokens`` come from the final chunk; the emulator's
``adev`` field (``EndpointExtension``) lands in ``CallRecord.server`` unchanged; the prompt's
token ids (``prompt_token_ids``) go to the :class:`LedgerHook` and are then dropped:
records never hold them.

Retries: connection errors (before or during the stream) and HTTP 5xx are retried with
exponential backoff and jitter, up to ``RetryPolicy.max_attempts`` attempts; every attempt is its
own :class:`~adev.records.CallRecord` (``attempt`` 0, 1, ...). 4xx answers are not retried
(:class:`ContextLengthError` for a prompt over the model's context). A cancelled call records
status ``cancelled`` and re-raises. Records are appended to the run's ``calls.jsonl`` as each
attempt completes. API keys are held out of reprs, records and logs.

The request path is kept lean (it is benchmarked, ``bench/bench_client.py`` and
``bench/bench_fleet.py``). The ``openai`` package serves discovery (``/v1/models``, one
``AsyncOpenAI`` per base URL); chat requests are serialised once with orjson and streamed over
aiohttp, whose C HTTP parser and connection pool cost about half the CPU per call of httpx's
pure-Python stack (measured in ``bench_client.py``: 8.4 -> 5 ms per call; httpcore's pool walks
every pooled connection on each request). The openai package's own per-request parameter
transform walks every message (about 15 ms for a 90 KB prompt on a loaded 2-core host), so it is
not on the chat path. The SSE body is split on raw bytes and each event parsed with orjson. The
first event carries the prompt's token ids (tens of thousands of integers): their JSON array is
cut out of the event as raw bytes and, for a ledger with ``add_json``, handed over unparsed.
"""
from __future__ import annotations

import asyncio
import functools
import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp
import openai
from aiohttp.client_proto import ResponseHandler

from ..clock import RunClock, mono
from ..records import CallRecord

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Endpoint", "RetryPolicy", "LLMClient", "ChatResult", "ToolCallOut", "LLMError",
           "ContextLengthError", "LedgerHook"]

BLOCK_SIZE = 16  # tokens per block for CallRecord.n_prompt_blocks (vLLM's default)

class LedgerHook(Protocol):
    """Receives each prompt's token ids (the reuse ledger). A hook that also has
    ``add_json(t, session_id, call_id, ids_json: bytes)`` (e.g.
    :class:`adev.analysis.ledger_worker.LedgerProcess`) gets the raw JSON array instead and
    parses it itself, so the ids are never parsed on the client's event loop."""

    def add(self, t: float, session_id: str, call_id: str, token_ids: list[int]) -> object: ...


@dataclass
class Endpoint:
    """One OpenAI-compatible endpoint. ``model``/``max_model_len`` are discovered when None."""

    name: str
    base_url: str
    model: str | None = None
    api_key: str = field(default="EMPTY", repr=False)
    max_model_len: int | None = None


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff before attempt n (n >= 1): ``min(backoff_max_s, backoff_s * 2**(n-1))`` wall
    seconds, times a uniform factor in ``[1 - jitter, 1 + jitter]``."""

    max_attempts: int = 4
    backoff_s: float = 0.5
    backoff_max_s: float = 8.0
    jitter: float = 0.25

    def delay(self, attempt: int, rng: random.Random) -> float:
        base = min(self.backoff_max_s, self.backoff_s * 2 ** (attempt - 1))
        return base * (1.0 + self.jitter * (2 * rng.random() - 1))


@dataclass
class ToolCallOut:
    id: str
    name: str
    arguments: str  # raw JSON text as the model wrote it (may be malformed)


@dataclass
class ChatResult:
    content: str
    reasoning: str
    tool_calls: list[ToolCallOut]
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None
    record: CallRecord  # the successful attempt's record
    kv_transfer_params: dict[str, Any] | None = None  # completions: vLLM's P/D hand-over


class LLMError(Exception):
    """A call that failed for good (after retries, or not retryable)."""

    def __init__(self, message: str, status: int | None = None,
                 record: CallRecord | None = None):
        super().__init__(message)
        self.status = status
        self.record = record


class ContextLengthError(LLMError):
    """The endpoint refused the prompt as longer than its context (HTTP 400)."""


class _Retryable(Exception):
    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


_loads: Callable[[str | bytes], Any]

try:  # orjson: ~10x faster JSON on the request path (token id lists are large)
    import orjson

    _loads = orjson.loads

    def _dumps(obj: Any) -> bytes:
        return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY)  # numpy token-id arrays
except ImportError:  # pragma: no cover - orjson is a declared dependency
    _loads = json.loads

    def _dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

_IDS_FIELD = re.compile(rb'"prompt_token_ids"\s*:\s*\[')
_CONTEXT_MARKERS = ("maximum context length", "context length", "too long", "max_model_len")


class LLMClient:
    """The one chat client of a run. Safe to share by many concurrent sessions.

    ``endpoints``: name -> :class:`Endpoint`; ``run_dir``: where ``CallRecord``s go (anything with
    ``append(record)`` and ``run_id``; None = not recorded); ``ledger``: the reuse-ledger hook.
    """

    def __init__(self, endpoints: dict[str, Endpoint] | list[Endpoint], *, clock: RunClock,
                 run_dir: Any = None, ledger: LedgerHook | None = None, pool_size: int = 256,
                 retry: RetryPolicy = RetryPolicy(), timeout_s: float = 900.0,
                 connect_timeout_s: float = 10.0, seed: int = 0,
                 return_token_ids: bool | None = None):
        if isinstance(endpoints, list):
            endpoints = {e.name: e for e in endpoints}
        self.endpoints: dict[str, Endpoint] = dict(endpoints)
        self.clock = clock
        self.run_dir = run_dir
        self.run_id = getattr(run_dir, "run_id", "") if run_dir is not None else ""
        self.ledger = ledger
        # token ids are asked for when a ledger consumes them (they are large to send and parse)
        self.return_token_ids = (ledger is not None) if return_token_ids is None \
            else return_token_ids
        self.pool_size = pool_size
        self.retry = retry
        self.timeout_s, self.connect_timeout_s = timeout_s, connect_timeout_s
        self._rng = random.Random(seed)
        self._clients: dict[str, openai.AsyncOpenAI] = {}  # discovery only, built on demand
        self._session: aiohttp.ClientSession | None = None  # the chat path's one pool

    # ---- connections ------------------------------------------------------------------
    def _client(self, ep: Endpoint) -> openai.AsyncOpenAI:
        """The ``openai`` client of an endpoint's base URL (discovery: ``/v1/models``)."""
        c = self._clients.get(ep.base_url)
        if c is None:
            c = openai.AsyncOpenAI(base_url=ep.base_url, api_key=ep.api_key or "EMPTY",
                                   max_retries=0, timeout=self.timeout_s)
            self._clients[ep.base_url] = c
        return c

    def _pool(self) -> aiohttp.ClientSession:
        """The keep-alive pool of the chat path (``pool_size`` connections over all endpoints),
        created on first use inside the running loop."""
        s = self._session
        if s is None or s.closed:
            trace = aiohttp.TraceConfig()
            trace.on_request_headers_sent.append(_stamp_headers)
            trace.on_request_chunk_sent.append(_stamp_body)
            connector = aiohttp.TCPConnector(limit=self.pool_size, limit_per_host=0,
                                             keepalive_timeout=300.0)
            # every pooled connection stamps its first received bytes per request (t_first_byte);
            # aiohttp has no public hook at the socket read, so its protocol factory is swapped
            connector._factory = functools.partial(  # type: ignore[assignment]  # typeshed's partial is
                _StampedHandler, loop=connector._loop)  # invariant; a subclass factory is valid here
            s = self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout_s,
                                              sock_read=self.timeout_s),
                trace_configs=[trace])
        return s

    async def discover(self) -> None:
        """Fill ``model`` and ``max_model_len`` of every endpoint from ``GET /v1/models``;
        :class:`LLMError` naming the endpoint and its URL when it does not answer."""
        for ep in self.endpoints.values():
            if ep.model and ep.max_model_len:
                continue
            try:
                page = await self._client(ep).models.list()
            except openai.APIError as e:
                cause = e.__cause__ or e.__context__
                why = f"{e}" + (f" ({type(cause).__name__}: {cause})" if cause else "")
                raise LLMError(f"endpoint {ep.name} at {ep.base_url}: GET /models failed: "
                               f"{why}"[:500]) from None
            cards = list(page.data)
            if not cards:
                raise LLMError(f"endpoint {ep.name}: /v1/models lists no model")
            card = next((c for c in cards if ep.model and c.id == ep.model), cards[0])
            ep.model = ep.model or card.id
            mml = (card.model_extra or {}).get("max_model_len")
            if ep.max_model_len is None and isinstance(mml, int):
                ep.max_model_len = mml

    async def warm(self, per_endpoint: int) -> int:
        """Open up to ``per_endpoint`` keep-alive connections to every endpoint now (concurrent
        ``GET /v1/models``), so that a fleet's first calls, all ready at once, find connections
        in the pool instead of each waiting for a TCP set-up behind the others. Returns the
        connections opened; a failure here only costs the warm-up (the calls connect as usual).
        """
        n = max(0, min(per_endpoint, self.pool_size // max(1, len(self.endpoints))))
        pool = self._pool()

        async def one(ep: Endpoint) -> bool:
            try:
                async with pool.get(ep.base_url.rstrip("/") + "/models", headers={
                        "Authorization": f"Bearer {ep.api_key or 'EMPTY'}"}) as r:
                    await r.read()
                    return r.status < 400
            except (aiohttp.ClientError, TimeoutError):
                return False
        got = await asyncio.gather(*(one(ep) for ep in self.endpoints.values()
                                     for _ in range(n)))
        return sum(got)

    def max_model_len(self, endpoint: str) -> int | None:
        """The endpoint's context length (None when unknown or not an endpoint of this client)."""
        ep = self.endpoints.get(endpoint)
        return ep.max_model_len if ep else None

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for c in clients:
            await c.close()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> LLMClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # ---- the call ----------------------------------------------------------------------
    def _endpoint(self, name: str) -> Endpoint:
        try:
            return self.endpoints[name]
        except KeyError:
            raise LLMError(f"unknown endpoint {name!r}; known: "
                           + ", ".join(sorted(self.endpoints))) from None

    async def chat(self, endpoint: str, messages: list[dict[str, Any]], *,
                   tools: list[dict[str, Any]] | None = None, max_tokens: int | None = None,
                   temperature: float | None = None, seed: int | None = None,
                   session_id: str = "", call_id: str = "", role: str = "", round: int = 0,
                   step: int = 0, t_scheduled: float | None = None,
                   extra_body: dict[str, Any] | None = None) -> ChatResult:
        """One chat completion (streamed), retried per :class:`RetryPolicy`."""
        t_sched = self.clock.now() if t_scheduled is None else t_scheduled
        ep = self._endpoint(endpoint)
        body: dict[str, Any] = {"model": ep.model or "", "messages": messages, "stream": True,
                                "stream_options": {"include_usage": True}}
        if tools:
            body["tools"] = tools
            body["tool_choice"] = "auto"
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if temperature is not None:
            body["temperature"] = temperature
        if seed is not None:
            body["seed"] = seed
        xb: dict[str, Any] = {"return_token_ids": True} if self.return_token_ids else {}
        if extra_body:
            xb.update(extra_body)
        return await self._call(ep, endpoint, "/chat/completions", body, xb, t_sched,
                                session_id=session_id, call_id=call_id, role=role, round=round,
                                step=step)

    async def completion(self, endpoint: str, prompt: list[int] | np.ndarray | str, *, max_tokens: int,
                         min_tokens: int | None = None, ignore_eos: bool = False,
                         stream: bool = True, temperature: float | None = None,
                         session_id: str = "", call_id: str = "", role: str = "",
                         round: int = 0, step: int = 0, t_scheduled: float | None = None,
                         extra_body: dict[str, Any] | None = None) -> ChatResult:
        """One ``POST /v1/completions`` (vLLM's interface; ``prompt`` may be token ids, a list or
        a numpy array, so no tokenizer round trip changes the prompt), streamed unless ``stream``
        is False.
        ``min_tokens``/``ignore_eos`` are vLLM's sampling extensions (an exact output length
        when ``min_tokens == max_tokens`` and ``ignore_eos``). The result's ``content`` is the
        generated text; ``kv_transfer_params`` the answer's field of that name (vLLM's
        disaggregated prefill), when present. Records and retries as :meth:`chat`."""
        t_sched = self.clock.now() if t_scheduled is None else t_scheduled
        ep = self._endpoint(endpoint)
        body: dict[str, Any] = {"model": ep.model or "", "prompt": prompt, "stream": stream,
                                "max_tokens": max_tokens}
        if stream:
            body["stream_options"] = {"include_usage": True}
        if min_tokens is not None:
            body["min_tokens"] = min_tokens
        if ignore_eos:
            body["ignore_eos"] = True
        if temperature is not None:
            body["temperature"] = temperature
        return await self._call(ep, endpoint, "/completions", body, dict(extra_body or {}),
                                t_sched, session_id=session_id, call_id=call_id, role=role,
                                round=round, step=step)

    async def _call(self, ep: Endpoint, endpoint: str, path: str, body: dict[str, Any],
                    xb: dict[str, Any], t_sched: float, *, session_id: str, call_id: str,
                    role: str, round: int, step: int) -> ChatResult:
        """The retry loop of one call (every attempt recorded)."""
        attempt = 0
        while True:
            rec = CallRecord(run_id=self.run_id, session_id=session_id, call_id=call_id,
                             endpoint=endpoint, role=role, round=round, step=step,
                             attempt=attempt, model=ep.model or "", t_scheduled=t_sched)
            try:
                result = await self._attempt(ep, body, xb, rec, path)
            except asyncio.CancelledError:
                rec.status, rec.error = "cancelled", "cancelled"
                rec.t_end = self.clock.now()
                self._record(rec)
                raise
            except _Retryable as e:
                rec.status, rec.error = "error", str(e)[:500]
                rec.t_end = self.clock.now()
                self._record(rec)
                attempt += 1
                if attempt >= self.retry.max_attempts:
                    raise LLMError(f"{endpoint}: giving up after {attempt} attempts: {e}",
                                   status=e.status, record=rec) from None
                await asyncio.sleep(self.retry.delay(attempt, self._rng))
                t_sched = self.clock.now()
                continue
            except LLMError as e:
                rec.status, rec.error = "error", str(e)[:500]
                rec.t_end = rec.t_end or self.clock.now()
                e.record = rec
                self._record(rec)
                raise
            self._record(rec)
            return result

    async def _attempt(self, ep: Endpoint, body: dict[str, Any], xb: dict[str, Any],
                       rec: CallRecord, path: str = "/chat/completions") -> ChatResult:
        clock = self.clock
        payload = _dumps({**body, **xb})
        box = [0.0, 0.0]  # headers serialised, first body bytes written (aiohttp's traces)
        st = _StreamState()
        try:
            try:
                async with self._pool().post(
                        ep.base_url.rstrip("/") + path, data=payload,
                        headers={"Authorization": f"Bearer {ep.api_key or 'EMPTY'}",
                                 "Content-Type": "application/json",
                                 "Accept": "text/event-stream"},
                        trace_request_ctx=box) as resp:
                    if resp.status >= 400:
                        err_body = await resp.read()
                        msg = _error_message(err_body, resp.status)
                        if resp.status >= 500:
                            raise _Retryable(f"HTTP {resp.status}: {msg}", resp.status)
                        cls = (ContextLengthError if resp.status == 400 and
                               any(m in msg.lower() for m in _CONTEXT_MARKERS) else LLMError)
                        raise cls(f"HTTP {resp.status}: {msg}", status=resp.status)
                    conn = resp.connection
                    st.first_byte = getattr(conn and conn.protocol, "t_first_rx", None)
                    if not body.get("stream"):
                        st.whole(await resp.read())
                    buf = b""
                    # read to the end even after [DONE]: a response released before its last
                    # byte costs the pooled keep-alive connection (and a TCP set-up next call)
                    async for data in resp.content.iter_any():
                        if st.done:
                            continue
                        if st.first_byte is None:
                            st.first_byte = mono()
                        buf = buf + data if buf else data
                        start = 0
                        while True:
                            k = buf.find(b"\n", start)
                            if k < 0:
                                break
                            line = buf[start:k]
                            start = k + 1
                            if st.feed(line):
                                break
                        buf = buf[start:]
            except (aiohttp.ClientError, TimeoutError) as e:
                # refused, reset, dropped mid-stream (payload error), read or connect timeouts
                raise _Retryable(f"{type(e).__name__}: {e}") from None
        finally:
            t_end = mono()
            sent = box[1] or box[0]
            rec.t_sent = clock.to_model(sent) if sent else rec.t_scheduled
            rec.t_first_byte = clock.to_model(st.first_byte) if st.first_byte else None
            rec.t_first_content = (clock.to_model(st.first_content) if st.first_content
                                   else None)
            rec.t_end = clock.to_model(t_end)
        rec.server = st.server
        rec.finish_reason = st.finish
        usage = st.usage
        pt = ct = cached = None
        if usage:
            pt, ct = usage.get("prompt_tokens"), usage.get("completion_tokens")
            det = usage.get("prompt_tokens_details")
            if isinstance(det, dict):
                cached = det.get("cached_tokens") or 0
            elif "prompt_tokens_details" in usage:
                cached = 0
        rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens = pt, ct, cached
        ids, raw = st.prompt_ids, st.prompt_ids_json
        add_json = getattr(self.ledger, "add_json", None)
        if raw is not None and ids is None and add_json is not None:
            # the ledger parses the ids itself, off this loop; a JSON int array's length is
            # its commas + 1
            n = raw.count(b",") + 1 if raw.strip(b"[] \t\r\n") else 0
            rec.n_prompt_blocks = n // BLOCK_SIZE
            if rec.prompt_tokens is None:
                rec.prompt_tokens = n
            if n:
                add_json(rec.t_sent, rec.session_id, rec.call_id, raw)
        else:
            if raw is not None and ids is None:
                try:
                    ids = _loads(raw)
                except ValueError:
                    raise LLMError(f"malformed prompt_token_ids: {raw[:200]!r}") from None
            if ids:
                rec.n_prompt_blocks = len(ids) // BLOCK_SIZE
                if rec.prompt_tokens is None:
                    rec.prompt_tokens = len(ids)
                if self.ledger is not None:
                    self.ledger.add(rec.t_sent, rec.session_id, rec.call_id, ids)
        tool_calls = [ToolCallOut(id=c[0] or f"call_{i}", name=c[1], arguments="".join(c[2]))
                      for i, c in sorted(st.calls.items())]
        rec.n_tool_calls = len(tool_calls)
        return ChatResult(content="".join(st.content), reasoning="".join(st.reasoning),
                          tool_calls=tool_calls, finish_reason=st.finish,
                          prompt_tokens=rec.prompt_tokens, completion_tokens=ct,
                          cached_tokens=cached, record=rec,
                          kv_transfer_params=st.kv_transfer_params)

    def _record(self, rec: CallRecord) -> None:
        if self.run_dir is not None:
            self.run_dir.append(rec)


class _StampedHandler(ResponseHandler):
    """aiohttp's client protocol, plus ``t_first_rx``: when the current request's first response
    bytes were read from the socket (reset as each request on the connection starts)."""

    t_first_rx: float | None = None

    def set_response_params(self, **kw: Any) -> None:
        self.t_first_rx = None
        super().set_response_params(**kw)

    def data_received(self, data: bytes) -> None:
        if self.t_first_rx is None:
            self.t_first_rx = mono()
        super().data_received(data)


async def _stamp_headers(session: Any, ctx: Any, params: Any) -> None:
    """aiohttp trace hook: the request's headers were serialised on a connection."""
    box = ctx.trace_request_ctx
    if box is not None and not box[0]:
        box[0] = mono()


async def _stamp_body(session: Any, ctx: Any, params: Any) -> None:
    """aiohttp trace hook: the first body chunk (with the buffered headers) is being handed to
    the connection's transport, which writes it to the socket at once (``t_sent``)."""
    box = ctx.trace_request_ctx
    if box is not None and not box[1]:
        box[1] = mono()


class _StreamState:
    """Accumulates one streamed chat completion, one SSE line at a time (hot path)."""

    __slots__ = ("content", "reasoning", "calls", "finish", "usage", "server", "prompt_ids",
                 "prompt_ids_json", "first_byte", "first_content", "done", "kv_transfer_params")

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, list] = {}  # index -> [id, name, [argument pieces]]
        self.finish = self.usage = self.server = self.prompt_ids = None
        self.prompt_ids_json: bytes | None = None  # the raw JSON array of prompt_token_ids
        self.first_byte: float | None = None      # time.monotonic() stamps
        self.first_content: float | None = None
        self.done = False
        self.kv_transfer_params: dict[str, Any] | None = None

    def whole(self, raw: bytes) -> None:
        """A non-streamed answer (chat or completion), parsed as one event."""
        try:
            d = _loads(raw)
        except ValueError:
            raise LLMError(f"malformed response: {raw[:200]!r}") from None
        if isinstance(d, dict):
            for ch in d.get("choices") or ():
                if isinstance(ch, dict) and "message" in ch:
                    ch["delta"] = ch.pop("message") or {}
        self._event(_dumps(d) if isinstance(d, dict) else raw)
        if self.first_content is None:  # the whole answer, even an empty one, arrived now
            self.first_content = mono()
        self.done = True

    def feed(self, line: bytes) -> bool:
        """Process one line; True once the stream is complete (``[DONE]``).

        The event carrying ``prompt_token_ids`` (tens of thousands of integers, the first event)
        is not parsed whole: the ids' JSON array is cut out as raw bytes (for the ledger, which
        parses it off the event loop) and the rest of the event is parsed as any other."""
        if not line.startswith(b"data:"):
            return False  # blank separators, comments, event: lines
        data = line[5:].strip()
        if data == b"[DONE]":
            self.done = True
            return True
        if self.prompt_ids_json is None and len(data) > 4096:
            m = _IDS_FIELD.search(data)
            if m is not None:
                end = data.find(b"]", m.end())
                if end > 0:
                    self.prompt_ids_json = data[m.end() - 1:end + 1]
                    data = data[:m.end() - 1] + b"null" + data[end + 1:]
        return self._event(data)

    def _event(self, data: bytes) -> bool:
        try:
            chunk = _loads(data)
        except ValueError:
            raise LLMError(f"malformed stream event: {data[:200]!r}") from None
        if not isinstance(chunk, dict):
            raise LLMError(f"malformed stream event: {data[:200]!r}")
        if "error" in chunk and not chunk.get("choices"):
            err = chunk["error"]
            msg = err.get("message", str(err)) if isinstance(err, dict) else str(err)
            code = err.get("code") if isinstance(err, dict) else None
            if isinstance(code, int) and code >= 500:
                raise _Retryable(f"stream error {code}: {msg}", code)
            raise LLMError(f"stream error: {msg}", status=code if isinstance(code, int) else None)
        ids = chunk.get("prompt_token_ids")
        if ids and self.prompt_ids is None:
            self.prompt_ids = ids
        for ch in chunk.get("choices") or ():
            d = ch.get("delta") or {}
            c = d.get("content") or ch.get("text")  # chat delta, or a completion's text
            r = d.get("reasoning_content") or d.get("reasoning")
            tcs = d.get("tool_calls")
            if self.first_content is None and (c or r or tcs):
                self.first_content = mono()
            if c:
                self.content.append(c)
            if r:
                self.reasoning.append(r)
            if tcs:
                for tc in tcs:
                    slot = self.calls.setdefault(tc.get("index", len(self.calls)), ["", "", []])
                    if tc.get("id"):
                        slot[0] = tc["id"]
                    fn = tc.get("function") or {}
                    if fn.get("name"):
                        slot[1] += fn["name"]
                    if fn.get("arguments"):
                        slot[2].append(fn["arguments"])
            if ch.get("finish_reason"):
                self.finish = ch["finish_reason"]
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        if "adev" in chunk:
            self.server = chunk["adev"]
        if isinstance(chunk.get("kv_transfer_params"), dict):
            self.kv_transfer_params = chunk["kv_transfer_params"]
        return False


def _error_message(raw: bytes, status: int) -> str:
    try:
        body = _loads(raw)
    except ValueError:
        return raw[:500].decode("utf-8", "replace") or f"HTTP {status}"
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])[:500]
        if isinstance(inner, str):
            return inner[:500]
        if body.get("message"):
            return str(body["message"])[:500]
    return str(body)[:500]
