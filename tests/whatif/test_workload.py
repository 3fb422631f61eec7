"""Workload loaders: the Mooncake trace format, run directories (ledger + call records), errors."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from adev.config import PrefillTime
from adev.whatif.workload import (
    WorkloadError,
    from_mooncake_trace,
    from_run,
    load_workload,
)

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def write(tmp_path, rows, name="t.jsonl"):
    p = tmp_path / name
    p.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return p


def test_mooncake_trace_full_blocks_times_and_dense_ids(tmp_path):
    p = write(tmp_path, [
        {"timestamp": 1000, "input_length": 1100, "output_length": 10, "hash_ids": [7, 8, 9]},
        {"timestamp": 0, "input_length": 512, "output_length": 2, "hash_ids": [7]},
    ])
    w = from_mooncake_trace(p, prefill=PrefillTime(1 / 512), decode_step_s=0.5)
    assert w.block_size == 512 and w.calls == 2
    # sorted by time: the 512-token request first; 1100 tokens = 2 full blocks (9 is partial)
    assert w.t_admit.tolist() == [0.0, 1.0]
    assert [w.blocks(i).tolist() for i in range(2)] == [[0], [0, 1]]
    assert w.n_ids == 2 and w.touches == 3
    assert w.t_save.tolist() == pytest.approx([1.0, 1.0 + 1100 / 512])
    assert w.t_end.tolist() == pytest.approx([2.0, 1.0 + 1100 / 512 + 5.0])
    # by position, 0.001 s per token + 1e-6 s per earlier token: 1,100 tokens take
    # 1.1 + 1e-6 * 1100 * 1099 / 2 = 1.1 + 0.60445 = 1.70445 s
    w = from_mooncake_trace(p, prefill=PrefillTime(0.001, 1e-6), decode_step_s=0.5)
    assert w.t_save.tolist() == pytest.approx([0.512 + 1e-6 * 512 * 511 / 2, 1.0 + 1.70445])


@pytest.mark.parametrize("row,field", [
    ({"timestamp": -1, "input_length": 1, "output_length": 1, "hash_ids": [1]}, "timestamp"),
    ({"timestamp": 0, "input_length": "x", "output_length": 1, "hash_ids": [1]}, "input_length"),
    ({"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1]}, "hash_ids"),
    ({"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": "a"}, "hash_ids"),
])
def test_mooncake_trace_errors_name_line_and_field(tmp_path, row, field):
    ok = {"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}
    p = write(tmp_path, [ok, row])
    with pytest.raises(WorkloadError, match=rf"t\.jsonl:2: .*{field}"):
        from_mooncake_trace(p)


def test_unknown_input_is_refused(tmp_path):
    p = write(tmp_path, [{"a": 1}])
    with pytest.raises(WorkloadError, match="unknown trace format"):
        load_workload(p)
    with pytest.raises(WorkloadError, match="no such"):
        load_workload(tmp_path / "missing.jsonl")
    with pytest.raises(WorkloadError, match="ledger"):
        load_workload(tmp_path)


def test_run_directory_joins_ledger_and_call_records(tmp_path):
    from adev.analysis.ledger import read_ledger
    from adev.analysis.run import load_run
    from tests.analysis.synth import make_run
    path = make_run(tmp_path, width=3, windows=1, window_s=200.0)
    run = load_run(path)
    w = load_workload(path)
    led = read_ledger(path)
    assert w.touches == len(led.touches)
    assert w.n_ids == len(np.unique(led.touches["key"]))
    assert set(w.endpoints) <= set(run.calls["endpoint"].dropna())
    c = run.calls.drop_duplicates("call_id", keep="last").set_index("call_id")
    i = len(w.call_ids) // 2
    cid = w.call_ids[i]
    assert w.endpoints[w.endpoint[i]] == c.loc[cid, "endpoint"]
    assert w.t_admit[i] == pytest.approx(c.loc[cid, "t_admit"])
    assert w.t_end[i] >= w.t_save[i] >= w.t_admit[i]
    assert np.all(np.diff(w.t_admit) >= 0)
    # the same prompt's blocks in prompt order: block keys map to dense ids one to one
    k = led.touches[led.touches["call"] == int(
        next(x["call"] for x in led.calls if x["call_id"] == cid))]
    k = k[np.argsort(k["pos"])]["key"]
    uniq = np.unique(led.touches["key"])
    assert w.blocks(i).tolist() == np.searchsorted(uniq, k).tolist()
    assert from_run(run).touches == w.touches
