"""``adev storage`` verbs through adev's command line (what a user sees; hand-worked figures)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from adev.cli import main
from adev.storage.cli import parse_bytes

DATA = Path(__file__).parent / "data"


def run(capsys, *argv):
    rc = main(["storage", *argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_profile_prints_the_must_show_figures(capsys):
    rc, out, _ = run(capsys, "profile", str(DATA / "Qwen3-Coder-30B-A3B-Instruct.config.json"),
                     "--kv-dtype", "bf16")
    assert rc == 0 and "98,304 B" in out and "from head_dim" in out
    rc, out, _ = run(capsys, "profile", str(DATA / "Llama-3.1-70B.config.json"), "--kv-dtype",
                     "bf16", "--tp", "1", "--json")
    doc = json.loads(out)
    assert (doc["bytes_per_token"], doc["bytes_per_block"]) == (327_680, 5 * 1024 * 1024)
    rc, out, _ = run(capsys, "profile", str(DATA / "Llama-3.1-70B.config.json"), "--kv-dtype",
                     "fp8", "--json")
    assert json.loads(out)["bytes_per_block"] == 5 * 1024 * 1024 // 2


def test_profile_bad_input_exits_2_naming_the_field(tmp_path, capsys):
    f = tmp_path / "config.json"
    f.write_text(json.dumps({"num_hidden_layers": 2, "torch_dtype": "bfloat16"}))
    rc, _, err = run(capsys, "profile", str(f))
    assert rc == 2 and "num_attention_heads is missing" in err and str(f) in err


def test_capacity_from_context_and_given_rate(capsys):
    rc, out, _ = run(capsys, "capacity", "--sessions", "18", "--context-tokens", "65536",
                     "--retention", "4", "--profile", "qwen3-coder-30b-a3b",
                     "--new-kv-per-hour", "100GiB", "--json")
    doc = json.loads(out)
    assert rc == 0
    assert doc["kv_per_session_bytes"] == 65536 * 98304 == 6 * 2**30
    assert doc["ram_bytes"] == 108 * 2**30 and doc["disk_blocks"] == 294_912
    assert doc["disk_hours"] == pytest.approx(4.32)


def test_capacity_from_a_run(tmp_path, capsys):
    from tests.storage.test_runstats import make
    run_dir = make(tmp_path)
    rc, out, _ = run(capsys, "capacity", "--sessions", "10", "--run", str(run_dir),
                     "--retention", "2", "--kv-stat", "max", "--json")
    doc = json.loads(out)
    assert rc == 0
    assert doc["kv_per_session_bytes"] == 3000 * 98304
    assert doc["ram_bytes"] == 10 * 3000 * 98304 and doc["disk_bytes"] == 2 * 10 * 3000 * 98304
    # 5984 computed tokens in one model hour
    assert doc["new_kv_bytes_per_hour"] == pytest.approx(5984 * 98304)
    assert doc["disk_hours"] == pytest.approx(2 * 10 * 3000 / 5984)


def test_capacity_needs_a_kv_source(capsys):
    rc, _, err = run(capsys, "capacity", "--sessions", "3", "--context-tokens", "10")
    assert rc == 2 and "--hf-config" in err


def test_crossover_with_a_run_prefill(tmp_path, capsys):
    from tests.storage.test_fio import REPORT
    from adev.storage.fio import FioResult, parse_fio_json, save_result
    from tests.storage.test_runstats import make
    r, w, v = parse_fio_json(json.dumps(REPORT))
    p = save_result(FioResult("t", 1_572_864, 1, 1, 16, 1, 75, True, None, r, w, v, ["fio"], "d"),
                    tmp_path / "f.json")
    rc, out, _ = run(capsys, "crossover", str(p), "--run", str(make(tmp_path)), "--contexts",
                     "100,1000", "--json")
    doc = json.loads(out)
    t = (0.5 / 1000 + 0.3 / 2000) / 2
    assert rc == 0 and doc["t_prefill_s_per_token"] == pytest.approx(t)
    assert doc["crossover_tokens"] == pytest.approx(0.189792256 / t)  # ~584 tokens
    assert [c["gains"] for c in doc["contexts"]] == [False, True]
    rc, _, err = run(capsys, "crossover", str(p), "--direction", "write")
    assert rc == 2 and "no I/O" in err


@pytest.mark.parametrize("text,want", [("5MiB", 5 * 2**20), ("1.5GB", 1_500_000_000),
                                       ("4096", 4096), ("2 TiB", 2 * 2**40)])
def test_parse_bytes(text, want):
    assert parse_bytes(text, "--x") == want


def test_parse_bytes_rejects():
    from adev.config import ConfigError
    with pytest.raises(ConfigError, match="--size: '5 parsecs' is not a size"):
        parse_bytes("5 parsecs", "--size")
