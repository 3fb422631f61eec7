"""The context rule of a session (:mod:`adev.session.loop`).

Before each call the loop estimates the prompt's tokens (characters divided by
the characters-per-token ratio measured on this session's previous call; 3.0 before the first)
plus the role's ``max_tokens``, against the endpoint's ``max_model_len`` (from ``/v1/models``)
minus ``context_margin_tokens``. (1) If it does not fit, ``max_tokens`` is lowered to the room
left, down to a floor of min(role max_tokens, 4,096). (2) Below the floor the loop *elides*
history, oldest first, until the role's full ``max_tokens`` fits again: a tool result or a
``write_file`` content longer than 200 characters is replaced by a one-line marker (``[elided to
fit the context: N characters ...]``). Elision is permanent (the trimmed history is what later
calls resend, so they share its prefix). (3) If everything elidable is elided and the floor still
does not fit -- or the endpoint answers twice that the prompt is over its context -- the session
ends with status ``ended`` and reason ``context_limit``.
"""
from __future__ import annotations

import json
from typing import Any

ELIDE_MIN_CHARS = 200
MIN_MAX_TOKENS = 4096


class ContextLimit(Exception):
    """The prompt does not leave the floor of ``max_tokens`` even with all history elided."""


def estimate(messages: list[dict[str, Any]], tools_chars: int, cpt: float) -> int:
    """The prompt's tokens: its characters over ``cpt`` (characters per token) + 8 a message."""
    return int((message_chars(messages) + tools_chars) / cpt) + 8 * len(messages)


def fit_context(messages: list[dict[str, Any]], history: list[dict[str, Any]], tools_chars: int,
                max_tokens: int, cpt: float, max_model_len: int | None, margin_tokens: int) -> int:
    """Apply the context rule; returns the max_tokens to use. May elide ``history`` in place
    (``messages`` shares its dicts); :class:`ContextLimit` when even that is not enough."""
    mml = max_model_len
    if not mml:
        return max_tokens
    floor = min(max_tokens, MIN_MAX_TOKENS)
    limit = mml - margin_tokens
    est = estimate(messages, tools_chars, cpt)
    if limit - est >= floor:
        return min(max_tokens, limit - est)
    # elide the oldest history until the role's full max_tokens fits again
    for msg in history:
        saved = elide(msg)
        if saved:
            est -= int(saved / cpt)
            if limit - est >= max_tokens:
                break
    est = estimate(messages, tools_chars, cpt)
    if limit - est >= floor:
        return min(max_tokens, limit - est)
    raise ContextLimit(f"context_limit: prompt of ~{est} tokens leaves "
                       f"{limit - est} of {mml} for the reply after eliding all earlier "
                       "tool output")


def message_chars(messages: list[dict[str, Any]]) -> int:
    n = 0
    for m in messages:
        c = m.get("content")
        if c:
            n += len(c)
        for tc in m.get("tool_calls") or ():
            f = tc["function"]
            n += len(f["name"]) + len(f["arguments"])
    return n


def elide(msg: dict[str, Any]) -> int:
    """Elide one history message in place; returns the characters saved."""
    saved = 0
    if msg.get("role") == "tool":
        c = msg.get("content") or ""
        if len(c) > ELIDE_MIN_CHARS and not c.startswith("[elided"):
            marker = f"[elided to fit the context: {len(c)} characters of tool output]"
            msg["content"] = marker
            saved += len(c) - len(marker)
    for tc in msg.get("tool_calls") or ():
        f = tc["function"]
        if f["name"] != "write_file" or len(f["arguments"]) <= ELIDE_MIN_CHARS:
            continue
        try:
            args = json.loads(f["arguments"])
            content = args.get("content")
        except (ValueError, AttributeError, RecursionError):
            continue
        if isinstance(content, str) and not content.startswith("[elided"):
            args["content"] = f"[elided to fit the context: {len(content)} characters]"
            new = json.dumps(args)
            saved += len(f["arguments"]) - len(new)
            tc["function"] = {"name": f["name"], "arguments": new}
    return saved
