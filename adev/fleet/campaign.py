"""``adev nightly``: run a campaign of fleets and compare the night with the previous one.

A campaign file (``fleets/nightly.toml``, :class:`~adev.fleet.config.CampaignConfig`) names a base
fleet and its points (width sweep 1, 2, 6, 12, 18; at 12 sessions the operating points disk tier
on/off, local vs remote disk profile, short vs 300 s lease). Each night gets one folder
``results/nights/<date>/`` holding one run directory per point (``<date>/<point>/``),
``night.json`` (points, runs, exit codes, figures) and ``comparison.md`` / ``comparison.json``
against the previous night (the latest earlier folder). A figure is **flagged** when
``|new - old| > abs_floor`` and ``|new - old| / |old| > threshold`` (old = 0: the absolute test
alone). Figures are the numeric leaves of the measurement stage's run figures
(:func:`point_figures`); a figure missing on either night is listed as missing, never compared.

``--quick`` applies the campaign's ``[campaign.quick]`` table (fewer points, capped width,
short windows, high time scale) so tests and smoke runs finish in minutes.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import sys
from pathlib import Path
from typing import Any

from ..analysis.render import change_text, fmt, label, unit_of
from ..config import ROOT, ConfigError, StackConfig, from_dict
from .config import CampaignConfig, CampaignPoint, FleetConfig, load_campaign, load_fleet, resolve_path, set_dotted

DEFAULT_CAMPAIGN = ROOT / "fleets" / "nightly.toml"


def point_fleet(camp: CampaignConfig, base_dir: Path, point: CampaignPoint, *,
                quick: bool = False, extra: dict[str, Any] | None = None) -> FleetConfig:
    """The fleet of one point: base fleet file + campaign overrides + point + quick + extra."""
    fleet_path = resolve_path(camp.fleet, base_dir)
    ov: dict[str, Any] = {**camp.fleet_overrides, **point.fleet}
    if quick:
        ov.update(camp.quick.fleet)
        if camp.quick.width_cap and int(ov.get("width", 1)) > camp.quick.width_cap:
            ov["width"] = camp.quick.width_cap
    ov.update({k: v for k, v in (extra or {}).items() if v is not None})
    where = f"campaign.points[{point.name}]"
    try:
        cfg, fbase = load_fleet(fleet_path, ov)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    st = dataclasses.asdict(cfg.stack_config(fbase))
    stack_ov = {**(camp.quick.stack if quick else {}), **point.stack}
    for k, v in stack_ov.items():
        set_dotted(st, k, v)
    try:
        stack = from_dict(StackConfig, st, f"{where}.stack")
    except ConfigError as e:
        raise ConfigError(str(e)) from None
    return dataclasses.replace(cfg, stack=stack, time_scale=None, name=point.name)


def selected_points(camp: CampaignConfig, quick: bool, only: list[str] | None) -> list[CampaignPoint]:
    names = [p.name for p in camp.points]
    if only:
        bad = [n for n in only if n not in names]
        if bad:
            raise ConfigError(f"--points: unknown point(s) {bad}; points: {', '.join(names)}")
        return [p for p in camp.points if p.name in only]
    if quick and camp.quick.points:
        return [p for p in camp.points if p.name in camp.quick.points]
    return list(camp.points)


# --------------------------------------------------------------------------------------------
# Figures and the night-to-night comparison


def _flatten(d: Any, prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}."))
    elif isinstance(d, (int, float)) and not isinstance(d, bool):
        if math.isfinite(float(d)):
            out[prefix[:-1]] = float(d)
    return out


def point_figures(run_path: Path) -> tuple[dict[str, float], str | None]:
    """Figures of one run for the comparison: the measurement stage's run summary
    (:func:`adev.analysis.aggregate.summarise`): the mean over valid windows of each key figure
    and the reuse shares. A figure that is missing (NaN) is left out. (figures, why missing)."""
    try:
        from ..analysis.aggregate import KEY_FIGURES, REUSE_KEYS, summarise
        from ..analysis.run import load_run
        s = summarise(load_run(run_path))
    except Exception as e:
        return {}, f"{type(e).__name__}: {e}"
    figs: dict[str, float | None] = {f: s.mean(f) for f in KEY_FIGURES}
    for k in REUSE_KEYS:
        figs[f"reuse_{k}"] = (s.reuse or {}).get(k)
    return _flatten(figs), (None if s.stats else "no figures")


def compare(new: dict[str, dict[str, float]], old: dict[str, dict[str, float]],
            threshold: float, abs_floor: float) -> list[dict[str, Any]]:
    """One row per (point, figure) present on either night; ``flag`` True when it moved."""
    rows = []
    for point in sorted(set(new) | set(old)):
        a, b = old.get(point, {}), new.get(point, {})
        for fig in sorted(set(a) | set(b)):
            o, n = a.get(fig), b.get(fig)
            row: dict[str, Any] = {"point": point, "figure": fig, "old": o, "new": n,
                                   "change": None, "rel": None, "flag": False}
            if o is None or n is None:
                row["missing"] = "previous night" if o is None else "this night"
            else:
                d = n - o
                row["change"] = d
                row["rel"] = (d / abs(o)) if o != 0 else None
                big = abs(d) > abs_floor
                row["flag"] = big and (o == 0 or abs(d) / abs(o) > threshold)
            rows.append(row)
    return rows


def source_beside_markdown(runs: list[str]) -> str:
    """The source study's figures beside this night's (:mod:`adev.analysis.source`)."""
    from ..analysis.aggregate import summarise
    from ..analysis.run import load_run
    from ..analysis.shapes import judge_all, shapes_markdown
    from ..analysis.source import beside, beside_markdown
    summaries, failed = [], []
    for r in runs:
        try:
            summaries.append(summarise(load_run(r)))
        except Exception as e:  # a point whose run cannot be read is listed, not fatal
            failed.append(f"- `{r}`: {type(e).__name__}: {e}")
    txt = "## The source study beside this night\n\n" + beside_markdown(beside(summaries))
    txt += "\n## Shapes of the source\n\n" + shapes_markdown(judge_all(summaries))
    if failed:
        txt += "\nRuns that could not be read:\n\n" + "\n".join(failed) + "\n"
    return txt


def previous_night(root: Path, current: str) -> Path | None:
    nights = sorted(p for p in root.iterdir() if p.is_dir() and p.name < current
                    and (p / "night.json").exists()) if root.exists() else []
    return nights[-1] if nights else None


def comparison_markdown(rows: list[dict[str, Any]], prev: str | None, cur: str,
                        threshold: float) -> str:
    if prev is None:
        return f"# Night {cur}\n\nNo previous night to compare with.\n"
    flagged = [r for r in rows if r["flag"]]
    lines = [f"# Night {cur} vs {prev}", "",
             f"{len(flagged)} figure(s) moved by more than {threshold:.0%} (flagged **MOVED**).",
             "", "| Point | Figure | Previous night | This night | Change | |", "|---|---|---:|---:|---:|---|"]
    for r in rows:
        unit = unit_of(r["figure"])
        old, new = ("missing" if v is None else fmt(v, unit=unit) for v in (r["old"], r["new"]))
        rel = "" if r["rel"] is None else f" ({r['rel']:+.1%})"
        mark = "**MOVED**" if r["flag"] else ("missing: " + r["missing"] if r.get("missing") else "")
        ch = "" if r["change"] is None else change_text(r["change"], unit) + rel
        lines.append(f"| {r['point']} | {label(r['figure'])} | {old} | {new} | {ch} | {mark} |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------


def run_campaign(path: str | Path | None = None, *, quick: bool = False, date: str | None = None,
                 only: list[str] | None = None, results_dir: str | None = None,
                 extra: dict[str, Any] | None = None, deps: Any = None, out=None,
                 live: str | None = None) -> tuple[Path, int]:
    from .cli import print_outcome
    from .runner import run_fleet

    out = out or sys.stdout
    camp, base_dir = load_campaign(path or DEFAULT_CAMPAIGN)
    points = selected_points(camp, quick, only)
    fleets = [(p, point_fleet(camp, base_dir, p, quick=quick, extra=extra)) for p in points]
    root = Path(results_dir or camp.results_dir)
    root = root if root.is_absolute() else ROOT / root
    date = date or datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    night = root / date
    k = 2
    while night.exists():
        night = root / f"{date}-{k}"
        k += 1
    night.mkdir(parents=True)
    doc: dict[str, Any] = {"campaign": camp.name, "night": night.name, "quick": quick,
                           "started_at": datetime.datetime.now(datetime.UTC).isoformat(),
                           "points": {}}
    worst = 0
    for p, cfg in fleets:
        assert isinstance(cfg.stack, StackConfig)  # point_fleet resolved it
        print(f"== {p.name}: width {cfg.width}, {cfg.protocol}, stack "
              f"{cfg.stack.configuration} / {cfg.stack.store.disk_tier} / lease "
              f"{cfg.stack.store.lease_ttl_s:g} s", file=out, flush=True)
        try:
            outcome = run_fleet(cfg, deps=deps, out=out, live=live, run_path=night / p.name)
        except Exception as e:
            doc["points"][p.name] = {"run": None, "exit_code": 1,
                                     "error": f"{type(e).__name__}: {e}", "figures": {}}
            worst = 1
            print(f"   {p.name}: failed: {e}", file=out, flush=True)
            _write(night / "night.json", doc)
            continue
        print_outcome(outcome, out)
        figs, why = point_figures(outcome.run_dir)
        doc["points"][p.name] = {"run": str(outcome.run_dir), "exit_code": outcome.exit_code,
                                 "wall_s": outcome.wall_s, "figures": figs,
                                 "figures_missing": why,
                                 "windows_valid": sum(1 for w in outcome.windows if w.get("valid"))}
        worst = max(worst, outcome.exit_code)
        _write(night / "night.json", doc)
        if outcome.stopped:
            break
    doc["finished_at"] = datetime.datetime.now(datetime.UTC).isoformat()
    _write(night / "night.json", doc)
    prev = previous_night(root, night.name)
    new = {k: v.get("figures") or {} for k, v in doc["points"].items()}
    old = {}
    if prev is not None:
        pdoc = json.loads((prev / "night.json").read_text())
        old = {k: v.get("figures") or {} for k, v in pdoc.get("points", {}).items()}
    rows = compare(new, old, camp.threshold, camp.abs_floor) if prev else []
    _write(night / "comparison.json", {"previous": prev.name if prev else None,
                                       "threshold": camp.threshold, "abs_floor": camp.abs_floor,
                                       "rows": rows})
    md = comparison_markdown(rows, prev.name if prev else None, night.name, camp.threshold)
    md += "\n" + source_beside_markdown([v["run"] for v in doc["points"].values() if v.get("run")])
    (night / "comparison.md").write_text(md)
    flagged = [r for r in rows if r["flag"]]
    print(f"\nnight {night}: {len(doc['points'])} point(s); compared with "
          f"{prev.name if prev else 'no previous night'}: {len(flagged)} figure(s) flagged",
          file=out)
    for r in flagged:
        print(f"  MOVED {r['point']} {r['figure']}: {r['old']:.4g} -> {r['new']:.4g}", file=out)
    print(f"comparison: {night / 'comparison.md'}", file=out, flush=True)
    return night, worst


def _write(p: Path, obj: Any) -> None:
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str))
    tmp.replace(p)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("nightly", help="run the nightly campaign and compare with last night",
                       description="Run every point of a campaign file (width sweep and "
                                   "operating points) into results/nights/<date>/ and compare "
                                   "its figures with the previous night.")
    p.add_argument("--config", metavar="FILE", help="campaign file (default fleets/nightly.toml)")
    p.add_argument("--quick", action="store_true",
                   help="scaled-down campaign (the file's [campaign.quick] table)")
    p.add_argument("--points", help="comma-separated point names to run")
    p.add_argument("--date", help="night folder name (default: today, UTC)")
    p.add_argument("--results-dir", metavar="DIR")
    p.add_argument("--time-scale", type=float, metavar="S")
    p.add_argument("--windows", type=int)
    p.add_argument("--window-length", type=float, metavar="S")
    p.add_argument("--live", choices=["auto", "rich", "plain", "off"])
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    only = [x.strip() for x in args.points.split(",")] if args.points else None
    extra = {"time_scale": args.time_scale, "windows.count": args.windows,
             "windows.length_s": args.window_length}
    _, code = run_campaign(args.config, quick=args.quick, date=args.date, only=only,
                           results_dir=args.results_dir, extra=extra, live=args.live)
    return code
