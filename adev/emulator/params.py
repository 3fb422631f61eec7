"""Request parameters of the emulated endpoint, validated as vLLM validates them.

:func:`parse_sampling` reads the sampling and streaming fields both completion APIs share;
:func:`parse_prompts` the ``prompt`` of ``POST /v1/completions`` (a string, a list of token ids,
or a list of either). Anything invalid raises :class:`BadRequest`, answered with vLLM's error
shape (HTTP 400, ``param`` naming the field). Unknown fields are ignored, as vLLM ignores them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class BadRequest(Exception):
    """An invalid request: HTTP ``status`` with vLLM's error body."""

    def __init__(self, message: str, param: str | None = None, status: int = 400,
                 etype: str = "BadRequestError") -> None:
        super().__init__(message)
        self.param = param
        self.status = status
        self.etype = etype


@dataclass(slots=True)
class Sampling:
    """The fields of a request that shape its reply and its stream."""

    max_tokens: int | None
    """``max_completion_tokens`` (chat) or ``max_tokens``; None: up to the context length."""
    min_tokens: int
    """No EOS before this many tokens."""
    ignore_eos: bool
    """Generate through EOS up to ``max_tokens``."""
    stream: bool
    include_usage: bool
    """``stream_options.include_usage``: a final chunk with ``usage``."""
    continuous_usage: bool
    """``stream_options.continuous_usage_stats`` (with ``include_usage``): ``usage`` in every chunk."""
    return_token_ids: bool


def _int(body: dict[str, Any], key: str, lo: int) -> int | None:
    v = body.get(key)
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or v < lo:
        raise BadRequest(f"{key}: expected an integer >= {lo}, got {v!r}", key)
    return v


def _bool(body: dict[str, Any], key: str) -> bool:
    v = body.get(key, False)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise BadRequest(f"{key}: expected true or false, got {v!r}", key)
    return v


def parse_sampling(body: dict[str, Any], chat: bool) -> Sampling:
    max_tokens = _int(body, "max_completion_tokens", 1) if chat else None
    if max_tokens is None:
        max_tokens = _int(body, "max_tokens", 1)
    min_tokens = _int(body, "min_tokens", 0) or 0
    if max_tokens is not None and min_tokens > max_tokens:
        raise BadRequest(f"min_tokens must be less than or equal to max_tokens={max_tokens}, "
                         f"got {min_tokens}.", "min_tokens")
    so = body.get("stream_options")
    if so is not None and not isinstance(so, dict):
        raise BadRequest("stream_options: expected an object", "stream_options")
    so = so or {}
    include = bool(so.get("include_usage"))
    return Sampling(max_tokens=max_tokens, min_tokens=min_tokens,
                    ignore_eos=_bool(body, "ignore_eos"), stream=_bool(body, "stream"),
                    include_usage=include,
                    continuous_usage=include and bool(so.get("continuous_usage_stats")),
                    return_token_ids=_bool(body, "return_token_ids"))


Prompt = str | list[int]


def parse_prompts(body: dict[str, Any], vocab_size: int) -> list[Prompt]:
    """The completion prompts: one per choice group (a string, or token ids in
    ``[0, vocab_size)``)."""
    p = body.get("prompt")

    def ids(x: list[Any], where: str) -> list[int]:
        if not x:
            raise BadRequest(f"{where}: a token-id prompt must not be empty", "prompt")
        # the types in one pass in C (a Python loop over a 100K-token prompt costs ~10 ms on
        # the request's held path); type(), not isinstance: True and False are not token ids
        if not set(map(type, x)) <= {int}:
            raise BadRequest(f"{where}: expected token ids (integers)", "prompt")
        bad = max(x)
        if bad >= vocab_size or min(x) < 0:
            bad = bad if bad >= vocab_size else min(x)
            raise BadRequest(f"Token id {bad} is out of vocabulary", "prompt")
        return x

    if isinstance(p, str):
        return [p]
    if isinstance(p, list) and p:
        if all(isinstance(x, str) for x in p):
            return list(p)
        if all(isinstance(x, list) for x in p):
            return [ids(x, f"prompt[{i}]") for i, x in enumerate(p)]
        return [ids(p, "prompt")]
    raise BadRequest("prompt: expected a string, a list of token ids, or a non-empty list of "
                     "either", "prompt")
