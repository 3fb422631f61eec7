"""fio job, report parsing (hand-made report), direct-I/O fallback; integration: a real fio run
against a file here, and the crossover computed from its saved output."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from adev.config import ConfigError
from adev.storage import fio as F

REPORT = {
    "fio version": "fio-3.33",
    "jobs": [{
        "jobname": "adev-kv", "error": 0,
        "read": {"total_ios": 1000, "bw_bytes": 800_000_000, "iops": 508.6,
                 "clat_ns": {"mean": 19_000_000.0,
                             "percentile": {"50.000000": 15_007_744, "99.000000": 189_792_256}}},
        "write": {"total_ios": 0, "bw_bytes": 0, "iops": 0.0,
                  "clat_ns": {"mean": 0.0, "percentile": {"50.000000": 0, "99.000000": 0}}},
    }],
}


def test_command_is_the_source_job():
    cmd = F.fio_command("/x/f", block_bytes=1_572_864, runtime_s=60, size_bytes=1 << 30)
    for flag in ("--rw=randrw", "--rwmixread=75", "--bs=1572864", "--iodepth=1", "--numjobs=16",
                 "--direct=1", "--ioengine=libaio", "--time_based", "--runtime=60",
                 "--size=1073741824", "--output-format=json", "--filename=/x/f"):
        assert flag in cmd
    assert "--direct=0" in F.fio_command("/x", block_bytes=512, runtime_s=1, size_bytes=512,
                                         direct=False)


def test_parse_report_with_leading_warning():
    r, w, v = F.parse_fio_json("fio: some warning\n" + json.dumps(REPORT))
    assert v == "fio-3.33"
    assert r.p50_s == pytest.approx(0.015007744) and r.p99_s == pytest.approx(0.189792256)
    assert r.mean_s == pytest.approx(0.019) and r.bw_bytes_per_s == 800e6 and r.ios == 1000
    assert w.ios == 0 and w.p99_s is None  # no writes: no latency, not 0


def test_parse_rejects_garbage():
    with pytest.raises(F.FioError, match="no JSON"):
        F.parse_fio_json("nothing here")
    bad = {**REPORT, "jobs": [{**REPORT["jobs"][0], "error": 22}]}
    with pytest.raises(F.FioError, match="error 22"):
        F.parse_fio_json(json.dumps(bad))


def test_direct_io_refused_falls_back(tmp_path, monkeypatch):
    calls = []

    def fake_run(cmd, **kw):
        calls.append(cmd)
        if "--direct=1" in cmd:
            return subprocess.CompletedProcess(cmd, 1, "", "fio: looks like your file system "
                                               "does not support direct=1/buffered=0\n")
        return subprocess.CompletedProcess(cmd, 0, json.dumps(REPORT), "")
    monkeypatch.setattr(F.subprocess, "run", fake_run)
    res = F.run_fio(str(tmp_path), block_bytes=4096, runtime_s=1, size_bytes=1 << 20)
    assert len(calls) == 2 and "--direct=0" in calls[1]
    assert res.direct is False and "direct I/O refused" in res.direct_note
    assert res.read.p99_s == pytest.approx(0.189792256)


def test_other_failures_are_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(F.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(
        cmd, 1, "", "fio: pid=1, err=28/file:io_u.c, error=No space left on device\n"))
    with pytest.raises(F.FioError, match="No space left"):
        F.run_fio(str(tmp_path), block_bytes=4096, runtime_s=1, size_bytes=1 << 20, direct=False)


def test_target_checks(tmp_path, monkeypatch):
    assert F.resolve_target(str(tmp_path)) == (str(tmp_path / F.TARGET_FILE), True)
    with pytest.raises(ConfigError, match="does not exist"):
        F.resolve_target(str(tmp_path / "no" / "f"))
    f = tmp_path / "dev"
    f.write_bytes(b"")
    monkeypatch.setattr(F.stat, "S_ISBLK", lambda mode: True)  # pretend it is a block device
    with pytest.raises(ConfigError, match="block device.*--allow-block-device"):
        F.resolve_target(str(f))
    with pytest.raises(ConfigError, match="multiple of 512"):
        F.run_fio(str(tmp_path), block_bytes=1000, runtime_s=1, size_bytes=1 << 20)


def test_saved_result_round_trips(tmp_path):
    r, w, v = F.parse_fio_json(json.dumps(REPORT))
    res = F.FioResult(target="t", block_bytes=4096, runtime_s=1, size_bytes=1, numjobs=16,
                      iodepth=1, rwmixread=75, direct=True, direct_note=None, read=r, write=w,
                      fio_version=v, command=["fio"], date="d")
    p = F.save_result(res, tmp_path / "a" / "r.json")
    assert F.load_result(p) == res
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(ConfigError, match="not an adev fio result"):
        F.load_result(tmp_path / "x.json")


@pytest.mark.integration
def test_fio_here_then_crossover(tmp_path, capsys):
    """fio runs against a file target here; the crossover is computed from its saved output."""
    from adev.cli import main
    out = tmp_path / "fio.json"
    rc = main(["storage", "fio", str(tmp_path), "--profile", "qwen3-coder-30b-a3b",
               "--runtime", "2", "--size", "32MiB", "--out", str(out)])
    assert rc == 0
    res = F.load_result(out)
    assert res.block_bytes == 1_572_864 and res.numjobs == 16
    assert res.read.ios > 0 and res.read.p99_s > 0 and res.read.p99_s >= res.read.p50_s
    assert res.read.bw_bytes_per_s > 0
    assert not (tmp_path / F.TARGET_FILE).exists()  # the test file is removed
    capsys.readouterr()
    rc = main(["storage", "crossover", str(out), "--prefill-rate", "14850", "--json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["t_p99_s"] == res.read.p99_s
    assert doc["crossover_tokens"] == pytest.approx(res.read.p99_s * 14850)
