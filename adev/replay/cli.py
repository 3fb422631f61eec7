"""``adev replay``: replay a trace over the six cache configurations.

    adev replay TRACE --experiment short|long|timestamps|short,long --configurations all --seeds 0,1 \\
        [--stack FILE | --profile NAME --ram-gb G --gpu-pool-tokens N --chunk-blocks C \\
         --payload-scale N] \\
        [--sessions N --min-turns K --skip M] \\
        [--order trace|longest] [--time-scale auto|S] [--out DIR]

Without ``--stack`` the replay's stack is ``stacks/embedded.toml`` with two prefill and two
decode replicas (``p0``, ``p1`` producers; ``d0``, ``d1`` consumers) where the endpoint supports
``kv_role``, else two colocated replicas ``p0``, ``p1``; the endpoints' policy is ``replay``
where the emulator has it, and they stream once per decode macro step (``--stream-interval``,
default 0; no replay figure depends on it). A stack file in external mode runs the same replay
against its endpoints, unchanged (one run per seed, labelled with its ``configuration``). On
the embedded stack the time scale is chosen by pilot runs unless ``--time-scale S`` is given
(:mod:`adev.replay.pace`). The replay's own stack serves the replay study's model variant
(:data:`REPLAY_PROFILE`; ``--profile`` for another) and writes the disk tier at put
(:data:`REPLAY_DISK_WRITES`; ``--disk-writes evict`` for the stack's default).
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import signal
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar, cast

from ..config import (
    DISK_WRITES,
    ROOT,
    STAGINGS,
    ConfigError,
    DiskWrites,
    EndpointSpec,
    KvRole,
    StackConfig,
    from_dict,
    load_stack,
    parse_cpu_list,
    to_dict,
)
from .experiment import (
    CONFIGURATIONS,
    EXPERIMENTS,
    MIN_SEGMENT_BYTES,
    SESSION_ORDERS,
    SOURCE_ACTIVE,
    SOURCE_GAP,
    SOURCE_IN_FLIGHT,
    Experiment,
    ReplayOptions,
    auto_active,
    check_jobs,
    mean_prompt,
    prompt_prefill_s,
    replay_payload_scale,
    run_matrix,
    scaled_gpu_pool,
    scaled_ram_gb,
    segment_bytes,
    select_sessions,
    source_mean_prompt,
    source_pool_tokens,
    source_prefill_s,
    working_set_scale,
)
from .format import Trace, TraceError, read_trace
from .pace import MIN_SCALE
from .routing import DEFAULT_THRESHOLD_TOKENS, POLICIES
from .traces import new_prompt_tokens, split_chains, working_set_tokens

T = TypeVar("T")


REPLAY_DISK_WRITES: DiskWrites = "put"
"""When the replay's own stack writes the RAM + disk configurations' disk tier: at put (every
object on the offload heartbeat after its put), not at eviction. The source describes its replay
study's disk tiers so: in the short gap "the local and remote storage replicas are written, but
almost no physical reads occur because useful data is still in RAM" (written while the data is
in RAM), and in the long gap they "need only about 75 cycles and about 1.7 TB of eviction because
the NVMe copy remains available after the RAM copy is removed" (the copy exists before the
removal). Its fleet study writes at eviction ("Eviction can move expired-lease objects from RAM
to disk"), the stack's default. ``--disk-writes evict`` replays with that."""

STORE_FLAGS = ("disk_writes", "load_threads", "staging")
"""Flags that set the replay stack's ``[stack.store]`` field of the same name (not with --stack)."""


REPLAY_PROFILE = "qwen3-coder-30b-a3b-128k"
"""The model profile of the replay's own stack: the source's replay study served
Qwen3-Coder-30B-A3B-Instruct-FP8 (FP8 weights, BF16 KV) with prompts above 96K tokens, where its
fleet study (``stacks/embedded.toml``'s profile) served the BF16 variant with a 65,536-token
context."""


def default_stack(**overrides: Any) -> StackConfig:
    """The replay's embedded stack (see the module docstring): the replay study's model variant
    (:data:`REPLAY_PROFILE`), its disk tier written at put (:data:`REPLAY_DISK_WRITES`)."""
    base = load_stack()
    has_role = "kv_role" in {f.name for f in dataclasses.fields(EndpointSpec)}
    if has_role:
        roles: tuple[tuple[str, KvRole], ...] = (("p0", "producer"), ("p1", "producer"),
                                                 ("d0", "consumer"), ("d1", "consumer"))
        eps = [EndpointSpec(n, kv_role=r) for n, r in roles]
    else:
        eps = [EndpointSpec("p0"), EndpointSpec("p1")]
    try:
        from ..emulator.policies import POLICIES as EMU_POLICIES
        policy = "replay" if "replay" in EMU_POLICIES else "length"
    except ImportError:
        policy = "length"
    cfg = dataclasses.replace(base, endpoints=eps, policy=policy, state_dir=".adev/replay",
                              profile=REPLAY_PROFILE,
                              store=dataclasses.replace(base.store, disk_writes=REPLAY_DISK_WRITES))
    store = overrides.pop("store", None)
    if store:  # validated as a stack file's [stack.store] would be
        cfg = dataclasses.replace(cfg, store=from_dict(
            type(cfg.store), {**to_dict(cfg.store), **store}, "stack.store"))
    return dataclasses.replace(cfg, **{k: v for k, v in overrides.items() if v is not None})


def _names(text: str) -> list[str]:
    if text == "all":
        return list(CONFIGURATIONS)
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in CONFIGURATIONS]
    if bad or not names:
        raise ConfigError(f"--configurations: {bad or text!r} not allowed; allowed values: all "
                          "or a comma list of " + ", ".join(CONFIGURATIONS))
    return names


