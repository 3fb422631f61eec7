"""A synthetic agent trace shaped after the source's replay workload (``adev trace synth``).

The source's replay study ran 256 complete coding-agent sessions with 7,903 LLM calls from the
``codex_swebenchpro_traces`` corpus, whose prompts fall into four length groups: 1,116 calls at
32K tokens or less, 3,061 at 32-64K, 2,779 at 64-96K and 947 above 96K (K = 1024). That corpus
cannot be fetched everywhere, so :func:`synth_trace` builds a trace with the same *inputs*: the
same number of sessions and calls and the same prompt-length groups, in sessions whose context
only grows. Nothing in it is fitted to the source's results.

How a trace is built (every draw from one ``numpy`` generator seeded with ``seed``):

1. **Turns per session.** ``n_s`` from a log-normal with mean ``calls / sessions`` and shape
   ``turns_sigma``, at least ``min_turns``; then single turns are added to or taken from
   randomly chosen sessions until the total is exactly ``calls``.
2. **Raw growth.** Session ``s`` grows at a rate ``r_s`` (log-normal, shape ``rate_sigma``):
   ``x[s, 0] = 0`` and ``x[s, k] = x[s, k-1] + r_s * E`` with ``E`` exponential of mean 1, so
   each session's raw context strictly increases and fast sessions reach far.
3. **Lengths by rank.** All calls' raw values are ranked together, and the call of rank ``i``
   gets the ``i``-th smallest of the target lengths: ``count_g`` evenly spaced lengths in each
   group's range ``(lo_g, hi_g]`` (``count_g`` the source's group shares times ``calls``, whole
   numbers by largest remainder; the first group starts at ``first_prompt``, the last ends at
   ``max_prompt``). The map is increasing, so every session's prompts still grow, and the trace
   has exactly the target number of calls in each group.
4. **Content.** A session's prompt is its first ``ceil(prompt / block_tokens)`` blocks: the
   first ``shared_tokens`` are block ids every session shares (the agent's system prompt and
   tool definitions), the rest ids of the session alone. Call ``k + 1``'s prompt therefore
   starts with call ``k``'s whole prompt, followed by its recorded output and the tool results.
5. **Outputs.** Each call's recorded output length is log-normal (median ``output_median``,
   shape ``output_sigma``), at most the context the next call adds less one token (the rest of
   that growth is tool output; a session's last call: at most ``context`` less its prompt) and
   at least 1.

Calls have no timestamps (neither had the source's): the short-gap schedule supplies the
intervals. The parameters and which of them come from the source are in docs/replay.md.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .format import Call, Trace

GROUP_EDGES = (32768, 65536, 98304)
"""Upper edges (tokens) of the first three prompt-length groups; the fourth ends at max_prompt."""
SOURCE_GROUP_CALLS = (1116, 3061, 2779, 947)
"""The source's calls per prompt-length group (<=32K, 32-64K, 64-96K, >96K)."""
SESSION_ID_SHIFT = 20  # a session's own block ids: (session + 1) << 20 | block index


@dataclass(frozen=True)
class SynthParams:
    """Parameters of :func:`synth_trace` (defaults: the source's counts, see docs/replay.md)."""

    sessions: int = 256                 # the source
    calls: int = 7903                   # the source
    group_calls: tuple[int, int, int, int] = SOURCE_GROUP_CALLS  # the source (shares)
    first_prompt: int = 8192            # assumed: system prompt, tools and task of a first call
    max_prompt: int = 126976            # assumed: the context less 4,096 tokens for output
    context: int = 131072               # assumed: the served context (prompt + output)
    shared_tokens: int = 4096           # assumed: system prompt + tool definitions
    block_tokens: int = 512
    turns_sigma: float = 0.6            # assumed
    min_turns: int = 2
    rate_sigma: float = 0.6             # assumed
    output_median: int = 160            # assumed
    output_sigma: float = 1.0           # assumed
    seed: int = 0

    def check(self) -> None:
        """Raise ``ValueError`` naming the first parameter out of range."""
        rules = [
            ("sessions", self.sessions >= 1, ">= 1"),
            ("calls", self.calls >= self.sessions * self.min_turns,
             f">= sessions x min_turns = {self.sessions * self.min_turns}"),
            ("group_calls", len(self.group_calls) == 4 and all(g >= 0 for g in self.group_calls)
             and sum(self.group_calls) > 0, "four non-negative counts, not all zero"),
            ("min_turns", self.min_turns >= 1, ">= 1"),
            ("first_prompt", self.shared_tokens < self.first_prompt < GROUP_EDGES[0],
             f"between shared_tokens ({self.shared_tokens}) and {GROUP_EDGES[0]}"),
            ("max_prompt", GROUP_EDGES[-1] < self.max_prompt < self.context,
             f"between {GROUP_EDGES[-1]} and context ({self.context})"),
            ("shared_tokens", self.shared_tokens >= 0, ">= 0"),
            ("block_tokens", self.block_tokens >= 1, ">= 1"),
            ("output_median", self.output_median >= 1, ">= 1"),
        ]
        for name, ok, allowed in rules:
            if not ok:
                raise ValueError(f"{name}: {getattr(self, name)!r} is not allowed; "
                                 f"allowed values: {allowed}")


