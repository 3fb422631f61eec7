"""Run a trace replay: one configuration on one stack, or the matrix of configurations.

Each configuration runs on its own fresh embedded stack (its own state directory, started and
stopped here through :func:`adev.stack.running_stack`), or, in external mode, against the
configured endpoints unchanged (then the run is labelled with ``stack.configuration``).

**Topology.** Endpoints with ``kv_role`` ``producer`` are the prefill replicas, ``consumer`` the
decode replicas (vLLM's disaggregated prefill, as its proxy drives it: the prefill replica gets
the prompt with ``max_tokens`` 1 and ``kv_transfer_params.do_remote_decode``, non-streamed; the
decode replica gets the same prompt with the ``kv_transfer_params`` of that answer, streamed).
Without producers every endpoint is a colocated replica (prefill and decode in one); the router
then has one decode column. Prompts go to ``/v1/completions`` as token ids; the output is asked
for at exactly the recorded length (``max_tokens = min_tokens`` = recorded, ``ignore_eos``).

**Records** (one run directory per configuration and seed, :class:`adev.records.RunDir`):
``calls.jsonl`` from the client (every HTTP attempt), ``replay.jsonl`` (:class:`ReplayRecord`,
one per trace call), ``scrapes.jsonl`` (endpoints and master every ``scrape_s`` model seconds,
plus one at the start and one at the end), ``manifest.json`` and ``summary.json``
(:func:`adev.replay.summary.summarise`, computed from those records).
"""
from __future__ import annotations

import asyncio
import dataclasses
import functools
import math
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np

from ..client.llm import Endpoint, LLMClient
from ..client.retry import LLMError
from ..clock import RunClock, handover, hold_at, request_holds, stack_run_clock
from ..config import ConfigError, Configuration, PrefillTime, StackConfig
from ..emulator.store import MIN_SEGMENT
from ..records import RunDir
from .format import Call, Trace, prompt_ids
from .routing import DEFAULT_THRESHOLD_TOKENS, Policy, Route, Router
from .schedules import ClippedLogNormal, describe_fit, run_long_gap, run_short_gap, run_timestamps
from .traces import length_group

Experiment = Literal["short", "long", "timestamps"]
EXPERIMENTS = ("short", "long", "timestamps")

CONFIGURATIONS: dict[str, tuple[Configuration, str | None]] = {
    "recompute": ("recompute", None),
    "gpu-only": ("gpu-only", None),
    "store-ram": ("store-ram", None),
    "store-ram+raid0": ("store-ram+disk", "local-raid0"),
    "store-ram+nvmeof": ("store-ram+disk", "remote-nvmeof"),
    "disk-only": ("disk-only", "local-raid0"),
}
"""The six configurations: name -> (stack.configuration, stack.store.disk_tier; None = keep)."""

SOURCE_RAM_GB = 256 * 2 ** 30 / 1e9
"""The source's replay study's shared RAM store: 256 GiB, in GB (the store's ``ram_gb`` unit)."""


@functools.cache
def source_mean_prompt() -> float:
    """The source's mean prompt (tokens) as its prompt-length groups give it: 1,116 / 3,061 /
    2,779 / 947 calls at <= 32K / 32-64K / 64-96K / > 96K tokens, evenly spaced within each
    group (the lengths of :func:`adev.replay.synth.target_lengths` with the source's counts:
    64,240)."""
    from .synth import SynthParams, target_lengths
    return float(target_lengths(SynthParams()).mean())


SOURCE_ACTIVE = 16
"""The source's short gap: 16 sessions active."""
SOURCE_GAP = 128
"""The source's long gap: at least 128 other calls complete between a session's turns."""
SOURCE_IN_FLIGHT = 16
"""The source's long gap: at most 16 calls in flight."""


def prompt_prefill_s(prompts: Sequence[int] | np.ndarray, prefill: PrefillTime) -> float:
    """The mean time to prefill each prompt whole, from position 0, on the model ``prefill``
    describes (:meth:`adev.config.PrefillTime.chunk_s`: the weights' time per token and
    attention's, which grows with the earlier tokens): the recomputing replicas' work per call
    (0 without prompts)."""
    if not len(prompts):
        return 0.0
    return float(np.mean([prefill.chunk_s(int(n)) for n in prompts]))


