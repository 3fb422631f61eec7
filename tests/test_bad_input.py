"""Bad input never a traceback: each case through the command line (``adev.cli.main``) gives a
one-line error naming the file, line or field, exit 2, and changes nothing already written.

Hostile tool calls from the model (a path nested 2,000 deep, tool-call JSON nested 100,000 deep,
a lone surrogate in a path) are the session loop's input, not the command line's: they are the
table of ``tests/session/test_loop.py::test_hostile_tool_arguments_get_an_error_answer``.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from adev.cli import main
from tests.analysis.synth import make_run


@pytest.fixture(scope="module")
def base_run(tmp_path_factory) -> Path:
    return make_run(tmp_path_factory.mktemp("runs"), width=2, windows=2, ledger=False)


def snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _write(p: Path, data: bytes) -> Path:
    p.write_bytes(data)
    return p


def fleet_dir(tmp: Path, state: bytes) -> Path:
    d = tmp / "fleet-x"
    d.mkdir()
    (d / "fleet.json").write_bytes(state)
    (d / "calls.jsonl").write_text('{"run_id": "fleet-x"}\n')
    return d


def run_copy(tmp: Path, base_run: Path, kind: str, extra: bytes | None = None,
             drop: bool = False) -> Path:
    d = tmp / "run"
    shutil.copytree(base_run, d)
    p = d / f"{kind}.jsonl"
    if drop:
        p.unlink()
    else:
        with p.open("ab") as fh:
            fh.write(extra)
    return d


# (case, argv builder(tmp, base_run) -> (argv, dir to check unchanged), text the line must hold)
CASES = [
    ("time-scale nan", lambda t, b: (["fleet", "--time-scale", "nan"], None),
     "--time-scale: nan is not allowed; expected a finite number"),
    ("time-scale inf", lambda t, b: (["fleet", "--time-scale", "inf", "--width", "2"], None),
     "--time-scale: inf is not allowed"),
    ("stack time-scale nan", lambda t, b: (["stack", "up", "--time-scale", "nan"], None),
     "--time-scale: nan is not allowed"),
    ("fleet file not UTF-8",
     lambda t, b: (["fleet", "--config",
                    str(_write(t / "f.toml", b"[fleet]\nwidth = 2\n# \xff\n"))], None),
     "f.toml: line 3: not UTF-8 text (byte 0xff)"),
    ("stack file not UTF-8",
     lambda t, b: (["fleet", "--stack", str(_write(t / "s.toml", b"[stack]\xfe\n"))], None),
     "s.toml: line 1: not UTF-8 text (byte 0xfe)"),
    ("stack table misspelt",
     lambda t, b: (["fleet", "--stack", str(_write(t / "s.toml", b"[stak]\ntime_scale = 5.0\n"))],
                   None), "s.toml: unknown top-level table(s) stak; allowed: stack"),
    ("stack table missing",
     lambda t, b: (["fleet", "--stack", str(_write(t / "s.toml", b"# nothing\n"))], None),
     "s.toml: no [stack] table"),
    ("stack up, table misspelt",
     lambda t, b: (["stack", "up", "--config", str(_write(t / "s.toml", b"[stak]\n"))], None),
     "unknown top-level table(s) stak"),
    ("fleet.json not JSON",
     lambda t, b: (["fleet", "--resume", str(d := fleet_dir(t, b'{"fleet": {"width": 2,'))], d),
     "fleet.json: line 1: not valid JSON"),
    ("fleet.json not UTF-8",
     lambda t, b: (["fleet", "--resume", str(d := fleet_dir(t, b'\xff\xfe{}'))], d),
     "fleet.json: not UTF-8 text (byte 0)"),
    ("fleet.json without a clock",
     lambda t, b: (["fleet", "--resume", str(d := fleet_dir(t, b'{"fleet": {"width": 2}}'))], d),
     "fleet.json: field 'clock' missing or not an object"),
    ("fleet.json with a bad field",
     lambda t, b: (["fleet", "--resume", str(d := fleet_dir(
         t, b'{"fleet": {"width": -3}, "clock": {"t0_mono": 1.0, "time_scale": 10.0}}'))], d),
     "fleet.json: fleet.width: -3"),
    ("calls.jsonl: a JSON array line",
     lambda t, b: (["report", str(d := run_copy(t, b, "calls", b"[1, 2, 3]\n"))], d),
     "calls.jsonl: line "),
    ("calls.jsonl: not UTF-8",
     lambda t, b: (["report", str(d := run_copy(t, b, "calls", b'{"run_id": "\xff\xfe"}\n'))], d),
     "not UTF-8"),
    ("calls.jsonl: an unknown object",
     lambda t, b: (["report", str(d := run_copy(t, b, "calls", b'{"foo": 1}\n'))], d),
     "without the calls record field(s) call_id, endpoint, run_id, session_id"),
    ("windows.jsonl: a string line",
     lambda t, b: (["report", str(d := run_copy(t, b, "windows", b'"w"\n'))], d),
     "windows.jsonl: line "),
    ("session endpoint that does not answer",
     lambda t, b: (["session", "--task", "kvblock-store", "--runs-dir", str(t / "runs"),
                    "--endpoint", "coder=http://127.0.0.1:9/v1"], None),
     "--endpoint: endpoint coder at http://127.0.0.1:9/v1: GET /models failed"),
]


@pytest.mark.parametrize("case,build,expect", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2(tmp_path, base_run, capsys, case, build, expect):
    argv, keep = build(tmp_path, base_run)
    before = snapshot(keep) if keep else None
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2, (rc, err)
    assert "\n" not in err and "Traceback" not in err, err
    assert expect in err, err
    if keep:
        after = snapshot(keep)  # nothing already written lost or changed
        assert {k: after.get(k) for k in before} == before
    if case.startswith(("calls.jsonl", "windows")):
        assert err.startswith(f"adev report: {keep}/") and ": line " in err


def test_report_says_windows_jsonl_is_missing(tmp_path, base_run, capsys):
    d = run_copy(tmp_path, base_run, "windows", drop=True)
    assert main(["report", str(d)]) == 0
    err = capsys.readouterr().err
    assert "windows.jsonl missing or empty: the whole run is treated as one window" in err
    md = (d / "report.md").read_text()
    assert "whole run is treated as one window" in md
    # a fleet run without windows is not measured as one window
    assert "a fleet run without windows" in md


def test_report_says_how_many_records_a_torn_file_lost(tmp_path, base_run, capsys):
    d = tmp_path / "run"
    shutil.copytree(base_run, d)
    p = d / "calls.jsonl"
    lines = p.read_bytes().splitlines(keepends=True)
    cut = lines[-1][: len(lines[-1]) // 2]  # the crash cut the last record in half
    p.write_bytes(b"".join(lines[:-1]) + cut)
    assert main(["report", str(d)]) == 0
    err = capsys.readouterr().err
    assert f"{p}: 1 record(s) lost (line(s) torn by a crash mid-write, skipped)" in err
    assert "Records lost (lines torn by a crash mid-write, skipped): {'calls': 1}" in \
        (d / "report.md").read_text()
    assert json.loads(lines[0])  # the records before the cut are read
