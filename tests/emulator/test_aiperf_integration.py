"""AIPerf (a venv of its own) against an emulated endpoint: bench/check_aiperf.py on a small
synthetic Mooncake trace. ``make test`` installs AIPerf into ``.venv-aiperf``
(``scripts/bootstrap.sh --aiperf``); ADEV_AIPERF names another one. Skipped where none is
installed."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from adev.config import ROOT

pytestmark = pytest.mark.integration
AIPERF = Path(os.environ.get("ADEV_AIPERF", str(ROOT / ".venv-aiperf" / "bin" / "aiperf")))


@pytest.mark.skipif(not AIPERF.exists(), reason=f"no AIPerf at {AIPERF} (set ADEV_AIPERF)")
def test_aiperf_chat_and_mooncake_trace_exact_lengths(tmp_path):
    # 12 calls with unique input lengths (the check matches replies to rows by input length);
    # 512-token hash blocks as in Mooncake's traces: every call shares block 0, the others
    # (the last one partial) are its own
    rows, next_id = [], 1
    for i in range(12):
        n = 600 + 97 * i
        k = -(-n // 512)
        rows.append({"timestamp": 200 * i, "input_length": n, "output_length": [1, 3, 40, 250][i % 4] + i,
                     "hash_ids": [0] + list(range(next_id, next_id + k - 1))})
        next_id += k - 1
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "check_aiperf.py"), "--trace", str(trace),
                          "--trace-lines", "12", "--requests", "8", "--aiperf", str(AIPERF)],
                         capture_output=True, text=True, timeout=900, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "12 requests, 0 errors, 0 replies not of the trace's output length" in out.stdout
    assert "8 requests, 0 errors, 0 replies not of the requested length" in out.stdout