def source_prefill_s(prefill: PrefillTime) -> float:
    """:func:`prompt_prefill_s` of the source's prompts (its prompt-length groups, as
    :func:`source_mean_prompt` takes them): 4.47 s on the replay's model profile."""
    from .synth import SynthParams, target_lengths
    return prompt_prefill_s(target_lengths(SynthParams()), prefill)


def auto_active(prompts: Sequence[int] | np.ndarray, prefill: PrefillTime) -> int:
    """``--active auto``: the short gap's active sessions that offer the source's 16 sessions'
    prefill work with this slice's prompts,

        active = max(1, round(16 x source t / slice t))

    with ``t`` the mean time to prefill a prompt whole (:func:`prompt_prefill_s`, on the
    stack's model profile). The short gap's load is open: each active session sends its next
    turn after a start-to-start interval drawn from the source's timing plan, so the prefill
    work offered per second is active sessions x t / mean interval, and it is this that
    saturated the source's recomputing replicas (median user TTFT 27.87 s). Sixteen sessions of
    a slice with half the source's prompts offer less than half its work: attention makes a
    token of a long prompt dearer than one of a short prompt. With a flat prefill rate the rule
    holds the source's prompt tokens, ``16 x 64,240 / mean prompt``; on the replay's profile it
    gives 37 for the conversation trace's long-prompt slice (mean 35,340 tokens; 29 by tokens)."""
    here = prompt_prefill_s(prompts, prefill)
    if here <= 0:
        return SOURCE_ACTIVE
    return max(1, round(SOURCE_ACTIVE * source_prefill_s(prefill) / here))


def working_set_scale(opts: ReplayOptions, mean_prompt: float,
                      working_set: float | None = None) -> tuple[float, float]:
    """(RAM store, GPU prefix pool) of a replay relative to the source's: the replay's working
    set in tokens over the source's, so that the store and the pools hold the same share of it
    as the source's did. With ``m = mean prompt / source mean prompt`` and ``w = working set /
    source mean prompt``, ``working set`` the mean tokens a session must keep to serve its later
    calls (:func:`adev.replay.traces.working_set_tokens`; the mean prompt when not given):

        short gap:   RAM = active / 16 x w,  pool = active / 16 x m   (the active sessions)
        long gap:    RAM = gap / 128 x w                              (the sessions between two turns)
                     pool = max in flight / 16 x m                    (the contexts in flight)
        timestamps:  RAM = w, pool = m

    The source's sessions were one conversation each (one agent's trajectory), so its working
    set per session was its mean prompt; a session of several agents, each continuing a prompt
    of its own, keeps several prompts' worth, and the store holds them. The pool holds the
    contexts of the calls being served, one prompt per call, whatever the session keeps. With
    the source's schedule and 16 active sessions, or the long gap's, and one conversation per
    session, both are ``m``: as many mean-sized contexts as the source's held. With ``--active
    auto`` (:func:`auto_active`) the short gap holds the source's prefill work, and its working
    set in tokens follows."""
    m = mean_prompt / source_mean_prompt()
    w = (mean_prompt if working_set is None else working_set) / source_mean_prompt()
    if opts.experiment == "short":
        return opts.active / SOURCE_ACTIVE * w, opts.active / SOURCE_ACTIVE * m
    if opts.experiment == "long":
        return opts.gap / SOURCE_GAP * w, opts.max_in_flight / SOURCE_IN_FLIGHT * m
    return w, m


def scaled_ram_gb(scale: float) -> float:
    """The RAM store (GB) of a replay whose working set is ``scale`` times the source's
    (:func:`working_set_scale`): ``SOURCE_RAM_GB x scale``. Nothing of the source's results
    goes in."""
    return SOURCE_RAM_GB * scale


def mean_prompt(sessions: Sequence[Sequence[Call]]) -> float:
    """The replayed calls' mean prompt tokens (0 without calls)."""
    calls = [c for cs in sessions for c in cs]
    return sum(c.prompt_tokens for c in calls) / len(calls) if calls else 0.0


SOURCE_PARAMETERS = 30.5e9
"""Qwen3-Coder-30B-A3B's total parameters ("about 30.5 billion", the source's replay study)."""