def _experiments(text: str) -> list[Experiment]:
    """``--experiment``: one experiment, or a comma list run one after another into one folder
    (the report judges the shapes of each)."""
    exps = list(dict.fromkeys(e.strip() for e in text.split(",") if e.strip()))
    bad = [e for e in exps if e not in EXPERIMENTS]
    if bad or not exps:
        raise ConfigError(f"--experiment: {bad or text!r} not allowed; allowed values: one of "
                          + ", ".join(EXPERIMENTS) + " or a comma list of them (short,long)")
    return cast(list[Experiment], exps)


def _seeds(text: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",")]
    except ValueError:
        raise ConfigError(f"--seeds: {text!r} is not allowed; allowed values: a count N (seeds "
                          "0..N-1) or a comma list such as 0,1") from None
    if len(vals) == 1 and "," not in text:
        return list(range(max(1, vals[0])))
    return vals


def _main(args: argparse.Namespace) -> int:
    try:
        trace = read_trace(args.trace)
    except TraceError as e:
        print(f"adev replay: {e}", file=sys.stderr)
        return 2
    if args.split_chains:
        before = len(trace.sessions())
        trace = split_chains(trace)
        print(f"--split-chains: {before:,} sessions -> {len(trace.sessions()):,} chains, each "
              "replayed as a session", file=sys.stderr)
    names, seeds = _names(args.configurations), _seeds(args.seeds)
    exps = _experiments(args.experiment)
    scale = None if args.time_scale == "auto" else _scale("--time-scale", args.time_scale)
    min_scale = _scale("--min-time-scale", args.min_time_scale)
    interval = _stream_interval(args.stream_interval)
    if args.payload_scale is not None and args.payload_scale < 1:
        raise ConfigError(f"--payload-scale: {args.payload_scale!r} is not allowed; allowed values: "
                          "an integer >= 1 (real store bytes = model bytes / N)")
    if args.promotion_on_hit is not None and args.promotion_on_hit < 1:
        raise ConfigError(f"--promotion-on-hit: {args.promotion_on_hit!r} is not allowed; allowed "
                          "values: an integer >= 1 (reads of a disk-only key before it is "
                          "copied back to RAM)")
    if args.promotion_on_hit is not None and args.stack:
        raise ConfigError("--promotion-on-hit: not with --stack; set [stack.store] "
                          "promotion_on_hit and promotion_threshold in the stack file")
    if args.profile is not None and args.stack:
        raise ConfigError("--profile: not with --stack; set [stack] profile in the stack file")
    for name in STORE_FLAGS:
        if getattr(args, name) is not None and args.stack:
            raise ConfigError(f"--{name.replace('_', '-')}: not with --stack; set [stack.store] "
                              f"{name} in the stack file")
    if args.load_threads is not None and args.load_threads < 0:
        raise ConfigError(f"--load-threads: {args.load_threads!r} is not allowed; allowed values: "
                          "an integer >= 0 (store loads one endpoint serves at once; 0: no limit)")
    check_jobs(args.jobs)   # before the pilots, not after them
    if args.stack:
        base = load_stack(args.stack, time_scale=scale)
    else:
        store: dict[str, Any] = {k: v for k, v in (("ram_gb", args.ram_gb),
                                                   ("chunk_blocks", args.chunk_blocks))
                                 if v is not None}
        if args.promotion_on_hit is not None:
            store.update(promotion_on_hit=True, promotion_threshold=args.promotion_on_hit)
        for name in STORE_FLAGS:
            if getattr(args, name) is not None:
                store[name] = getattr(args, name)
        base = default_stack(time_scale=scale, store=store, profile=args.profile,
                             cpus=parse_cpu_list(args.stack_cpus, "--stack-cpus")
                             if args.stack_cpus else None, stream_interval=0)
    if interval is not None:
        base = dataclasses.replace(base, stream_interval=interval)
    if not args.stack and args.gpu_pool_tokens is not None:
        base = _with_gpu_pool(base, args.gpu_pool_tokens)
    max_ctx = None if base.mode == "external" else _max_context(base)
    sessions = select_sessions(trace, sessions=args.sessions, min_turns=args.min_turns,
                               skip=args.skip, max_context=args.max_context or max_ctx,
                               order=args.order)
    if not sessions:
        print("adev replay: no session of the trace matches --sessions/--min-turns/--skip",
              file=sys.stderr)
        return 2
    mean = mean_prompt(sessions)
    held = float(working_set_tokens(sessions, trace.block_tokens).mean())
    prompts = [c.prompt_tokens for cs in sessions for c in cs]
    prefill = base.model_profile().prefill_time
    active = (min(auto_active(prompts, prefill), len(sessions)) if args.active == "auto"
              else args.active)
    opts = ReplayOptions(experiment=exps[0], routing=args.routing,
                         threshold_tokens=args.threshold_tokens, active=active,
                         gap=args.gap, max_in_flight=args.max_in_flight, speed=args.speed,
                         stagger_s=args.stagger_s)
    notes: list[str] = []   # printed once every stack is known to be valid
    if args.active == "auto" and "short" in exps:
        notes.append(f"short gap: {active} sessions active = the source's {SOURCE_ACTIVE} x its "
                     f"mean prefill of a whole prompt {source_prefill_s(prefill):.2f} s / this "
                     f"slice's {prompt_prefill_s(prompts, prefill):.2f} s (the model profile's "
                     f"prefill time; mean prompts {source_mean_prompt():,.0f} and {mean:,.0f} "
                     f"tokens), rounded, at most the slice's {len(sessions)} sessions (--active "
                     "sets another)")
    bases = {exp: base if args.stack else
             _sized(base, dataclasses.replace(opts, experiment=exp), mean, held, args, notes)
             for exp in exps}
    for line in notes:
        print(line, file=sys.stderr)
    new = new_prompt_tokens(Trace(trace.block_tokens, [c for cs in sessions for c in cs]))
    prompt = sum(c.prompt_tokens for cs in sessions for c in cs)
    print(f"new prompt tokens: {new.mean():,.0f} per call, {new.sum() / max(1, prompt):.1%} of "
          "prompt tokens (past the longest prefix an earlier call sent: the KV the store takes "
          "in per call)", file=sys.stderr)
    print(f"working set per session: {held:,.0f} tokens, {held / max(1.0, mean):.2f} x the mean "
          "prompt (at each call, its prompt and the latest prompt of each of its session's other "
          "chains that a later call continues)", file=sys.stderr)
    from ..records import new_run_id
    out = Path(args.out) if args.out else ROOT / "results" / "replays" / new_run_id("replay")
    out.mkdir(parents=True, exist_ok=True)

    def log(*a: Any, **kw: Any) -> None:
        print(*a, file=sys.stderr)
    pace = None
    if scale is None and base.mode != "external":
        from .pace import choose_time_scales
        pace = run_stoppable(choose_time_scales(trace, sessions, bases[exps[0]], names, opts,
                                                out, log=log, min_scale=min_scale))
        if pace is None:
            return _stopped(out)
    runs = []
    for exp in exps:   # one set of pilots serves every experiment: they replay their own slice
        got = run_stoppable(run_matrix(trace, sessions, bases[exp], names, seeds,
                                       dataclasses.replace(opts, experiment=exp), out, log=log,
                                       pace=pace, tag=exp if len(exps) > 1 else "",
                                       jobs=args.jobs))
        if got is None:
            return _stopped(out)
        runs += got
    from ..analysis.render import md_table
    from ..analysis.render import write as write_doc
    from .report import HEADLINE, build
    gaps = " and ".join(exps) + (" reuse gaps" if len(exps) > 1 else " reuse gap")
    doc, df = build(runs, f"Replay ({gaps}): {Path(args.trace).name}")
    html = write_doc(doc, out / "report")
    print(md_table(df, HEADLINE))
    print(doc.blocks[0])
    print(f"report: {html} (and {html.with_suffix('.md')})")
    return 0


