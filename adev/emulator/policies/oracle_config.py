"""The oracle policy's settings (:class:`OracleConfig`), validated from a plain mapping (the
stack's ``oracle`` table, :attr:`adev.config.StackConfig.oracle`, or a test's dict)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class OracleConfig:
    round_shares: tuple[float, float, float] = (0.40, 0.35, 0.25)
    output_tokens: dict[str, tuple[float, float]] = field(default_factory=lambda: {
        "architect": (1100.0, 0.45), "contract": (800.0, 0.45), "test_writer": (500.0, 0.5),
        "implementer": (700.0, 0.5), "integrator": (900.0, 0.45), "other": (300.0, 0.5)})
    salt: str = "adev-oracle-v1"
    thinking: bool = False
    one_call_per_turn: bool = False

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> OracleConfig:
        from ...config import ConfigError
        d = dict(d or {})
        unknown = set(d) - {"round_shares", "output_tokens", "salt", "thinking",
                            "one_call_per_turn"}
        if unknown:
            raise ConfigError(f"oracle: unknown key(s) {sorted(unknown)}; allowed: "
                              "one_call_per_turn, output_tokens, round_shares, salt, thinking")
        kw: dict[str, Any] = {}
        if "round_shares" in d:
            rs = d["round_shares"]
            if (not isinstance(rs, list | tuple) or len(rs) != 3
                    or any(not isinstance(x, int | float) or x < 0 for x in rs)
                    or not math.isclose(sum(rs), 1.0, abs_tol=1e-6)):
                raise ConfigError("oracle.round_shares: expected three shares >= 0 summing to "
                                  f"1 (rounds 1, 2, 3), got {rs!r}")
            kw["round_shares"] = tuple(float(x) for x in rs)
        if "output_tokens" in d:
            ot = dict(OracleConfig().output_tokens)
            for k, v in d["output_tokens"].items():
                if (not isinstance(v, list | tuple) or len(v) != 2 or v[0] <= 0 or v[1] < 0):
                    raise ConfigError(f"oracle.output_tokens.{k}: expected [median > 0, "
                                      f"sigma >= 0], got {v!r}")
                ot[k] = (float(v[0]), float(v[1]))
            kw["output_tokens"] = ot
        if "salt" in d:
            kw["salt"] = str(d["salt"])
        for key in ("thinking", "one_call_per_turn"):
            if key in d:
                if not isinstance(d[key], bool):
                    raise ConfigError(f"oracle.{key}: expected true or false, got {d[key]!r}")
                kw[key] = d[key]
        return cls(**kw)
