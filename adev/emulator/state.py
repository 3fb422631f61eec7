"""The engine's records: its configuration, tier read costs, requests, plans and step outputs.

Shared by the scheduler (:mod:`adev.emulator.scheduler`), its asyncio driver
(:mod:`adev.emulator.engine`) and the server, which reads a finished :class:`Request`'s timings
and token split into the response's ``adev`` field.
"""
from __future__ import annotations

import asyncio
import bisect
from dataclasses import dataclass, field

from adev.config import SERIAL_STAGINGS, PrefillTime

WAITING, LOADING, PREFILL, DECODE, DONE = "waiting", "loading", "prefill", "decode", "done"


@dataclass
class TierCost:
    """Modelled read cost of one tier: ``lookup_latency_s + blocks * bytes_per_block / read_bps``."""
    name: str
    lookup_latency_s: float
    read_bytes_per_s: float

    def load_s(self, blocks: int, bytes_per_block: int) -> float:
        return 0.0 if blocks <= 0 else self.lookup_latency_s + self.transfer_s(blocks, bytes_per_block)

    def transfer_s(self, blocks: int, bytes_per_block: int) -> float:
        """The tier's per-byte part alone: ``blocks * bytes_per_block / read_bps``."""
        return max(0, blocks) * bytes_per_block / self.read_bytes_per_s


def device_read_rate(staged_bytes_per_s: float, hop_bytes_per_s: float, staging: str) -> float:
    """The disk device's own read rate, given a lone staged load's measured rate and the staging
    hop's rate. ``overlap``: the hop runs under the disk read and is the faster, so the device's
    rate is the measured one. ``serial`` (and ``shared``, serial through one staging buffer):
    the hop follows the disk read, so

        1 / staged = 1 / device + 1 / hop   =>   device = 1 / (1 / staged - 1 / hop)

    (local RAID0 measured at 5.45 GB/s behind a 20 GB/s hop: 7.49 GB/s)."""
    if staging not in SERIAL_STAGINGS:
        return staged_bytes_per_s
    if staged_bytes_per_s >= hop_bytes_per_s:
        raise ValueError(f"staging {staging!r}: a staged load's rate ({staged_bytes_per_s:.4g} B/s) "
                         f"must be below the staging hop's ({hop_bytes_per_s:.4g} B/s)")
    return 1.0 / (1.0 / staged_bytes_per_s - 1.0 / hop_bytes_per_s)


@dataclass
class EngineConfig:
    block_size: int
    capacity_blocks: int
    prefill_tokens_per_s: float
    decode_step_base_s: float
    decode_step_per_seq_s: float
    decode_step_per_ktoken_s: float
    max_num_seqs: int
    max_num_batched_tokens: int
    time_scale: float
    bytes_per_block: int
    prefix_caching: bool = True
    ram_tier: TierCost | None = None
    disk_tier: TierCost | None = None
    disk_only: bool = False          # every store hit is charged (and reported) at the disk tier
    load_threads: int = 0            # store loads served at once (0: no limit; Engine._queue_load)
    staging_serial: bool = False     # a staged load's hop follows its disk read (Scheduler.disk_transfer_s)
    staging_shared: bool = False     # ... and holds the shared disk device through it (one staging buffer)
    pressure_skip: bool = True       # withhold a refused request's saves under pressure (Engine._save)
    # admit a waiting request only while the step has token budget left after the running
    # requests' decode tokens and ready prefill chunks, as vLLM v1's scheduler does
    # (Scheduler.admit); False: as soon as its blocks fit
    admit_within_budget: bool = True
    # add a waiting request's repeated lookups to vllm:prefix_cache_* as vLLM before 0.26 did
    # (adev.vllm_release; Scheduler.commit); False: each request counted once, at admission
    count_waiting_lookups: bool = False
    # longest macro step, wall seconds: how far ahead the driver plans decode steps (it still
    # delivers each step's tokens at the step's own time, see stream_interval)
    horizon_wall_s: float = 0.3
    # tokens per stream event, as vLLM's --stream-interval: 1 = every decode step's token leaves
    # at that step's modelled end; N = a request's tokens leave once N are pending (first and
    # last token at once); 0 = once per macro step (cheapest: one wake-up per plan)
    stream_interval: int = 1
    # prefill-to-decode KV link (adev.emulator.disagg): a request marked remote_prefill waits
    # lookup_latency_s + (prompt - local hit) tokens * bytes per token / read_bytes_per_s for
    # its prompt's KV instead of reading the store and prefilling; None = such requests prefill.
    kv_link: TierCost | None = None
    # prefill time by position (adev.config.PrefillTime); None = a flat prefill_tokens_per_s
    prefill: PrefillTime | None = None

    @property
    def prefill_time(self) -> PrefillTime:
        return self.prefill or PrefillTime(1.0 / self.prefill_tokens_per_s)


