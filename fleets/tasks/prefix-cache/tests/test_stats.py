import pytest

from prefixcache.stats import StatsRecorder


def test_rates_and_window():
    s = StatsRecorder(window=2)
    s.record(100, 50)
    s.record(100, 0)
    s.record(100, 100)
    assert s.queries == 3 and s.hit_rate == pytest.approx(0.5)
    assert s.window_hit_rate == pytest.approx(0.5)
    s.record(100, 100)
    assert s.window_hit_rate == pytest.approx(1.0)


def test_invalid_and_reset():
    s = StatsRecorder()
    assert s.hit_rate == 0.0 and s.window_hit_rate == 0.0
    with pytest.raises(ValueError):
        s.record(10, 11)
    with pytest.raises(ValueError):
        StatsRecorder(window=0)
    s.record(10, 5)
    s.record_eviction(3)
    s.reset()
    assert s.snapshot().queries == 0 and s.evictions == 0


def test_render():
    s = StatsRecorder()
    s.record(4, 2)
    text = s.render("pc")
    assert "# TYPE pc_queries_total counter\npc_queries_total 1\n" in text
    assert "pc_hit_rate 0.5\n" in text
    assert text.count("\n") == 12