FLEET_POOL_TOKENS = 166_512
"""The source's fleet study's HBM prefix pool per endpoint: Qwen3-Coder-30B-A3B-Instruct (BF16
weights, BF16 KV) on one H100 80 GB, as that study states it."""


def source_pool_tokens(bytes_per_token: int) -> float:
    """The source's replay study's HBM prefix pool per prefill replica, in tokens, estimated from
    its inputs (the study does not state it). Its replicas serve the same model on the same H100
    80 GB GPU as its fleet study (:data:`FLEET_POOL_TOKENS`), with BF16 KV as there, but with FP8
    weights, one byte per parameter where the fleet study's BF16 weights take two. Assuming
    both gave vLLM the same share of GPU memory, the byte per parameter saved holds KV:

        pool = 166,512 + 30.5e9 x (2 - 1) / bytes per token

    476,774 tokens at BF16 KV's 98,304 bytes per token (2.9x the fleet study's pool)."""
    return FLEET_POOL_TOKENS + SOURCE_PARAMETERS * (2 - 1) / bytes_per_token


def scaled_gpu_pool(scale: float, bytes_per_token: int, max_model_len: int) -> int:
    """The GPU prefix pool per endpoint of a replay whose working set on the GPUs is ``scale``
    times the source's (:func:`working_set_scale`): the source's (:func:`source_pool_tokens`)
    times ``scale``,

        pool = source pool x scale,

    and at least ``max_model_len`` (vLLM does not start with a pool that cannot hold one request
    of the full context). Nothing of the source's results goes in."""
    pool = source_pool_tokens(bytes_per_token) * scale
    return max(int(max_model_len), int(pool))


REPLAY_PAYLOAD_SCALE = 1024
"""The replay's own stack stores 1/1024 of each block's KV bytes where the store's segments allow
it (:func:`replay_payload_scale`)."""

MIN_SEGMENT_BYTES = MIN_SEGMENT
"""Mooncake refuses a segment smaller than 16 MiB; the emulator then mounts 16 MiB, more RAM
than the stack's ``ram_gb`` gives."""


def segment_bytes(ram_gb: float, payload_scale: int, n_endpoints: int) -> float:
    """Real bytes of RAM store each endpoint mounts: ``ram_gb x 1e9 / payload_scale /
    n_endpoints`` (as the emulated endpoint computes it)."""
    return ram_gb * 1e9 / payload_scale / max(1, n_endpoints)


def replay_payload_scale(ram_gb: float, n_endpoints: int, want: int = REPLAY_PAYLOAD_SCALE) -> int:
    """The payload scale of the replay's own stack: the largest power of two at most ``want``
    whose segments (:func:`segment_bytes`) are at least Mooncake's 16 MiB minimum, so the RAM
    store holds exactly ``ram_gb`` at model scale (1 when even full-size payloads need a larger
    segment). Real store bytes only stand for the model's: every figure stays in model bytes,
    and a smaller real payload costs this host less time per store read (a whole-matrix run at
    1024 against 256: docs/measurements/replay.md)."""
    s = 1
    while s * 2 <= want and segment_bytes(ram_gb, s * 2, n_endpoints) >= MIN_SEGMENT_BYTES:
        s *= 2
    return s


PREFILL_PARAMS = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                  "remote_block_ids": None, "remote_host": None, "remote_port": None}
"""``kv_transfer_params`` of the prefill request (vLLM's disaggregated-prefill proxy)."""


@dataclass
class ReplayRecord:
    """One trace call as replayed. Times in model seconds on the run clock.

    ``t_ready``: the schedule released the call (its dispatch time; user TTFT counts from here);
    ``t_first_token``: the first output token arrived (from the decode replica under P/D);
    ``ttft_s = t_first_token - t_ready`` (user TTFT: store lookup, load or recompute, prefill,
    the prefill-to-decode transfer and decode start, plus client dispatch);
    ``itl_s = (t_end - t_first_token) / (live_output_tokens - 1)`` (mean inter-token latency);
    ``cached_tokens``: the prompt tokens the prefill replica did not compute (GPU prefix cache
    and store hits; under P/D from the prefill request, not the decode's transferred KV)."""

    kind: ClassVar[str] = "replay"
    run_id: str
    session: str
    turn: int
    call_id: str
    prompt_tokens: int
    group: str
    recorded_output_tokens: int
    prefill: str
    decode: str
    preferred: str | None
    initial: bool
    sticky: bool | None
    t_ready: float
    status: str = "ok"
    error: str | None = None
    t_first_token: float | None = None
    t_end: float | None = None
    ttft_s: float | None = None
    itl_s: float | None = None
    live_output_tokens: int | None = None
    cached_tokens: int | None = None


