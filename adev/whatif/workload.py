"""What the simulator replays: calls, their block ids and their times, from a run or a trace.

A :class:`Workload` is a list of model calls sorted by admission time. Each call has an
endpoint, prompt and output lengths, three times (model seconds) and the ids of its prompt's full
blocks, in prompt order:

- ``t_admit``: the endpoint admits it (GPU prefix lookup, store lookup, block allocation);
- ``t_save``: its prefill ends (the store write of its new blocks);
- ``t_end``: its last token (its GPU blocks are freed to the LRU).

Block ids are dense integers (``0 .. n_ids-1``), one per distinct block key. Sources:

- a run directory (:func:`from_run`): the reuse ledger (``<run>/ledger``, one touch per full block
  of every prompt) joined on ``call_id`` with the run's call records (endpoint, the server's
  admission stamp ``t_admit``, ``t_admit + read_path_s + prefill_s`` as the save time, the end
  on the endpoint's own clock (:func:`_engine_end`), the endpoint's count of its preemptions; a call
  without a server record is admitted at its send time ``t`` and saved and freed at once);
- the Mooncake FAST'25 trace format (:func:`from_mooncake_trace`): one JSON object per line,
  ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids`` (512-token blocks, the
  last one possibly partial: only the ``input_length // 512`` full blocks are touched), read and
  validated by the replay's importer (the same rules, the same errors); one
  endpoint; the prefill takes the model profile's prefill time of ``input_length`` tokens
  (:class:`adev.config.PrefillTime`) and each output token one decode step;
- any other trace through :data:`TRACE_ADAPTERS` (``(detect, load)`` pairs tried in order).
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..config import PrefillTime, load_model_profile, load_stack

MOONCAKE_BLOCK = 512


class WorkloadError(ValueError):
    """Unreadable input: the message names the file, line and field."""


@dataclass
class Workload:
    """Calls sorted by ``t_admit``; ``ids[off[i]:off[i+1]]`` are call i's prompt block ids."""

    source: str
    block_size: int
    endpoints: list[str]
    endpoint: np.ndarray       # int32 index into endpoints, per call
    t_admit: np.ndarray        # float64 model seconds
    t_save: np.ndarray
    t_end: np.ndarray
    prompt_tokens: np.ndarray  # int64
    output_tokens: np.ndarray  # int64
    off: np.ndarray            # int64, len calls + 1
    ids: np.ndarray            # int64 dense block ids
    n_ids: int
    call_ids: list[str] = field(default_factory=list)
    preemptions: np.ndarray | None = None   # int64 per call (recorded by the endpoint), or None

    @property
    def calls(self) -> int:
        return len(self.t_admit)

    @property
    def touches(self) -> int:
        return len(self.ids)

    def blocks(self, i: int) -> np.ndarray:
        return self.ids[self.off[i]:self.off[i + 1]]


def _sorted(w: Workload) -> Workload:
    order = np.argsort(w.t_admit, kind="stable")
    if np.all(order == np.arange(len(order))):
        return w
    lens = np.diff(w.off)[order]
    off = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(lens, out=off[1:])
    ids = np.concatenate([w.ids[w.off[i]:w.off[i + 1]] for i in order]) if len(order) else w.ids
    return Workload(w.source, w.block_size, w.endpoints, w.endpoint[order], w.t_admit[order],
                    w.t_save[order], w.t_end[order], w.prompt_tokens[order],
                    w.output_tokens[order], off, ids, w.n_ids,
                    [w.call_ids[i] for i in order] if w.call_ids else [],
                    w.preemptions[order] if w.preemptions is not None else None)


def from_run(run: Any) -> Workload:
    """The workload of a run directory (or a loaded :class:`adev.analysis.run.Run`)."""
    from ..analysis.ledger import read_ledger
    from ..analysis.run import load_run
    if not hasattr(run, "calls"):
        run = load_run(run)
    led = read_ledger(run.path)
    tc = led.touches
    if not len(tc):
        raise WorkloadError(f"{led.path / 'touches.bin'}: the reuse ledger has no touches")
    bs = int(led.meta.get("block_size", 16))
    order = np.lexsort((tc["pos"], tc["call"]))
    tc = tc[order]
    uniq, dense = np.unique(tc["key"], return_inverse=True)
    call_of = tc["call"].astype(np.int64)
    ledger_calls = {int(c["call"]): c for c in led.calls}
    idx, first = np.unique(call_of, return_index=True)
    counts = np.diff(np.append(first, len(call_of)))
    rows = run.calls.set_index("call_id") if len(run.calls) else None
    eps: dict[str, int] = {}
    scale = float(run.time_scale or 1.0)
    n = len(idx)
    ep = np.zeros(n, dtype=np.int32)
    ta, ts, te = np.zeros(n), np.zeros(n), np.zeros(n)
    pt, ot = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    pre = np.zeros(n, dtype=np.int64)
    cids = []
    for j, ci in enumerate(idx.tolist()):
        lc = ledger_calls.get(ci, {})
        cid = str(lc.get("call_id", ci))
        cids.append(cid)
        t = float(tc["t"][first[j]])
        r = rows.loc[cid] if rows is not None and cid in rows.index else None
        if isinstance(r, pd.DataFrame):  # a retried call id: its last record
            r = r.iloc[-1]
        name = str(r["endpoint"]) if r is not None and isinstance(r["endpoint"], str) else "?"
        ep[j] = eps.setdefault(name, len(eps))
        pt[j] = int(lc.get("n_tokens", counts[j] * bs))
        adm = float(r["t_admit"]) if r is not None else float("nan")
        if not np.isfinite(adm):
            adm = t
        ta[j] = adm
        rp = float(r["srv_read_path_s"]) if r is not None else float("nan")
        pf = float(r["srv_prefill_s"]) if r is not None else float("nan")
        ts[j] = adm + (rp if np.isfinite(rp) else 0.0) + (pf if np.isfinite(pf) else 0.0)
        end = _engine_end(r, adm, scale) if r is not None else float("nan")
        te[j] = max(end, ts[j]) if np.isfinite(end) else ts[j]
        out = r["completion_tokens"] if r is not None else float("nan")
        ot[j] = int(out) if np.isfinite(out) else 0
        pr = float(r["srv_preemptions"]) if r is not None else float("nan")
        pre[j] = int(pr) if np.isfinite(pr) else 0
    off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=off[1:])
    names = sorted(eps, key=eps.__getitem__)
    return _sorted(Workload(f"run {run.path}", bs, names, ep, ta, ts, te, pt, ot, off,
                            dense.astype(np.int64), len(uniq), cids, pre))


