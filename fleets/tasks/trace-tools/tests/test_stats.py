import pytest

from tracetools.stats import (busy_fraction, clip, merge_intervals, percentile, summarize,
                              union_length)


def test_percentile_linear_interpolation():
    xs = [4, 1, 3, 2]
    assert percentile(xs, 50) == pytest.approx(2.5)
    assert percentile(xs, 90) == pytest.approx(3.7)
    assert percentile(xs, 0) == 1 and percentile(xs, 100) == 4
    assert percentile([7], 99) == 7


def test_percentile_errors():
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1, 2], 101)


def test_summarize():
    s = summarize([1.0, 2.0, 3.0, 4.0, 10.0])
    assert (s.count, s.min, s.max, s.p50) == (5, 1.0, 10.0, 3.0)
    assert s.mean == pytest.approx(4.0)
    assert s.p90 == pytest.approx(7.6)
    empty = summarize([])
    assert empty.count == 0 and empty.mean is None and empty.p99 is None


def test_merge_intervals():
    assert merge_intervals([(5, 6), (0, 2), (1, 3), (3, 4), (7, 7)]) == [(0, 4), (5, 6)]
    assert merge_intervals([]) == []
    with pytest.raises(ValueError):
        merge_intervals([(2, 1)])


def test_union_and_busy_fraction():
    iv = [(0, 2), (1, 3), (10, 11)]
    assert union_length(iv) == 4
    assert clip(iv, 1.5, 10.5) == [(1.5, 2), (1.5, 3), (10, 10.5)]
    assert busy_fraction(iv, 0, 4) == pytest.approx(0.75)
    assert busy_fraction(iv, 2, 12) == pytest.approx(0.2)
    with pytest.raises(ValueError):
        busy_fraction(iv, 3, 3)
