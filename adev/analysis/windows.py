"""Window analytics (docs/design.md §5.1): per endpoint and window W = [t0, t1).

Each figure is defined once in :mod:`adev.analysis.figures`, as a function with its formula in
the docstring; :func:`analyse_window` assembles them into one
:class:`WindowFigures` per (window, endpoint), plus an ``ALL`` row that pools the endpoints
(tokens and busy times summed, ratios recomputed from the sums, percentiles over all calls).
:func:`window_table` returns every window of a run as a pandas DataFrame. A figure whose inputs
are missing is NaN and ``missing[figure]`` says why.

Attribution: call-level figures (TTFT, dispatch delay, keys per call, refusals) use the calls
*sent* in W. Counter figures use the counter span (the boundary scrapes nearest t0 and t1, see
:mod:`adev.analysis.counters`); savings divide by the busy time over that same span
(``busy_span_s``; equal to B when the boundary scrapes sit on the window edges, as the fleet
takes them). The emulator's per-request figures that are cross-checked against counters
(tier tokens, read path) use the requests *admitted* in the counter span
(admission ``t_admit``: the server's arrival stamp on the run clock + ``queue_s``, see
:func:`adev.analysis.run.add_admission`). Master counters are global: they appear in the ALL
row only. The store tier split (RAM vs disk) of each endpoint's store tokens uses the endpoint's
own per-tier counters where it exports them (the emulator does: hits less failed loads, per tier),
else the master's byte shares over the window (the same for every endpoint);
``disk_split_source`` says which. Store tokens are
the lookup hits less the hit blocks whose load failed (:func:`served_store_tokens`).

The assembly is split by what each part reads: :mod:`.window_row` (the row and its ``missing``
rule), :mod:`.window_calls` (calls sent in W), :mod:`.window_endpoint` (one endpoint's counters
and savings), :mod:`.window_tiers` (the RAM/disk split), :mod:`.window_master` (master counters)
and :mod:`.window_pool` (the ``ALL`` row).
"""
from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pandas as pd

from .run import Run
from .window_endpoint import analyse_endpoint
from .window_pool import pool_endpoints
from .window_row import ALL, WindowFigures

__all__ = ["ALL", "WindowFigures", "analyse_window", "cross_check", "window_table"]


def analyse_window(run: Run, w: dict[str, Any]) -> list[WindowFigures]:
    """Figures of one window: one per endpoint, then the ALL row."""
    rows = [analyse_endpoint(run, w, ep) for ep in run.endpoints]
    return rows + [pool_endpoints(run, w, rows)]


def cross_check(run: Run) -> pd.DataFrame:
    """Counters vs the emulator's per-request tier split over the measured span: from the first
    valid window's start to the last valid window's end (the whole run when it has no windows),
    each end resolved to its boundary scrape. Calls cancelled or failed after the server counted
    them (e.g. sessions stopped at the end of a run) carry no per-request fields, which is why
    the span stops at the last window. Per-window cross-checks also carry boundary effects: the
    emulator counts a request's hits when its event loop gets to it, which lags the modelled
    admission stamp under load, so a request admitted just before a boundary scrape can land in
    the next span."""
    cols = ["endpoint", "span_from", "span_to", "gpu_tokens", "srv_gpu_tokens", "store_tokens",
            "srv_store_ram_tokens", "srv_store_disk_tokens", "store_disk_tokens",
            "store_load_failed_tokens", "xcheck_gpu_rel", "xcheck_store_rel", "xcheck_disk_rel"]
    ws = [w for w in run.measurement_windows() if w.get("valid", True)]
    if not ws:
        return pd.DataFrame(columns=cols + ["faults"])
    w = {"index": 0, "t0": min(float(x["t0"]) for x in ws),
         "t1": max(float(x["t1"]) for x in ws), "valid": True, "protocol": "measured span"}
    if run.faults is not None:  # the span may cross an invalid window's fault: name it
        w["faults"] = sorted(run.faults.touching(w["t0"], w["t1"]))
    return pd.DataFrame([asdict(f) for f in analyse_window(run, w)])[cols + ["faults"]]


def window_table(run: Run) -> pd.DataFrame:
    """Every window of the run x (endpoints + ALL) as a DataFrame (one row per figure set)."""
    rows: list[dict[str, Any]] = []
    for w in run.measurement_windows():
        rows.extend(asdict(f) for f in analyse_window(run, w))
    if not rows:
        return pd.DataFrame(columns=[f.name for f in WindowFigures.__dataclass_fields__.values()])
    return pd.DataFrame(rows)
