"""What is up: ``adev stack status`` and the stack processes' CPU and memory use."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config import StackConfig, load_model_profile, load_stack
from .configs import external_info
from .procs import http_ok
from .state import ProcState, StackInfo, StackState, read_state, state_dir_path
from .tracking import target_dir


def stack_status(config: StackConfig | None = None) -> dict[str, Any]:
    """What is up: per process pid, alive, healthy and URLs (embedded, from the state file), or
    the configured URLs probed for health (external). ``running`` is True when all is healthy."""
    config = config or load_stack()
    if config.mode == "external":
        info = external_info(config)
        eps = {}
        for n, url in info.endpoints.items():
            root = url[: -len("/v1")] if url.endswith("/v1") else url
            eps[n] = {"base_url": url, "metrics_url": info.metrics_urls[n],
                      "healthy": http_ok(root + "/health")}
        master = ({"metrics_url": info.master_metrics_url,
                   "healthy": http_ok(info.master_metrics_url)}
                  if info.master_metrics_url else None)
        return {"mode": "external", "running": all(e["healthy"] for e in eps.values()),
                "time_scale": 1.0, "model": info.model, "endpoints": eps, "master": master}
    sdir = state_dir_path(config.state_dir)
    st = read_state(sdir)
    if st is None:
        return {"mode": "embedded", "running": False, "state_file": str(sdir / "state.json"),
                "reason": "no stack recorded in this state dir"}
    cfg = st.stack_config()

    def proc(p: ProcState, master: bool = False) -> dict[str, Any]:
        alive = p.alive()
        d: dict[str, Any] = {"pid": p.pid, "alive": alive,
                             "healthy": alive and http_ok(p.health_url),
                             "metrics_url": p.metrics_url, "log": p.log}
        if master:
            d["address"] = p.url
        else:
            d["base_url"] = p.url
            d["port"] = p.port
        return d

    usage = process_usage(st)
    eps = {n: {**proc(p), **usage.get(n, {})} for n, p in st.endpoints.items()}
    master = {**proc(st.master, master=True), **usage.get("master", {})}
    master["lease_ttl_real_ms"] = st.lease_ttl_real_ms
    running = master["healthy"] and all(e["healthy"] for e in eps.values())
    return {"mode": "embedded", "running": running, "state_file": str(sdir / "state.json"),
            "started_at": st.started_at, "time_scale": cfg.time_scale,
            "configuration": cfg.configuration, "model": load_model_profile(cfg.profile).name,
            "endpoints": eps, "master": master}


def process_usage(target: StackState | StackInfo | StackConfig | str | Path | None = None
                  ) -> dict[str, dict[str, float]]:
    """CPU seconds (user + system, since start) and resident memory of each live stack process.

    CPU share over an interval = delta of ``cpu_s`` / wall seconds (cores used); this is what the
    stack itself costs the machine, apart from the client driving it.
    """
    import psutil

    from .procs import _process
    st = target if isinstance(target, StackState) else read_state(target_dir(target))
    if st is None:
        return {}
    out: dict[str, dict[str, float]] = {}
    for p in st.processes:
        proc = _process(p.pid, p.create_time)
        if proc is None:
            continue
        try:
            with proc.oneshot():
                t = proc.cpu_times()
                out[p.name] = {"cpu_s": t.user + t.system, "rss_mb": proc.memory_info().rss / 2**20}
        except psutil.Error:
            continue
    return out
