"""The replay's time scale chosen from a pilot on this host (``adev replay --time-scale auto``,
the default on the embedded stack).

On the embedded stack the store's reads are real Mooncake reads, done beside the tier profile's
modelled read; at time scale S a modelled read of ``m`` model seconds has ``m / S`` wall seconds.
The held clock keeps a slower real read out of the figures (model time waits for it), but the
study's headline figure is user TTFT, so the replay also runs where the reads keep pace: at a time
scale at which this host's reads are not slower than the profile.

How the scale is chosen (:func:`choose_time_scales`):

Each configuration with a store has its own pilots (its reads take their own path: RAM, a
disk tier behind RAM, or the disk alone); ``recompute`` and ``gpu-only`` read nothing and run at
the stack's scale.

1. A *pilot* replays :data:`PILOT_TURNS` consecutive turns from the middle of each of the first
   ``active`` selected sessions (:func:`pilot_sessions`) on a fresh stack of the configuration
   at the stack's own time scale ``S0``, with the short-gap schedule and round-robin routing: a later
   turn then goes to the other prefill replica about half of the time and loads its prefix
   from the store. So the pilot reads prefixes of the sizes the run reads most (a session's
   first turns read short ones, whose fixed costs per read weigh more), under the replay's own
   concurrency and process layout.
2. Its ratio ``r`` = the median, over the calls that loaded store hits, of the real read path
   against the modelled one (:func:`adev.analysis.figures.store_read_over_profile`, the figure
   every replay run reports as ``store_read_over_profile_p50``).
3. :func:`next_scale`: where ``r <= TARGET`` the scale stays; else the next pilot runs at
   ``S * TARGET / r`` rounded down to a multiple of :data:`STEP`. Where that is below the
   lowest scale allowed (``--min-time-scale``, default :data:`MIN_SCALE`), the reads cannot
   keep pace at any scale worth its wall time on this host (short prefixes, whose reads are
   mostly fixed costs, may not keep pace even in real time): the run goes at ``S0``, and the
   held clock keeps the slower reads out of the figures.
   A real read's wall time does not grow at a lower scale (which loads the host less per wall
   second), so the ratio tends to fall in proportion to the scale; pilots at one scale scatter
   (by tens of percent on a 2-core host), so a step can land above the target, and a later
   pilot checks it. At most ``max_pilots`` pilots run per
   configuration; the last one's scale is the choice, ``verified`` only if its own pilot met
   the target.

A configuration with a disk tier starts at ``S0`` = the stack's scale, at most the offload
heartbeat's (:func:`adev.replay.experiment.scale_for`: 10 for the default heartbeat).

The scale only ever goes down from ``S0``: a lower S lengthens the run on the wall and changes no
modelled duration. A pilot whose calls loaded fewer than :data:`MIN_LOADED` store hits cannot
judge the reads: the scale stays, with that reason. Against an external stack (real vLLM, time
scale 1) there is nothing to choose.

The pilots' run directories stay in ``<out>/.pace/`` and the choices, with every pilot's
figures, in ``<out>/pace.json`` (configuration -> choice) and in each run's manifest
(``time_scale_choice``).
"""
from __future__ import annotations

import dataclasses
import json
import math
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..config import STORELESS, StackConfig
from .format import Call, Trace

TARGET = 1.0
"""The pilot's median real read / profile aimed for: below the median at which a run's reads
count as keeping pace (:data:`adev.replay.summary.READS_AT_PACE`), so that a run at the chosen
scale has room for its own noise."""
STEP = 0.5
"""Chosen scales are multiples of this."""
MIN_SCALE = 2.0
"""The lowest scale chosen by default: a run at most five times as long on the wall as at the
stack's default scale of 10."""
MIN_LOADED = 8
"""Calls with store hits a pilot needs to judge the reads."""
PILOT_TURNS = 4
"""Turns of each session a pilot replays."""
PILOT_CONFIGURATION = "store-ram"
"""The configuration a lone :func:`choose_time_scale` pilots."""


