"""JSON over HTTP for the emulated endpoint: responses, request bodies, vLLM's error shape."""
from __future__ import annotations

from typing import Any

import msgspec
import orjson
from aiohttp import web

from adev.emulator.params import BadRequest


_ENCODER = msgspec.json.Encoder()


def _struct(obj: Any) -> orjson.Fragment:
    if isinstance(obj, msgspec.Struct):
        return orjson.Fragment(_ENCODER.encode(obj))
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def dumps(obj: Any) -> bytes:
    """Compact JSON (orjson: the first stream event carries every prompt token id); msgspec
    Structs inside (the extension object) are encoded by msgspec and spliced in."""
    return orjson.dumps(obj, default=_struct, option=orjson.OPT_SERIALIZE_NUMPY)


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=dumps(body), status=status, content_type="application/json")


async def json_object(request: web.Request) -> dict[str, Any] | web.Response:
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
    return json_response(body, status=status)


def bad_request_response(e: BadRequest) -> web.Response:
    return error_response(str(e), e.status, e.etype, e.param)


def sse(obj: Any) -> bytes:
    """One server-sent event carrying ``obj``."""
    return b"data: " + dumps(obj) + b"\n\n"