def _largest_remainder(shares: np.ndarray, total: int) -> np.ndarray:
    raw = shares / shares.sum() * total
    out = np.floor(raw).astype(int)
    for i in np.argsort(-(raw - out), kind="stable")[: total - out.sum()]:
        out[i] += 1
    return out


def target_lengths(p: SynthParams) -> np.ndarray:
    """The sorted prompt lengths of the trace: per group, ``count_g`` lengths evenly spaced in
    ``(lo_g, hi_g]`` (``lo + (hi - lo) * (i + 1) / count``, i = 0..count-1)."""
    counts = _largest_remainder(np.asarray(p.group_calls, dtype=float), p.calls)
    bounds = (p.first_prompt, *GROUP_EDGES, p.max_prompt)
    parts = [lo + (hi - lo) * (np.arange(c) + 1) / c
             for lo, hi, c in zip(bounds[:-1], bounds[1:], counts, strict=True) if c]
    return np.floor(np.concatenate(parts)).astype(np.int64)


def _turns(p: SynthParams, rng: np.random.Generator) -> np.ndarray:
    mean = p.calls / p.sessions
    mu = np.log(mean) - p.turns_sigma ** 2 / 2   # log-normal with this mean
    n = np.maximum(p.min_turns, np.rint(rng.lognormal(mu, p.turns_sigma, p.sessions))).astype(int)
    while (d := p.calls - int(n.sum())) != 0:
        s = int(rng.integers(p.sessions))
        if d > 0:
            n[s] += 1
        elif n[s] > p.min_turns:
            n[s] -= 1
    return n


def synth_trace(p: SynthParams | None = None) -> Trace:
    """A trace built as the module docstring says."""
    p = p or SynthParams()
    p.check()
    rng = np.random.default_rng(p.seed)
    turns = _turns(p, rng)
    rates = rng.lognormal(0.0, p.rate_sigma, p.sessions)
    raw = [np.concatenate([[0.0], np.cumsum(r * rng.exponential(1.0, n - 1))])
           for r, n in zip(rates, turns, strict=True)]
    flat = np.concatenate(raw)
    lengths = np.empty(len(flat), dtype=np.int64)
    # a stable sort: equal raw values (every first call's 0) rank in trace order
    lengths[np.argsort(flat, kind="stable")] = target_lengths(p)
    bt, n_shared = p.block_tokens, p.shared_tokens // p.block_tokens
    calls: list[Call] = []
    at = 0
    for s, n in enumerate(turns):
        prompts = lengths[at:at + n].copy()
        at += n
        for k in range(1, n):  # equal lengths after rounding: keep the growth strict
            prompts[k] = max(prompts[k], prompts[k - 1] + 1)
        outs = np.maximum(1, np.rint(rng.lognormal(np.log(p.output_median), p.output_sigma, n)))
        room = np.append(np.diff(prompts) - 1, p.context - prompts[-1])
        outs = np.clip(outs, 1, np.maximum(1, room)).astype(int)
        own = (s + 1) << SESSION_ID_SHIFT
        for k in range(n):
            nb = -(-int(prompts[k]) // bt)
            blocks = list(range(min(nb, n_shared))) + [own | j for j in range(n_shared, nb)]
            calls.append(Call(session=f"s{s:04d}", turn=k, prompt_tokens=int(prompts[k]),
                              output_tokens=int(outs[k]), blocks=blocks))
    source = {"kind": "synth", "shaped_after": "the source's replay workload "
              "(codex_swebenchpro_traces: sessions, calls, prompt-length groups)",
              **{k: list(v) if isinstance(v, tuple) else v for k, v in asdict(p).items()}}
    return Trace(block_tokens=bt, calls=calls, source=source)
