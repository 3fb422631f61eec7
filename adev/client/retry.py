"""How a chat call fails and when it is tried again: :class:`RetryPolicy` (exponential backoff
with jitter), the errors a caller sees (:class:`LLMError`, :class:`ContextLengthError`) and the
one the retry loop catches (:class:`RetryableError`: connection errors and HTTP 5xx)."""
from __future__ import annotations

import random
from dataclasses import dataclass

from ..records import CallRecord
from .jsoncodec import loads

CONTEXT_MARKERS = ("maximum context length", "context length", "too long", "max_model_len")


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



class LLMError(Exception):
    """A call that failed for good (after retries, or not retryable)."""

    def __init__(self, message: str, status: int | None = None,
                 record: CallRecord | None = None):
        super().__init__(message)
        self.status = status
        self.record = record


class ContextLengthError(LLMError):
    """The endpoint refused the prompt as longer than its context (HTTP 400)."""


class RetryableError(Exception):
    """A failed attempt worth another: a connection error, HTTP 5xx or a stream error with a 5xx
    code (the retry loop turns it into :class:`LLMError` after the last attempt)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


def http_error(status: int, raw: bytes) -> Exception:
    """The exception for an HTTP error answer with body ``raw``: retryable for 5xx,
    :class:`ContextLengthError` for a 400 that names the context length, else :class:`LLMError`."""
    msg = error_message(raw, status)
    if status >= 500:
        return RetryableError(f"HTTP {status}: {msg}", status)
    cls = (ContextLengthError if status == 400 and
           any(m in msg.lower() for m in CONTEXT_MARKERS) else LLMError)
    return cls(f"HTTP {status}: {msg}", status=status)


def error_message(raw: bytes, status: int) -> str:
    try:
        body = loads(raw)
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
