"""``bench/bench_store_io.py`` still measures every read path on the installed Mooncake: each
phase (own segment, another process's segment, disk-only blocks) must come back complete, so a
wheel update that changes how blocks reach the disk tier shows up here, not in a user's run."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from adev.config import ROOT

pytestmark = pytest.mark.integration

PATHS = ("put", "lookup", "ram, own segment", "ram, other process", "disk")


def test_every_read_path_is_measured():
    p = subprocess.run([sys.executable, str(ROOT / "bench/bench_store_io.py"), "--blocks", "300",
                        "--repeats", "1"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    out = p.stdout
    assert "failed" not in out and "incomplete" not in out, out
    rows = {}
    for line in out.splitlines():
        for path in PATHS:
            if line.startswith(path + " ") and re.match(rf"{re.escape(path)}\s+\d+\s+[\d.]+\s+[\d.]+", line):
                rows[path] = line.split()
    assert set(rows) == set(PATHS), out
    # the tiers' rows carry a modelled time and the time scale that real reads keep pace with
    for path in ("ram, own segment", "ram, other process", "disk"):
        s_max = float(rows[path][-2])
        assert s_max > 0, rows[path]
