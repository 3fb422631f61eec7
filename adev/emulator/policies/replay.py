"""The replay policy: the recorded output of a trace, exactly.

A trace replay sends each call with its recorded output length as ``max_tokens`` and
``ignore_eos: true``. That is vLLM's own interface, so the same replay runs against real vLLM
(which then generates exactly that many tokens) and against the emulator. The emulator can also be
given the recorded output itself, in the request's ``adev`` extension object, which real vLLM
ignores (unknown fields):

    "adev": {"recorded_output": {"token_ids": [...]}}   # or {"text": "..."}

Output:

- ``token_ids`` given: exactly those ids (padded or cut to ``max_tokens`` under ``ignore_eos``),
  so the engine caches the very blocks the recorded conversation's next prompt contains;
- ``text`` given: that text as content, padded or cut to ``max_tokens`` when given;
- neither: filler text of exactly ``max_tokens`` tokens.

A request with neither ``max_tokens`` nor a recorded output is refused (HTTP 400): there is
nothing to replay.
"""
from __future__ import annotations

from typing import Any

from adev.emulator.policies.base import PolicyInputError, PolicyReply, PolicyRequest


def recorded_output(request: PolicyRequest) -> dict[str, Any] | None:
    """The request's ``adev.recorded_output`` object, validated (None when absent)."""
    ext = request.extension
    rec = ext.get("recorded_output") if isinstance(ext, dict) else None
    if rec is None:
        return None
    if not isinstance(rec, dict):
        raise PolicyInputError("adev.recorded_output: expected an object with token_ids or text")
    ids = rec.get("token_ids")
    if ids is not None and (not isinstance(ids, list)
                            or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                       for i in ids)):
        raise PolicyInputError("adev.recorded_output.token_ids: expected a list of token ids")
    text = rec.get("text")
    if text is not None and not isinstance(text, str):
        raise PolicyInputError("adev.recorded_output.text: expected a string")
    if ids is None and text is None:
        raise PolicyInputError("adev.recorded_output: give token_ids or text")
    return rec


class Policy:
    name = "replay"

    def __init__(self, stack_config: Any = None, seed: int = 0) -> None:
        self.seed = int(seed)

    def reply(self, request: PolicyRequest) -> PolicyReply:
        rec = recorded_output(request)
        n = request.max_tokens
        if rec is not None and rec.get("token_ids") is not None:
            return PolicyReply(token_ids=list(rec["token_ids"]))
        if rec is not None:
            return PolicyReply(content=rec["text"], output_tokens=n)
        if n is None:
            raise PolicyInputError("replay policy: the request carries no recorded output; give "
                                   "max_tokens (the recorded length, with ignore_eos: true) or "
                                   "adev.recorded_output")
        return PolicyReply(content="", output_tokens=n)
