"""Prometheus metrics of one emulated endpoint, with vLLM's exported names, labels and rules.

One ``CollectorRegistry`` per process (``Metrics``). Labels ``model_name`` (the served name) and
``engine`` ("0"), as vLLM v1 exports them. Counters are exported with ``_total``; ``_created``
samples are disabled. Counting rules (vLLM v1's, docs/design.md §4):

- ``vllm:prefix_cache_queries_total`` += prompt tokens, ``vllm:prefix_cache_hits_total`` += local
  hit tokens (whole blocks, capped at len-1), both when the request is first admitted;
- ``vllm:external_prefix_cache_queries_total`` += prompt tokens - local hits,
  ``vllm:external_prefix_cache_hits_total`` += tokens the store will load; recorded only at the
  first admission (preempted requests re-admitted are left out of all four);
- ``vllm:prompt_tokens_total``, ``vllm:prompt_tokens_by_source_total{source}`` and
  ``vllm:prompt_tokens_cached_total`` jump once per request, at first-token time, by the whole
  prompt (local_compute + local_cache_hit + external_kv_transfer = prompt tokens);
- ``vllm:generation_tokens_total`` += tokens as they are emitted;
- ``vllm:num_preemptions_total`` += 1 per preemption;
- ``vllm:request_success_total{finished_reason}`` += 1 per finished request (stop | length | abort).

Times in histograms are model seconds. Extras (clearly ``adev_emulator_*``): store put refusals,
store errors, read-path seconds, store blocks by tier.
"""
from __future__ import annotations

import bisect
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.utils import floatToGoString

try:  # no *_created samples (vLLM's exposition has none that adev reads)
    from prometheus_client import disable_created_metrics
    disable_created_metrics()
except ImportError:  # pragma: no cover
    pass

TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
REQUEST_LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                           50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
               10.0, 20.0, 40.0, 80.0]
READ_PATH_BUCKETS = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0]


def build_1_2_5_buckets(max_value: int) -> list[int]:
    """vLLM's 1-2-5 buckets up to ``max_value``: 1, 2, 5, 10, 20, 50, ..."""
    out: list[int] = []
    exp = 0
    while True:
        for m in (1, 2, 5):
            v = m * 10 ** exp
            if v > max_value:
                return out
            out.append(v)
        exp += 1


def observe_n(hist, value: float, n: int) -> None:
    """Observe ``value`` ``n`` times at once (same effect as n ``observe`` calls)."""
    if n <= 0:
        return
    hist._sum.inc(value * n)
    i = bisect.bisect_left(hist._upper_bounds, value)
    hist._buckets[i].inc(n)


