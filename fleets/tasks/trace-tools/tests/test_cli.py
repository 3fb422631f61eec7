import json

from tracetools.cli import main

GOOD = [
    {"ts": 0, "kind": "request", "session": "a", "dur": 1.0, "tokens": 100},
    {"ts": 0.5, "kind": "request", "session": "b", "dur": 2.0, "tokens": 300},
    {"ts": 1.0, "kind": "tool", "session": "a", "dur": 0.5},
    {"ts": 3.0, "kind": "response", "session": "b", "tokens": 50},
]


def write(tmp_path, rows, extra=()):
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join([json.dumps(r) for r in rows] + list(extra)) + "\n")
    return str(p)


def test_validate_ok(tmp_path, capsys):
    assert main(["validate", write(tmp_path, GOOD)]) == 0
    assert capsys.readouterr().out.strip().endswith("ok: 4 events, 2 sessions")


def test_validate_reports_errors(tmp_path, capsys):
    path = write(tmp_path, GOOD, extra=['{"ts": 1}', "[]"])
    assert main(["validate", path]) == 1
    out = capsys.readouterr().out
    assert "line 5: kind: required field missing" in out
    assert "line 6: expected a JSON object" in out
    assert "invalid: 2 error(s) in 6 line(s)" in out


def test_stats_text_and_json(tmp_path, capsys):
    path = write(tmp_path, GOOD)
    assert main(["stats", path]) == 0
    assert capsys.readouterr().out.strip() == (
        "count=4 mean=0.875 min=0 p50=0.75 p90=1.7 p99=1.97 max=2")
    assert main(["stats", path, "--field", "tokens", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["count"] == 4 and data["max"] == 300 and data["p50"] == 75


def test_windows_json(tmp_path, capsys):
    assert main(["windows", write(tmp_path, GOOD), "--width", "1", "--json"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [r["count"] for r in rows] == [2, 1, 0, 1]
    assert rows[0]["busy"] == 1.0 and rows[0]["tokens"] == 400


def test_errors_exit_codes(tmp_path, capsys):
    assert main(["stats", str(tmp_path / "missing.jsonl")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main(["windows", write(tmp_path, GOOD)]) == 2  # --width missing
    assert main(["frobnicate"]) == 2
    assert main(["stats", write(tmp_path, GOOD, extra=["{bad"])]) == 1
    assert "line 5" in capsys.readouterr().err