STOPPED = 130
"""``adev replay``'s exit status when SIGINT or SIGTERM stopped it (128 + SIGINT, as a shell
reports a Ctrl-C)."""


def run_stoppable(coro: Coroutine[Any, Any, T]) -> T | None:
    """``asyncio.run(coro)``, where SIGINT or SIGTERM cancels it (None then): the runs in
    progress stop their stacks on the way out, and the runs already written stay as they are.
    After a signal, an error on the way out (a run in a process of its own that the same signal
    ended first, :func:`adev.replay.experiment.run_in_process`) also counts as stopped."""
    signalled: list[int] = []

    async def main() -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None

        def stop(sig: int) -> None:
            signalled.append(sig)
            task.cancel()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop, sig)
        try:
            return await coro
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
    try:
        return asyncio.run(main())
    except asyncio.CancelledError:
        return None
    except Exception:
        if signalled:
            return None
        raise


def _stopped(out: Path) -> int:
    print(f"adev replay: stopped by a signal; the runs finished before it are in {out}",
          file=sys.stderr)
    return STOPPED


def _with_gpu_pool(base: StackConfig, given: int) -> StackConfig:
    """``base`` with the GPU prefix pool ``given``, refused where it cannot hold one request of
    the model's full context, as vLLM refuses to start."""
    prof = base.model_profile()
    if given < prof.max_model_len:
        raise ConfigError(f"--gpu-pool-tokens: {given} is not allowed; allowed values: at least "
                          f"the model's context, {prof.max_model_len} tokens ({base.profile})")
    return dataclasses.replace(base, gpu_pool_tokens=given)