class Metrics:
    """Every metric the endpoint exports, defined once."""

    def __init__(self, model_name: str, block_size: int, num_gpu_blocks: int,
                 enable_prefix_caching: bool, max_model_len: int) -> None:
        self.registry = r = CollectorRegistry()
        self._exposition = Exposition(r)  # compiles at the first render, once every metric exists
        ln = ["model_name", "engine"]
        self.labels = lv = {"model_name": model_name, "engine": "0"}

        def c(name, doc, extra=()):
            m = Counter(name, doc, ln + list(extra), registry=r)
            return m if extra else m.labels(**lv)

        def h(name, doc, buckets):
            return Histogram(name, doc, ln, buckets=buckets, registry=r).labels(**lv)

        def g(name, doc):
            return Gauge(name, doc, ln, registry=r).labels(**lv)

        self.prefix_cache_queries = c("vllm:prefix_cache_queries", "Prefix cache queries, in tokens.")
        self.prefix_cache_hits = c("vllm:prefix_cache_hits", "Prefix cache hits, in tokens.")
        self.external_prefix_cache_queries = c("vllm:external_prefix_cache_queries",
                                               "External prefix cache queries, in tokens.")
        self.external_prefix_cache_hits = c("vllm:external_prefix_cache_hits",
                                            "External prefix cache hits, in tokens.")
        self.prompt_tokens = c("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self._by_source = c("vllm:prompt_tokens_by_source", "Prompt tokens by source.", ["source"])
        self.prompt_tokens_cached = c("vllm:prompt_tokens_cached",
                                      "Prompt tokens served from cache (local + external).")
        self.generation_tokens = c("vllm:generation_tokens", "Number of generation tokens processed.")
        self.num_preemptions = c("vllm:num_preemptions", "Cumulative number of preemptions.")
        self._success = c("vllm:request_success", "Count of successfully processed requests.",
                          ["finished_reason"])
        for reason in ("stop", "length", "abort"):
            self._success.labels(**lv, finished_reason=reason)
        for src in ("local_compute", "local_cache_hit", "external_kv_transfer"):
            self._by_source.labels(**lv, source=src)

        self.num_requests_running = g("vllm:num_requests_running", "Requests in model execution batches.")
        self.num_requests_waiting = g("vllm:num_requests_waiting", "Requests waiting to be processed.")
        self.kv_cache_usage_perc = g("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        info = Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                     ["block_size", "num_gpu_blocks", "enable_prefix_caching", "prefix_caching_hash_algo",
                      "cache_dtype", "engine"], registry=r)
        info.labels(block_size=str(block_size), num_gpu_blocks=str(num_gpu_blocks),
                    enable_prefix_caching=str(enable_prefix_caching), prefix_caching_hash_algo="adev-tuple64",
                    cache_dtype="auto", engine="0").set(1)

        self.ttft = h("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                      TTFT_BUCKETS)
        self.e2e = h("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                     REQUEST_LATENCY_BUCKETS)
        self.queue_time = h("vllm:request_queue_time_seconds",
                            "Histogram of time spent in WAITING phase for request.", REQUEST_LATENCY_BUCKETS)
        self.prefill_time = h("vllm:request_prefill_time_seconds",
                              "Histogram of time spent in PREFILL phase for request.", REQUEST_LATENCY_BUCKETS)
        self.decode_time = h("vllm:request_decode_time_seconds",
                             "Histogram of time spent in DECODE phase for request.", REQUEST_LATENCY_BUCKETS)
        self.itl = h("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                     ITL_BUCKETS)
        self.kv_computed = h("vllm:request_prefill_kv_computed_tokens",
                             "Histogram of new KV tokens computed during prefill (excluding cached).",
                             build_1_2_5_buckets(max_model_len))

        # adev extras
        self.store_lookups = c("adev_emulator_store_lookups", "Store lookups (batch_is_exist calls).")
        self.store_keys_looked_up = c("adev_emulator_store_keys_looked_up", "Block keys looked up in the store.")
        self.store_errors = c("adev_emulator_store_errors",
                              "Store operations that failed (master down, RPC errors); the request recomputes.",
                              ["op"])
        for op in ("lookup", "load", "put", "lease", "connect"):
            self.store_errors.labels(**lv, op=op)
        self.store_put_blocks = c("adev_emulator_store_put_blocks", "Blocks the store accepted (put).")
        self.store_put_refused_blocks = c("adev_emulator_store_put_refused_blocks",
                                          "Blocks the store refused (put returned an error such as -200).")
        self.store_put_refused_bytes = c("adev_emulator_store_put_refused_bytes",
                                         "Model-scale bytes of refused blocks (blocks x bytes_per_block).")
        self.store_put_skipped_blocks = c(
            "adev_emulator_store_put_skipped_blocks",
            "Blocks not offered: a save of a request skipped while the store is under pressure "
            "(a put of it was refused), or after a refused or failed put batch.")
        self.store_hit_blocks = c("adev_emulator_store_hit_blocks",
                                  "Store hit blocks of lookups, by the tier holding them (counted with "
                                  "vllm:external_prefix_cache_hits; failed loads are counted apart).",
                                  ["tier"])
        self.store_load_failed_blocks = c("adev_emulator_store_load_failed_blocks",
                                          "Looked-up hit blocks whose load failed (recomputed), by tier.",
                                          ["tier"])
        for t in ("ram", "disk"):
            self.store_hit_blocks.labels(**lv, tier=t)
            self.store_load_failed_blocks.labels(**lv, tier=t)
        self.store_lease_retries = c("adev_emulator_store_lease_retries",
                                     "Load batches renewed and re-read after LEASE_EXPIRED (a real read "
                                     "slower than the time-scaled lease).")
        self.store_lease_renewed = c("adev_emulator_store_lease_renewed_keys",
                                     "Store keys whose lease was renewed because their model-time "
                                     "lease had not ended (adev.emulator.leases).")
        self.store_lease_lapses = c("adev_emulator_store_lease_lapses",
                                    "Rounds of lease renewals that ended over one real lease after the "
                                    "round before began: the master may have ended leases still running "
                                    "in model time (adev.emulator.leases).")
        self.store_up = g("adev_emulator_store_up", "1 while the store client is connected.")
        self.read_path = h("adev_emulator_read_path_seconds",
                           "Per-request store read path (lookup + load), model seconds.", READ_PATH_BUCKETS)
        self.read_path_overrun = c("adev_emulator_read_path_overrun_seconds",
                                   "Model seconds the real store I/O took beyond the modelled read path.")
        self.disk_wait = c("adev_emulator_disk_queue_seconds",
                           "Model seconds disk-tier reads waited for the disk device, shared by the "
                           "stack's endpoints, behind other reads (part of the modelled load).")
        self.prefix_cache_retry_queries = c(
            "adev_emulator_prefix_cache_retry_queries",
            "Prefix cache lookups, in tokens, of a waiting request looked up and not admitted for "
            "want of blocks, once per scheduler step it waits so (vLLM before 0.26 added these "
            "to vllm:prefix_cache_queries; counted there too only with stack.vllm_version "
            "before 0.26).")
        self.prefix_cache_retry_hits = c(
            "adev_emulator_prefix_cache_retry_hits",
            "The hits, in tokens, of those lookups (vLLM before 0.26 added these to "
            "vllm:prefix_cache_hits; counted there too only with stack.vllm_version before "
            "0.26).")

    def by_source(self, source: str):
        return self._by_source.labels(**self.labels, source=source)

    def success(self, reason: str):
        return self._success.labels(**self.labels, finished_reason=reason)

    def store_error(self, op: str):
        return self.store_errors.labels(**self.labels, op=op)

    def hit_tier(self, tier: str):
        return self.store_hit_blocks.labels(**self.labels, tier=tier)

    def load_failed(self, tier: str):
        return self.store_load_failed_blocks.labels(**self.labels, tier=tier)

    def render(self) -> bytes:
        """The ``/metrics`` text: exactly ``generate_latest(self.registry)``, from
        :class:`Exposition` (a scrape must not hold the endpoint's loop for milliseconds)."""
        return self._exposition.render()


class Exposition:
    """Prometheus text exposition of a registry of plain counters, gauges and histograms, equal
    to ``generate_latest(registry)`` byte for byte, at a seventh to a tenth of its cost
    (``bench/bench_endpoint_cpu.py``).

    Why: ``generate_latest`` re-validates and re-escapes every label of every sample on each
    call, 6 ms for an endpoint's ~210 samples on an idle core (more on a busy host), and a fleet
    scrapes each endpoint every 5 model seconds (0.5 wall s at S=10): each scrape held the
    endpoint's event loop, and every first token due meanwhile left late (x S in model time).

    How: ``generate_latest`` renders once; its comment lines and each sample line's name and
    labels are kept as they are, and each later render writes the current values after them
    (prometheus_client's own ``floatToGoString``), read straight from the metric objects in the
    order ``generate_latest`` emits them (counter: ``_total``; gauge: the value; histogram:
    cumulative ``_bucket``s, ``_count``, ``_sum``). The values are read in one synchronous pass on
    the caller's thread, so a scrape is one consistent snapshot. The layout is recompiled when a
    labelled metric gains a child; if ``generate_latest``'s text does not match the layout
    (another metric type, ``_created`` samples, a changed format) every render falls back to
    ``generate_latest``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._shape: tuple | None = None
        self._parts: list[tuple[str, list[str], Callable[[], list[float]]]] | None = None
        self.fast = False

    def _parents(self) -> list:
        return list(self.registry._collector_to_names)

    def _shape_now(self) -> tuple:
        return tuple(len(p._metrics) if p._labelnames else -1 for p in self._parents())

    @staticmethod
    def _reader(kind: str, child) -> Callable[[], list[float]] | None:
        if kind in ("counter", "gauge"):
            v = child._value
            return lambda: [v.get()]
        if kind == "histogram":
            buckets, total = child._buckets, child._sum

            def read() -> list[float]:
                out, acc = [], 0.0
                for b in buckets:
                    acc += b.get()
                    out.append(acc)
                out.append(acc)
                out.append(total.get())
                return out
            return read
        return None

    def _compile(self) -> None:
        self._shape = self._shape_now()
        self._parts, self.fast = None, False
        readers = []
        for p in self._parents():
            children = list(p._metrics.values()) if p._labelnames else [p]
            for ch in children:
                r = self._reader(getattr(p, "_type", ""), ch)
                if r is None:
                    return
                readers.append(r)
        text = generate_latest(self.registry).decode()
        parts: list[tuple[str, list[str], Callable[[], list[float]]]] = []
        comments: list[str] = []
        lines = text.splitlines(keepends=True)
        i = 0
        for r in readers:
            values = r()
            while i < len(lines) and lines[i].startswith("#"):
                comments.append(lines[i])
                i += 1
            prefixes = []
            for v in values:
                if i >= len(lines) or lines[i].startswith("#"):
                    return
                head, _, val = lines[i].rstrip("\n").rpartition(" ")
                if val != floatToGoString(v):
                    return
                prefixes.append(head + " ")
                i += 1
            parts.append(("".join(comments), prefixes, r))
            comments = []
        if i != len(lines):
            return
        self._parts, self.fast = parts, True

    def render(self) -> bytes:
        if self._shape != self._shape_now():
            self._compile()
        if not self.fast or self._parts is None:
            return generate_latest(self.registry)
        out: list[str] = []
        fmt = floatToGoString
        for comments, prefixes, read in self._parts:
            if comments:
                out.append(comments)
            for head, v in zip(prefixes, read(), strict=True):
                out.append(f"{head}{fmt(v)}\n")
        return "".join(out).encode()
