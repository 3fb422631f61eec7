"""Runs named on a command line: run directories, folders of runs, the notes a report prints."""
from __future__ import annotations

import pytest

from adev.analysis import loaded as L
from adev.analysis.ledger import read_ledger, reuse_profile
from adev.analysis.run import load_run
from adev.analysis.windows import window_table

from .synth import make_run


def test_is_run_dir_by_manifest_or_calls(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for d in (a, b, c):
        d.mkdir()
    (a / "manifest.json").write_text("{}")
    (b / "calls.jsonl").write_text("")
    (c / "windows.jsonl").write_text("")
    assert L.is_run_dir(a) and L.is_run_dir(b)
    assert not L.is_run_dir(c)
    assert not L.is_run_dir(a / "manifest.json")       # a file is not a run directory
    assert not L.is_run_dir(tmp_path / "nope")


def test_expand_runs_folders_and_duplicates(tmp_path):
    night = tmp_path / "night"
    for name in ("r2", "r1", "r3"):
        (night / name).mkdir(parents=True)
        (night / name / "calls.jsonl").write_text("")
    (night / "notes").mkdir()                          # not a run: skipped
    (night / "x.txt").write_text("")
    r1 = night / "r1"
    # a folder expands to its runs in name order; a run named twice (also through the folder,
    # or by another spelling of its path) is kept once, at its first place
    assert L.expand([night / "r3", night, str(night / "notes" / ".." / "r1")]) == [
        night / "r3", r1, night / "r2"]
    assert L.expand([str(r1)]) == [r1]
    assert L.expand([]) == []


def test_expand_refuses_what_is_not_a_run(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError) as e:
        L.expand([tmp_path / "empty"])
    assert str(e.value) == f"{tmp_path / 'empty'}: neither a run directory nor a folder of runs"
    with pytest.raises(FileNotFoundError) as e:
        L.expand([tmp_path / "gone"])
    assert str(e.value) == f"run directory not found: {tmp_path / 'gone'}"
    (tmp_path / "f.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="run directory not found: .*f.json"):
        L.expand([tmp_path / "f.json"])


def test_load_all_tables_summaries_and_notes(tmp_path, monkeypatch):
    monkeypatch.setattr(L, "notes", [])
    good = make_run(tmp_path / "n", width=1, windows=1, window_s=60, ledger=False,
                    max_prompt=2000, run_id="a-good")
    bad = make_run(tmp_path / "n", width=2, windows=1, window_s=60, ledger=False,
                   max_prompt=2000, run_id="b-bad")
    with open(bad / "calls.jsonl", "a") as f:
        f.write('{"x": 1')                             # torn last lines
    with open(bad / "scrapes.jsonl", "a") as f:
        f.write('{"y"')
    (bad / "windows.jsonl").unlink()
    out = L.load_all([tmp_path / "n"], with_reuse=False)
    assert [ld.run.path for ld in out] == [good, bad]
    assert [ld.run.run_id for ld in out] == ["a-good", "b-bad"]
    assert [ld.summary.width for ld in out] == [1, 2]
    for ld in out:
        exp = window_table(load_run(ld.run.path))
        assert ld.table.equals(exp)
        assert ld.summary.reuse is None and "reuse" not in ld.summary.missing
    assert L.notes == [
        f"{bad / 'calls.jsonl'}: 1 record(s) lost (line(s) torn by a crash mid-write, skipped)",
        f"{bad / 'scrapes.jsonl'}: 1 record(s) lost (line(s) torn by a crash mid-write, skipped)",
        f"{bad / 'windows.jsonl'} missing or empty: the whole run is treated as one window, "
        "invalid (a fleet run without windows: stopped before its first window, or the file is "
        "lost)"]
    # with the reuse profile (the default): a run without a ledger says so
    [ld] = L.load_all([good])
    assert ld.summary.missing["reuse"] == f"no reuse ledger in {good} (ledger/meta.json missing)"
    assert len(L.notes) == 3                            # a clean run adds no note


def test_load_all_reads_the_reuse_ledger(tmp_path):
    run = make_run(tmp_path, width=1, windows=1, window_s=60, max_prompt=2000)
    [ld] = L.load_all([run])
    r = reuse_profile(read_ledger(run), ld.run.lease_ttl_s)
    assert ld.summary.reuse["touches"] == r.touches > 0
    assert ld.summary.reuse["unique_blocks"] == r.unique_blocks
