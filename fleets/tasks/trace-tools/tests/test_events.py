import json

import pytest

from tracetools.events import Event, TraceError, out_of_order, parse_line, read_trace


def line(**kw):
    return json.dumps(kw)


def test_parse_full_and_defaults():
    e = parse_line(line(ts=1.5, kind="tool", session="s1", dur=0.25, tokens=7,
                        attrs={"name": "write_file"}))
    assert e == Event(ts=1.5, kind="tool", session="s1", dur=0.25, tokens=7,
                      attrs={"name": "write_file"})
    assert e.end == 1.75
    d = parse_line(line(ts=2, kind="gate", session="s1"))
    assert (d.ts, d.dur, d.tokens, d.attrs) == (2.0, 0.0, 0, {})
    assert isinstance(d.ts, float)


def test_blank_and_comment_lines():
    assert parse_line("") is None
    assert parse_line("   \n") is None
    assert parse_line("# a comment") is None


def test_invalid_json_names_the_line():
    with pytest.raises(TraceError) as e:
        parse_line("{not json", lineno=7)
    assert e.value.lineno == 7 and e.value.field is None
    assert str(e.value).startswith("line 7: invalid JSON")
    assert isinstance(e.value, ValueError)


def test_missing_and_unknown_fields():
    with pytest.raises(TraceError) as e:
        parse_line(line(ts=1, session="s"), lineno=3)
    assert e.value.field == "kind" and str(e.value) == "line 3: kind: required field missing"
    with pytest.raises(TraceError) as e:
        parse_line(line(ts=1, kind="tool", session="s", colour="red"))
    assert e.value.field == "colour" and e.value.message == "unknown field"


@pytest.mark.parametrize("bad,field", [
    ({"ts": -1}, "ts"), ({"ts": True}, "ts"), ({"ts": "1"}, "ts"),
    ({"kind": "reply"}, "kind"), ({"session": ""}, "session"), ({"session": 5}, "session"),
    ({"dur": -0.5}, "dur"), ({"tokens": 1.5}, "tokens"), ({"tokens": True}, "tokens"),
    ({"tokens": -1}, "tokens"), ({"attrs": [1]}, "attrs"),
])
def test_bad_values(bad, field):
    obj = {"ts": 1.0, "kind": "request", "session": "s", **bad}
    with pytest.raises(TraceError) as e:
        parse_line(json.dumps(obj))
    assert e.value.field == field


def test_strict_and_lenient_reading():
    lines = [line(ts=0, kind="request", session="a"), "oops",
             line(ts=1, kind="response", session="a"), line(ts=2, kind="nope", session="a")]
    with pytest.raises(TraceError) as e:
        read_trace(lines)
    assert e.value.lineno == 2
    t = read_trace(lines, strict=False)
    assert len(t.events) == 2 and [x.lineno for x in t.errors] == [2, 4] and t.lines == 4


def test_read_from_path_and_sessions(tmp_path):
    p = tmp_path / "trace.jsonl"
    p.write_text("\n".join([line(ts=0, kind="request", session="b"),
                            line(ts=1, kind="request", session="a"),
                            line(ts=2, kind="response", session="b")]) + "\n")
    t = read_trace(p)
    assert list(t.sessions()) == ["b", "a"]
    assert [e.ts for e in t.sessions()["b"]] == [0.0, 2.0]
    assert read_trace(str(p)).lines == 3


def test_out_of_order_compares_with_latest_seen():
    evs = [Event(5, "request", "a"), Event(3, "tool", "a"), Event(4, "tool", "a"),
           Event(1, "request", "b"), Event(6, "gate", "a")]
    assert out_of_order(evs) == [1, 2]