@dataclasses.dataclass(frozen=True)
class Pilot:
    """One pilot run: its scale, calls, calls that loaded store hits, the read ratio's median
    and p99 over those (None where it has no such call), and its run directory (relative to the
    replay's output folder)."""
    time_scale: float
    calls: int
    loaded_calls: int
    read_over_profile_p50: float | None
    read_over_profile_p99: float | None
    run: str


@dataclasses.dataclass(frozen=True)
class PaceChoice:
    """The time scale a replay runs at and how it was chosen."""
    start_scale: float
    time_scale: float
    verified: bool
    reason: str
    target: float = TARGET
    pilots: tuple[Pilot, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def next_scale(scale: float, ratio: float, min_scale: float = MIN_SCALE) -> float | None:
    """The next scale to try after a pilot at ``scale`` read at ``ratio`` x the profile:
    ``scale`` where ``ratio <= TARGET``, else ``want = scale x TARGET / ratio`` rounded down to a
    multiple of :data:`STEP` (``min_scale`` itself where that is below it); None where ``want``
    is below ``min_scale`` (the reads would keep pace only at a lower scale)."""
    if ratio <= TARGET:
        return scale
    want = scale * TARGET / ratio
    if want < min_scale:
        return None
    return min(scale, max(min_scale, math.floor(want / STEP + 1e-9) * STEP))


def pilot_sessions(sessions: Sequence[Sequence[Call]], active: int) -> list[list[Call]]:
    """The pilot's calls: of each of the first ``active`` sessions, the :data:`PILOT_TURNS`
    consecutive turns from ``(turns - PILOT_TURNS) // 2`` on (all of a shorter session). Each
    call's prompt is whole in the trace, so the slice's first turn computes its prompt and the
    next ones find it cached."""
    out = []
    for s in sessions[:max(1, active)]:
        m = max(0, (len(s) - PILOT_TURNS) // 2)
        out.append(list(s[m:m + PILOT_TURNS]))
    return out


def _pilot(summary: dict[str, Any], scale: float, run: Path) -> Pilot:
    return Pilot(time_scale=scale, calls=int(summary.get("ok_calls") or 0),
                 loaded_calls=int(summary.get("store_read_calls") or 0),
                 read_over_profile_p50=summary.get("store_read_over_profile_p50"),
                 read_over_profile_p99=summary.get("store_read_over_profile_p99"),
                 run=str(run))


def decide(start: float, pilots: Sequence[Pilot], max_pilots: int,
           min_scale: float = MIN_SCALE) -> tuple[float | None, PaceChoice | None]:
    """After ``pilots`` (in order): ``(scale of the next pilot, None)`` or ``(None, the choice)``."""
    last = pilots[-1]
    s = last.time_scale
    if last.loaded_calls < MIN_LOADED or last.read_over_profile_p50 is None:
        return None, PaceChoice(start, s, False, f"the pilot at S = {s:g} loaded store hits in "
                                f"{last.loaded_calls} calls (fewer than {MIN_LOADED}): too few to "
                                "judge the reads; the scale stays", pilots=tuple(pilots))
    r = last.read_over_profile_p50
    if r <= TARGET:
        return None, PaceChoice(start, s, True, f"the pilot at S = {s:g} read at {r:.2f} x the "
                                f"profile (median; target {TARGET:g})", pilots=tuple(pilots))
    nxt = next_scale(s, r, min_scale)
    if nxt is None or nxt >= s:
        return None, PaceChoice(start, start, False, f"the pilot at S = {s:g} read at {r:.2f} x "
                                f"the profile: the reads would keep pace only at S = "
                                f"{s * TARGET / r:.2f}, below the lowest allowed {min_scale:g}; "
                                f"the run goes at S = {start:g} (the held clock keeps the slower "
                                "reads out of the figures)", pilots=tuple(pilots))
    if len(pilots) >= max_pilots:
        return None, PaceChoice(start, nxt, False, f"the pilot at S = {s:g} read at {r:.2f} x "
                                f"the profile; S = {nxt:g} is not checked by a pilot "
                                f"({max_pilots} pilots run)", pilots=tuple(pilots))
    return nxt, None


async def choose_time_scales(trace: Trace, sessions: Sequence[Sequence[Call]], base: StackConfig,
                             names: Sequence[str], opts: Any, out_dir: Path, *, log=print,
                             max_pilots: int = 3, min_scale: float = MIN_SCALE
                             ) -> dict[str, PaceChoice]:
    """The time scale of each configuration in ``names``: pilots (module docstring) for each
    configuration with a store, the stack's scale for the others. Written to
    ``out_dir/pace.json`` (configuration -> choice)."""
    from .experiment import CONFIGURATIONS, scale_for
    out: dict[str, PaceChoice] = {}
    start = float(base.time_scale)
    for name in names:
        if base.mode == "external":
            out[name] = PaceChoice(start, start, False, "external stack: its time scale is kept")
        elif CONFIGURATIONS[name][0] in STORELESS:
            out[name] = PaceChoice(start, start, False, "no store reads in this configuration: "
                                   "the stack's scale")
        else:   # a disk tier's configuration starts at most at the heartbeat's scale (scale_for)
            at = dataclasses.replace(base, time_scale=scale_for(base, name))
            out[name] = await choose_time_scale(trace, sessions, at, opts, out_dir,
                                                configuration=name, log=log,
                                                max_pilots=max_pilots, min_scale=min_scale)
        log(f"replay pace: {name}: time scale {out[name].time_scale:g} ({out[name].reason})")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "pace.json").write_text(json.dumps({k: v.to_dict() for k, v in out.items()},
                                                  indent=2) + "\n")
    return out


async def choose_time_scale(trace: Trace, sessions: Sequence[Sequence[Call]], base: StackConfig,
                            opts: Any, out_dir: Path, *, configuration: str = PILOT_CONFIGURATION,
                            log=print, max_pilots: int = 3, min_scale: float = MIN_SCALE
                            ) -> PaceChoice:
    """Run pilots (module docstring) of ``configuration`` on the embedded stack ``base`` and
    return the choice; the pilots' runs go to ``out_dir/.pace/pilot-<configuration>-S<scale>``."""
    from .experiment import run_one, stack_for
    calls = pilot_sessions(sessions, opts.active)
    pace_dir = out_dir / ".pace"
    start = float(base.time_scale)
    popts = dataclasses.replace(opts, experiment="short", routing="round-robin", seed=0)
    pilots: list[Pilot] = []
    scale = start
    try:
        while True:
            stack = stack_for(dataclasses.replace(base, time_scale=scale), configuration,
                              pace_dir / ".stacks")
            log(f"replay pace: {configuration}: pilot at S = {scale:g}, "
                f"{sum(map(len, calls))} calls")
            run = await run_one(trace, calls, stack, popts, pace_dir,
                                f"pilot-{configuration}-S{scale:g}", log=log,
                                configuration=configuration)
            shutil.rmtree(stack.state_dir, ignore_errors=True)   # the next pilot's stack is fresh
            pilots.append(_pilot(json.loads((run / "summary.json").read_text()), scale,
                                 Path(pace_dir.name) / run.name))
            p = pilots[-1]
            ratio = "n/a" if p.read_over_profile_p50 is None else f"{p.read_over_profile_p50:.2f}"
            log(f"replay pace: {configuration}: S = {scale:g}: reads at {ratio} x the profile "
                f"(median over {p.loaded_calls} calls with store hits)")
            nxt, choice = decide(start, pilots, max_pilots, min_scale)
            if choice is not None:
                return choice
            assert nxt is not None
            scale = nxt
    finally:
        shutil.rmtree(pace_dir / ".stacks", ignore_errors=True)
