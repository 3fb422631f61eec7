"""Stack configs beyond the file: an external stack's handle, the small test stack, and how a
running stack's config differs from a wanted one (the reuse check)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..config import ConfigError, StackConfig, from_dict
from .state import StackInfo


def external_info(config: StackConfig) -> StackInfo:
    """StackInfo for a stack of external endpoints (real vLLM): nothing is started."""
    eps, mets = {}, {}
    for e in config.endpoints:
        if not e.base_url:
            raise ConfigError(f"stack.endpoints: endpoint {e.name!r} needs base_url in mode 'external'")
        parts = urlsplit(e.base_url.rstrip("/"))
        path = parts.path if parts.path not in ("", "/") else "/v1"
        eps[e.name] = urlunsplit((parts.scheme, parts.netloc, path, "", ""))
        mets[e.name] = urlunsplit((parts.scheme, parts.netloc, "/metrics", "", ""))
    return StackInfo(endpoints=eps, metrics_urls=mets, master_metrics_url=config.store.metrics_url,
                     time_scale=1.0, profile=config.model_profile(), config=config,
                     started_here=False,
                     models={e.name: e.model for e in config.endpoints if e.model})


def small_config(state_dir: str | Path, **overrides: Any) -> StackConfig:
    """A small, fast embedded stack for tests and demos (length policy, 2 GB RAM tier, store-ram).

    ``overrides``: top-level StackConfig keys; ``store`` as a dict merged into the defaults;
    ``endpoints`` as names or dicts.
    """
    store = {"ram_gb": 2.0, "lease_ttl_s": 5.0, **(overrides.pop("store", None) or {})}
    eps = overrides.pop("endpoints", ["coder", "reasoner"])
    data: dict[str, Any] = {"mode": "embedded", "time_scale": 10.0, "configuration": "store-ram",
                            "policy": "length", "payload_scale": 64, "state_dir": str(state_dir),
                            "store": store,
                            "endpoints": [e if isinstance(e, dict) else {"name": e} for e in eps]}
    data.update(overrides)
    return from_dict(StackConfig, data, "stack")


def config_diff(running: dict[str, Any], wanted: StackConfig) -> list[str]:
    """Fields where the running stack's config differs from ``wanted`` (port 0 = any port)."""
    want = dataclasses.asdict(wanted)
    run = json.loads(json.dumps(running))
    want.pop("state_dir", None)
    run.pop("state_dir", None)
    for key in ("master_port", "metrics_port"):
        if want["store"].get(key) == 0:
            want["store"][key] = run.get("store", {}).get(key)
    run_eps = {e["name"]: e for e in run.get("endpoints", [])}
    for e in want["endpoints"]:
        if e.get("port") == 0 and e["name"] in run_eps:
            e["port"] = run_eps[e["name"]].get("port")
    diffs: list[str] = []

    def walk(a: Any, b: Any, path: str) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b)):
                walk(a.get(k), b.get(k), f"{path}.{k}")
        elif a != b:
            diffs.append(f"{path}: running {b!r}, wanted {a!r}")

    walk(want, run, "stack")
    return diffs
