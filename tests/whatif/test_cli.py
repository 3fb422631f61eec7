"""``adev whatif``: sweeps write a table and a plot; validate sets predictions beside the run's
measured figures; bad values exit 2 with a one-line reason."""
import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from adev.cli import main

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture
def trace(tmp_path):
    rows = []
    for i in range(40):   # 4 conversations of growing prompts, one every second
        conv = i % 4
        n = 2 + i // 4
        rows.append({"timestamp": i * 1000, "input_length": n * 512 + 5, "output_length": 20,
                     "hash_ids": [conv * 1000 + j for j in range(n + 1)]})
    p = tmp_path / "trace.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def test_sweep_over_a_trace_writes_table_and_heat_map(trace, tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["whatif", str(trace), "--ram", "0,1,4", "--lease", "5,300", "--gpu-pool", "1k",
               "--out", str(out)])
    assert rc == 0
    df = pd.read_csv(out / "whatif.csv")
    tot = df[df["window"] == -1]
    assert len(tot) == 6
    assert set(tot["ram"]) == {0.0, 1.0, 4.0} and set(tot["lease"]) == {5.0, 300.0}
    assert (tot[tot["ram"] == 0]["store_hit_share"] == 0).all()
    # 4 conversations x (2..11 blocks): with 4 GB (~43 blocks of 512 tokens at 96 KiB/token)
    # every repeated prefix is in the store
    big = tot[tot["ram"] == 4.0]["store_hit_share"]
    assert (big > tot[tot["ram"] == 1.0]["store_hit_share"].max() - 1e-12).all()
    assert (out / "whatif.png").stat().st_size > 1000
    text = capsys.readouterr().out
    assert "store_hit_share" in text and "6 points" in text


def test_a_ram_tier_that_evicts_reports_the_share_no_lookup_touched(trace, tmp_path, capsys):
    """A RAM tier of 1 GB (21 blocks of 512 tokens) without a disk tier evicts; the whole-run
    row and the printed summary carry the share of evicted blocks no lookup touched since their
    put, from the store model's counters."""
    out = tmp_path / "o"
    assert main(["whatif", str(trace), "--ram", "1", "--disk", "off", "--gpu-pool", "1k",
                 "--out", str(out)]) == 0
    tot = pd.read_csv(out / "whatif.csv").query("window == -1").iloc[0]
    assert tot["store_evicted_blocks"] > 0
    assert tot["evicted_unread_share"] == pytest.approx(
        tot["store_evicted_unread_blocks"] / tot["store_evicted_blocks"])
    assert "evicted_unread_share" in capsys.readouterr().out


def test_the_lookup_rule_is_an_axis(trace, tmp_path):
    """`--lookup past-gpu,whole` sweeps both rules, one row each. Each conversation's prefix was
    saved whole from block 0, so a store run never breaks before the GPU hit and a 1K-token GPU
    pool leaves the store the same hits under either rule."""
    out = tmp_path / "o"
    assert main(["whatif", str(trace), "--lookup", "past-gpu,whole", "--gpu-pool", "1k",
                 "--out", str(out)]) == 0
    tot = pd.read_csv(out / "whatif.csv").query("window == -1").set_index("lookup")
    assert set(tot.index) == {"past-gpu", "whole"}
    assert tot.loc["whole", "store_hit_share"] == pytest.approx(
        tot.loc["past-gpu", "store_hit_share"])
    assert tot.loc["whole", "store_hit_share"] > 0


def test_promotion_on_hit_is_an_axis(trace, tmp_path):
    out = tmp_path / "o"
    assert main(["whatif", str(trace), "--ram", "1", "--lease", "1", "--disk", "on",
                 "--gpu-pool", "1k", "--promotion", "off,1", "--out", str(out)]) == 0
    tot = pd.read_csv(out / "whatif.csv").query("window == -1").set_index("promotion")
    assert set(tot.index) == {"off", "1"}
    assert tot.loc["off", "store_promoted_blocks"] == 0
    assert tot.loc["1", "store_promoted_blocks"] > 0


def test_the_offload_heartbeat_is_an_axis(trace, tmp_path):
    """A 1 GB RAM tier (21 blocks of 512 tokens) over a disk tier, every lookup leased for the
    whole 40 s trace: the objects the master chooses for eviction wait in RAM for the offload
    heartbeat. At 0.5 s it writes them and frees their memory within the trace; at 1000 s it never
    comes, so they keep their memory and later puts find less room."""
    out = tmp_path / "o"
    assert main(["whatif", str(trace), "--ram", "1", "--lease", "300", "--disk", "on",
                 "--gpu-pool", "1k", "--offload-heartbeat", "0.5,1000", "--out", str(out)]) == 0
    tot = pd.read_csv(out / "whatif.csv").query("window == -1").set_index("offload_heartbeat")
    assert set(tot.index) == {0.5, 1000.0}
    assert tot.loc[1000.0, "refused_share"] > tot.loc[0.5, "refused_share"]
    assert tot.loc[1000.0, "store_evicted_blocks"] < tot.loc[0.5, "store_evicted_blocks"]


def test_single_axis_sweep_plots_a_line(trace, tmp_path):
    out = tmp_path / "o"
    assert main(["whatif", str(trace), "--ram", "0.5,1,2", "--out", str(out)]) == 0
    assert (out / "whatif.png").exists()


@pytest.mark.parametrize("opt,val,needle", [("--ram", "8,x", "--ram: 'x'"),
                                            ("--disk", "maybe", "allowed values: on, off"),
                                            ("--lease", "-1", "--lease: '-1'"),
                                            ("--lookup", "all", "allowed values: past-gpu, whole"),
                                            ("--promotion", "0", "--promotion: '0'"),
                                            ("--disk-writes", "never", "allowed values: evict, put"),
                                            ("--offload-heartbeat", "0", "--offload-heartbeat: '0'")])
def test_bad_values_exit_2_with_the_allowed_values(trace, tmp_path, capsys, opt, val, needle):
    assert main(["whatif", str(trace), opt, val, "--out", str(tmp_path / "o")]) == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_bad_trace_exits_2(tmp_path, capsys):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n'
                 '{"timestamp": 0, "input_length": 10, "output_length": 1}\n')
    assert main(["whatif", str(p)]) == 2
    assert "bad.jsonl:2" in capsys.readouterr().err


def test_validate_on_a_run(tmp_path, capsys):
    from tests.analysis.synth import make_run
    a = make_run(tmp_path, width=3, windows=2, window_s=200.0, lease_ttl_s=5.0, run_id="a")
    b = make_run(tmp_path, width=3, windows=2, window_s=200.0, lease_ttl_s=300.0, run_id="b")
    assert main(["whatif", "validate", str(a), str(b)]) == 0
    t = pd.read_csv(a / "whatif" / "validate.csv")
    assert list(t["window"]) == [1, 2]
    for k in ("store_hit_share", "gpu_hit_share", "refused_share", "gross_saving"):
        assert {f"{k}_pred", f"{k}_meas", f"{k}_diff_pp"} <= set(t.columns)
    # the measured column is the analysis' own figure for the window
    from adev.analysis.run import load_run
    from adev.analysis.windows import window_table
    m = window_table(load_run(a))
    m = m[m["endpoint"] == "ALL"].set_index("window")
    assert t["store_hit_share_meas"].tolist() == pytest.approx(
        m.loc[[1, 2], "store_hit_share"].tolist())
    out = capsys.readouterr().out
    assert "lease ranking" in out


def test_validate_needs_a_run(capsys):
    assert main(["whatif", "validate"]) == 2
    assert "validate needs" in capsys.readouterr().err
