"""Who holds a stack's held clock: which slot stops it, sampled on the wall (prints figures; not a
test).

    .venv/bin/python bench/clock_holds.py DIR [--seconds 45] [--interval 0.002]

``DIR``: a running stack's state directory, or a folder above one (a replay's ``--out``, whose
stacks start and stop under ``.stacks/``); the script waits for the first clock file under it
(:data:`adev.clock.CLOCK_FILE`) and then, every ``--interval`` wall seconds for ``--seconds``,
asks :meth:`adev.clock.HeldClock.holder` which slot stops the clock. It prints each holder's
share of the samples:

- an endpoint by its name (endpoints take the slots from 0 up in the stack's order, read from
  the ``stack.json`` beside the clock): its loop's next boundary, a store read or save, an event
  it has not handled yet;
- ``request``: a request slot (:data:`adev.clock.REQUEST_SLOTS`), a request or an answer on its
  way between the client and an endpoint;
- ``client``: the client's own slot (:data:`adev.clock.CLIENT_SLOT`, a fleet's gate runs);
- ``free``: nothing holds it, model time passes with the wall.

The held share is the wall time a run spends beyond ``model time / time scale``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from adev.clock import CLIENT_SLOT, CLOCK_FILE, REQUEST_SLOTS, HeldClock, open_held_clock  # noqa: E402


def find_clock(root: Path, wait_s: float) -> Path | None:
    """The first clock file under ``root`` (hidden folders included), waiting up to ``wait_s``."""
    end = time.monotonic() + wait_s
    while True:
        for d, _, files in os.walk(root):
            if CLOCK_FILE in files:
                return Path(d) / CLOCK_FILE
        if time.monotonic() >= end:
            return None
        time.sleep(0.05)


def slot_names(stack_dir: Path) -> dict[int, str]:
    """Slot -> endpoint name, from the stack's ``stack.json`` (empty without one)."""
    try:
        stack = json.loads((stack_dir / "stack.json").read_text())
    except (OSError, ValueError):
        return {}
    return {i: e["name"] for i, e in enumerate(stack.get("endpoints", []))}


def label(slot: int | None, names: dict[int, str]) -> str:
    """A holder's name in the printout."""
    if slot is None:
        return "free"
    if slot == CLIENT_SLOT:
        return "client"
    if slot in REQUEST_SLOTS:
        return "request"
    return names.get(slot, f"endpoint slot {slot}")


def sample(clock: HeldClock, seconds: float, interval: float) -> Counter:
    """Samples per holding slot (None: free) over ``seconds`` of wall time."""
    counts: Counter = Counter()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        counts[clock.holder()] += 1
        time.sleep(interval)
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--seconds", type=float, default=45.0)
    ap.add_argument("--interval", type=float, default=0.002)
    a = ap.parse_args(argv)
    path = find_clock(a.dir, a.seconds)
    if path is None:
        print(f"no held clock under {a.dir} within {a.seconds:g} s", file=sys.stderr)
        return 1
    clock = open_held_clock(path.parent)   # checks the file's layout
    if clock is None:
        print(f"{path}: not a held clock of this adev version", file=sys.stderr)
        return 1
    try:
        counts = sample(clock, a.seconds, a.interval)
    finally:
        clock.close()
    names = slot_names(path.parent)   # after sampling: a stack writes it after its clock
    by_name: Counter = Counter()
    for slot, k in counts.items():
        by_name[label(slot, names)] += k
    n = sum(by_name.values())
    print(f"{path}: {n} samples every {a.interval * 1000:g} ms")
    for who, k in by_name.most_common():
        print(f"  {who}: {k / n * 100:.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