def _sized(base: StackConfig, opts: ReplayOptions, mean: float, held: float,
           args: argparse.Namespace, notes: list[str]) -> StackConfig:
    """The replay's own stack for experiment ``opts.experiment``: its RAM store and GPU prefix
    pool, unless ``--ram-gb`` / ``--gpu-pool-tokens`` give them, sized to the experiment's
    working set (:func:`working_set_scale`: ``mean`` prompt and ``held`` tokens per session, each
    derivation added to ``notes``), and its payload scale."""
    f_ram, f_pool = working_set_scale(opts, mean, held)
    exp = opts.experiment
    why = {"short": f"{opts.active} active sessions / {SOURCE_ACTIVE}",
           "long": f"a gap of {opts.gap} calls / {SOURCE_GAP}",
           "timestamps": "1"}[exp]
    src = source_mean_prompt()
    if args.ram_gb is None:
        ram = scaled_ram_gb(f_ram)
        base = dataclasses.replace(base, store=dataclasses.replace(base.store, ram_gb=ram))
        notes.append(f"{exp}: RAM store {ram:.1f} GB at model scale = the source's 256 GiB x "
                     f"{why} x this slice's working set per session {held:,.0f} / the source's "
                     f"{src:,.0f} tokens (its mean prompt: one conversation per session; "
                     "--ram-gb sets another)")
    if args.gpu_pool_tokens is None:
        prof = base.model_profile()
        pool = scaled_gpu_pool(f_pool, prof.bytes_per_token, prof.max_model_len)
        floor = " (the model's context: the floor)" if pool == prof.max_model_len else ""
        pwhy = (f"{opts.max_in_flight} calls in flight / {SOURCE_IN_FLIGHT}" if exp == "long"
                else why)
        notes.append(f"{exp}: GPU prefix pool {pool:,} tokens per endpoint{floor} = the "
                     f"source's estimated {source_pool_tokens(prof.bytes_per_token):,.0f} x "
                     f"{pwhy} x this slice's mean prompt {mean:,.0f} / the source's {src:,.0f} "
                     "tokens (--gpu-pool-tokens sets another)")
        base = dataclasses.replace(base, gpu_pool_tokens=pool)
    return _with_payload_scale(base, args.payload_scale, notes, exp)


