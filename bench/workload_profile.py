"""Where a fleet run's prompt tokens and their hits come from: per role, endpoint, round and call
kind, from the records of one run directory.

    PYTHONPATH=$PWD .venv/bin/python bench/workload_profile.py [results/runs/<run id>] [--windows]

Without a run directory it profiles the newest run under ``results/runs/`` (none: says so).

Every figure is computed from ``calls.jsonl`` (successful calls with the emulator's per-request
tier split, ``server.tokens``: gpu / store_ram / store_disk / computed):

- **share of prompt served by a tier** = sum of that tier's tokens / sum of prompt tokens, over
  the calls of the row;
- **call kind** of a call, from the session's previous call by send time: ``start`` (the
  session's first call), ``switch`` (the previous call went to the other endpoint: the context
  since that endpoint's last call was computed elsewhere), ``same`` (same endpoint as the
  previous call);
- **growth** = prompt tokens - prompt tokens of the previous call of the same role turn (same
  session, round and call-id tag), i.e. what one step adds (reply + tool results);
- **peak concurrent tokens** of an endpoint = the largest sum, over calls in flight at one
  instant ([t_sent, t_end)), of prompt + completion tokens: the KV a pool must hold at once;
- **turnover before a call** = tokens the *other* calls on the same endpoint allocated (computed
  prompt tokens + completion tokens) between the session's previous call on that endpoint and
  this one (by send time): a session's blocks can leave an LRU pool only when this exceeds the
  free room, so it is compared with the pool size;
- **store keys per call** = mean of ``server.store_keys_looked_up``;
- **requests running** of an endpoint = mean of the scraped ``vllm:num_requests_running`` gauge
  over the scrapes in the span (what vLLM reports as running: admitted, not waiting);
- **preemptions per 900 s** = preemptions counted by the calls of the span x 900 / span length;
- **prompt per busy second** = (prompt tokens / prefill rate) / busy time, the busy time summed
  over endpoints (:func:`adev.analysis.figures.prompt_per_busy_s`): how much prompt the workload
  sends per second the endpoints are busy, whatever serves it; the run summary's gross saving /
  store hit share is the same ratio over the endpoints' counters.

``--windows`` keeps only calls sent inside the run's measurement windows.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

TIERS = ("gpu", "store", "computed")


def prepare(calls: pd.DataFrame) -> pd.DataFrame:
    """Successful calls with a tier split, with ``store``, ``kind``, ``tag`` and ``growth``."""
    need = ["srv_tok_gpu", "srv_tok_store_ram", "srv_tok_store_disk", "srv_tok_computed"]
    df = calls[(calls["status"] == "ok") & calls[need].notna().all(axis=1)].copy()
    df["gpu"] = df["srv_tok_gpu"].astype(float)
    df["store"] = (df["srv_tok_store_ram"] + df["srv_tok_store_disk"]).astype(float)
    df["computed"] = df["srv_tok_computed"].astype(float)
    df["prompt"] = df["prompt_tokens"].astype(float)
    df = df.sort_values(["session_id", "t_sent"], kind="stable")
    prev_ep = df.groupby("session_id")["endpoint"].shift(1)
    df["kind"] = np.where(prev_ep.isna(), "start",
                          np.where(prev_ep != df["endpoint"], "switch", "same"))
    # role turn tag: "<session>/r<round>/<tag>/s<step>" -> "<session>/r<round>/<tag>"
    df["turn"] = df["call_id"].str.replace(r"/s\d+(\+trim)?$", "", regex=True)
    df["growth"] = df["prompt"] - df.groupby("turn")["prompt"].shift(1)
    return df


def shares(df: pd.DataFrame) -> dict[str, float]:
    """Share of all prompt tokens of ``df`` served by each tier (NaN without prompt tokens)."""
    p = float(df["prompt"].sum())
    return {t: (float(df[t].sum()) / p if p else float("nan")) for t in TIERS}


def breakdown(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """One row per group: calls, prompt tokens (sum, share of the run, mean, p50, p90), mean
    completion tokens, mean growth per step, and the tier shares of the group's prompt tokens."""
    total = float(df["prompt"].sum())
    rows = []
    for key, g in df.groupby(by, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        s = shares(g)
        rows.append({**dict(zip(by, key, strict=True)), "calls": len(g), "prompt_sum": int(g["prompt"].sum()),
                     "of_run": g["prompt"].sum() / total if total else np.nan,
                     "prompt_mean": g["prompt"].mean(), "prompt_p50": g["prompt"].median(),
                     "prompt_p90": g["prompt"].quantile(0.9),
                     "completion_mean": g["completion_tokens"].astype(float).mean(),
                     "growth_mean": g["growth"].mean(),
                     "gpu": s["gpu"], "store": s["store"], "computed": s["computed"]})
    return pd.DataFrame(rows)


def peak_concurrent_tokens(df: pd.DataFrame) -> dict[str, tuple[float, float]]:
    """Per endpoint: (peak, time-weighted mean) of the prompt + completion tokens of the calls in
    flight at once (intervals [t_sent, t_end); the mean is over time with >= 1 call in flight)."""
    out: dict[str, tuple[float, float]] = {}
    for ep, g in df.groupby("endpoint"):
        g = g[g["t_end"].notna()]
        size = (g["prompt"] + g["completion_tokens"].fillna(0).astype(float)).to_numpy()
        ev = sorted([(float(t), s) for t, s in zip(g["t_sent"], size, strict=True)]
                    + [(float(t), -s) for t, s in zip(g["t_end"], size, strict=True)],
                    key=lambda e: (e[0], e[1]))  # ends before starts at the same instant
        cur = peak = area = busy = 0.0
        last = None
        for t, d in ev:
            if last is not None and cur > 0:
                area += cur * (t - last)
                busy += t - last
            cur += d
            peak = max(peak, cur)
            last = t
        out[str(ep)] = (peak, area / busy if busy else float("nan"))
    return out


def turnover_before_calls(df: pd.DataFrame) -> pd.Series:
    """Per call (index of ``df``) with an earlier call of its session on the same endpoint: the
    tokens the other calls on that endpoint sent in between allocated (computed + completion).
    Calls without such an earlier call are left out."""
    out = {}
    alloc = (df["computed"] + df["completion_tokens"].fillna(0).astype(float))
    for _, g in df.groupby("endpoint"):
        g = g.sort_values("t_sent", kind="stable")
        t = g["t_sent"].to_numpy(dtype=float)
        a = alloc.loc[g.index].to_numpy(dtype=float)
        cum = np.concatenate([[0.0], np.cumsum(a)])
        sids = g["session_id"].to_numpy()
        last: dict[str, int] = {}
        for i, idx in enumerate(g.index):
            j = last.get(sids[i])
            if j is not None:
                between = cum[i] - cum[j + 1]            # calls j+1 .. i-1 by send time
                own = sum(a[k] for k in range(j + 1, i) if sids[k] == sids[i])
                out[idx] = between - own
            last[sids[i]] = i
        del t
    return pd.Series(out, dtype=float)


def store_origin(df: pd.DataFrame) -> dict[str, float]:
    """Share of all store-served tokens by call kind (where the store's hits come from)."""
    s = float(df["store"].sum())
    return {k: (float(df.loc[df["kind"] == k, "store"].sum()) / s if s else float("nan"))
            for k in ("start", "switch", "same")}


def mean_gauge(scrapes: dict, name: str, t0: float, t1: float) -> dict[str, float]:
    """Per scrape target: mean of the samples whose name starts with ``name`` (summed over
    label sets within one scrape) over the successful scrapes with t0 <= t < t1."""
    out: dict[str, float] = {}
    for target, rows in scrapes.items():
        vals = []
        for s in rows:
            if not (s.ok and t0 <= s.t < t1):
                continue
            hit = [v for k, v in s.samples.items() if k == name or k.startswith(name + "{")]
            if hit:
                vals.append(sum(hit))
        if vals:
            out[str(target)] = sum(vals) / len(vals)
    return out


def intensity(df: pd.DataFrame, spans: list[tuple[float, float]],
              prefill_tokens_per_s: float) -> tuple[float, float]:
    """(prompt per busy second, busy seconds): the calls' prompt tokens against the endpoints'
    busy time over ``spans`` (each endpoint's union of its calls' [sent, end], summed over
    endpoints): :func:`adev.analysis.figures.prompt_per_busy_s`."""
    from adev.analysis.figures import busy_time, prompt_per_busy_s
    busy = sum(busy_time(g["t_sent"].to_numpy(float), g["t_end"].to_numpy(float), t0, t1)
               for _, g in df.groupby("endpoint") for t0, t1 in spans)
    if busy <= 0:
        return math.nan, 0.0
    return prompt_per_busy_s(float(df["prompt"].sum()), prefill_tokens_per_s, busy), busy


def _pct(x: float) -> str:
    return "   -  " if x != x else f"{100 * x:5.1f}%"


def _table(t: pd.DataFrame, by: list[str]) -> str:
    head = "".join(f"{b:<14}" for b in by) + (f"{'calls':>6} {'of run':>7} {'mean':>7} {'p50':>7} "
                                              f"{'p90':>7} {'out':>6} {'growth':>7} {'gpu':>7} "
                                              f"{'store':>7} {'comp':>7}")
    lines = [head]
    for _, r in t.iterrows():
        g = "      -" if r["growth_mean"] != r["growth_mean"] else f"{r['growth_mean']:7.0f}"
        lines.append("".join(f"{str(r[b]):<14}" for b in by)
                     + f"{r['calls']:>6} {_pct(r['of_run']):>7} {r['prompt_mean']:7.0f} "
                     f"{r['prompt_p50']:7.0f} {r['prompt_p90']:7.0f} {r['completion_mean']:6.0f} "
                     f"{g} {_pct(r['gpu']):>7} {_pct(r['store']):>7} {_pct(r['computed']):>7}")
    return "\n".join(lines)


def report(df: pd.DataFrame, pool_tokens: int | None, running: dict[str, float] | None = None,
           span_s: float | None = None, spans: list[tuple[float, float]] | None = None,
           prefill_tokens_per_s: float | None = None) -> str:
    s = shares(df)
    out = [f"calls {len(df)}, sessions {df['session_id'].nunique()}, prompt tokens "
           f"{int(df['prompt'].sum())}: gpu {_pct(s['gpu'])}, store {_pct(s['store'])}, "
           f"computed {_pct(s['computed'])}",
           f"prompt tokens per call: mean {df['prompt'].mean():.0f}, p50 "
           f"{df['prompt'].median():.0f}, p90 {df['prompt'].quantile(0.9):.0f}, max "
           f"{df['prompt'].max():.0f}; completion tokens per call: mean "
           f"{df['completion_tokens'].astype(float).mean():.0f}, p50 "
           f"{df['completion_tokens'].astype(float).median():.0f}, p90 "
           f"{df['completion_tokens'].astype(float).quantile(0.9):.0f}",
           f"growth per step (tokens a step adds to its role turn): mean {df['growth'].mean():.0f}, "
           f"p50 {df['growth'].median():.0f}, p90 {df['growth'].quantile(0.9):.0f}; steps per role "
           f"turn: mean {df.groupby('turn').size().mean():.1f}, p50 "
           f"{df.groupby('turn').size().median():.0f}",
           f"store keys per call: mean {df['srv_store_keys_looked_up'].mean():.0f}; preemptions "
           f"{int(df['srv_preemptions'].fillna(0).sum())}"]
    if spans and prefill_tokens_per_s:
        x, busy = intensity(df, spans, prefill_tokens_per_s)
        out.append(f"prompt per busy second: {x:.2f} prefill-rates ({int(df['prompt'].sum())} "
                   f"prompt tokens / ({prefill_tokens_per_s:g} tokens/s x {busy:.0f} s busy, "
                   "endpoints summed); the summary's gross saving / store hit share is the same "
                   "ratio over its counters")
    if running:
        out.append("requests running (mean of scraped vllm:num_requests_running): "
                   + ", ".join(f"{k} {v:.2f}" for k, v in sorted(running.items())))
    if span_s:
        out.append(f"preemptions per 900 s: {df['srv_preemptions'].fillna(0).sum() * 900 / span_s:.1f}"
                   f" (span {span_s:.0f} s)")
    tv = turnover_before_calls(df)
    if len(tv):
        line = (f"turnover before a call (other calls' allocations on its endpoint since the "
                f"session's previous call there): p50 {tv.median():.0f}, p90 {tv.quantile(0.9):.0f}"
                f", max {tv.max():.0f} tokens")
        if pool_tokens:
            line += f"; above the pool for {(tv > pool_tokens).mean() * 100:.1f}% of calls"
        out.append(line)
    so = store_origin(df)
    out.append("store-served tokens by call kind: "
               + ", ".join(f"{k} {_pct(v)}" for k, v in so.items()))
    for title, by in (("by role and endpoint", ["role", "endpoint"]),
                      ("by round", ["round"]), ("by call kind and endpoint", ["kind", "endpoint"]),
                      ("by role and call kind", ["role", "kind"])):
        out += ["", title, _table(breakdown(df, by), by)]
    out += ["", "peak / mean tokens in flight per endpoint"
            + (f" (pool {pool_tokens} tokens)" if pool_tokens else "")]
    for ep, (peak, mean) in peak_concurrent_tokens(df).items():
        out.append(f"  {ep:<10} peak {peak:8.0f}  mean {mean:8.0f}"
                   + (f"  peak/pool {peak / pool_tokens:.2f}" if pool_tokens else ""))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, nargs="?",
                    help="run directory (default: the newest under results/runs)")
    ap.add_argument("--windows", action="store_true", help="only calls sent inside windows")
    a = ap.parse_args(argv)
    from adev.analysis.run import load_run
    from adev.config import ROOT
    if a.run is None:
        runs = sorted((p for p in (ROOT / "results" / "runs").glob("*/calls.jsonl")),
                      key=lambda p: p.stat().st_mtime)
        if not runs:
            print("workload_profile: no run under results/runs to profile (run `adev fleet`)")
            return 0
        a.run = runs[-1].parent
    try:
        run = load_run(a.run)
    except (FileNotFoundError, ValueError) as e:
        print(f"workload_profile: {e}", file=sys.stderr)
        return 2
    df = prepare(run.calls)
    spans = [(float(df["t_sent"].min()), float(df["t_end"].max()))] if len(df) else []
    if a.windows:
        ws = [w for w in run.measurement_windows() if w.get("valid", True)]
        spans = [(float(w["t0"]), float(w["t1"])) for w in ws]
        keep = np.zeros(len(df), dtype=bool)
        for w in ws:
            keep |= ((df["t_sent"] >= w["t0"]) & (df["t_sent"] < w["t1"])).to_numpy()
        df = df[keep]
    if not len(df):
        print(f"{a.run}: no successful calls with a tier split", file=sys.stderr)
        return 2
    pool = None
    stack = run.stack or {}
    for ep in (stack.get("endpoints") or []):
        pool = pool or ep.get("gpu_pool_tokens")
    pool = pool or (getattr(run.profile, "gpu_pool_tokens", None) if run.profile else None)
    print(f"run {run.run_id} width {run.width} pause {run.pause_s} "
          f"{'(windows only)' if a.windows else '(whole run)'}")
    running: dict[str, list[float]] = {}
    for t0, t1 in spans:
        for k, v in mean_gauge(run.scrapes, "vllm:num_requests_running", t0, t1).items():
            running.setdefault(k, []).append(v)
    span_s = sum(t1 - t0 for t0, t1 in spans) or None
    print(report(df, pool, {k: sum(v) / len(v) for k, v in running.items()}, span_s, spans,
                 run.prefill_tokens_per_s))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
