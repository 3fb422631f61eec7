import pytest

from tracetools.events import Event
from tracetools.windows import windows


def ev(ts, kind="request", dur=0.0, tokens=0, session="s"):
    return Event(ts=ts, kind=kind, session=session, dur=dur, tokens=tokens)


def test_assignment_counts_and_tokens():
    evs = [ev(0, tokens=10), ev(0.5, "response", tokens=5), ev(1.0, tokens=1), ev(2.9, "tool")]
    ws = windows(evs, 1.0)
    assert [(w.start, w.end) for w in ws] == [(0, 1), (1, 2), (2, 3)]
    assert [w.count for w in ws] == [2, 1, 1]
    assert [w.tokens for w in ws] == [15, 1, 0]
    assert ws[0].by_kind == {"request": 1, "response": 1}


def test_busy_counts_overlapping_events():
    evs = [ev(0, dur=1.5), ev(0.25, dur=0.5), ev(2.5, dur=0.5)]
    ws = windows(evs, 1.0)
    assert [w.busy for w in ws] == pytest.approx([1.0, 0.5, 0.5])
    assert ws[1].count == 0


def test_default_range_covers_event_ends():
    ws = windows([ev(10, dur=2.5)], 1.0)
    assert len(ws) == 3 and ws[0].start == 10 and ws[-1].end == 13
    assert windows([ev(4)], 2.0)[0].end == 6


def test_kind_filter_empty_and_bad_width():
    evs = [ev(0), ev(1, "tool"), ev(2, "tool")]
    ws = windows(evs, 1.0, kind="tool")
    assert ws[0].start == 1 and sum(w.count for w in ws) == 2
    assert windows([], 1.0) == []
    with pytest.raises(ValueError):
        windows(evs, 0)
