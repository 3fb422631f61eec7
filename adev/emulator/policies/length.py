"""The length-only policy: filler text of a chosen length, never a tool call.

Output length (tokens): ``max_tokens`` when the request gives it, else a draw from a lognormal
distribution (median ``median_tokens``, shape ``sigma``, clipped to ``[min_tokens, max_tokens_cap]``)
seeded by (endpoint seed, request seed or the last message), so runs replay. The engine pads or cuts
the filler to exactly that many tokens (``PolicyReply.output_tokens``).
"""
from __future__ import annotations

import math
import random
import zlib
from typing import Any

from adev.emulator.policies.base import PolicyReply, PolicyRequest

_WORDS = ("the", "store", "cache", "block", "prefix", "token", "agent", "test", "patch", "file",
          "module", "value", "result", "check", "lease", "tier", "read", "write", "model", "step")


class Policy:
    name = "length"

    def __init__(self, stack_config: Any = None, seed: int = 0, *, median_tokens: int = 300,
                 sigma: float = 0.8, min_tokens: int = 16, max_tokens_cap: int = 4096) -> None:
        self.seed = int(seed)
        self.median_tokens = median_tokens
        self.sigma = sigma
        self.min_tokens = min_tokens
        self.max_tokens_cap = max_tokens_cap

    def _rng(self, request: PolicyRequest) -> random.Random:
        last = request.messages[-1] if request.messages else {}
        basis = f"{self.seed}|{request.seed}|{request.prompt_tokens}|{last.get('content')!s}"
        return random.Random(zlib.crc32(basis.encode("utf-8", "replace")))

    def length(self, request: PolicyRequest) -> int:
        if request.max_tokens is not None and request.max_tokens > 0:
            return int(request.max_tokens)
        rng = self._rng(request)
        n = int(round(math.exp(math.log(self.median_tokens) + self.sigma * rng.gauss(0.0, 1.0))))
        return max(self.min_tokens, min(self.max_tokens_cap, n))

    def reply(self, request: PolicyRequest) -> PolicyReply:
        n = self.length(request)
        rng = self._rng(request)
        # about one token per word (short words); the engine pads/cuts to exactly n tokens
        words = [rng.choice(_WORDS) for _ in range(max(1, n - 1))]
        return PolicyReply(content=" ".join(words) + ".", output_tokens=n)
