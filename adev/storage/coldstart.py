"""Cold recovery: the TTFT of re-activating a session whose KV has left the GPU, read back from a
store tier versus recomputed (the vendor studies' long-context cold-recovery scenario).

Per configuration and context length L, ``parallel`` sessions (distinct prompts of about L
tokens) each run:

1. **warm**: one call (``max_tokens=1``) computes the context; with a store, its blocks are put
   (the step waits until the endpoint's put counters account for every full block);
2. **evict**: ``POST /reset_prefix_cache`` (vLLM's route, also served by the emulator) drops the
   GPU prefix cache; the store keeps its copy;
3. **re-activate**: the same prompt again; its TTFT is the cold-recovery time.

The re-activations of the ``parallel`` sessions are sent together. Configurations on the embedded
stack: ``gpu-only`` (nothing outside the GPU: recompute), ``store-ram`` (read back from the RAM
tier), ``disk-only`` (read back from the disk tier: every object is written through to disk and
every hit is charged at the disk tier's profile). Per re-activation, from the emulator's
extension field (:class:`adev.emulator.schema.EndpointExtension`):

- ``ttft_s``: the endpoint's TTFT (model seconds); the client-side TTFT
  (``t_first_content - t_sent``, model seconds) is kept beside it;
- tokens by source (gpu / store_ram / store_disk / computed): the eviction worked when gpu is 0;
- read bandwidth = store tokens x bytes per token / ``load_s`` (model-scale bytes per model
  second: what the tier profile lets through, lookup included);
- host read bandwidth = store blocks x payload bytes / (``read_path_host_s`` / time scale):
  the real Mooncake reads on this host, in real bytes per wall second;
- reads in flight: read paths of this configuration's re-activations overlapping the start of
  this one (itself included), from the endpoint's stamps (``t_arrival_mono`` + queue, read path).

speed-up = recompute TTFT / read-back TTFT at the same L. Against a real vLLM
(``mode = "external"``) only the stack's own configuration is measured; the extension fields are
absent there, so the tier split, bandwidths and reads in flight are null with the reason.
"""
from __future__ import annotations

import asyncio
import random
import string
import tempfile
import time
import urllib.request
import zlib
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..config import STORELESS, PrefillTime, StackConfig, TierProfile, load_tier_profile

EMBEDDED_CONFIGS = ("gpu-only", "store-ram", "disk-only")
TIER_OF = {"recompute": "recompute", "gpu-only": "recompute", "store-ram": "ram",
           "store-ram+disk": "ram+disk", "disk-only": "disk"}
PUT_WAIT_S = 30.0
MAX_TOKENS = 4
WARMUP_TOKENS = 256


@dataclass
class Reactivation:
    configuration: str
    tier: str
    context_tokens: int
    session: int
    ttft_s: float | None                 # the endpoint's (model s); client-side when absent
    ttft_client_s: float | None          # t_first_content - t_sent (model s)
    tokens: dict[str, int] | None        # gpu / store_ram / store_disk / computed
    lookup_s: float | None
    load_s: float | None
    read_bw_bytes_per_s: float | None
    host_read_bw_bytes_per_s: float | None
    reads_in_flight: int | None
    evicted: bool | None                 # GPU hit tokens were 0 (None: cannot tell)
    note: str | None = None
    read_start_mono: float | None = field(default=None, repr=False)
    read_end_mono: float | None = field(default=None, repr=False)


def make_messages(tokens: int, seed: int) -> list[dict[str, str]]:
    """A user turn of about ``tokens`` tokens: random 5-letter words (one token each for the
    emulator's tokenizer), distinct per seed so sessions share no prefix."""
    rng = random.Random(seed)
    n = max(1, tokens - 8)  # the chat template adds a few tokens
    words = ["".join(rng.choices(string.ascii_lowercase, k=5)) for _ in range(n)]
    return [{"role": "user", "content": " ".join(words)}]