def _engine_end(r: Any, t_admit: float, scale: float) -> float:
    """A call's end on its endpoint's own model clock: ``t_arrival + ttft_s`` (the first token,
    on that clock) plus the decode's wall duration times the time scale; the client's ``t_end``
    when the server stamps are missing. (A busy endpoint's model clock falls behind the wall;
    its admissions, prefills and ends are all on that clock, so they are replayed on it.)"""
    ttft, q = float(r["srv_ttft_s"]), float(r["srv_queue_s"])
    a, b = float(r["srv_t_first_token_mono"]), float(r["srv_t_end_mono"])
    if all(np.isfinite(x) for x in (ttft, q, a, b)) and b >= a:
        return t_admit - q + ttft + (b - a) * scale
    return float(r["t_end"])


def from_mooncake_trace(path: str | Path, prefill: PrefillTime | None = None,
                        decode_step_s: float | None = None) -> Workload:
    """The Mooncake trace format (see module doc), read and validated by the replay's importer
    (:func:`adev.replay.importers.import_mooncake`). A call's prefill takes
    ``prefill.chunk_s(input_length)`` and each output token ``decode_step_s``; None: the default
    stack's model profile's prefill model and decode step base."""
    from ..replay.format import TraceError
    from ..replay.importers import import_mooncake
    if prefill is None or decode_step_s is None:
        prof = load_model_profile(load_stack().profile)
        prefill = prefill or prof.prefill_time
        decode_step_s = prof.decode_step_base_s if decode_step_s is None else decode_step_s
    p = Path(path)
    try:
        trace = import_mooncake(p, MOONCAKE_BLOCK)
    except TraceError as e:
        raise WorkloadError(str(e)) from None
    ta, pt, ot, lens, chunks = [], [], [], [], []
    for c in trace.calls:
        full = c.prompt_tokens // MOONCAKE_BLOCK
        ta.append(c.t)
        pt.append(c.prompt_tokens)
        ot.append(c.output_tokens)
        lens.append(full)
        chunks.append(c.blocks[:full])
    flat = np.fromiter((x for c in chunks for x in c), dtype=np.int64, count=sum(lens))
    uniq, dense = np.unique(flat, return_inverse=True)
    n = len(ta)
    t_admit = np.asarray(ta, dtype=float)
    ptoks = np.asarray(pt, dtype=np.int64)
    otoks = np.asarray(ot, dtype=np.int64)
    t_save = t_admit + np.array([prefill.chunk_s(int(n)) for n in ptoks], dtype=float)
    off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=off[1:])
    w = Workload(f"mooncake trace {p}", MOONCAKE_BLOCK, ["trace"], np.zeros(n, dtype=np.int32),
                 t_admit, t_save, t_save + otoks * decode_step_s, ptoks, otoks, off,
                 dense.astype(np.int64), len(uniq), [str(i) for i in range(n)])
    return _sorted(w)


def _is_mooncake(p: Path) -> bool:
    if not p.is_file():
        return False
    with p.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if line.strip():
                try:
                    d = json.loads(line)
                except json.JSONDecodeError:
                    return False
                return isinstance(d, dict) and "hash_ids" in d and "timestamp" in d
    return False


def _is_run(p: Path) -> bool:
    return p.is_dir() and (p / "ledger" / "meta.json").exists()


TRACE_ADAPTERS: list[tuple[Callable[[Path], bool], Callable[..., Workload]]] = [
    (_is_run, lambda p, **kw: from_run(p)),
    (_is_mooncake, from_mooncake_trace),
]
"""(detect, load) pairs tried in order by :func:`load_workload`; a new trace format adds one."""


def load_workload(path: str | Path, **kw: Any) -> Workload:
    """A run directory or a trace file, whichever :data:`TRACE_ADAPTERS` recognises first."""
    p = Path(path)
    if not p.exists():
        raise WorkloadError(f"{p}: no such run directory or trace file")
    for detect, load in TRACE_ADAPTERS:
        if detect(p):
            return load(p, **kw)
    if p.is_dir():
        raise WorkloadError(f"{p}: not a run with a reuse ledger (ledger/meta.json missing)")
    raise WorkloadError(f"{p}: unknown trace format; allowed: a run directory with a reuse "
                        "ledger, or JSON lines with timestamp, input_length, output_length, "
                        "hash_ids (Mooncake)")
