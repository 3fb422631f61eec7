"""``bench/clock_holds.py``: which slot holds a stack's held clock, by name."""
from __future__ import annotations

import importlib.util
import json
import math
import time

from adev.clock import CLIENT_SLOT, HeldClock
from adev.config import ROOT

_spec = importlib.util.spec_from_file_location("clock_holds", ROOT / "bench" / "clock_holds.py")
ch = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ch)


def test_holders_are_named_by_the_stacks_endpoints(tmp_path):
    stack = tmp_path / ".stacks" / "s0" / "store-ram"   # a replay's stack, in hidden folders
    stack.mkdir(parents=True)
    (stack / "stack.json").write_text(json.dumps({"endpoints": [{"name": "p0"}, {"name": "d0"}]}))
    HeldClock.create(stack / "clock")
    path = ch.find_clock(tmp_path, 0.0)
    assert path == stack / "clock"
    names = ch.slot_names(stack)
    assert [ch.label(s, names) for s in (None, 0, 1, 5, 40, CLIENT_SLOT)] == [
        "free", "p0", "d0", "endpoint slot 5", "request", "client"]


def test_sampling_counts_the_holder_of_each_sample(tmp_path):
    clock = HeldClock.create(tmp_path / "clock")
    clock.set_hold(1, 0.0)          # a hold in the past: slot 1 stops the clock from now on
    time.sleep(0.001)               # so that the first sample's wall is past the hold
    counts = ch.sample(clock, seconds=0.05, interval=0.005)
    assert set(counts) == {1} and sum(counts.values()) >= 1
    clock.set_hold(1, math.inf)
    counts = ch.sample(clock, seconds=0.05, interval=0.005)
    assert set(counts) == {None}
    assert ch.find_clock(tmp_path / "none", 0.0) is None
