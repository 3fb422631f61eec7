"""One row of the window table: :class:`WindowFigures`, the figures of one (window, endpoint)
(or the pooled ``ALL`` row), and :func:`set_figure`, which sets a figure or records in
``missing`` why it cannot be computed (docs/design.md §5.1)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

GiB = 1024 ** 3
ALL = "ALL"
NAN = math.nan


@dataclass
class WindowFigures:
    run_id: str
    label: str
    width: int | None
    window: int
    t0: float
    t1: float
    valid: bool
    protocol: str
    endpoint: str
    calls: int = 0
    calls_failed: int = 0
    calls_open: int = 0
    busy_s: float = NAN
    busy_share: float = NAN
    span_from: float = NAN
    span_to: float = NAN
    busy_span_s: float = NAN
    counter_resets: int = 0
    scrape_gaps: int = 0
    prompt_tokens: float = NAN
    gpu_tokens: float = NAN
    gpu_tokens_source: str = ""
    store_tokens: float = NAN
    store_ram_tokens: float = NAN
    store_disk_tokens: float = NAN
    store_load_failed_tokens: float = NAN
    disk_fraction: float = NAN
    disk_split_source: str = ""
    gpu_hit_share: float = NAN
    store_hit_share: float = NAN
    gross_saving: float = NAN
    gross_saving_disk: float = NAN
    disk_share_of_saving: float = NAN
    net_saving: float = NAN
    net_saving_full: float = NAN
    read_path_s: float = NAN
    store_hit_rate: float = NAN
    store_hit_rate_source: str = ""
    store_keys_per_call: float = NAN
    put_blocks: float = NAN
    put_refused_blocks: float = NAN
    refused_bytes: float = NAN
    refused_share: float = NAN
    refused_source: str = ""
    master_put_alloc_failures: float = NAN
    master_batch_put_failed_items: float = NAN
    master_batch_put_items: float = NAN
    evictions: float = NAN
    eviction_attempts: float = NAN
    evicted_keys: float = NAN
    evicted_bytes: float = NAN
    store_gib_served: float = NAN
    store_ram_gib: float = NAN
    store_disk_gib: float = NAN
    master_mem_read_gib: float = NAN
    master_file_read_gib: float = NAN
    disk_read_rate: float = NAN
    recompute_rate: float = NAN
    disk_vs_recompute: float = NAN
    preemptions: float = NAN
    preemptions_server: float = NAN
    ttft_send_p50: float = NAN
    ttft_send_p90: float = NAN
    ttft_send_p99: float = NAN
    ttft_sched_p50: float = NAN
    ttft_sched_p90: float = NAN
    ttft_sched_p99: float = NAN
    ttfb_send_p50: float = NAN
    ttft_model_err_p50: float = NAN   # emulated stack only: ttft_model_error, fraction
    ttft_model_err_p99: float = NAN
    store_read_over_p50: float = NAN   # emulated stack only: store_read_over_profile, ratio
    store_read_over_p99: float = NAN
    store_late_share: float = NAN      # emulated stack only: mean of store_read_late, fraction
    store_behind: float = NAN          # 1.0 when the median loaded call's read fell behind (p50 > 1)
    read_overrun_s: float = NAN        # emulated stack with a store: model s past reads' modelled ends
    dispatch_p50: float = NAN
    dispatch_p90: float = NAN
    dispatch_p99: float = NAN
    dispatch_mean: float = NAN
    srv_requests: int = 0
    srv_gpu_tokens: float = NAN
    srv_store_ram_tokens: float = NAN
    srv_store_disk_tokens: float = NAN
    srv_computed_tokens: float = NAN
    xcheck_gpu_rel: float = NAN
    xcheck_store_rel: float = NAN
    xcheck_disk_rel: float = NAN
    faults: str = ""   # faults that touched the window (adev.analysis.faults); "" = none
    missing: dict[str, str] = field(default_factory=dict)


def set_figure(fig: WindowFigures, name: str, fn, *args, need: dict[str, Any] | None = None) -> None:
    """Set ``fig.name = fn(*args)`` unless an input is missing (records why)."""
    for k, v in (need or {}).items():
        if v is None or (isinstance(v, float) and math.isnan(v)):
            why = fig.missing.get(k) or f"{k} unavailable"
            fig.missing[name] = why
            return
    try:
        val = fn(*args)
    except ZeroDivisionError:
        fig.missing[name] = "division by zero (" + ", ".join(
            k for k, v in (need or {}).items() if v == 0) + " is 0)"
        return
    if isinstance(val, float) and (math.isnan(val) or math.isinf(val)):
        zero = [k for k, v in (need or {}).items() if v == 0]
        fig.missing[name] = f"{' and '.join(zero) or 'a divisor'} is 0" if zero else "not finite"
        return
    setattr(fig, name, float(val))

