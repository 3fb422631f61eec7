"""``adev report RUN [RUN ...]`` and ``adev report --compare A B``: markdown + one self-contained
HTML page.

A RUN is a run directory (``manifest.json`` / ``calls.jsonl``) or a folder of run directories (a
night of a campaign). The report opens with each run's headline figures and their intervals and
the source study's figures beside ours, then the width sweep, the 12-session operating points,
latency, reuse, and per-window tables. A figure whose inputs are missing is printed as missing
with the reason, never filled in. Plots live in :mod:`.plots`, rendering in :mod:`.render`.

Also :func:`summarise_run` (a short text for the end of a fleet run) and :func:`write_report`
(what the fleet calls to write the full report of one run).
"""
from __future__ import annotations

import argparse
import datetime
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..config import DISK_CONFIGS
from ..stack.commands import heartbeat_real_s
from ..vllm_release import counts_waiting_lookups
from .aggregate import RunSummary, operating_points, summarise, sweep_table
from .faults import fault_rows, faults_md
from .figures import held_share, offload_heartbeat_model_s
from .loaded import Loaded, expand, is_run_dir, load_all, notes  # noqa: F401  (the report's API)
from .plots import OP_WIDTH, Figure, fig_hit_shares, fig_operating_points, fig_reuse, fig_saving_vs_width, fig_ttft_cdfs  # noqa: F401
from .render import PCT_COLS, Doc, change_text, label, md_table
from .render import fmt as _fmt
from .render import write as _write
from .run import load_run
from .shapes import judge_all, shapes_markdown
from .source import beside, beside_markdown
from .windows import ALL, window_table

WINDOW_COLS = ["window", "endpoint", "valid", "faults", "calls", "calls_failed", "busy_s", "busy_share",
               "gpu_hit_share", "store_hit_share", "gross_saving", "gross_saving_disk", "net_saving",
               "net_saving_full", "store_hit_rate", "refused_share", "preemptions",
               "ttft_send_p50", "ttft_send_p99"]
"""The per-window figures table."""
HOST_COLS = ["window", "endpoint", "ttft_model_err_p50", "ttft_model_err_p99",
             "store_read_over_p50", "store_read_over_p99", "store_late_share", "store_behind",
             "counter_resets", "scrape_gaps",
             "xcheck_gpu_rel", "xcheck_store_rel", "xcheck_disk_rel", "store_load_failed_tokens"]
"""The per-window table of how far this host and the scrapes were from the model."""
SWEEP_COLS = ["operating_point", "width", "runs", "interval_basis", "gross_saving", "gross_saving_lo",
              "gross_saving_hi", "gross_saving_quiet", "net_saving", "gross_saving_disk",
              "disk_share_of_saving", "gpu_hit_share", "store_hit_share", "store_hit_rate",
              "refused_share", "reuse_owner_share_cross_session", "reuse_share_cross_session"]
OP_COLS = ["operating_point", "label", "gross_saving",
           "gross_saving_quiet", "net_saving", "gross_saving_disk", "disk_share_of_saving",
           "gpu_hit_share", "store_hit_share", "store_hit_rate", "refused_share",
           "burst_windows", "windows"]


def _run_header(ld: Loaded) -> str:
    r, s = ld.run, ld.summary
    bits = [f"**{s.label}** (`{r.run_id}`)", f"width {_fmt(r.width)}", f"protocol {_fmt(r.protocol)}",
            f"configuration {_fmt(r.configuration)}", f"lease {_fmt(r.lease_ttl_s)} s",
            f"pause {_fmt(r.pause_s)} s", f"windows {s.windows} ({s.invalid_windows} invalid, "
            f"{s.burst_windows} with preemption bursts)"]
    if ((r.stack or {}).get("store") or {}).get("pressure_skip") is False:  # no pressure rule
        bits.insert(5, "every save offered (no pressure rule)")
    if r.fleet is not None:  # how its roles saw the history (fleets recorded before it: shared)
        bits.insert(5, f"role context {r.fleet.get('context', 'shared')}")
        # where its agents found the task spec (fleets recorded before the setting: the prompt)
        bits.insert(6, f"spec {r.fleet.get('spec', 'prompt')}")
    txt = " · ".join(bits) + "\n"
    txt += _releases_md(r)
    txt += clock_md(r)
    if r.torn:
        txt += f"\nRecords lost (lines torn by a crash mid-write, skipped): {r.torn}\n"
    if "windows" in r.missing:
        txt += f"\nNote: {r.missing['windows']}.\n"
    return txt