def _with_payload_scale(base: StackConfig, given: int | None, notes: list[str],
                        exp: str) -> StackConfig:
    """The replay's own stack at ``--payload-scale`` (checked: no endpoint's RAM segment below
    Mooncake's 16 MiB minimum, which would hold more than ``ram_gb``), or at
    :func:`replay_payload_scale` for its RAM store (added to ``notes``)."""
    n_eps = len(base.endpoints)
    if given is None:
        scale = replay_payload_scale(base.store.ram_gb, n_eps)
        notes.append(f"{exp}: payload scale {scale} (real store bytes = model bytes / {scale}; "
                     "--payload-scale sets another)")
        return dataclasses.replace(base, payload_scale=scale)
    seg = segment_bytes(base.store.ram_gb, given, n_eps)
    if seg < MIN_SEGMENT_BYTES:
        top = replay_payload_scale(base.store.ram_gb, n_eps, want=given)
        raise ConfigError(f"--payload-scale: {given} is not allowed for a RAM store of "
                          f"{base.store.ram_gb:.1f} GB over {n_eps} endpoints (segments of "
                          f"{seg / 2**20:.1f} MiB, below Mooncake's 16 MiB minimum); allowed "
                          f"values: at most {top}")
    return dataclasses.replace(base, payload_scale=given)


def _scale(flag: str, text: str | float) -> float:
    """A time scale given as ``flag``: a finite number > 0 (``--time-scale`` may also be
    ``auto``, chosen by pilots: :mod:`adev.replay.pace`)."""
    try:
        s = float(text)
    except ValueError:
        s = float("nan")
    if not 0 < s < float("inf"):
        allowed = "auto or a number" if flag == "--time-scale" else "a number"
        raise ConfigError(f"{flag}: {text!r} is not allowed; allowed values: {allowed} > 0 "
                          "(model seconds per wall second)")
    return s


def _stream_interval(n: int | None) -> int | None:
    """``--stream-interval``: tokens per stream event of the embedded endpoints (None: not given,
    0 on the replay's own stack, the file's with ``--stack``). The replay's figures do not
    depend on it: a first token is never inside a decode macro step, so it leaves at its own
    model time, and inter-token latency is (end - first token) / (tokens - 1)."""
    if n is not None and n < 0:
        raise ConfigError(f"--stream-interval: {n!r} is not allowed; allowed values: an integer "
                          ">= 0 (tokens per stream event; 0 = once per decode macro step)")
    return n


def _active(text: str) -> str | int:
    """``--active``: ``auto`` or an integer >= 1."""
    if text == "auto":
        return text
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; allowed values: auto or an "
                                         "integer >= 1")
    return n


