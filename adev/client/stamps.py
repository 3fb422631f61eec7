"""The send and first-byte stamps of the chat path, on aiohttp's connections.

``t_sent``: aiohttp's ``on_request_headers_sent`` / ``on_request_chunk_sent`` trace signals write
``time.monotonic()`` into the request's trace context (a two-slot list: headers serialised, first
body bytes handed to the transport). ``t_first_byte``: every pooled connection's protocol is a
:class:`StampedHandler`, which stamps the first bytes read from the socket for each request.
:func:`stamped_session` builds the keep-alive pool with both.
"""
from __future__ import annotations

import functools
from typing import Any

import aiohttp
from aiohttp.client_proto import ResponseHandler

from ..clock import mono


def stamped_session(pool_size: int, connect_timeout_s: float, read_timeout_s: float) -> aiohttp.ClientSession:
    """A keep-alive pool of ``pool_size`` connections over all hosts whose requests are stamped
    (:func:`stamp_headers`, :func:`stamp_body`, :class:`StampedHandler`)."""
    trace = aiohttp.TraceConfig()
    trace.on_request_headers_sent.append(stamp_headers)
    trace.on_request_chunk_sent.append(stamp_body)
    connector = aiohttp.TCPConnector(limit=pool_size, limit_per_host=0, keepalive_timeout=300.0)
    # every pooled connection stamps its first received bytes per request (t_first_byte);
    # aiohttp has no public hook at the socket read, so its protocol factory is swapped
    connector._factory = functools.partial(  # type: ignore[assignment]  # typeshed's partial is
        StampedHandler, loop=connector._loop)  # invariant; a subclass factory is valid here
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s,
                                      sock_read=read_timeout_s),
        trace_configs=[trace])


class StampedHandler(ResponseHandler):
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


async def stamp_headers(session: Any, ctx: Any, params: Any) -> None:
    """aiohttp trace hook: the request's headers were serialised on a connection."""
    box = ctx.trace_request_ctx
    if box is not None and not box[0]:
        box[0] = mono()


async def stamp_body(session: Any, ctx: Any, params: Any) -> None:
    """aiohttp trace hook: the first body chunk (with the buffered headers) is being handed to
    the connection's transport, which writes it to the socket at once (``t_sent``)."""
    box = ctx.trace_request_ctx
    if box is not None and not box[1]:
        box[1] = mono()
