"""THE scraper's parser: the per-series cache gives exactly what prometheus_client's parser gives."""
from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from adev.client import scrape
from adev.client.scrape import parse_metrics, sample_key, total
from adev.emulator.metrics import Metrics

MOONCAKE_LIKE = """\
master_key_count 12
mem_cache_hit_bytes_total 3.5e+06
master_put_start_alloc_failures_total 0
odd_metric{path="a b c",quote="say \\"hi\\""} 7
with_ts{x="1"} 4 1700000000000
nan_metric NaN
inf_metric +Inf
"""


def reference(text: str) -> dict[str, float]:
    return {sample_key(s.name, s.labels): float(s.value)
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def same(a: dict[str, float], b: dict[str, float]) -> bool:
    return a.keys() == b.keys() and all(
        (math.isnan(a[k]) and math.isnan(b[k])) or a[k] == b[k] for k in a)


def emulator_page(hits: int) -> str:
    m = Metrics(model_name="m", block_size=16, num_gpu_blocks=100, enable_prefix_caching=True,
                max_model_len=4096)
    m.prefix_cache_hits.inc(hits)
    m.ttft.observe(0.25 * hits)
    return m.render().decode()


@pytest.fixture(autouse=True)
def fresh_cache():
    scrape._SERIES.clear()
    yield
    scrape._SERIES.clear()


@pytest.mark.parametrize("page", [emulator_page(3), MOONCAKE_LIKE])
def test_cached_parse_equals_the_parser_and_follows_new_values(page):
    assert same(parse_metrics(page), reference(page))  # cold: every line through the parser
    again = page.replace(" 7\n", " 8\n").replace(" 12\n", " 13\n")
    if page is not MOONCAKE_LIKE:
        again = emulator_page(5)
    assert same(parse_metrics(again), reference(again))  # warm: from the cache, new values


def test_warm_parse_does_not_call_the_parser_except_for_uncacheable_lines(monkeypatch):
    page = emulator_page(2)
    parse_metrics(page)
    calls = []
    real = scrape.text_string_to_metric_families

    def counting(text):
        calls.append(text)
        return real(text)
    monkeypatch.setattr(scrape, "text_string_to_metric_families", counting)
    parse_metrics(emulator_page(4))
    assert calls == []
    parse_metrics(MOONCAKE_LIKE)
    parse_metrics(MOONCAKE_LIKE)
    assert [c for c in calls if "with_ts" in c] and len(calls) == 8  # 7 cold + 1 timestamped


def test_malformed_line_raises_and_total_sums_labels():
    with pytest.raises(ValueError, match=r"could not convert string to float: '\{x=\"1\}'"):
        parse_metrics('bad{x="1} 3\n')
    # a bad line after good ones fails the whole page (no partial result), as does a known
    # series (its key cached) whose value is not a number
    with pytest.raises(ValueError, match="could not convert"):
        parse_metrics('good 1\nbad{x="1} 3\n')
    assert parse_metrics('good 1\n') == {"good": 1.0}
    with pytest.raises(ValueError, match="could not convert string to float: 'NaNa'"):
        parse_metrics('good NaNa\n')
    s = parse_metrics('a{k="1"} 2\na{k="2"} 3\nb 1\n')
    assert total(s, "a") == 5 and total(s, "a", k="2") == 3 and total(s, "c") is None
