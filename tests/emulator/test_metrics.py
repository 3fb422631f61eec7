"""adev.emulator.metrics: the endpoint's /metrics text is generate_latest's, byte for byte."""
import random

from prometheus_client import CollectorRegistry, Info, generate_latest

from adev.emulator.metrics import Exposition, Metrics, observe_n


def _metrics() -> Metrics:
    return Metrics("Qwen3-Coder-30B-A3B-Instruct", 16, 10407, True, 65536)


def test_render_equals_generate_latest_as_values_and_children_change():
    m = _metrics()
    assert m.render() == generate_latest(m.registry)
    assert m._exposition.fast  # the compiled path, not the fallback
    rng = random.Random(7)
    for _ in range(500):
        m.ttft.observe(rng.random() * 3000)  # beyond the last bucket too (+Inf)
        observe_n(m.itl, rng.random(), rng.randrange(1, 50))
        m.prefix_cache_hits.inc(rng.randrange(10**7))
        m.kv_cache_usage_perc.set(rng.random())
        m.by_source("external_kv_transfer").inc(rng.randrange(100))
        m.read_path_overrun.inc(rng.random() * 1e-7)  # values that print in exponent form
        assert m.render() == generate_latest(m.registry)
    m.success("error").inc()  # a child created after the first render: the layout is rebuilt
    m.store_error("brand-new-op").inc(3)
    assert m.render() == generate_latest(m.registry) and m._exposition.fast
    assert b'finished_reason="error"' in m.render()


def test_a_metric_type_it_does_not_know_falls_back_to_generate_latest():
    r = CollectorRegistry()
    Info("build", "Build info.", registry=r).info({"version": "1"})
    ex = Exposition(r)
    assert ex.render() == generate_latest(r) and not ex.fast
