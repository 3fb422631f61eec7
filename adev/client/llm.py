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
not on the chat path.

Its parts: :mod:`.retry` (the retry policy and the errors), :mod:`.stamps` (the send and
first-byte stamps on aiohttp's connections), :mod:`.stream` (the answer's parser and the call's
result) and :mod:`.jsoncodec`.
"""
from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp
import openai

from ..clock import HOLD_HEADER, SENT_HEADER, RunClock, held_source, mono, request_holds
from ..manifest import redact_text
from ..records import CallRecord
from .jsoncodec import dumps
from .retry import LLMError, RetryableError, RetryPolicy, http_error
from .stamps import stamped_session
from .stream import ChatResult, LedgerHook, StreamState, call_result

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Endpoint", "LLMClient"]


@dataclass
class Endpoint:
    """One OpenAI-compatible endpoint. ``model``/``max_model_len`` are discovered when None;
    ``server_version`` is what the server answers at ``GET /version`` (vLLM's release; None when
    it does not answer one)."""

    name: str
    base_url: str
    model: str | None = None
    api_key: str = field(default="EMPTY", repr=False)
    max_model_len: int | None = None
    server_version: str | None = None



_ROLE = b'"role":"assistant"'
"""In a stream's event: the role-only first event of a chat answer (sent before any token)."""


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
            s = self._session = stamped_session(self.pool_size, self.connect_timeout_s,
                                                self.timeout_s)
        return s

    async def discover(self) -> None:
        """Fill ``model`` and ``max_model_len`` of every endpoint from ``GET /v1/models``
        (:class:`LLMError` naming the endpoint and its URL when it does not answer), and
        ``server_version`` from ``GET /version``."""
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
        for ep in self.endpoints.values():
            if ep.server_version is None:
                ep.server_version = await self._version(ep)

    async def _version(self, ep: Endpoint) -> str | None:
        """The release the server names at ``GET /version`` beside its ``/v1`` base (vLLM:
        ``{"version": "0.24.0"}``); None when it answers none: other OpenAI-compatible servers
        need not have the route, and only figures that depend on the release lose it."""
        root = ep.base_url.rstrip("/")
        root = root[:-3] if root.endswith("/v1") else root
        try:
            async with self._pool().get(root + "/version", headers={
                    "Authorization": f"Bearer {ep.api_key or 'EMPTY'}"}) as r:
                if r.status >= 400:
                    return None
                doc = await r.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None
        v = doc.get("version") if isinstance(doc, dict) else None
        return v if isinstance(v, str) and v else None

    def described(self) -> dict[str, dict[str, Any]]:
        """What discovery found, per endpoint, for the run's ``endpoints.json``: base URL (its
        credentials redacted), model, context length and the server's release."""
        return {ep.name: {"base_url": redact_text(ep.base_url), "model": ep.model,
                          "max_model_len": ep.max_model_len, "server_version": ep.server_version}
                for ep in self.endpoints.values()}

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
                   extra_body: dict[str, Any] | None = None,
                   hold_slot: int | None = None) -> ChatResult:
        """One chat completion (streamed), retried per :class:`RetryPolicy`; ``hold_slot`` as
        in :meth:`completion`."""
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
                                step=step, hold_slot=hold_slot)

    async def completion(self, endpoint: str, prompt: list[int] | np.ndarray | str, *, max_tokens: int,
                         min_tokens: int | None = None, ignore_eos: bool = False,
                         stream: bool = True, temperature: float | None = None,
                         session_id: str = "", call_id: str = "", role: str = "",
                         round: int = 0, step: int = 0, t_scheduled: float | None = None,
                         extra_body: dict[str, Any] | None = None,
                         hold_slot: int | None = None) -> ChatResult:
        """One ``POST /v1/completions`` (vLLM's interface; ``prompt`` may be token ids, a list or
        a numpy array, so no tokenizer round trip changes the prompt), streamed unless ``stream``
        is False.
        ``min_tokens``/``ignore_eos`` are vLLM's sampling extensions (an exact output length
        when ``min_tokens == max_tokens`` and ``ignore_eos``). The result's ``content`` is the
        generated text; ``kv_transfer_params`` the answer's field of that name (vLLM's
        disaggregated prefill), when present. Records and retries as :meth:`chat`.
        ``hold_slot``: a request slot of the stack's held clock that the caller took
        (:class:`adev.clock.RequestHolds`) and keeps across several calls: the call lends it to
        its request instead of taking one, and holds the clock in it again when it has read the
        answer (so the caller's own work up to its next call takes no model time either); the
        caller gives it back."""
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
                                round=round, step=step, hold_slot=hold_slot)

    async def _call(self, ep: Endpoint, endpoint: str, path: str, body: dict[str, Any],
                    xb: dict[str, Any], t_sched: float, *, session_id: str, call_id: str,
                    role: str, round: int, step: int, hold_slot: int | None = None) -> ChatResult:
        """The retry loop of one call (every attempt recorded)."""
        attempt = 0
        while True:
            rec = CallRecord(run_id=self.run_id, session_id=session_id, call_id=call_id,
                             endpoint=endpoint, role=role, round=round, step=step,
                             attempt=attempt, model=ep.model or "", t_scheduled=t_sched)
            try:
                result = await self._attempt(ep, body, xb, rec, path, hold_slot)
            except asyncio.CancelledError:
                rec.status, rec.error = "cancelled", "cancelled"
                rec.t_end = self.clock.now()
                self._record(rec)
                raise
            except RetryableError as e:
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
                       rec: CallRecord, path: str = "/chat/completions",
                       hold_slot: int | None = None) -> ChatResult:
        clock = self.clock
        payload = dumps({**body, **xb})
        box = [0.0, 0.0]  # headers serialised, first body bytes written (aiohttp's traces)
        st = StreamState()
        headers = {"Authorization": f"Bearer {ep.api_key or 'EMPTY'}",
                   "Content-Type": "application/json", "Accept": "text/event-stream"}
        held = held_source()
        holds, slot = None, None
        if held is not None and clock.source in (mono, held):
            # on the stack's held clock the request's trips between the processes take no model
            # time: a lent slot holds the clock from here until the endpoint has the request,
            # and from the answer's first tokens (and its end) until they are read here
            holds = request_holds()
            slot = hold_slot if hold_slot is not None else holds.take() if holds is not None else None
            if slot is not None:
                headers[HOLD_HEADER] = str(slot)
            headers[SENT_HEADER] = repr(held())  # the endpoint's arrival (same clock)
        try:
            try:
                async with self._pool().post(
                        ep.base_url.rstrip("/") + path, data=payload, headers=headers,
                        trace_request_ctx=box) as resp:
                    if resp.status >= 400:
                        raise http_error(resp.status, await resp.read())
                    conn = resp.connection
                    st.first_byte = getattr(conn and conn.protocol, "t_first_rx", None)
                    if not body.get("stream"):
                        st.whole(await resp.read())
                    # a whole answer came at once: its slot stays held (at its end) until
                    # given back, or held on for the caller's next call
                    read_first = slot is None or not body.get("stream")
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
                            first = (not read_first and line.startswith(b"data:")
                                     and _ROLE not in line)
                            done = st.feed(line)   # stamps the first tokens while still held
                            if first:
                                # the first event after the role-only one: the answer's first
                                # tokens are read (and stamped), model time may run on
                                read_first = True
                                if holds is not None and slot is not None:
                                    holds.release(slot)
                            if done:
                                break
                        buf = buf[start:]
            except (aiohttp.ClientError, TimeoutError) as e:
                # refused, reset, dropped mid-stream (payload error), read or connect timeouts
                raise RetryableError(f"{type(e).__name__}: {e}") from None
        finally:
            t_end = mono()
            if holds is not None and slot is not None:
                if slot == hold_slot:   # the caller's: hold on where the clock is, for its next call
                    holds.hold(slot)
                else:
                    holds.give_back(slot)
            sent = box[1] or box[0]
            rec.t_sent = clock.to_model(sent) if sent else rec.t_scheduled
            rec.t_first_byte = clock.to_model(st.first_byte) if st.first_byte else None
            rec.t_first_content = (clock.to_model(st.first_content) if st.first_content
                                   else None)
            rec.t_end = clock.to_model(t_end)
        return call_result(st, rec, self.ledger)

    def _record(self, rec: CallRecord) -> None:
        if self.run_dir is not None:
            self.run_dir.append(rec)