def clock_md(r: Any) -> str:
    """How long the run's held model clock stood still (its ``model_clock_held`` events), and
    where the run had a disk tier, how often its wall-timed offload heartbeat came in model time
    (:func:`adev.analysis.figures.offload_heartbeat_model_s`); empty for a run without them."""
    ev = r.events
    if ev is None or not len(ev) or "event" not in ev.columns:
        return ""
    det = [d for d in ev.loc[ev["event"] == "model_clock_held", "detail"] if isinstance(d, dict)]
    held_s = sum(float(d.get("held_wall_s", 0.0)) for d in det)
    wall_s = sum(float(d.get("wall_s", 0.0)) for d in det)
    if not det or wall_s <= 0:
        return ""
    h = held_share(held_s, wall_s)
    txt = (f"\nModel clock held {_fmt(h, unit='%')} of the wall time ({_fmt(held_s)} of "
           f"{_fmt(wall_s)} s): model time ran {_fmt((r.time_scale or math.nan) * (1 - h))} model s "
           f"per wall second against the time scale's {_fmt(r.time_scale)}.")
    store = (r.stack or {}).get("store") or {}
    if r.configuration in DISK_CONFIGS and r.time_scale and "offload_heartbeat_s" in store:
        nominal = float(store["offload_heartbeat_s"])
        real = heartbeat_real_s(nominal, float(r.time_scale))
        txt += (f" The disk tier's offload heartbeat (every {real} wall s) came every "
                f"{_fmt(offload_heartbeat_model_s(real, float(r.time_scale), h))} model s "
                f"({_fmt(real * float(r.time_scale))} with the clock never held; configured "
                f"{_fmt(nominal)}): objects chosen for eviction wait for it, so the figures that "
                "turn on RAM turnover (refused writes, the store's hits under a long lease) move "
                "with it.")
    return txt + "\n"


def _releases_md(r: Any) -> str:
    """The servers' releases (``endpoints.json``), and for a release whose prefix cache counter
    counts a waiting request at every step, where its GPU hit share comes from instead."""
    if not r.server_versions:
        return ""
    names = ", ".join(f"{ep} {v}" for ep, v in sorted(r.server_versions.items()))
    old = sorted(ep for ep, v in r.server_versions.items() if counts_waiting_lookups(v))
    txt = f"\nServers (GET /version): {names}.\n"
    if old:
        txt += (f"\nThe GPU hit share of {', '.join(old)} is taken from the calls' cached tokens "
                "less the store's hits (missing where the calls carry none): releases before "
                "vLLM 0.26.0 add a waiting request's prefix cache lookup to "
                "`vllm:prefix_cache_hits` at every scheduler step it waits (vLLM#43736).\n")
    return txt


def _reuse_md(ld: Loaded) -> str:
    ru = ld.summary.reuse
    if not ru:
        return f"- {ld.summary.label}: reuse ledger missing — {ld.summary.missing.get('reuse', 'no ledger')}"
    return (f"- {ld.summary.label} (`{ld.summary.run_id}`): {ru['touches']} touches, {ru['unique_blocks']} blocks; new "
            f"{_fmt(ru['share_new'], True)}; ownership view: same-session "
            f"{_fmt(ru.get('owner_share_same_session'), True)}, cross-session "
            f"{_fmt(ru.get('owner_share_cross_session'), True)}; last-toucher view: same-session "
            f"{_fmt(ru['share_same_session'], True)}, "
            f"cross-session {_fmt(ru['share_cross_session'], True)}; aged (> lease "
            f"{_fmt(ru['lease_ttl_s'])} s) {_fmt(ru['aged_share'], True)}; reuse distance p50 "
            f"{_fmt(ru['distance_p50_s'])} s, p99 {_fmt(ru['distance_p99_s'])} s, max "
            f"{_fmt(ru['distance_max_s'])} s")