def _post(url: str, timeout: float = 10.0) -> int:
    req = urllib.request.Request(url, data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status


def _root(base_url: str) -> str:
    u = base_url.rstrip("/")
    return u[:-3] if u.endswith("/v1") else u


PUT_COUNTERS = ("adev_emulator_store_put_blocks_total",
                "adev_emulator_store_put_refused_blocks_total",
                "adev_emulator_store_put_skipped_blocks_total")
FILE_OBJECTS = "file_cache_nums_"
"""The Mooncake master's count of objects with a disk replica."""


def _counters(url: str, names: tuple[str, ...]) -> list[float]:
    from ..client.scrape import scrape_sync, total
    s = scrape_sync(url)
    return [total(s, n) or 0.0 for n in names]


async def _wait(url: str, names: tuple[str, ...], before: float, expect: float, what: str) -> float:
    """Poll ``url`` until the sum of ``names`` has grown by ``expect``; returns the growth."""
    t_end = time.monotonic() + PUT_WAIT_S
    got = 0.0
    while time.monotonic() < t_end:
        got = sum(await asyncio.to_thread(_counters, url, names)) - before
        if got >= expect:
            return got
        await asyncio.sleep(0.05)
    raise RuntimeError(f"{what}: {got:.0f} of {expect} blocks after {PUT_WAIT_S:.0f} s ({url})")


def _row(conf: str, L: int, i: int, res, time_scale: float, bpt: int,
         payload_bytes: int | None) -> Reactivation:
    rec = res.record
    srv = rec.server or {}
    client = (rec.t_first_content - rec.t_sent) if rec.t_first_content is not None else None
    toks = srv.get("tokens") if isinstance(srv.get("tokens"), dict) else None
    row = Reactivation(configuration=conf, tier=TIER_OF.get(conf, conf),
                       context_tokens=int(res.prompt_tokens or 0), session=i,
                       ttft_s=srv.get("ttft_s", client), ttft_client_s=client, tokens=toks,
                       lookup_s=srv.get("lookup_s"), load_s=srv.get("load_s"),
                       read_bw_bytes_per_s=None, host_read_bw_bytes_per_s=None,
                       reads_in_flight=None, evicted=None)
    if not srv:
        row.note = "no emulator extension field (real vLLM): tier split and bandwidth unmeasurable"
        return row
    store_tok = (toks or {}).get("store_ram", 0) + (toks or {}).get("store_disk", 0)
    row.evicted = (toks or {}).get("gpu", 0) == 0
    if store_tok and row.load_s:
        row.read_bw_bytes_per_s = store_tok * bpt / row.load_s
    host = srv.get("read_path_host_s")
    if store_tok and host and payload_bytes:
        real_bytes = srv.get("store_hit_blocks", 0) * payload_bytes
        row.host_read_bw_bytes_per_s = real_bytes / (host / time_scale)
    t0 = srv.get("t_arrival_mono")
    if t0 is not None:
        start = t0 + (srv.get("queue_s") or 0.0) / time_scale
        row.read_start_mono = start
        row.read_end_mono = start + (srv.get("read_path_s") or 0.0) / time_scale
    return row


async def measure(info, contexts: list[int], *, parallel: int = 1, endpoint: str | None = None,
                  seed: int = 0) -> list[Reactivation]:
    """Warm, evict and re-activate sessions on the running stack ``info`` (a
    :class:`adev.stack.StackInfo`); one :class:`Reactivation` per session and context."""
    from ..analysis.figures import in_flight
    from ..client.llm import Endpoint, LLMClient
    from ..clock import stack_run_clock
    cfg: StackConfig = info.config
    name = endpoint or next(iter(info.endpoints))
    base = info.endpoints[name]
    S = info.time_scale
    prof = info.profile
    bs = prof.block_size
    store = cfg.mode == "embedded" and cfg.configuration not in STORELESS
    disk = store and cfg.configuration == "disk-only" and bool(info.master_metrics_url)
    payload = max(1, prof.bytes_per_block // cfg.payload_scale) if cfg.mode == "embedded" else None
    chunk = cfg.store.chunk_blocks if cfg.mode == "embedded" else 1   # blocks per store object
    rows: list[Reactivation] = []
    client = LLMClient({name: Endpoint(name, base, model=info.models.get(name))},
                       clock=stack_run_clock(info), return_token_ids=False)
    async with client:
        await client.discover()
        for cycle, L in enumerate([WARMUP_TOKENS, *contexts]):
            msgs = [make_messages(L, zlib.crc32(f"{seed}:{cfg.configuration}:{L}:{i}".encode()))
                    for i in range(parallel)]
            mets = info.metrics_urls[name]
            before = sum(await asyncio.to_thread(_counters, mets, PUT_COUNTERS)) if store else 0.0
            put_before = (await asyncio.to_thread(_counters, mets, PUT_COUNTERS[:1]))[0] \
                if store else 0.0
            file_before = (await asyncio.to_thread(_counters, info.master_metrics_url,
                                                   (FILE_OBJECTS,)))[0] if disk else 0.0
            warm = await asyncio.gather(*(client.chat(name, m, max_tokens=MAX_TOKENS,
                                                      session_id=f"s{i}", call_id=f"warm-{L}-{i}")
                                          for i, m in enumerate(msgs)))
            if store:  # every block of a complete chunk saved (put, refused or present) ...
                expect = sum((r.prompt_tokens or 0) // bs // chunk * chunk for r in warm)
                await _wait(mets, PUT_COUNTERS, before, expect, "store puts")
            if disk:  # ... and, write-through to disk, on disk (the offload lags the put; the
                # master counts objects, of ``chunk`` blocks each)
                put = (await asyncio.to_thread(_counters, mets, PUT_COUNTERS[:1]))[0] - put_before
                await _wait(info.master_metrics_url, (FILE_OBJECTS,), file_before, put / chunk,
                            "disk offload")
            await asyncio.to_thread(_post, _root(base) + "/reset_prefix_cache")
            got = await asyncio.gather(*(client.chat(name, m, max_tokens=MAX_TOKENS,
                                                     session_id=f"s{i}",
                                                     call_id=f"cold-{L}-{i}")
                                         for i, m in enumerate(msgs)))
            batch = [_row(cfg.configuration, L, i, r, S, prof.bytes_per_token, payload)
                     for i, r in enumerate(got)]
            starts = np.array([b.read_start_mono or np.nan for b in batch], dtype=float)
            ends = np.array([b.read_end_mono or np.nan for b in batch], dtype=float)
            if np.isfinite(starts).any():
                n = in_flight(starts, ends + 1e-9, starts)
                for b, nb in zip(batch, n, strict=True):
                    ok = np.isfinite(b.read_start_mono or np.nan)
                    b.reads_in_flight = int(nb) if ok else None
            if cycle:  # the first cycle warms connections and the store client up; not reported
                rows += batch
    return rows


async def run_embedded(contexts: list[int], *, parallel: int = 1, time_scale: float = 2.0,
                       configurations: tuple[str, ...] = EMBEDDED_CONFIGS,
                       profile: str | None = None, ram_tier: str = "ram",
                       disk_tier: str = "local-raid0", ram_gb: float = 32.0,
                       payload_scale: int = 1024, seed: int = 0) -> list[Reactivation]:
    """Start a small embedded stack per configuration (one endpoint) and :func:`measure` it
    (``payload_scale`` 1024: 1.5 KiB of real bytes per block of the default profile)."""
    from ..stack import running_stack, small_config
    rows: list[Reactivation] = []
    for conf in configurations:
        with tempfile.TemporaryDirectory(prefix="adev-cold-") as sdir:
            over: dict[str, Any] = {"configuration": conf, "time_scale": time_scale,
                                    "endpoints": ["coder"], "payload_scale": payload_scale,
                                    "store": {"ram_gb": ram_gb, "ram_tier": ram_tier,
                                              "disk_tier": disk_tier, "lease_ttl_s": 5.0}}
            if profile:
                over["profile"] = profile
            cfg = small_config(sdir, **over)
            async with running_stack(cfg) as info:
                rows += await measure(info, contexts, parallel=parallel, seed=seed)
    return rows


# --------------------------------------------------------------------------------------------
# Summary


@dataclass
class Summary:
    context_tokens: int
    recompute_ttft_s: float | None
    tiers: dict[str, dict[str, float | None]]
    """tier -> ttft_s, speedup, ttft_client_s, speedup_client, read_bw_bytes_per_s,
    host_read_bw_bytes_per_s, reads_in_flight"""


def profile_speedup(L: int, tier: TierProfile, prefill: PrefillTime, block_size: int,
                    bytes_per_block: int) -> float:
    """What the tier profile predicts for L tokens, before the first decode step:
    ``P(L, 0) / (lookup + n * bytes_per_block / read_rate + P(L - n * block_size, n * block_size))``
    with ``P = prefill.chunk_s`` (tokens, tokens before them) and ``n = (L - 1) // block_size``
    blocks read back (the last token is always computed)."""
    n = max(0, L - 1) // block_size
    rec = prefill.chunk_s(L)
    back = tier.lookup_latency_s + n * bytes_per_block / tier.read_bytes_per_s \
        + prefill.chunk_s(L - n * block_size, n * block_size)
    return rec / back


def _med(v: list[float | None]) -> float | None:
    x = [a for a in v if a is not None]
    return float(np.median(x)) if x else None


def summarize(rows: list[Reactivation]) -> list[Summary]:
    """Per context length (median over sessions): recompute TTFT, each tier's TTFT and speed-up
    (recompute TTFT / tier TTFT; the endpoint's and the client's), bandwidths and the most reads
    in flight."""
    out = []
    for L in sorted({r.context_tokens for r in rows}):
        at = [r for r in rows if r.context_tokens == L]
        rec = _med([r.ttft_s for r in at if r.tier == "recompute"])
        rec_c = _med([r.ttft_client_s for r in at if r.tier == "recompute"])
        tiers: dict[str, dict[str, float | None]] = {}
        for t in sorted({r.tier for r in at if r.tier != "recompute"}):
            tr = [r for r in at if r.tier == t]
            ttft = _med([r.ttft_s for r in tr])
            ttft_c = _med([r.ttft_client_s for r in tr])
            fl = [r.reads_in_flight for r in tr if r.reads_in_flight is not None]
            tiers[t] = {"ttft_s": ttft,
                        "speedup": rec / ttft if rec and ttft else None,
                        "ttft_client_s": ttft_c,
                        "speedup_client": rec_c / ttft_c if rec_c and ttft_c else None,
                        "read_bw_bytes_per_s": _med([r.read_bw_bytes_per_s for r in tr]),
                        "host_read_bw_bytes_per_s": _med([r.host_read_bw_bytes_per_s for r in tr]),
                        "reads_in_flight": float(max(fl)) if fl else None}
        out.append(Summary(L, rec, tiers))
    return out


def tier_profiles(names: list[str]) -> list[TierProfile]:
    return [load_tier_profile(n) for n in names]


def to_json(rows: list[Reactivation]) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        d = asdict(r)
        d.pop("read_start_mono", None)
        d.pop("read_end_mono", None)
        out.append(d)
    return out