@dataclass
class ReplayOptions:
    experiment: Experiment = "short"
    routing: Policy = "soft-sticky"
    threshold_tokens: int = DEFAULT_THRESHOLD_TOKENS
    active: int = 16
    stagger_s: float = 30.0
    gap: int = 128
    max_in_flight: int = 16
    speed: float = 1.0
    scrape_s: float = 5.0
    seed: int = 0


@dataclass
class Topology:
    prefill: list[str]
    decode: list[str] = field(default_factory=list)  # [] = colocated

    @property
    def disaggregated(self) -> bool:
        return bool(self.decode)


def topology(stack: StackConfig) -> Topology:
    roles = {e.name: getattr(e, "kv_role", "both") for e in stack.endpoints}
    pre = [n for n, r in roles.items() if r == "producer"]
    dec = [n for n, r in roles.items() if r == "consumer"]
    if pre and dec:
        return Topology(pre, dec)
    if pre or dec:
        raise ConfigError("stack.endpoints: a disaggregated replay needs both kv_role 'producer' "
                          f"and 'consumer' endpoints; got {roles}")
    return Topology(list(roles))


SESSION_ORDERS = ("trace", "longest")
"""How :func:`select_sessions` ranks the matching sessions before ``skip`` and ``sessions``."""


def select_sessions(trace: Trace, *, sessions: int | None = None, min_turns: int = 1,
                    max_context: int | None = None, skip: int = 0,
                    order: str = "trace") -> list[list[Call]]:
    """The sessions to replay: those with at least ``min_turns`` turns, ranked by ``order``,
    after ``skip`` of them, at most ``sessions``. A session is cut before its first call whose
    prompt plus recorded output exceeds ``max_context`` (later turns only grow).

    ``order``: ``trace`` keeps the trace's order; ``longest`` ranks the sessions by the mean
    prompt tokens of their calls (after the cut), longest first, ties in trace order, so a
    slice of a trace with many short conversations can be taken at the prompt lengths a study
    needs. The ranking only picks the sessions: they are returned, and replayed, in trace order,
    so the sessions active together are a mix of the slice's lengths, as in the trace, and not
    its longest first (whose active sessions would hold several times the working set the
    store is sized for, :func:`working_set_scale`)."""
    if order not in SESSION_ORDERS:
        raise ValueError(f"order: {order!r} not allowed; allowed values: "
                         + ", ".join(SESSION_ORDERS))
    kept: list[list[Call]] = []
    for cs in trace.sessions().values():
        if max_context is not None:
            k = next((i for i, c in enumerate(cs)
                      if c.prompt_tokens + max(1, c.output_tokens) > max_context), len(cs))
            cs = cs[:k]
        if len(cs) >= max(1, min_turns):
            kept.append(cs)
    index = {id(cs): i for i, cs in enumerate(kept)}
    if order == "longest":
        kept.sort(key=lambda cs: -sum(c.prompt_tokens for c in cs) / len(cs))
    out = kept[max(0, skip):]
    out = out if sessions is None else out[:max(0, sessions)]
    return sorted(out, key=lambda cs: index[id(cs)])