def _missing_md(ld: Loaded) -> str:
    m = ld.summary.missing
    if not m:
        return ""
    return "Missing figures (reason):\n\n" + "\n".join(
        f"- `{k}`: {v}" for k, v in sorted(m.items())) + "\n"


def figure_line(s: RunSummary, name: str, fig: str, pctg: bool = True) -> str:
    """``name: mean (CV, 95% t-interval lo..hi over n windows)`` of one figure of run ``s``,
    or why it is missing. The CV (standard deviation / mean) is printed as a percentage."""
    st, iv = s.stats[fig], s.interval[fig]
    if st["n"] == 0:
        return f"{name}: — ({s.missing.get(fig, 'no valid window')})"
    txt = f"{name}: {_fmt(st['mean'], pctg)}"
    if st["n"] > 1:
        txt += (f" (CV {_fmt(st['cv'], unit='%')}, 95% t-interval {_fmt(iv['lo'], pctg)}.."
                f"{_fmt(iv['hi'], pctg)} over {st['n']} windows)")
    else:
        txt += " (1 window)"
    if st["n"] < s.windows - s.invalid_windows:
        txt += f"; missing in {s.windows - s.invalid_windows - st['n']} window(s): " + \
               str(s.missing.get(fig, "see report"))[:160]
    return txt


HEADLINE = (("Gross saving", "gross_saving"), ("Net saving", "net_saving"),
            ("Gross saving from the disk tier", "gross_saving_disk"),
            ("Disk tier's part of the saving", "disk_share_of_saving"),
            ("GPU hit share", "gpu_hit_share"), ("Store hit share", "store_hit_share"),
            ("Store hit rate", "store_hit_rate"), ("Refused writes", "refused_share"))
"""The headline figures, in the order a report opens with them."""


def _headline_md(ld: Loaded) -> str:
    s = ld.summary
    out = [f"**{s.label}**: {_fmt(s.width)} sessions, {s.protocol or '?'}, "
           f"{s.windows - s.invalid_windows} valid window(s) of {s.windows}", ""]
    out += [f"- {figure_line(s, name, fig)}" for name, fig in HEADLINE]
    ru = s.reuse or {}
    if ru:
        out.append(f"- Reuse of touches: cross-session {_fmt(ru.get('owner_share_cross_session'), True)}"
                   f", same-session {_fmt(ru.get('owner_share_same_session'), True)} (ownership "
                   "view: whether the session had touched the block before)")
    return "\n".join(out) + "\n"



def build_report(loaded: Sequence[Loaded], title: str | None = None) -> Doc:
    summ = [ld.summary for ld in loaded]
    doc = Doc(title or f"adev report: {len(loaded)} run(s)")
    doc.blocks.append("## Headline figures\n\n" + "\n".join(_headline_md(ld) for ld in loaded))
    doc.blocks.append("## The source study beside adev\n\nThe figures the source study measured on "
                      "real GPUs at the points of these runs, beside adev's:\n\n"
                      + beside_markdown(beside(summ)))
    doc.blocks.append("## Shapes of the source\n\nWhat the source says about how its figures move "
                      "between points, held against these runs:\n\n"
                      + shapes_markdown(judge_all(summ), only_judged=True))
    doc.blocks.append("## Runs\n\n" + "\n".join("- " + _run_header(ld).strip() for ld in loaded) + "\n")
    doc.blocks.append("## Width sweep\n\n" + md_table(sweep_table(summ), SWEEP_COLS))
    doc.blocks.append(fig_saving_vs_width(summ))
    doc.blocks.append(fig_hit_shares(summ))
    doc.blocks.append(f"## {OP_WIDTH}-session operating points\n\n"
                      + md_table(operating_points(summ, OP_WIDTH), OP_COLS))
    doc.blocks.append(fig_operating_points(summ))
    doc.blocks.append("## Latency\n")
    doc.blocks.append(fig_ttft_cdfs(loaded))
    doc.blocks.append("## Reuse\n\n" + "\n".join(_reuse_md(ld) for ld in loaded) + "\n")
    doc.blocks.append(fig_reuse(loaded))
    for ld in loaded:
        from .windows import cross_check
        xc = cross_check(ld.run)
        doc.blocks.append(faults_md(ld.run, ld.summary.label))
        doc.blocks.append(f"## Per-window figures: {ld.summary.label}\n\n" + _run_header(ld) + "\n"
                          + md_table(ld.table, WINDOW_COLS) + "\n"
                          + "How far this host was from the model, and scrape health:\n\n"
                          + md_table(ld.table, HOST_COLS) + "\n"
                          + "Cross-check over the measured span (counters vs the emulator's per-request "
                          "tier split; empty without scrapes):\n\n" + md_table(xc) + "\n"
                          + _missing_md(ld))
    return doc