def _max_context(stack: StackConfig) -> int:
    from ..config import load_model_profile
    return load_model_profile(stack.profile).max_model_len


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("replay", help="replay a trace over cache configurations",
                              description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", help="an adev trace file (see `adev trace import/export`)")
    p.add_argument("--experiment", default="short",
                   help="short, long or timestamps, or a comma list of them run one after "
                        "another into one folder and one report (short,long: the whole matrix)")
    p.add_argument("--configurations", "--configs", default="all",
                   help="all, or a comma list of " + ", ".join(CONFIGURATIONS))
    p.add_argument("--seeds", default="1", help="a count N (seeds 0..N-1) or a list 0,1")
    p.add_argument("--stack", help="a stack file (default: the replay's embedded stack)")
    p.add_argument("--time-scale", default="auto",
                   help="model seconds per wall second on the embedded stack; auto (default): "
                        "for each configuration with a store, the stack's scale lowered until "
                        "this host's store reads keep pace with the tier profile in pilot runs "
                        "(adev.replay.pace); the choices are in <out>/pace.json and in each "
                        "run's manifest")
    p.add_argument("--min-time-scale", type=float, default=MIN_SCALE,
                   help="with --time-scale auto: the lowest scale a pilot may choose (default "
                        f"{MIN_SCALE:g}); where the reads keep pace only below it, the run goes "
                        "at the stack's scale")
    p.add_argument("--ram-gb", type=float, default=None,
                   help="RAM tier at model scale (default on the replay's own stack: the "
                        "source's 256 GiB x the replayed calls' mean prompt / the source's; "
                        "with --stack: the file's)")
    p.add_argument("--chunk-blocks", type=int, default=None,
                   help="blocks per store object (stack.store.chunk_blocks; default: the stack "
                        "file's 16 = 256 tokens); counts stay per block")
    p.add_argument("--promotion-on-hit", type=int, default=None, metavar="N",
                   help="Mooncake's promotion on hit for the RAM + disk configurations: a key "
                        "held only on the disk tier is copied back to RAM once read N times "
                        "(stack.store.promotion_on_hit and promotion_threshold; default: off, "
                        "as in Mooncake)")
    p.add_argument("--disk-writes", choices=DISK_WRITES, default=None,
                   help="when the RAM + disk configurations write a block to disk: evict (when "
                        "RAM evicts it, Mooncake's --offload_on_evict) or put (every object "
                        "after its put); default on the replay's own stack: put, as the "
                        "source's replay study describes its disk tiers; with --stack: the file's")
    p.add_argument("--load-threads", type=int, default=None, metavar="N",
                   help="store loads each endpoint serves at once (stack.store.load_threads; "
                        "vLLM's VLLM_MOONCAKE_LOAD_RECV_THREADS); default: 1, as in vLLM; 0: no "
                        "limit; with --stack: the file's")
    p.add_argument("--staging", choices=STAGINGS, default=None,
                   help="a staged load's two hops: overlap (the slower sets the pace), serial "
                        "(the disk read, then the copy to the GPU, as Mooncake stages a batch) or "
                        "shared (serial through the disk owner's one staging buffer, which every "
                        "endpoint's staged loads take in turn); "
                        "either way a lone staged load runs at the disk tier's profiled rate "
                        "(stack.store.staging; default: serial; with --stack: the file's)")
    p.add_argument("--payload-scale", type=int, default=None, metavar="N",
                   help="store values are 1/N of the real KV bytes (stack.payload_scale; "
                        "default on the replay's own stack: 1024, or the largest power of two "
                        "below it that keeps every endpoint's RAM segment at Mooncake's 16 MiB "
                        "minimum or more; with --stack: the file's); capacities scale alike, "
                        "every figure stays in model bytes")
    p.add_argument("--gpu-pool-tokens", type=int, default=None, metavar="N",
                   help="GPU prefix pool per endpoint in tokens (default on the replay's own "
                        "stack: the source's estimated 476,774 x the replayed calls' mean "
                        "prompt / the source's, at least the model's context; with --stack: the "
                        "file's)")
    p.add_argument("--profile", default=None,
                   help="model profile of the embedded stack (stacks/profiles/models/<name>; "
                        f"default: {REPLAY_PROFILE}, the replay study's FP8 variant; not with "
                        "--stack)")
    p.add_argument("--stack-cpus", default=None, help="cores of the stack's processes")
    p.add_argument("--stream-interval", type=int, default=None,
                   help="tokens per stream event of the embedded endpoints (vLLM's "
                        "--stream-interval; default: 0 = once per decode macro step, about half "
                        "the host's time per run that 1 = every token takes; with --stack, the "
                        "file's). No replay figure depends on it: a first token always leaves at "
                        "its own model time, and inter-token latency is (end - first token) / "
                        "(tokens - 1)")
    p.add_argument("--split-chains", action="store_true",
                   help="replay each chain of a session as a session of its own: a call "
                        "continues the earlier call it shares most of its leading blocks with, "
                        "so a fleet run's agents (context = per-role) become one session each "
                        "(adev.replay.traces.split_chains)")
    p.add_argument("--sessions", type=int, default=None, help="replay at most N sessions")
    p.add_argument("--min-turns", type=int, default=2, help="sessions with at least K turns")
    p.add_argument("--skip", type=int, default=0, help="skip the first M matching sessions")
    p.add_argument("--order", choices=SESSION_ORDERS, default="trace",
                   help="pick the matching sessions in trace order, or by their mean prompt "
                        "tokens, longest first (replayed in trace order either way)")
    p.add_argument("--max-context", type=int, default=None,
                   help="cut a session before a call longer than this (default: the model's)")
    p.add_argument("--routing", choices=POLICIES, default="soft-sticky")
    p.add_argument("--threshold-tokens", type=int, default=DEFAULT_THRESHOLD_TOKENS)
    p.add_argument("--active", type=_active, default="auto",
                   help="short gap: sessions active; auto (default): the source's 16 x its mean "
                        "time to prefill a prompt / the slice's, so that the active sessions "
                        "offer the source's prefill work (adev.replay.experiment.auto_active)")
    p.add_argument("--stagger-s", type=float, default=30.0)
    p.add_argument("--gap", type=int, default=128, help="long gap: other calls between turns")
    p.add_argument("--max-in-flight", type=int, default=16)
    p.add_argument("--speed", type=float, default=1.0, help="timestamps: speed factor")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="embedded runs at once, each in a process of its own with its own stack "
                        "(default 1)")
    p.add_argument("--out", help="output directory (default results/replays/<id>)")
    p.set_defaults(func=_main)