class Replayer:
    """Dispatches the calls of one run: routing, the request(s), the records."""

    def __init__(self, trace: Trace, client: LLMClient, clock: RunClock, rd: RunDir,
                 topo: Topology, opts: ReplayOptions):
        self.trace, self.client, self.clock, self.rd = trace, client, clock, rd
        self.topo = topo
        self.opts = opts
        self.router = Router(len(topo.prefill), max(1, len(topo.decode)), opts.routing,
                             opts.threshold_tokens)
        self._next: dict[str, asyncio.Future] = {}
        self._ahead = 0
        self.errors = 0

    def _prepare(self, call: Call) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(None, prompt_ids, self.trace, call)

    def prefetch(self, sessions: Sequence[Sequence[Call]]) -> None:
        """Build the first turns' prompts of the first sessions ahead; each dispatch builds its
        session's next prompt (and a first turn further down the list) while it runs, so that
        prompt synthesis is not part of the dispatch delay."""
        self._ahead = 2 * max(self.opts.active, self.opts.max_in_flight)
        for cs in sessions[:self._ahead]:
            if cs:
                self._next[f"{cs[0].session}/{cs[0].turn}"] = self._prepare(cs[0])

    async def dispatch(self, s: int, call: Call, sessions: Sequence[Sequence[Call]]) -> None:
        # on the stack's held clock the client's own work (building, routing and sending the
        # request, handing the prefill's answer to the decode) takes no model time: a request
        # slot holds the clock from here through both requests (adev.clock.RequestHolds), taken
        # before the call's release is stamped so that the stamp is the held time
        holds = request_holds()
        slot = holds.take() if holds is not None else None
        t_ready = self.clock.now()
        try:
            await self._dispatch(s, call, sessions, t_ready, slot)
        finally:
            h = handover()
            if h is not None:  # the schedule's work up to its next release is no model time
                h.leave(hold_at(self.clock, -math.inf))
            if holds is not None and slot is not None:
                holds.give_back(slot)

    async def _dispatch(self, s: int, call: Call, sessions: Sequence[Sequence[Call]],
                        t_ready: float, slot: int | None) -> None:
        key = f"{call.session}/{call.turn}"
        fut = self._next.pop(key, None)
        ids = await fut if fut is not None else prompt_ids(self.trace, call)
        cs = sessions[s]
        k = next(i for i, c in enumerate(cs) if c is call)
        ahead = [cs[k + 1]] if k + 1 < len(cs) else []
        if k == 0 and s + self._ahead < len(sessions) and sessions[s + self._ahead]:
            ahead.append(sessions[s + self._ahead][0])
        for nxt in ahead:
            key_n = f"{nxt.session}/{nxt.turn}"
            if key_n not in self._next:
                self._next[key_n] = self._prepare(nxt)
        out = max(1, call.output_tokens)
        route = self.router.route(call.session, call.prompt_tokens, out)
        rec = self._record(call, route, t_ready)
        try:
            res = await self._send(call, ids, out, route, t_ready, rec.call_id, slot)
        except LLMError as e:
            self.errors += 1
            rec.status, rec.error = "error", str(e)[:300]
        else:
            res, cached = res
            r = res.record
            rec.t_first_token, rec.t_end = r.t_first_content, r.t_end
            rec.live_output_tokens, rec.cached_tokens = res.completion_tokens, cached
            if rec.t_first_token is not None:
                rec.ttft_s = rec.t_first_token - t_ready
                n = res.completion_tokens or 0
                if n > 1 and rec.t_end is not None:
                    rec.itl_s = (rec.t_end - rec.t_first_token) / (n - 1)
        finally:
            self.router.call_done(route, out)
        self.rd.append(rec)

    def _record(self, call: Call, route: Route, t_ready: float) -> ReplayRecord:
        t = self.topo
        pre = t.prefill
        dec = t.decode or ["colocated"]
        return ReplayRecord(
            run_id=self.rd.run_id, session=call.session, turn=call.turn,
            call_id=f"{call.session}-t{call.turn}", prompt_tokens=call.prompt_tokens,
            group=length_group(call.prompt_tokens), recorded_output_tokens=call.output_tokens,
            prefill=pre[route.prefill], decode=dec[route.decode],
            preferred=None if route.preferred is None else pre[route.preferred],
            initial=route.initial, sticky=route.sticky, t_ready=t_ready)

    async def _send(self, call: Call, ids: np.ndarray, out: int, route: Route, t_ready: float,
                    call_id: str, slot: int | None = None):
        c, t = self.client, self.topo
        common: dict[str, Any] = {"session_id": call.session, "round": call.turn, "role": "replay",
                                  "hold_slot": slot}
        pre = t.prefill[route.prefill]
        if not t.disaggregated:
            try:
                r = await c.completion(pre, ids, max_tokens=out, min_tokens=out,
                                       ignore_eos=True, t_scheduled=t_ready, call_id=call_id,
                                       **common)
                return r, r.cached_tokens
            finally:
                self.router.prefill_done(route, call.prompt_tokens)
        try:
            p = await c.completion(pre, ids, max_tokens=1, stream=False, t_scheduled=t_ready,
                                   call_id=call_id + "-prefill",
                                   extra_body={"kv_transfer_params": dict(PREFILL_PARAMS)},
                                   **common)
        finally:
            self.router.prefill_done(route, call.prompt_tokens)
        d = await c.completion(t.decode[route.decode], ids, max_tokens=out, min_tokens=out,
                               ignore_eos=True, call_id=call_id,
                               extra_body={"kv_transfer_params": p.kv_transfer_params or {}},
                               **common)
        return d, p.cached_tokens  # the prefill replica's hits (the decode's are the transfer)


