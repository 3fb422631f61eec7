"""Typed, validated TOML configuration.

Every config file adev reads (stack, model profile, tier profile, fleet, campaign) is parsed into a
frozen dataclass by :func:`from_dict`, which rejects unknown keys, wrong types and values outside
the allowed set with a :class:`ConfigError` that names the field (``stack.configuration``) and the
allowed values. Domain dataclasses declare their constraints in field metadata:

    field(default=..., metadata={"min": 0, "max": 1, "help": "..."})

and ``typing.Literal[...]`` for enumerations.
"""
from __future__ import annotations

import dataclasses
import math
import os
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, get_args, get_origin, get_type_hints

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")

ROOT = Path(__file__).resolve().parent.parent
"""The project root (where ``stacks/``, ``fleets/``, ``roles/`` live)."""


class ConfigError(ValueError):
    """An invalid configuration value; the message names the field and what is allowed."""


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in get_args(tp))
    if origin in (list, tuple):
        args = get_args(tp)
        return f"list of {_type_name(args[0])}" if args else "list"
    if origin is dict:
        args = get_args(tp)
        return f"table of {_type_name(args[1])}" if args else "table"
    if dataclasses.is_dataclass(tp):
        return "table"
    return getattr(tp, "__name__", str(tp))


def _convert(tp: Any, value: Any, where: str) -> Any:
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin is Literal:
        allowed = get_args(tp)
        if value not in allowed:
            raise ConfigError(f"{where}: {value!r} is not allowed; allowed values: "
                              + ", ".join(repr(a) for a in allowed))
        return value
    if origin in (typing.Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _convert(a, value, where)
            except ConfigError as e:
                errors.append(str(e))
                if isinstance(value, dict) and dataclasses.is_dataclass(a):
                    raise  # a table meant for this dataclass: its own error names the key
        raise ConfigError(errors[0] if len(errors) == 1 else
                          f"{where}: expected {_type_name(tp)}, got {value!r}")
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}: expected {_type_name(tp)}, got {value!r}")
        (arg,) = get_args(tp)[:1] or (Any,)
        items = [_convert(arg, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected {_type_name(tp)}, got {value!r}")
        _, varg = get_args(tp) or (str, Any)
        return {k: _convert(varg, v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a table, got {value!r}")
        return from_dict(tp, value, where)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        if not math.isfinite(value):
            raise ConfigError(f"{where}: {value!r} is not allowed; expected a finite number")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    return value


def _check_bounds(f: dataclasses.Field, value: Any, where: str) -> None:
    if value is None or not isinstance(value, int | float) or isinstance(value, bool):
        return
    lo, hi = f.metadata.get("min"), f.metadata.get("max")
    if lo is not None and value < lo:
        raise ConfigError(f"{where}: {value!r} is below the minimum {lo}")
    if hi is not None and value > hi:
        raise ConfigError(f"{where}: {value!r} is above the maximum {hi}")
    if f.metadata.get("positive") and value <= 0:
        raise ConfigError(f"{where}: {value!r} must be greater than 0")


def from_dict(cls: type[T], data: dict[str, Any], where: str = "") -> T:
    """Build dataclass ``cls`` from ``data``, validating every field; ``where`` prefixes names."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where or cls.__name__}: expected a table, got {data!r}")
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        names = ", ".join(f"{where}.{k}" if where else k for k in unknown)
        raise ConfigError(f"unknown key(s) {names}; allowed keys: {', '.join(sorted(fields))}")
    kwargs = {}
    for name, f in fields.items():
        path = f"{where}.{name}" if where else name
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ConfigError(f"{path}: required key is missing")
            continue
        value = _convert(hints[name], data[name], path)
        _check_bounds(f, value, path)
        kwargs[name] = value
    obj = cls(**kwargs)
    check = getattr(obj, "validate", None)
    if check is not None:
        check(where or cls.__name__)
    return obj


def to_dict(obj: Any) -> Any:
    """Dataclass -> plain TOML/JSON-able dict (tuples become lists)."""
    return dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) and not isinstance(obj, type) else obj


def load_toml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {p}") from None
    except OSError as e:
        raise ConfigError(f"{p}: cannot read the config file: {e.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise ConfigError(f"{p}: line {line}: not UTF-8 text (byte 0x{raw[e.start]:02x}); a "
                          "config file is UTF-8 TOML") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: invalid TOML: {e}") from None


def load(cls: type[T], path: str | Path, section: str | None = None) -> T:
    """Load ``cls`` from a TOML file (optionally one top-level table of it)."""
    data = load_toml(path)
    if section is not None:
        data = data.get(section, {})
    try:
        return from_dict(cls, data, section or "")
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def resolve(name_or_path: str, folder: str | Path, suffix: str = ".toml") -> Path:
    """A profile given by name (``qwen3-coder-30b-a3b``) or by path."""
    p = Path(name_or_path)
    if p.suffix == suffix or p.exists():
        return p
    cand = ROOT / folder / f"{name_or_path}{suffix}"
    if cand.exists():
        return cand
    avail = sorted(x.stem for x in (ROOT / folder).glob(f"*{suffix}"))
    raise ConfigError(f"no profile {name_or_path!r} in {folder}/; available: {', '.join(avail)}")


# --------------------------------------------------------------------------------------------
# Model and tier profiles (docs/design.md §4)


@dataclass(frozen=True)
class PrefillTime:
    """Modelled prefill time of the prompt tokens at positions ``start .. start + n - 1``:

        t(n, start) = n * per_token_s + per_token_pos_s * (n * start + n * (n - 1) / 2)

    the weights' cost, the same for every token, plus attention's, which grows with the number
    of earlier tokens each one attends to (cached ones included). ``per_token_pos_s = 0``: a flat
    rate of ``1 / per_token_s`` tokens per second.
    """

    per_token_s: float
    per_token_pos_s: float = 0.0

    def chunk_s(self, n: int, start: int = 0) -> float:
        if n <= 0:
            return 0.0
        return n * self.per_token_s + self.per_token_pos_s * (n * start + n * (n - 1) / 2)


@dataclass(frozen=True)
class ModelProfile:
    """A served model as the emulator's timing model and the storage planner see it.

    bytes per token = 2 * num_layers * (num_kv_heads / tp) * head_dim * kv_dtype_bytes
    (K and V, per layer); bytes per block = bytes per token * block_size.

    Prefill time (:attr:`prefill_time`): a flat ``prefill_tokens_per_s`` when any of
    ``num_attention_heads``, ``active_params`` and ``prefill_reference_tokens`` is 0; else the
    FLOPs of a token at position p (p earlier tokens in its sequence),

        F(p) = 2 * active_params + 4 * num_layers * num_attention_heads * head_dim * p

    (the weights' multiply-adds, and per layer Q.K and the weighted sum of V over p tokens).
    Attention runs at ``attention_flops_per_s``; the weights at the rate at which a prompt of
    ``prefill_reference_tokens`` tokens, prefilled from position 0, takes
    ``prefill_reference_tokens / prefill_tokens_per_s`` seconds (the measured rate holds at the
    reference length), times ``weights_rate_factor`` (a served variant whose weights run faster
    than the measured one's). ``attention_flops_per_s = 0``: attention at the weights' rate, one
    effective FLOP rate for both.
    """

    name: str
    num_layers: int = field(metadata={"positive": True})
    num_kv_heads: int = field(metadata={"positive": True})
    head_dim: int = field(metadata={"positive": True})
    kv_dtype_bytes: int = field(default=2, metadata={"positive": True})
    tp: int = field(default=1, metadata={"positive": True})
    block_size: int = field(default=16, metadata={"positive": True})
    max_model_len: int = field(default=65536, metadata={"positive": True})
    gpu_pool_tokens: int = field(default=166512, metadata={"positive": True})
    prefill_tokens_per_s: float = field(default=14850.0, metadata={"positive": True})
    decode_step_base_s: float = field(default=0.012, metadata={"min": 0})
    decode_step_per_seq_s: float = field(default=0.0004, metadata={"min": 0})
    decode_step_per_ktoken_s: float = field(default=0.00002, metadata={"min": 0})
    max_num_seqs: int = field(default=256, metadata={"positive": True})
    max_num_batched_tokens: int = field(default=8192, metadata={"positive": True})
    vocab_size: int = field(default=151936, metadata={"positive": True})
    num_attention_heads: int = field(default=0, metadata={"min": 0})
    active_params: float = field(default=0.0, metadata={"min": 0})
    prefill_reference_tokens: int = field(default=0, metadata={"min": 0})
    attention_flops_per_s: float = field(default=0.0, metadata={"min": 0})
    weights_rate_factor: float = field(default=1.0, metadata={"positive": True})
    source: str = ""

    @property
    def prefill_time(self) -> PrefillTime:
        """The prefill model (see the class docstring). With ``T = ref / prefill_tokens_per_s``
        and ``P = ref (ref - 1) / 2`` token pairs at the reference length ``ref``:

            per earlier token  b = 4 L H_q d / attention_flops_per_s
            per token          a = (T - b P) / ref / weights_rate_factor

        and with ``attention_flops_per_s = 0`` one rate ``R = (ref 2 N + 4 L H_q d P) / T``:
        ``a = 2 N / R / weights_rate_factor``, ``b = 4 L H_q d / R``."""
        if not self._positional():
            return PrefillTime(1.0 / self.prefill_tokens_per_s / self.weights_rate_factor)
        ref = self.prefill_reference_tokens
        f_lin = 2.0 * self.active_params
        f_att, t_ref, pairs = self._reference()
        if self.attention_flops_per_s:
            b = f_att / self.attention_flops_per_s
            a = (t_ref - b * pairs) / ref
        else:
            rate = (ref * f_lin + f_att * pairs) / t_ref
            a, b = f_lin / rate, f_att / rate
        return PrefillTime(a / self.weights_rate_factor, b)

    def _positional(self) -> bool:
        """Whether prefill time depends on position (else the flat measured rate)."""
        return bool(self.num_attention_heads and self.active_params and self.prefill_reference_tokens)

    def _reference(self) -> tuple[float, float, float]:
        """Attention FLOPs per token pair ``4 L H_q d``, the reference prompt's time
        ``ref / prefill_tokens_per_s`` and its token pairs ``ref (ref - 1) / 2``."""
        ref = self.prefill_reference_tokens
        return (4.0 * self.num_layers * self.num_attention_heads * self.head_dim,
                ref / self.prefill_tokens_per_s, ref * (ref - 1) / 2)

    @property
    def bytes_per_token(self) -> int:
        """KV bytes per token: ``2 * L * (H_kv / TP) * d_head * b_kv``."""
        return 2 * self.num_layers * (self.num_kv_heads // self.tp) * self.head_dim * self.kv_dtype_bytes

    @property
    def bytes_per_block(self) -> int:
        """KV bytes per block: ``bytes_per_token * block_size``."""
        return self.bytes_per_token * self.block_size

    @property
    def gpu_pool_blocks(self) -> int:
        return self.gpu_pool_tokens // self.block_size

    def validate(self, where: str) -> None:
        if self.num_kv_heads % self.tp:
            raise ConfigError(f"{where}.tp: {self.tp} must divide num_kv_heads={self.num_kv_heads}")
        if self.gpu_pool_tokens < self.block_size:
            raise ConfigError(f"{where}.gpu_pool_tokens: must hold at least one block")
        if self.attention_flops_per_s and self._positional():
            f_att, t_ref, pairs = self._reference()
            t_att = f_att * pairs / self.attention_flops_per_s
            if t_att >= t_ref:
                raise ConfigError(
                    f"{where}.attention_flops_per_s: {self.attention_flops_per_s:g} leaves no time "
                    f"for the weights: attention alone takes {t_att:.4g} s of the {t_ref:.4g} s a "
                    f"{self.prefill_reference_tokens}-token prompt takes at prefill_tokens_per_s; "
                    f"allowed values: above {f_att * pairs / t_ref:.4g}, or 0")


@dataclass(frozen=True)
class TierProfile:
    """Read/write model of one store tier (RAM, local RAID0 NVMe, remote NVMe-oF).

    modelled load time of n blocks of b bytes = lookup_latency_s + n * b / read_bytes_per_s
    (reads are batched, as vLLM's connector issues one batch get per request).
    """

    name: str
    lookup_latency_s: float = field(metadata={"min": 0})
    read_bytes_per_s: float = field(metadata={"positive": True})
    write_bytes_per_s: float = field(metadata={"positive": True})
    source: str = ""


def load_model_profile(name_or_path: str) -> ModelProfile:
    """A model profile by name or path. A profile with ``extends = "<name>"`` is that profile
    with its own keys replacing the base's (one level: the base may not extend another)."""
    path = resolve(name_or_path, "stacks/profiles/models")
    data = load_toml(path)
    if "extends" in data:
        base_name = data.pop("extends")
        base = load_toml(resolve(str(base_name), "stacks/profiles/models"))
        if "extends" in base:
            raise ConfigError(f"{path}: field 'extends': {base_name!r} extends another profile; "
                              "allowed values: a profile without 'extends'")
        data = {**base, **data}
    try:
        return from_dict(ModelProfile, data, "")
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def stack_model_profile(profile: str, gpu_pool_tokens: int | None = 0) -> ModelProfile:
    """The model profile ``profile`` (name or path) with a stack's own GPU prefix pool of
    ``gpu_pool_tokens`` per endpoint (0 or None: the profile's)."""
    prof = load_model_profile(profile)
    if gpu_pool_tokens:
        prof = dataclasses.replace(prof, gpu_pool_tokens=int(gpu_pool_tokens))
    return prof


def load_tier_profile(name_or_path: str) -> TierProfile:
    return load(TierProfile, resolve(name_or_path, "stacks/profiles/tiers"))


# --------------------------------------------------------------------------------------------
# The stack: embedded (Mooncake master + emulated endpoints here) or external (real vLLM)

Configuration = Literal["recompute", "gpu-only", "store-ram", "store-ram+disk", "disk-only"]
"""Cache configurations (docs/design.md §3): full recompute (no prefix caching, no store);
GPU prefix cache only; + shared RAM store; + RAM store with a disk tier below it; disk tier with no
RAM store (the GDS-like case)."""
DISK_CONFIGS = ("store-ram+disk", "disk-only")
"""The configurations whose store has a disk tier (Mooncake's offload to files)."""
STORELESS: tuple[Configuration, ...] = ("recompute", "gpu-only")
"""The configurations with no store: no master, nothing read or written outside the GPU."""


KvRole = Literal["producer", "consumer", "both"]
"""An endpoint's part in disaggregated prefill (vLLM's ``kv_role`` kv_producer | kv_consumer |
kv_both): a producer prefills requests marked ``kv_transfer_params.do_remote_decode`` and hands
their KV over; a consumer takes requests marked ``do_remote_prefill`` and decodes them from the
transferred KV; ``both`` does either (and plain requests in any case)."""
DiskWrites = Literal["evict", "put"]
DISK_WRITES: tuple[str, ...] = get_args(DiskWrites)
"""When the disk tier is written (:attr:`StoreSpec.disk_writes`)."""
Staging = Literal["overlap", "serial", "shared"]
STAGINGS: tuple[str, ...] = get_args(Staging)
"""How a staged load's two hops (disk to CPU memory, CPU memory to GPU) are timed
(:attr:`StoreSpec.staging`)."""
SERIAL_STAGINGS: tuple[str, ...] = ("serial", "shared")
"""The stagings whose hop follows the disk read ("shared": through one staging buffer)."""


@dataclass(frozen=True)
class EndpointSpec:
    name: str
    port: int = field(default=0, metadata={"min": 0, "max": 65535, "help": "0 = a free port"})
    base_url: str | None = None
    model: str | None = None
    kv_role: KvRole = "both"


@dataclass(frozen=True)
class StoreSpec:
    """The Mooncake Store below the endpoints (sizes and times at model scale)."""

    ram_gb: float = field(default=32.0, metadata={"min": 0})
    lease_ttl_s: float = field(default=5.0, metadata={"positive": True})
    ram_tier: str = "ram"
    disk_tier: str = "local-raid0"
    master_port: int = field(default=0, metadata={"min": 0, "max": 65535})
    metrics_port: int = field(default=0, metadata={"min": 0, "max": 65535})
    disk_dir: str | None = None
    metrics_url: str | None = None
    # Where puts are placed: "local" prefers the putting endpoint's own segment (falls back to
    # any segment when full), "random" is Mooncake's default allocation.
    placement: Literal["local", "random"] = "local"
    # Blocks per store object (adev.emulator.chunks): 16 = one per 256-token chunk (LMCache's
    # chunk size; the real client's cost on the host is mostly per key); 1 = one per block (vLLM's
    # Mooncake store connector). Counts stay per block.
    chunk_blocks: int = field(default=16, metadata={"positive": True})
    # The disk tier's offload heartbeat in model seconds (10: 1 s real at time scale 10, the
    # shortest Mooncake takes). Each endpoint's client gets MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS
    # = max(1, round(this / time_scale)) real seconds (adev.stack.commands.offload_heartbeat_real_s),
    # so an evicted object waits about as many model seconds for its offload at every time scale
    # up to this / 1 s.
    offload_heartbeat_s: float = field(default=10.0, metadata={"positive": True})
    # When store-ram+disk writes a block to the disk tier: "evict" (master --offload_on_evict:
    # when RAM evicts it; until its client's offload heartbeat has written it, it stays in RAM,
    # readable, not evictable) or "put" (every object is written to disk on the heartbeat after
    # its put, and stays in RAM until then; a RAM eviction then frees memory at once). disk-only
    # always writes at put.
    disk_writes: DiskWrites = "evict"
    # Mooncake's promotion on hit (master --promotion_on_hit; store-ram+disk only, ignored by the
    # other configurations): a key held only on the disk tier, once read promotion_threshold
    # times (the master's count-min sketch), is copied back to RAM by the client that holds it,
    # on its offload heartbeat, at most promotion_per_heartbeat objects per heartbeat (0: every
    # queued one; Mooncake's own default is 1) and only while RAM is below the eviction high
    # watermark. Off, as in Mooncake: a block evicted from RAM is then read from disk on every
    # later hit, since a save skips keys present in any tier.
    promotion_on_hit: bool = False
    promotion_threshold: int = field(default=2, metadata={"positive": True})
    promotion_per_heartbeat: int = field(default=0, metadata={"min": 0})
    # Store loads one endpoint serves at once (0: no limit). vLLM's Mooncake store connector
    # loads on VLLM_MOONCAKE_LOAD_RECV_THREADS receiving threads per worker, 1 by default (one
    # request's load after another), and so does the emulator by default; each further load waits
    # for a free thread, in admission order (adev.emulator.engine.Engine._queue_load).
    load_threads: int = field(default=1, metadata={"min": 0})
    # A staged load's two hops (store-ram+disk): "serial" (the default) = the disk read, then the
    # hop, as Mooncake reads a disk-tier batch into its client's staging buffer before the
    # transfer to the GPU starts; "overlap" = the CPU-memory hop runs under the disk read (the
    # slower sets the pace). Either way a lone staged load runs at the disk tier profile's
    # read_bytes_per_s (measured for staged loads): with "serial" the device's own rate is the
    # one that, followed by the hop, gives that rate (adev.emulator.state.device_read_rate), and
    # a direct (disk-only) read gets it. "shared" = "serial", and the staging buffer is the disk
    # tier owner's one buffer for the stack: Mooncake's SSD read-back goes through the owner's
    # client (FileStorage::BatchGet reads a batch into its ClientBuffer, the reader pulls it from
    # there with the transfer engine, then releases it), so a staged batch keeps the shared disk
    # device's queue (adev.emulator.disk_device) through its read and its hop, and the staged
    # loads of every endpoint pass one at a time. A direct read holds the device for its read alone.
    staging: Staging = "serial"
    # The connector's rule for a refused put (-200: RAM full of leased objects). true: vLLM's
    # MooncakeStoreConnector with its pressure rule (the sending thread marks the request and,
    # until a later put stores everything it offers, withholds that request's further saves;
    # each withheld block counts as skipped, never offered); false: the connector as first merged
    # (mooncake_store_worker.py), which offers every step's missing blocks whatever the last put
    # did, so a refused range is offered, and refused, again at each later step.
    pressure_skip: bool = True


def _default_endpoints() -> list[EndpointSpec]:
    return [EndpointSpec("coder"), EndpointSpec("reasoner")]


@dataclass(frozen=True)
class StackConfig:
    mode: Literal["embedded", "external"] = "embedded"
    host: str = "127.0.0.1"
    time_scale: float = field(default=10.0, metadata={"positive": True})
    profile: str = "qwen3-coder-30b-a3b"
    # GPU prefix pool per endpoint in tokens; 0 = the model profile's gpu_pool_tokens (a replay
    # sizes it to its slice: adev.replay.experiment.scaled_gpu_pool).
    gpu_pool_tokens: int = field(default=0, metadata={"min": 0})
    configuration: Configuration = "store-ram+disk"
    payload_scale: int = field(default=256, metadata={"positive": True})
    policy: str = "oracle"  # a name in adev.emulator.policies.POLICIES
    # Settings of the oracle policy (keys of adev.emulator.policies.oracle_config.OracleConfig:
    # one_call_per_turn, output_tokens, round_shares, salt, thinking); {} = its defaults. Part of
    # the stack's config, so a run's manifest records them and a running stack with other
    # settings is not reused.
    oracle: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    state_dir: str = ".adev/stack"
    endpoints: list[EndpointSpec] = field(default_factory=_default_endpoints)
    store: StoreSpec = field(default_factory=StoreSpec)
    # CPU cores the stack's processes run on (Linux affinity, via taskset); [] = any core. Keep
    # the fleet's client (fleet.client_cpus) on other cores so the two never wait for each other.
    cpus: list[int] = field(default_factory=list)
    # Prefill-to-decode KV link (stacks/profiles/links/<name>.toml): the emulated transfer time of
    # a request that a consumer endpoint decodes after a producer prefilled it.
    kv_link: str = "rdma-400g"
    # Tokens per stream event, as vLLM's --stream-interval: 1 = every decode step's token is sent
    # at that step's modelled end; N = once N are pending; 0 = once per macro step (cheapest).
    stream_interval: int = field(default=1, metadata={"min": 0})
    # Embedded stack: "held" = model time waits while a real store read is behind its tier
    # profile (a clock shared by the stack's processes, adev/clock.py), so the host's read speed
    # never reaches a modelled figure; "free" = model time is wall time x time_scale, and a
    # slow read delays its request (the host's lag shows up in TTFT and in what follows).
    model_clock: Literal["held", "free"] = "held"
    # The vLLM release the emulated endpoints answer at GET /version and count their prefix cache
    # as (adev.vllm_release): before 0.26.0 a waiting request's lookup was added to
    # vllm:prefix_cache_* at every scheduler step it waited; from 0.26.0 once, at admission.
    vllm_version: str = "0.26.0"

    def model_profile(self) -> ModelProfile:
        """The model profile the stack serves: :attr:`profile` with :attr:`gpu_pool_tokens`
        (when set) as its GPU prefix pool (:func:`stack_model_profile`)."""
        return stack_model_profile(self.profile, self.gpu_pool_tokens)

    def validate(self, where: str) -> None:
        from adev.emulator.policies import POLICIES, unknown_policy
        if self.gpu_pool_tokens:
            self.model_profile().validate(where)
        if self.policy not in POLICIES:
            raise ConfigError(unknown_policy(self.policy, f"{where}.policy"))
        if self.oracle:
            if self.policy != "oracle":
                raise ConfigError(f"{where}.oracle: settings of the oracle policy, but "
                                  f"{where}.policy is {self.policy!r}; allowed: leave "
                                  f"{where}.oracle empty or set {where}.policy = 'oracle'")
            from adev.emulator.policies.oracle_config import OracleConfig
            try:
                OracleConfig.from_dict(self.oracle)
            except ConfigError as e:
                raise ConfigError(f"{where}.{e}") from None
        check_cpus(self.cpus, f"{where}.cpus")
        from adev.vllm_release import parse
        try:
            parse(self.vllm_version)
        except ValueError as e:
            raise ConfigError(f"{where}.vllm_version: {e}") from None
        if self.store.staging in SERIAL_STAGINGS and self.mode == "embedded":
            from adev.emulator.state import device_read_rate
            ram, disk = load_tier_profile(self.store.ram_tier), load_tier_profile(self.store.disk_tier)
            try:
                device_read_rate(disk.read_bytes_per_s, ram.read_bytes_per_s, "serial")
            except ValueError as e:
                raise ConfigError(f"{where}.store.staging: {self.store.staging!r} needs the disk "
                                  f"tier ({disk.name}) slower than the RAM tier ({ram.name}): {e}; "
                                  f"allowed values: {', '.join(STAGINGS)}") from None
        names = [e.name for e in self.endpoints]
        if len(set(names)) != len(names):
            raise ConfigError(f"{where}.endpoints: endpoint names must be unique, got {names}")
        if not names:
            raise ConfigError(f"{where}.endpoints: at least one endpoint is required")
        if self.mode == "external":
            missing = [e.name for e in self.endpoints if not e.base_url]
            if missing:
                raise ConfigError(f"{where}.endpoints: mode 'external' needs base_url for {missing}")


# The cores this process could run on when adev was imported (before any pinning of its own).
HOST_CPUS: list[int] = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def check_cpus(cpus: list[int], where: str) -> None:
    """A CPU list names cores this process may use (:data:`HOST_CPUS`), each once."""
    allowed = HOST_CPUS
    if cpus and not allowed:
        raise ConfigError(f"{where}: CPU affinity is not supported on this system; use []")
    bad = [c for c in cpus if not isinstance(c, int) or isinstance(c, bool) or c not in allowed]
    if bad or len(set(cpus)) != len(cpus):
        raise ConfigError(f"{where}: {cpus!r} is not allowed; allowed values: distinct cores "
                          f"among {allowed} (or [] for any core)")


def parse_cpu_list(text: str, where: str) -> list[int]:
    """``"0,2-3"`` -> ``[0, 2, 3]`` (taskset's list syntax, for command-line options)."""
    out: list[int] = []
    try:
        for part in text.split(","):
            lo, _, hi = part.strip().partition("-")
            out += list(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise ConfigError(f"{where}: {text!r} is not a CPU list; allowed values: e.g. 1 or "
                          "0,2-3") from None
    return out


def load_stack(path: str | Path | None = None, **overrides: Any) -> StackConfig:
    """Load a stack file (default ``stacks/embedded.toml``), applying top-level overrides."""
    p = Path(path) if path else ROOT / "stacks" / "embedded.toml"
    data: dict[str, Any] = {}
    if p.exists() or path:
        doc = load_toml(p)
        extra = sorted(set(doc) - {"stack"})
        if extra:
            raise ConfigError(f"{p}: unknown top-level table(s) {', '.join(extra)}; "
                              "allowed: stack")
        if not isinstance(doc.get("stack"), dict):
            raise ConfigError(f"{p}: no [stack] table; a stack file holds its settings under "
                              "[stack] (see stacks/embedded.toml)")
        data = doc["stack"]
    data = {**data, **{k: v for k, v in overrides.items() if v is not None}}
    try:
        return from_dict(StackConfig, data, "stack")
    except ConfigError as e:
        raise ConfigError(f"{p}: {e}") from None