def build_compare(a: Sequence[Loaded], b: Sequence[Loaded], la: str, lb: str) -> Doc:
    sa, sb = [ld.summary for ld in a], [ld.summary for ld in b]
    doc = Doc(f"adev compare: {la} vs {lb}")
    ta, tb = sweep_table(sa), sweep_table(sb)
    cols = ["gross_saving", "net_saving", "gross_saving_disk", "gpu_hit_share", "store_hit_share",
            "store_hit_rate", "refused_share", "ttft_send_p50"]
    rows = []
    keys = []
    for t in (ta, tb):
        for r in t.itertuples() if len(t) else []:
            if r.width is not None and not (isinstance(r.width, float) and math.isnan(r.width)):
                if (r.operating_point, r.width) not in keys:
                    keys.append((r.operating_point, r.width))
    for op, w in sorted(keys, key=lambda k: (k[0], k[1])):
        ra = ta[(ta["operating_point"] == op) & (ta["width"] == w)] if len(ta) else ta
        rb = tb[(tb["operating_point"] == op) & (tb["width"] == w)] if len(tb) else tb
        for c in cols:
            va = float(ra[c].iloc[0]) if len(ra) else math.nan
            vb = float(rb[c].iloc[0]) if len(rb) else math.nan
            rows.append({"point": op, "width": int(w), "figure": c, la: va, lb: vb,
                         "delta (B-A)": vb - va})
    cmp = pd.DataFrame(rows)
    txt = "## Side by side (means per width)\n\n"
    if len(cmp):
        lines = ["| Operating point | Width (sessions) | Figure | " + la + " | " + lb + " | "
                 + f"{lb} − {la} |", "|---|---|---|---|---|---|"]
        for r in rows:
            p = r["figure"] in PCT_COLS
            lines.append(f"| {r['point']} | {r['width']} | {label(r['figure'])} | {_fmt(r[la], p)} | "
                         f"{_fmt(r[lb], p)} | {change_text(r['delta (B-A)'], '%' if p else None)} |")
        txt += "\n".join(lines) + "\n"
    else:
        txt += "**Missing:** neither side has runs with a width in its manifest\n"
    doc.blocks.append(txt)
    doc.blocks.append(fig_saving_vs_width(sa + sb, labels=[la, lb], groups=[sa, sb]))
    doc.blocks.append(fig_ttft_cdfs(list(a) + list(b),
                                    labels=[f"{la}: {ld.summary.label}" for ld in a]
                                    + [f"{lb}: {ld.summary.label}" for ld in b]))
    doc.blocks.append(f"## {la}\n\n" + md_table(ta, SWEEP_COLS))
    doc.blocks.append(f"## {lb}\n\n" + md_table(tb, SWEEP_COLS))
    return doc