WARMUP_PROMPT = list(range(100, 108))
"""The warm-up requests' prompt: 8 token ids, under one KV block, so it leaves nothing in a
prefix cache or the store that a trace's prompt could hit."""


async def warm_up(eps: list[Endpoint], topo: Topology, clock: RunClock) -> None:
    """One request through every replica before the schedule starts (a prefill on each prefill
    replica, handed to a decode replica under P/D; a plain completion when colocated), on a
    client that records nothing: the first request a process serves pays its one-time costs
    (first connections, lazy set-up in the endpoint and the client), which are not the model's
    and would otherwise land in the first calls' TTFT."""
    async with LLMClient(eps, clock=clock, return_token_ids=False) as c:
        if not topo.disaggregated:
            await asyncio.gather(*(c.completion(n, WARMUP_PROMPT, max_tokens=2) for n in topo.prefill))
            return
        for i in range(max(len(topo.prefill), len(topo.decode))):
            p = await c.completion(topo.prefill[i % len(topo.prefill)], WARMUP_PROMPT, max_tokens=1,
                                   stream=False,
                                   extra_body={"kv_transfer_params": dict(PREFILL_PARAMS)})
            await c.completion(topo.decode[i % len(topo.decode)], WARMUP_PROMPT, max_tokens=2,
                               extra_body={"kv_transfer_params": p.kv_transfer_params or {}})


async def run_one(trace: Trace, sessions: list[list[Call]], stack: StackConfig, opts: ReplayOptions,
                  out_dir: Path, label: str, *, log=print,
                  pace: dict[str, Any] | None = None, configuration: str | None = None) -> Path:
    """Replay ``sessions`` on a stack of ``stack`` (started here when embedded); returns the
    run directory (``out_dir/label``). ``pace``: how the time scale was chosen
    (:class:`adev.replay.pace.PaceChoice`), kept in the manifest as ``time_scale_choice``;
    ``configuration``: the name of :data:`CONFIGURATIONS` the run is made at, kept in the
    manifest (the report's point of the run)."""
    from ..fleet.scraper import Scraper
    from ..manifest import build_manifest
    from ..stack import running_stack
    from .summary import summarise
    topo = topology(stack)
    rd = RunDir.create(run_id=label, base=out_dir)
    async with running_stack(stack, exclusive=True) as info:  # shared with no other client
        clock = stack_run_clock(info)  # the stack's held clock, when it has one
        eps = [Endpoint(n, info.endpoints[n], model=info.models.get(n) or None)
               for n in topo.prefill + topo.decode]
        extra = {"replay": {**dataclasses.asdict(opts), "label": label,
                            "configuration": configuration,
                            "sessions": len(sessions), "calls": sum(map(len, sessions)),
                            "topology": dataclasses.asdict(topo), "trace": trace.source}}
        if pace is not None:
            extra["time_scale_choice"] = pace
        rd.write_json("manifest.json", build_manifest(
            rd.run_id, config={"stack": stack}, time_scale=info.time_scale,
            seeds={"replay": opts.seed}, extra=extra))
        targets = dict(info.metrics_urls)
        if info.master_metrics_url:
            targets["master"] = info.master_metrics_url
        scraper = Scraper(rd, rd.run_id, clock, targets, interval_s=opts.scrape_s)
        async with LLMClient(eps, clock=clock, run_dir=rd, return_token_ids=False,
                             pool_size=max(64, 4 * opts.max_in_flight)) as client:
            await client.discover()
            rd.write_json("endpoints.json", client.described())   # the servers' releases
            await warm_up(eps, topo, clock)
            await client.warm(min(opts.max_in_flight, opts.active))
            rep = Replayer(trace, client, clock, rd, topo, opts)
            rep.prefetch(sessions)
            await scraper.boundary()
            loop_task = asyncio.create_task(scraper.loop())

            async def dispatch(s: int, call: Call) -> None:
                await rep.dispatch(s, call, sessions)
            extra_out: dict[str, Any] = {}
            try:
                if opts.experiment == "short":
                    dist = ClippedLogNormal.fit()
                    log(describe_fit(dist, opts.seed))
                    await run_short_gap(sessions, dispatch, clock, active=opts.active,
                                        stagger_s=opts.stagger_s, dist=dist, seed=opts.seed)
                elif opts.experiment == "long":
                    pol = await run_long_gap(sessions, dispatch, clock, gap=opts.gap,
                                             max_in_flight=opts.max_in_flight)
                    extra_out["relaxed_starts"] = pol.relaxed
                else:
                    await run_timestamps(sessions, dispatch, clock, speed=opts.speed)
            finally:
                loop_task.cancel()
                await asyncio.gather(loop_task, return_exceptions=True)
                await scraper.boundary()
                await scraper.aclose()
    rd.close()
    summary = summarise(rd.path)
    summary["schedule"] = extra_out
    rd.write_json("summary.json", summary)
    return rd.path


