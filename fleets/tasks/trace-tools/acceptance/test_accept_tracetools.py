"""Hidden acceptance tests for trace-tools (not shown to the sessions)."""
import json

import pytest

from tracetools.cli import main
from tracetools.events import Event, TraceError, out_of_order, parse_line, read_trace
from tracetools.stats import busy_fraction, merge_intervals, percentile, summarize, union_length
from tracetools.windows import windows


def test_parse_preserves_attrs_and_coerces_ts():
    e = parse_line('{"ts": 3, "kind": "error", "session": "x", "attrs": {"a": [1, {"b": null}]}}')
    assert e.ts == 3.0 and type(e.ts) is float and e.attrs == {"a": [1, {"b": None}]}
    with pytest.raises(TraceError) as err:
        parse_line('{"ts": 1, "kind": "tool", "session": "x", "tokens": true}')
    assert err.value.field == "tokens"


@pytest.mark.parametrize("text", ['{"ts": NaN, "kind": "tool", "session": "x"}',
                                  '{"ts": Infinity, "kind": "tool", "session": "x"}',
                                  '{"ts": 1, "kind": "tool", "session": "x", "dur": NaN}'])
def test_non_finite_numbers_rejected(text):
    with pytest.raises(TraceError) as err:
        parse_line(text, lineno=4)
    assert err.value.field in ("ts", "dur") and err.value.lineno == 4


def test_non_object_lines_and_first_unknown_field():
    for text in ("[1, 2]", '"text"', "42"):
        with pytest.raises(TraceError) as err:
            parse_line(text)
        assert err.value.field is None and err.value.message == "expected a JSON object"
    with pytest.raises(TraceError) as err:
        parse_line('{"ts": 1, "kind": "tool", "session": "x", "zeta": 1, "alpha": 2}')
    assert err.value.field == "alpha"


def test_line_numbers_count_blank_and_comment_lines():
    lines = ["# header", "", '{"ts": 1, "kind": "tool", "session": "s"}', "",
             '{"ts": 2, "kind": "bogus", "session": "s"}']
    t = read_trace(lines, strict=False)
    assert t.lines == 5 and len(t.events) == 1 and t.errors[0].lineno == 5
    assert str(t.errors[0]).startswith("line 5: kind: ")


def test_out_of_order_interleaved_sessions():
    evs = [Event(1, "request", "a"), Event(1, "request", "b"), Event(1, "tool", "a"),
           Event(0.5, "tool", "b"), Event(9, "tool", "a"), Event(2, "tool", "a"),
           Event(3, "tool", "a")]
    assert out_of_order(evs) == [3, 5, 6]


def test_percentile_on_larger_unsorted_input():
    xs = list(range(100, 0, -1))
    assert percentile(xs, 99) == pytest.approx(99.01)
    assert percentile(xs, 25) == pytest.approx(25.75)
    assert xs[0] == 100  # input not mutated
    s = summarize([5.0])
    assert s.min == s.max == s.p50 == s.p99 == s.mean == 5.0


def test_interval_edge_cases():
    assert merge_intervals([(0, 10), (2, 3), (10, 12), (13, 14)]) == [(0, 12), (13, 14)]
    assert union_length([(1, 1), (2, 2)]) == 0
    assert busy_fraction([(-5, 50)], 0, 10) == 1.0
    assert busy_fraction([(20, 30)], 0, 10) == 0.0
    with pytest.raises(ValueError):
        union_length([(3, 2)])


def test_explicit_range_excludes_outside_events():
    evs = [Event(0, "request", "s", tokens=1), Event(5, "request", "s", tokens=2),
           Event(5.5, "tool", "s", dur=3.0, tokens=4), Event(20, "request", "s", tokens=8)]
    ws = windows(evs, 2.0, start=4, end=9)
    assert [(w.start, w.end) for w in ws] == [(4, 6), (6, 8), (8, 10)]
    assert [w.tokens for w in ws] == [6, 0, 0]
    assert ws[1].busy == 1.0 and ws[2].busy == pytest.approx(0.25)
    assert ws[0].rate == pytest.approx(1.0)


def test_window_duration_summary():
    evs = [Event(0, "tool", "s", dur=d) for d in (0.1, 0.2, 0.3)] + [Event(1.2, "tool", "s")]
    ws = windows(evs, 1.0)
    assert ws[0].dur.count == 3 and ws[0].dur.max == pytest.approx(0.3)
    assert ws[0].dur.p50 == pytest.approx(0.2) and ws[1].dur.count == 1
    with pytest.raises(ValueError):
        windows(evs, 1.0, start=5, end=1)
    long = windows([Event(0, "gate", "s", dur=10), Event(1, "tool", "s")], 3.0)
    assert len(long) == 4 and long[-1].busy == pytest.approx(1 / 3)


def _write(tmp_path, rows, extra=()):
    p = tmp_path / "trace.jsonl"
    p.write_text("\n".join([json.dumps(r) for r in rows] + list(extra)) + "\n")
    return str(p)


ROWS = [{"ts": 0, "kind": "request", "session": "a", "tokens": 1000, "dur": 2},
        {"ts": 1, "kind": "tool", "session": "a", "tokens": 10, "dur": 0.5},
        {"ts": 2, "kind": "request", "session": "b", "tokens": 3000, "dur": 1},
        {"ts": 4, "kind": "gate", "session": "a", "dur": 4}]


def test_cli_stats_filters(tmp_path, capsys):
    path = _write(tmp_path, ROWS)
    assert main(["stats", path, "--kind", "request", "--field", "tokens", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["count"] == 2 and data["mean"] == 2000 and data["p50"] == 2000
    assert main(["stats", path, "--kind", "error"]) == 0
    assert capsys.readouterr().out.strip() == "count=0 mean=- min=- p50=- p90=- p99=- max=-"


def test_cli_windows_table(tmp_path, capsys):
    assert main(["windows", _write(tmp_path, ROWS), "--width", "4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split("\t") == ["index", "start", "end", "count", "tokens", "busy"]
    assert lines[1].split("\t") == ["0", "0", "4", "3", "4010", "0.750"]
    assert lines[2].split("\t") == ["1", "4", "8", "1", "0", "1.000"]
    assert len(lines) == 3


def test_cli_validate_warns_but_passes(tmp_path, capsys):
    rows = ROWS + [{"ts": 0.5, "kind": "response", "session": "b"}]
    assert main(["validate", _write(tmp_path, rows)]) == 0
    out = capsys.readouterr().out
    assert "warning: event 5 of session b goes back in time" in out
    assert "ok: 5 events, 2 sessions" in out


def test_cli_strict_commands_fail_on_bad_line(tmp_path, capsys):
    path = _write(tmp_path, ROWS, extra=['{"ts": 1, "kind": "tool"}'])
    assert main(["windows", path, "--width", "1"]) == 1
    assert "line 5: session: required field missing" in capsys.readouterr().err
    assert main(["windows", _write(tmp_path, ROWS), "--width", "0"]) == 2
