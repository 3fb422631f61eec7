"""The emulated endpoint's per-request extension payload: the ``"adev"`` object of a response.

Written by the server (:mod:`adev.emulator.server`), stored by the client as a call record's
``server`` field, and read back by the analysis (:mod:`adev.analysis.run`) from this one
definition. Every completion carries it: the non-streamed body, or the stream's final chunk
(with ``usage`` when requested, else a last ``choices: []`` chunk). Times are *model seconds*
(wall seconds x ``time_scale``) unless named ``*_mono`` (the server's ``time.monotonic()``).

msgspec Structs (``gc=False``: they hold no containers that could form cycles): building and
encoding one costs less than the hand-made dict it replaces did, where a slotted dataclass cost
about twice as much (``bench/bench_endpoint_cpu.py`` prints the figures).
:func:`adev.emulator.http.dumps` splices their encoding into orjson's output.
"""
from __future__ import annotations

from types import UnionType
from typing import Literal, Union, get_args, get_origin

import msgspec

from adev.config import Configuration, KvRole

Transfer = Literal["none", "produce", "consume"]


class TokenSplit(msgspec.Struct, gc=False):
    """Where the prompt's tokens came from; the fields sum to the prompt tokens."""

    gpu: int
    """Hits in the endpoint's GPU prefix cache (whole blocks, at most prompt - 1)."""
    store_ram: int
    """Loaded from the store's RAM tier."""
    store_disk: int
    """Loaded from the store's disk tier (every store hit in ``disk-only``)."""
    kv_transfer: int
    """Received from a prefill replica over the prefill-to-decode link (consumer requests)."""
    computed: int
    """Computed by this endpoint's prefill."""


class EndpointExtension(msgspec.Struct, gc=False):
    """One request as the emulated endpoint served it."""

    request_id: str
    """The response's ``id``."""
    t_arrival_mono: float
    """When the request reached the server (``time.monotonic()``); the model clock counts from here."""
    t_first_token_mono: float | None
    """When the first token was handed to the response (None: no token)."""
    t_end_mono: float
    """When the last token was handed over."""
    t_first_byte_sent_mono: float | None
    """Streams: when the response's first bytes (headers, then the first event) were handed to the
    connection; None when not streamed."""
    t_first_token_sent_mono: float | None
    """Streams: when the first token event was handed to the connection; None when not streamed."""
    queue_s: float
    """Arrival to first admission."""
    lookup_s: float
    """Modelled store lookup (the RAM tier's lookup latency; the disk tier's in ``disk-only``)."""
    load_s: float
    """Modelled store load: per tier with hits, ``lookup_latency_s + blocks x bytes / read rate``."""
    read_path_s: float
    """``lookup_s + load_s``."""
    read_path_host_s: float | None
    """The real read path on this host (``batch_is_exist`` through the end of the load), wall
    seconds x ``time_scale``; None without a store read."""
    transfer_s: float
    """Modelled prefill-to-decode KV transfer (consumer requests; 0 otherwise)."""
    prefill_s: float
    """From the end of the read path (or transfer) to the end of prefill."""
    ttft_s: float | None
    """Arrival to first token on the engine's model clock (None: no token)."""
    tokens: TokenSplit
    """Where the prompt's tokens came from."""
    store_keys_looked_up: int
    """Store keys looked up (blocks beyond the local hit)."""
    store_hit_blocks: int
    """Leading store hits found by the lookup."""
    put_blocks: int
    """Blocks saved to the store so far (the save is asynchronous: may still be 0 here)."""
    put_refused_blocks: int
    """Blocks the store refused so far."""
    store_errors: int
    """Store operations of this request that failed."""
    preemptions: int
    """Times the request was preempted."""
    configuration: Configuration
    """The stack's cache configuration."""
    time_scale: float
    """The stack's time scale S (model seconds per wall second)."""
    kv_role: KvRole
    """The endpoint's part in disaggregated prefill."""
    transfer: Transfer
    """What the request asked of this endpoint through ``kv_transfer_params``."""
    disk_wait_s: float = 0.0
    """The part of ``load_s`` its disk read waited for the disk device, which the stack's
    endpoints share (:mod:`adev.emulator.disk_device`); 0 without a disk read."""
    load_wait_s: float = 0.0
    """The part of ``load_s`` the load waited for one of the endpoint's load threads (stack
    ``store.load_threads``); 0 without a limit."""


def _numeric(tp: object) -> bool:
    args = get_args(tp) if get_origin(tp) in (Union, UnionType) else (tp,)
    return all(a in (int, float, type(None)) for a in args)


def scalar_fields() -> tuple[str, ...]:
    """Names of the numeric fields of :class:`EndpointExtension` (what analysis tabulates)."""
    return tuple(f.name for f in msgspec.structs.fields(EndpointExtension) if _numeric(f.type))


def token_fields() -> tuple[str, ...]:
    """Names of the fields of :class:`TokenSplit`."""
    return tuple(f.name for f in msgspec.structs.fields(TokenSplit))


def decode(raw: bytes | str) -> EndpointExtension:
    """An extension object from its JSON (validated: a wrong type or value raises
    ``msgspec.ValidationError`` naming the field)."""
    return msgspec.json.decode(raw, type=EndpointExtension)