DISK_CONFIGURATIONS = ("store-ram+disk", "disk-only")
"""Stack configurations with a disk tier: Mooncake's offload heartbeat writes their disk copies."""


def scale_for(base: StackConfig, name: str) -> float:
    """The time scale configuration ``name`` runs at on the embedded stack ``base``: base's, at
    most :func:`adev.stack.commands.heartbeat_max_scale` for a configuration with a disk tier
    (10 for the default 10 model s heartbeat), where Mooncake's offload heartbeat keeps its
    model period and the eviction figures are the model's."""
    if base.mode == "external" or CONFIGURATIONS[name][0] not in DISK_CONFIGURATIONS:
        return float(base.time_scale)
    from ..stack.commands import heartbeat_max_scale
    return min(float(base.time_scale), heartbeat_max_scale(base.store.offload_heartbeat_s))


def stack_for(base: StackConfig, name: str, state_root: Path) -> StackConfig:
    """The stack of configuration ``name`` (:data:`CONFIGURATIONS`): ``base`` with its
    configuration, disk tier, time scale (:func:`scale_for`) and an own state directory (a fresh
    stack per run): ``state_root / name``, made absolute from the current directory (where the
    run's records go), as a relative stack state directory is taken from the repository root."""
    if name not in CONFIGURATIONS:
        raise ConfigError(f"--configurations: {name!r} is not allowed; allowed values: "
                          + ", ".join(CONFIGURATIONS))
    conf, disk = CONFIGURATIONS[name]
    store = dataclasses.replace(base.store, disk_tier=disk or base.store.disk_tier)
    return dataclasses.replace(base, configuration=conf, store=store, time_scale=scale_for(base, name),
                               state_dir=str(Path(state_root).absolute() / name))


