"""``adev trace``: import traces into the adev trace format, export runs, print statistics.

    adev trace import mooncake|openai|sharegpt IN --out TRACE.jsonl
    adev trace export RUN --out TRACE.jsonl       # an adev run (calls.jsonl + reuse ledger)
    adev trace synth --out TRACE.jsonl [--seed N]  # shaped after the source's replay workload
    adev trace stats TRACE.jsonl [--json]

The format is described in :mod:`adev.replay.format` (and docs/replay.md); importers in
:mod:`adev.replay.importers`.
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .format import Call, Trace, TraceError, read_trace, write_trace
from .importers import IMPORTERS, import_adev_run

GROUPS = ((0, 32768, "<=32K"), (32768, 65536, "32-64K"), (65536, 98304, "64-96K"),
          (98304, None, ">96K"))
"""Prompt-length groups (tokens): (lower bound exclusive, upper bound inclusive, label)."""


def length_group(prompt_tokens: int) -> str:
    """The prompt-length group of a prompt: <=32K, 32-64K, 64-96K or >96K (K = 1024 tokens)."""
    for lo, hi, label in GROUPS:
        if prompt_tokens > lo and (hi is None or prompt_tokens <= hi):
            return label
    return GROUPS[0][2]


def _q(a: np.ndarray, q: float) -> float | None:
    return float(np.percentile(a, q)) if len(a) else None


@dataclass
class TraceStats:
    """Figures of one trace. ``growth_per_turn``: prompt_tokens[k+1] - prompt_tokens[k] within a
    session (tokens, p50 and mean over all consecutive pairs); ``gap``: t[k+1] - t[k] within a
    session (seconds, where both calls have a time); ``interarrival``: consecutive call times
    over the whole trace (seconds); ``new_tokens_mean`` and ``new_share``:
    :func:`new_prompt_tokens` per call (mean) and summed over prompt tokens summed;
    ``working_set_mean``: :func:`working_set_tokens` per call (mean)."""

    sessions: int
    calls: int
    turns_p50: float | None
    turns_max: int
    prompt_tokens_p50: float | None
    prompt_tokens_p99: float | None
    prompt_tokens_mean: float | None
    output_tokens_mean: float | None
    groups: dict[str, int]
    growth_per_turn_p50: float | None
    growth_per_turn_mean: float | None
    gap_p50_s: float | None
    gap_p90_s: float | None
    gap_p99_s: float | None
    interarrival_mean_s: float | None
    duration_s: float | None
    block_tokens: int
    new_tokens_mean: float | None = None
    new_share: float | None = None
    working_set_mean: float | None = None


def _chain_keys(blocks: list[int]) -> list[int]:
    """Prefix-chained keys of a call's blocks: block k's key names blocks 0..k, as a prefix
    cache keys a block by its whole prefix."""
    key, out = 0, []
    for b in blocks:
        key = hash((key, b))
        out.append(key)
    return out


def new_prompt_tokens(trace: Trace) -> np.ndarray:
    """Per call (in the trace's call order), the prompt tokens past the longest block prefix that
    any earlier call sent: what an unbounded prefix cache could not serve, the new content a
    store takes in from that call. Earlier = earlier in time (the calls sorted by ``t``, stable;
    file order when a call has no time). A block counts as sent when the same run of block ids
    up to it was sent, as prefix caches key a block by its whole prefix:

        new = prompt_tokens - min(prompt_tokens, block_tokens x (leading blocks already sent))
    """
    calls = trace.calls
    order = range(len(calls)) if any(c.t is None for c in calls) else \
        sorted(range(len(calls)), key=lambda i: calls[i].t or 0.0)
    seen: set[int] = set()
    out = np.zeros(len(calls), dtype=float)
    for i in order:
        c = calls[i]
        lead, leading = 0, True
        for key in _chain_keys(c.blocks):
            if leading and key in seen:
                lead += 1
            else:
                leading = False
                seen.add(key)
        out[i] = c.prompt_tokens - min(c.prompt_tokens, lead * trace.block_tokens)
    return out


def _chains(keys: Sequence[Sequence[int]]) -> list[int]:
    """The chain of each call of one session (:func:`working_set_tokens`), given each call's
    :func:`_chain_keys`: 0, 1, ... in order of each chain's first call."""
    chain: list[int] = []
    latest: list[int] = []          # chain -> index of its latest call so far
    for i, ks in enumerate(keys):
        best, lead = -1, 0
        for h, j in enumerate(latest):
            n = 0
            for x, y in zip(keys[j], ks, strict=False):
                if x != y:
                    break
                n += 1
            if n > lead:
                best, lead = h, n
        if best >= 0 and 2 * lead >= len(keys[latest[best]]):
            latest[best] = i
        else:
            best = len(latest)
            latest.append(i)
        chain.append(best)
    return chain


def split_chains(trace: Trace) -> Trace:
    """The trace with each session's chains (:func:`working_set_tokens`) as sessions of their own:
    session ``<session>/<k>`` for its k-th chain (in order of first call), its calls renumbered
    from turn 0 in their order. A session of agents each continuing a prompt of its own (a fleet
    run's roles) becomes one session per agent, each one agent's trajectory as the source's
    replayed sessions were; a conversation stays one session (``<session>/0``)."""
    calls: list[Call] = []
    for sid, cs in trace.sessions().items():
        chain = _chains([_chain_keys(c.blocks) for c in cs])
        turns: dict[int, int] = {}
        for c, h in zip(cs, chain, strict=True):
            calls.append(dataclasses.replace(c, session=f"{sid}/{h}", turn=turns.get(h, 0)))
            turns[h] = turns.get(h, 0) + 1
    return Trace(trace.block_tokens, calls, dict(trace.source), dict(trace.contents))


def working_set_tokens(sessions: Sequence[Sequence[Call]], block_tokens: int) -> np.ndarray:
    """Per call (sessions in the given order, each in turn order), the tokens of its session's
    *working set* as the call is sent: the call's prompt tokens and the blocks (x
    ``block_tokens``) of the latest prompt of each of the session's other chains that a later
    call continues, those the call's prompt holds counted once. It is what a cache must keep of
    the session, at that call, to serve every later call from where its chain stopped.

    A *chain* is a run of calls each of which continues the one before: a call continues the
    chain whose latest prompt shares the most leading blocks with it, when those are at least half
    of that prompt's blocks, and then becomes that chain's latest prompt; otherwise it starts a
    chain of its own (so does every call of a trace without block ids). One conversation is one
    chain, and its working set at each call is that call's prompt: the mean is the mean prompt.
    A session of agents each with a prompt of its own (a fleet run's roles, ``context =
    "per-role"``) has a chain per agent, and its working set is several prompts at once: a
    replay that sized its store by the mean prompt would give such a session a fraction of the
    room the source's store gave one of its conversations.

        working set at c = prompt_tokens(c) + block_tokens x |U_h keys(latest prompt of h) - keys(c)|

    over the session's chains ``h`` other than c's that have a call after c.
    """
    out: list[float] = []
    for calls in sessions:
        keys = [_chain_keys(c.blocks) for c in calls]
        chain = _chains(keys)
        last = {h: i for i, h in enumerate(chain)}
        count: dict[int, int] = {}       # keys of the other chains' latest prompts -> how many
        held: dict[int, int] = {}        # chain -> the call whose keys it holds in ``count``
        for i, h in enumerate(chain):
            if h in held:
                for k in set(keys[held.pop(h)]):
                    count[k] -= 1
                    if not count[k]:
                        del count[k]
            own = set(keys[i])
            others = len(count) - sum(1 for k in own if k in count)
            out.append(float(calls[i].prompt_tokens + others * block_tokens))
            if last[h] != i:
                held[h] = i
                for k in own:
                    count[k] = count.get(k, 0) + 1
    return np.array(out, dtype=float)


def trace_stats(trace: Trace) -> TraceStats:
    sess = trace.sessions()
    pt = np.array([c.prompt_tokens for c in trace.calls], dtype=float)
    ot = np.array([c.output_tokens for c in trace.calls], dtype=float)
    groups = {label: 0 for _, _, label in GROUPS}
    for c in trace.calls:
        groups[length_group(c.prompt_tokens)] += 1
    growth, gaps = [], []
    for cs in sess.values():
        for a, b in itertools.pairwise(cs):
            growth.append(b.prompt_tokens - a.prompt_tokens)
            if a.t is not None and b.t is not None:
                gaps.append(b.t - a.t)
    g, gp = np.array(growth, dtype=float), np.array(gaps, dtype=float)
    ts = np.sort(np.array([c.t for c in trace.calls if c.t is not None], dtype=float))
    turns = np.array([len(cs) for cs in sess.values()], dtype=float)
    new = new_prompt_tokens(trace)
    ws = working_set_tokens(list(sess.values()), trace.block_tokens)
    return TraceStats(
        sessions=len(sess), calls=len(trace.calls), turns_p50=_q(turns, 50),
        turns_max=int(turns.max()) if len(turns) else 0,
        prompt_tokens_p50=_q(pt, 50), prompt_tokens_p99=_q(pt, 99),
        prompt_tokens_mean=float(pt.mean()) if len(pt) else None,
        output_tokens_mean=float(ot.mean()) if len(ot) else None, groups=groups,
        growth_per_turn_p50=_q(g, 50), growth_per_turn_mean=float(g.mean()) if len(g) else None,
        gap_p50_s=_q(gp, 50), gap_p90_s=_q(gp, 90), gap_p99_s=_q(gp, 99),
        interarrival_mean_s=float(np.diff(ts).mean()) if len(ts) > 1 else None,
        duration_s=float(ts[-1] - ts[0]) if len(ts) > 1 else None,
        block_tokens=trace.block_tokens,
        new_tokens_mean=float(new.mean()) if len(new) else None,
        new_share=float(new.sum()) / float(pt.sum()) if pt.sum() > 0 else None,
        working_set_mean=float(ws.mean()) if len(ws) else None)


def format_stats(s: TraceStats) -> str:
    def f(v: Any, nd: int = 0) -> str:
        return "n/a" if v is None else (f"{v:,.{nd}f}" if isinstance(v, float) else f"{v:,}")
    lines = [f"sessions {f(s.sessions)}, calls {f(s.calls)} (turns per session p50 "
             f"{f(s.turns_p50)}, max {f(s.turns_max)}); {s.block_tokens} tokens per block",
             f"prompt tokens: p50 {f(s.prompt_tokens_p50)}, p99 {f(s.prompt_tokens_p99)}, mean "
             f"{f(s.prompt_tokens_mean)}; output tokens mean {f(s.output_tokens_mean)}",
             "prompt-length groups: " + ", ".join(f"{k} {v:,}" for k, v in s.groups.items()),
             f"context growth per turn: p50 {f(s.growth_per_turn_p50)}, mean "
             f"{f(s.growth_per_turn_mean)} tokens",
             f"gap between a session's turns: p50 {f(s.gap_p50_s, 2)} s, p90 {f(s.gap_p90_s, 2)}"
             f" s, p99 {f(s.gap_p99_s, 2)} s; mean inter-arrival {f(s.interarrival_mean_s, 3)} s"
             f" over {f(s.duration_s, 1)} s",
             f"new prompt tokens (past the longest prefix an earlier call sent): mean "
             f"{f(s.new_tokens_mean)} per call, "
             + ("n/a" if s.new_share is None else f"{100 * s.new_share:.1f}%")
             + " of prompt tokens",
             f"working set per session (a call's prompt and each other chain a later call "
             f"continues): mean "
             f"{f(s.working_set_mean)} tokens"
             + ("" if not s.working_set_mean or not s.prompt_tokens_mean else
                f", {s.working_set_mean / s.prompt_tokens_mean:.2f} x the mean prompt")]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# CLI


def _fail(msg: str) -> int:
    print(f"adev trace: {msg}", file=sys.stderr)
    return 2


def _write(trace: Trace, out: str) -> int:
    p = Path(out)
    if p.exists():
        return _fail(f"--out {p}: file exists; choose another name (nothing was overwritten)")
    write_trace(trace, p)
    print(f"wrote {p}: {len(trace.calls):,} calls, {len(trace.sessions()):,} sessions")
    return 0


def _cmd_import(args: argparse.Namespace) -> int:
    try:
        trace = IMPORTERS[args.kind](args.input)
    except TraceError as e:
        return _fail(str(e))
    return _write(trace, args.out)


def _cmd_export(args: argparse.Namespace) -> int:
    try:
        trace = import_adev_run(args.run)
    except TraceError as e:
        return _fail(str(e))
    return _write(trace, args.out)


def _cmd_synth(args: argparse.Namespace) -> int:
    from .synth import SynthParams, synth_trace
    try:
        params = SynthParams(**{k: v for k, v in (("sessions", args.sessions),
                                                  ("calls", args.calls), ("seed", args.seed))
                                if v is not None})
        trace = synth_trace(params)
    except ValueError as e:
        name, _, why = str(e).partition(":")
        return _fail(f"synth: --{name.replace('_', '-')}:{why}")
    rc = _write(trace, args.out)
    if rc == 0:
        print(format_stats(trace_stats(trace)))
    return rc


def _cmd_stats(args: argparse.Namespace) -> int:
    try:
        s = trace_stats(read_trace(args.trace))
    except TraceError as e:
        return _fail(str(e))
    print(json.dumps(asdict(s), indent=2) if args.json else format_stats(s))
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("trace", help="import, export and describe replay traces")
    sub = p.add_subparsers(dest="trace_cmd", metavar="CMD", required=True)
    i = sub.add_parser("import", help="convert a Mooncake / OpenAI-message / ShareGPT trace")
    i.add_argument("kind", choices=sorted(IMPORTERS))
    i.add_argument("input")
    i.add_argument("--out", required=True, help="the adev trace file to write (JSONL)")
    i.set_defaults(func=_cmd_import)
    e = sub.add_parser("export", help="an adev run (calls + reuse ledger) as a trace")
    e.add_argument("run")
    e.add_argument("--out", required=True)
    e.set_defaults(func=_cmd_export)
    y = sub.add_parser("synth", help="a trace shaped after the source's replay workload")
    y.add_argument("--out", required=True)
    y.add_argument("--seed", type=int, default=None, help="generator seed (default 0)")
    y.add_argument("--sessions", type=int, default=None, help="sessions (default 256)")
    y.add_argument("--calls", type=int, default=None, help="calls (default 7,903)")
    y.set_defaults(func=_cmd_synth)
    s = sub.add_parser("stats", help="sessions, calls, prompt lengths, growth and gaps")
    s.add_argument("trace")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_cmd_stats)
