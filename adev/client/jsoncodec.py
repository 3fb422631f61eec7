"""The client's JSON codec: orjson (about 10x faster than the standard library on the request
path, where token id lists are large), with numpy arrays serialised as lists."""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

loads: Callable[[str | bytes], Any]

try:  # orjson: ~10x faster JSON on the request path (token id lists are large)
    import orjson

    loads = orjson.loads

    def dumps(obj: Any) -> bytes:
        return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY)  # numpy token-id arrays
except ImportError:  # pragma: no cover - orjson is a declared dependency
    loads = json.loads

    def dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()