async def run_matrix(trace: Trace, sessions: list[list[Call]], base: StackConfig,
                     names: Sequence[str], seeds: Sequence[int], opts: ReplayOptions,
                     out_dir: Path, *, log=print, pace: dict[str, Any] | None = None,
                     tag: str = "", jobs: int = 1) -> list[Path]:
    """Every configuration x seed, each on a fresh stack (embedded); external mode runs once per
    seed, labelled with the stack's configuration. ``pace``: configuration ->
    :class:`adev.replay.pace.PaceChoice` (:func:`adev.replay.pace.choose_time_scales`), each
    configuration's stack at its chosen scale and the choice in its runs' manifests. A run is
    labelled ``<configuration>-s<seed>``, after ``<tag>-`` when ``tag`` is given (the
    experiment, where one folder holds the runs of several).

    ``jobs``: embedded runs at once. One runs them here, in matrix order (seed, then ``names``);
    more run each in a process of its own (:mod:`adev.replay.worker`: the held clock a client
    stamps with is one per process), each with its own stack, the runs at the lowest time scale
    (the longest on the wall) first. A failed run stops the others (their stacks stop) and its
    error is raised. External mode runs one at a time. The runs are returned in matrix order."""
    check_jobs(jobs)
    external = base.mode == "external"
    jobs = 1 if external else jobs
    common: dict[str, Any] = dict(trace=trace, sessions=sessions)
    inputs = None
    if jobs > 1:   # the trace and the slice go to the workers once, not once per run
        import pickle
        out_dir.mkdir(parents=True, exist_ok=True)
        inputs = out_dir / f".{tag or 'matrix'}.inputs.pkl"
        inputs.write_bytes(pickle.dumps(common))
    todo = [base.configuration] if external else list(names)
    plan: list[tuple[StackConfig, StackConfig, str, dict[str, Any]]] = []
    for seed in seeds:
        for name in todo:
            choice = (pace or {}).get(name)
            at = dataclasses.replace(base, time_scale=choice.time_scale) if choice else base
            stack = at if external else stack_for(at, name, out_dir / ".stacks" / f"s{seed}")
            label = f"{tag}-{name}-s{seed}" if tag else f"{name}-s{seed}"
            plan.append((at, stack, label, dict(
                stack=stack, opts=dataclasses.replace(opts, seed=seed), out_dir=out_dir,
                label=label, pace=choice.to_dict() if choice else None, configuration=name)))
    runs: list[Path] = [out_dir] * len(plan)
    gate = asyncio.Semaphore(jobs)

    async def one(i: int) -> None:
        at, stack, label, job = plan[i]
        async with gate:
            if stack.time_scale != at.time_scale:
                log(f"replay {label}: time scale {stack.time_scale:g}, not {at.time_scale:g}: "
                    f"Mooncake's offload heartbeat (whole seconds, at least 1) keeps its "
                    f"{stack.store.offload_heartbeat_s:g} model s only up to that scale")
            log(f"replay {label}: {opts.experiment} gap, {len(sessions)} sessions, "
                f"{sum(map(len, sessions))} calls")
            runs[i] = await (run_one(**common, **job, log=log) if jobs == 1
                             else run_in_process({**job, "inputs": inputs}))
            if not external:
                shutil.rmtree(stack.state_dir, ignore_errors=True)  # stopped: nothing to keep

    starts = list(range(len(plan)))
    if jobs > 1:
        starts.sort(key=lambda i: plan[i][1].time_scale)   # stable: matrix order within a scale
    try:
        async with asyncio.TaskGroup() as tg:   # the semaphore lets them start in this order
            for i in starts:
                tg.create_task(one(i))
    except BaseExceptionGroup as group:        # the first failure, as one run at a time raises it
        raise group.exceptions[0] from None
    finally:
        if inputs is not None:
            inputs.unlink(missing_ok=True)
    if not external:
        shutil.rmtree(out_dir / ".stacks", ignore_errors=True)
    return runs


def check_jobs(jobs: int) -> None:
    """``--jobs`` must be at least 1 (:class:`ConfigError` naming it otherwise)."""
    if jobs < 1:
        raise ConfigError(f"--jobs: {jobs!r} is not allowed; allowed values: an integer >= 1")


class RunFailed(RuntimeError):
    """A run in a process of its own (:func:`run_in_process`) exited with an error."""


async def run_in_process(job: dict[str, Any]) -> Path:
    """:func:`run_one` with the keyword arguments ``job`` in a process of its own
    (:mod:`adev.replay.worker`); returns its run directory. ``job["inputs"]``, where given, is a
    pickle file of further keyword arguments that every run of a matrix shares (the trace and the
    sessions), written once by :func:`run_matrix`. Cancelled, it sends the process
    SIGTERM and waits for it to stop its stack."""
    import pickle
    import signal
    import sys
    out_dir, label = Path(job["out_dir"]), job["label"]
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f".{label}.job.pkl"
    path.write_bytes(pickle.dumps(job))
    try:
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "adev.replay.worker",
                                                    str(path))
        try:
            rc = await proc.wait()
        except asyncio.CancelledError:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                await asyncio.shield(proc.wait())
            raise
    finally:
        path.unlink(missing_ok=True)
    if rc != 0:
        raise RunFailed(f"replay {label}: its process exited with status {rc} (its output is "
                        "above)")
    return out_dir / label