@dataclass
class Request:
    """One request in the engine. Its stream is ``queue``: ``(n, t)`` for n more tokens, the last
    one generated at model time t, then ``(0, None)`` once it is finished (``finish_reason``)."""
    rid: str
    prompt: list[int]
    out_ids: list[int]
    finish_reason: str
    hashes: list[int] = field(default_factory=list)
    remote_prefill: bool = False       # the prompt's KV comes from a prefill replica (disagg)
    writer_holds: bool = False         # a handler writes its answer: the engine holds the clock
    #                                    at its first tokens and its end until it has (Engine.written)
    hold_slot: int | None = None       # the client's request slot: those holds go there, and the
    #                                    client releases them as it reads (adev.clock.RequestHolds)
    slot_hold: str | None = None       # what the engine last held the request slot at ("out", "end")
    state: str = WAITING
    t_arrival: float = 0.0
    arrival_mono: float = 0.0
    # progress
    n_computed: int = 0
    n_gen: int = 0
    n_sent: int = 0                 # tokens handed to the stream (driver)
    held: list[int] = field(default_factory=list)
    n_anon: int = 0
    ready_time: float = 0.0
    admitted_once: bool = False
    aborted: bool = False
    # accounting (first admission)
    gpu_hit_tokens: int = 0
    ram_blocks: int = 0
    disk_blocks: int = 0
    store_keys_looked_up: int = 0
    store_hit_blocks: int = 0
    put_blocks: int = 0
    put_refused_blocks: int = 0
    save_sched_blocks: int = 0         # full prompt blocks offered to the store so far (steps)
    saved_blocks: int = 0              # full prompt blocks up to the last successful save
    store_errors: int = 0
    preemptions: int = 0
    lookup_s: float = 0.0
    load_s: float = 0.0
    disk_wait_s: float = 0.0           # part of load_s spent queued for the shared disk device
    load_wait_s: float = 0.0           # part of load_s spent waiting for a load thread
    kv_transfer_tokens: int = 0        # prompt tokens whose KV came over the prefill-decode link
    transfer_s: float = 0.0            # modelled time of that transfer
    read_host_s: float | None = None   # the real read path on this host, wall x time scale
    t_admit: float | None = None
    t_ready: float | None = None
    t_prefill_done: float | None = None
    t_first: float | None = None
    t_last_token: float | None = None
    t_end: float | None = None
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)

    @property
    def n_out(self) -> int:
        return len(self.out_ids)

    def seq(self) -> list[int]:
        return self.prompt + self.out_ids[:self.n_gen] if self.n_gen else self.prompt

    def tokens_split(self, bs: int) -> dict[str, int]:
        """Prompt tokens by where their KV came from;
        ``computed = prompt - gpu - ram - disk - kv_transfer``."""
        p = len(self.prompt)
        ram, disk = self.ram_blocks * bs, self.disk_blocks * bs
        kv = self.kv_transfer_tokens
        return {"gpu": self.gpu_hit_tokens, "store_ram": ram, "store_disk": disk, "kv_transfer": kv,
                "computed": p - self.gpu_hit_tokens - ram - disk - kv}


TIE_S = 1e-9
"""Model seconds within which an event counts as at a step boundary. A request's arrival is its
client's send stamp, a time the client read off the held clock: the end of the answer before it,
often the very boundary where the engine's next plan starts. That stamp makes a round trip
through wall seconds (model -> wall -> model, on two processes' own time origins), which moves
it by about 1e-11 model s, either way; without a tolerance, whether the request joins the step
that starts there or waits for the next one (a whole step later) would depend on that rounding,
so two runs of one seed would part there."""


@dataclass
class Plan:
    start: float
    ends: list[float]                    # end time of each step
    prefill: list[tuple[Request, int]]   # (request, tokens) for a single mixed step
    decode: list[Request]
    delivered: int = 0                   # leading steps whose tokens the driver already streamed

    @property
    def end(self) -> float:
        return self.ends[-1]

    def truncate(self, te: float) -> None:
        """End the plan with the step in progress at ``te`` (an event at a step's end, within
        :data:`TIE_S`, ends the plan with that step)."""
        j = bisect.bisect_left(self.ends, te - TIE_S)
        if j < len(self.ends) - 1:
            del self.ends[j + 1:]
            self.delivered = min(self.delivered, j + 1)


@dataclass
class StepOutput:
    """What one :meth:`Scheduler.step` did (request ids)."""
    start: float
    ends: list[float]                    # end of each decode step (one entry for a mixed step)
    prefill: dict[str, int]              # rid -> prompt tokens computed in this step
    decode: list[str]                    # rids in the decode batch
    tokens: dict[str, int] = field(default_factory=dict)     # rid -> tokens emitted
    admitted: list[str] = field(default_factory=list)
    loading: list[str] = field(default_factory=list)         # admitted into a store read
    preempted: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)

    @property
    def end(self) -> float:
        return self.ends[-1]

    @property
    def duration(self) -> float:
        return self.ends[-1] - self.start

    @property
    def idle(self) -> bool:
        return not self.prefill and not self.decode