def write_report(paths: Sequence[str | Path] | str | Path, out: str | Path | None = None,
                 with_reuse: bool = True) -> Path:
    """Build and write the report of ``paths``; returns the HTML path. Default output: inside the
    run directory for one run, else ``results/reports/report-<UTC time>``. Replay runs (all of
    ``paths``) get the replay report instead, by default beside them (``<folder>/report``)."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    runs = expand(paths)
    if runs and all(_is_replay(p) for p in runs):
        return _write_replay(runs, out)
    loaded = load_all(paths, with_reuse)
    if out is None:
        if len(loaded) == 1:
            out = loaded[0].run.path / "report"
        else:
            from ..config import ROOT
            ts = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
            out = ROOT / "results" / "reports" / f"report-{ts}"
    return _write(build_report(loaded), Path(out))


def _is_replay(p: Path) -> bool:
    """Whether ``p`` is a replay run (its manifest carries the replay's options)."""
    from ..records import RecordError, RunDir
    try:
        return "replay" in RunDir(p).manifest()
    except RecordError:
        return False


def _write_replay(runs: Sequence[Path], out: str | Path | None) -> Path:
    """The replay report (:mod:`adev.replay.report`) of replay runs, their summaries computed
    afresh from their records. What a run's own summary holds beyond them (its schedule's
    counts, which no record keeps) is carried over, never dropped."""
    from ..records import RecordError, RunDir, read_json
    from ..replay.report import write as write_replay
    from ..replay.summary import summarise as summarise_replay
    for p in runs:
        fresh = summarise_replay(p)
        old = p / "summary.json"
        if old.exists():
            kept = read_json(old, "a replay summary adev wrote", RecordError)
            fresh.update({k: v for k, v in kept.items() if k not in fresh})
        RunDir(p).write_json("summary.json", fresh)
    if out is None:
        out = (runs[0].parent if len({p.parent for p in runs}) == 1 else runs[0]) / "report"
    title = f"Replay: {', '.join(sorted({p.parent.name for p in runs}))}"
    return write_replay(runs, Path(out), title)


def write_compare(a: str | Path, b: str | Path, out: str | Path | None = None,
                  with_reuse: bool = True) -> Path:
    la, lb = Path(a).name, Path(b).name
    if la == lb:
        la, lb = f"A:{la}", f"B:{lb}"
    doc = build_compare(load_all([a], with_reuse), load_all([b], with_reuse), la, lb)
    if out is None:
        from ..config import ROOT
        ts = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
        out = ROOT / "results" / "reports" / f"compare-{ts}"
    return _write(doc, Path(out))


def summarise_run(path: str | Path) -> str:
    """A short text summary of one run (the fleet prints it at the end of a run)."""
    run = load_run(path)
    t = window_table(run)
    s = summarise(run, t, with_reuse=True)
    a = t[(t["endpoint"] == "ALL") & t["valid"].astype(bool)] if len(t) else t
    across = sorted({n for f in (a["faults"] if len(a) else []) for n in f.split(", ") if n})
    tag = f" [across faults: {', '.join(across)}]" if across else ""

    def line(name: str, fig: str, pctg: bool = True) -> str:
        return "  " + figure_line(s, name, fig, pctg) + (tag if s.stats[fig]["n"] else "")

    out = [f"run {s.run_id}: width {_fmt(s.width)}, {s.protocol or '?'}, {s.windows} window(s)"
           f" ({s.invalid_windows} invalid, {s.burst_windows} with preemption bursts)",
           line("gross saving", "gross_saving"), line("net saving", "net_saving"),
           line("disk tier's part", "gross_saving_disk"),
           line("GPU hit share", "gpu_hit_share"), line("store hit share", "store_hit_share"),
           line("store hit rate", "store_hit_rate"), line("refused writes", "refused_share"),
           line("TTFT p50 (s)", "ttft_send_p50", False)]
    if (s.stats.get("ttft_model_err_p99") or {}).get("n"):  # emulated stack only
        out += [line("TTFT over the emulator's model, p50", "ttft_model_err_p50"),
                line("TTFT over the emulator's model, p99", "ttft_model_err_p99")]
    if (s.stats.get("store_read_over_p99") or {}).get("n"):  # emulated stack with a store
        out += [line("real store reads / tier profile, p50 (x)", "store_read_over_p50", False),
                line("real store reads / tier profile, p99 (x)", "store_read_over_p99", False)]
        out.append(line("store reads behind the profile (share of calls)", "store_late_share"))
        if (s.stats.get("read_overrun_s") or {}).get("n"):
            out.append(line("model time past reads' modelled ends (model s per window)",
                            "read_overrun_s", False))
        over = s.mean("store_read_over_p50")
        rows = t[t["endpoint"] == ALL] if "endpoint" in t else t
        behind = int((rows["store_behind"] == 1.0).sum()) if "store_behind" in rows else 0
        held = ((run.stack or {}).get("model_clock") or "free") == "held"
        if over > 1:
            ov = s.mean("read_overrun_s")
            leak = (f" (but model time passed their modelled ends by {ov:.3g} model s per window "
                    "before they ended: that much of the host's time is in the figures)"
                    if held and ov > 1e-6 else "")
            effect = ("model time waited for them (held model clock), so their time reaches no "
                      f"figure{leak} and the run took longer on the wall; TTFT over the emulator's "
                      "model says how much other host time still reached the client" if held else
                      "first tokens waited for them (free model clock), so TTFT and busy time "
                      "include host time")
            out.append(f"  note: this host's real store reads took {over:.3g}x the tier profile's time "
                       f"(median call; time scale {_fmt(run.time_scale)}; {behind} window(s) behind); "
                       f"{effect}. bench/bench_store_io.py prints the largest time scale at which "
                       "each read path keeps pace on this host.")
    if s.burst_windows and s.quiet["gross_saving"]["n"]:
        out.append(f"  gross saving, quiet windows: {_fmt(s.quiet['gross_saving']['mean'], True)}")
    if s.reuse:
        out.append(f"  reuse, ownership view: same-session "
                   f"{_fmt(s.reuse.get('owner_share_same_session'), True)}, cross-session "
                   f"{_fmt(s.reuse.get('owner_share_cross_session'), True)}; last-toucher view: "
                   f"same-session {_fmt(s.reuse['share_same_session'], True)}, cross-session "
                   f"{_fmt(s.reuse['share_cross_session'], True)}; aged "
                   f"{_fmt(s.reuse['aged_share'], True)}")
    xc = s.xcheck or {}
    got = [xc.get(k) for k in ("xcheck_gpu_rel", "xcheck_store_rel", "xcheck_disk_rel")]
    vals = [v for v in got if v is not None and not math.isnan(v)]
    if vals:
        worst = max(vals)
        txt = f"  counters vs emulator per-request tier split (measured span): max rel. diff {_fmt(worst)}"
        failed = xc.get("store_load_failed_tokens")
        if worst > 0.01:
            txt += " (> 1%)"
        if failed and not math.isnan(failed):
            txt += (f"; {failed:.0f} store-hit tokens failed to load (recomputed, not counted as "
                    "store-served)")
        out.append(txt)
    for r in fault_rows(run):
        if r["valid"] == "outside":
            out.append(f"  {r['window']} the windows: {r['failed_calls']} failed calls, "
                       f"{r['store_error_calls']} calls with store errors, "
                       f"{r['sessions_ended_llm_error']} sessions ended with llm_error")
            continue
        if r["faults"] == "none" and not (r["failed_calls"] or r["store_error_calls"]
                                          or r["sessions_ended_llm_error"]):
            continue
        out.append(f"  window {r['window']}: {'valid' if r['valid'] else 'INVALID'}, faults: "
                   f"{r['faults']}; {r['failed_calls']} failed calls, {r['store_error_calls']} "
                   f"calls with store errors, {r['sessions_ended_llm_error']} sessions ended "
                   "with llm_error")
    if run.torn:
        out.append(f"  records lost (lines torn by a crash mid-write, skipped): {run.torn}")
    if "windows" in run.missing:
        out.append(f"  note: {run.missing['windows']}")
    return "\n".join(out)


# -----------------------------------------------------------------------------------------------
# CLI


def _main(args: argparse.Namespace) -> int:
    from ..records import RecordError
    notes.clear()
    try:
        if args.compare:
            p = write_compare(args.compare[0], args.compare[1], args.out, not args.no_reuse)
        elif args.runs:
            p = write_report(args.runs, args.out, not args.no_reuse)
        else:
            print("adev report: give RUN [RUN ...] or --compare A B", file=sys.stderr)
            return 2
    except (FileNotFoundError, RecordError) as e:
        print(f"adev report: {e}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"adev report: {note}", file=sys.stderr)
    print(p.with_suffix(".md"))
    print(p)
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("report", help="tables and plots of runs (markdown + HTML)",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="*", metavar="RUN",
                   help="run directory, or a folder of run directories (a night)")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"),
                   help="compare two runs or two folders of runs (nights)")
    p.add_argument("--out", help="output path without suffix (writes OUT.md, OUT.html, OUT_files/)")
    p.add_argument("--no-reuse", action="store_true", help="skip the reuse ledger")
    p.set_defaults(func=_main)
