"""Small stand-ins for the stack, the sessions and a metrics endpoint (unit tests only)."""
from __future__ import annotations

import asyncio
import contextlib
import random
import time
from types import SimpleNamespace

from aiohttp import web

from adev.config import ModelProfile, StackConfig
from adev.fleet.deps import Deps
from adev.records import CallRecord, SessionRecord

PROFILE = ModelProfile(name="fake", num_layers=2, num_kv_heads=2, head_dim=8,
                       gpu_pool_tokens=1000)


class MetricsServer:
    """Serves vLLM-named counters that grow by ``rate`` query tokens per scrape."""

    def __init__(self, rate: float = 200.0):
        self.rate = rate
        self.queries = 0.0
        self.runner = None
        self.url = ""

    async def _metrics(self, request):
        self.queries += self.rate
        text = (f'vllm:prefix_cache_queries_total{{model_name="fake"}} {self.queries}\n'
                f'vllm:kv_cache_usage_perc{{model_name="fake"}} 0.1\n')
        return web.Response(text=text)

    async def start(self) -> str:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/metrics"
        return self.url

    async def stop(self) -> None:
        if self.runner:
            await self.runner.cleanup()


def fake_deps(time_scale: float, session_model_s: tuple[float, float] = (30.0, 60.0),
              tasks=("t1", "t2"), fail: bool = False, counters: dict | None = None,
              errors_between: tuple[float, float] | None = None) -> Deps:
    """Deps whose stack is one fake metrics endpoint plus a dead master URL (scrape failures)
    and whose sessions write a start record, two calls and an end record. Calls on ``coder``
    sent inside ``errors_between`` (model seconds) end with status ``error``."""
    counters = counters if counters is not None else {}

    @contextlib.asynccontextmanager
    async def running_stack(cfg: StackConfig):
        srv = MetricsServer()
        url = await srv.start()
        counters["stacks"] = counters.get("stacks", 0) + 1
        try:
            yield SimpleNamespace(
                endpoints={e.name: "http://127.0.0.1:9/v1" for e in cfg.endpoints},
                metrics_urls={e.name: url for e in cfg.endpoints},
                master_metrics_url="http://127.0.0.1:9/metrics",  # nothing listens: ok=False
                time_scale=time_scale, profile=PROFILE, config=cfg, started_here=True)
        finally:
            await srv.stop()

    @contextlib.asynccontextmanager
    async def make_sessions(cfg, info, run_dir, clock, state, gate):
        async def launch(task: str, seed: int, sid: str):
            if fail:
                raise RuntimeError("boom")
            rng = random.Random(seed)
            run_dir.append(SessionRecord(run_id=run_dir.run_id, session_id=sid, task=task,
                                         t=clock.now(), status="started", seed=seed))
            try:
                return await _calls(sid, task, seed, rng)
            except asyncio.CancelledError:
                run_dir.append(SessionRecord(run_id=run_dir.run_id, session_id=sid, task=task,
                                             t=clock.now(), status="cancelled", seed=seed))
                raise

        async def _calls(sid, task, seed, rng):
            for k in range(2):
                ep = "coder" if k == 0 else "reasoner"
                t_s = clock.now()
                tok = state.call_started(ep, sid, "architect", 1, t_s)
                try:
                    await clock.sleep(rng.uniform(*session_model_s) / 2)
                except asyncio.CancelledError:
                    run_dir.append(CallRecord(run_id=run_dir.run_id, session_id=sid,
                                              call_id=f"{sid}-c{k}", endpoint=ep, status="cancelled",
                                              t_scheduled=t_s, t_sent=t_s, t_end=clock.now()))
                    raise
                finally:
                    state.call_finished(ep, tok)
                bad = (errors_between is not None and ep == "coder"
                       and errors_between[0] <= t_s < errors_between[1])
                run_dir.append(CallRecord(run_id=run_dir.run_id, session_id=sid,
                                          call_id=f"{sid}-c{k}", endpoint=ep, role="architect",
                                          round=1, t_scheduled=t_s, t_sent=t_s,
                                          t_end=clock.now(), prompt_tokens=100,
                                          status="error" if bad else "ok",
                                          error="connection refused" if bad else None))
            run_dir.append(SessionRecord(run_id=run_dir.run_id, session_id=sid, task=task,
                                         t=clock.now(), status="passed", seed=seed, rounds=1))
            return "passed"
        yield launch

    return Deps(running_stack=running_stack, list_tasks=lambda: list(tasks),
                make_sessions=make_sessions, summarise=lambda p: "fake summary",
                report=None,   # the fake stack's metrics server runs in this process
                stack_usage=lambda info: {"stack": {"cpu_s": time.process_time()}})
