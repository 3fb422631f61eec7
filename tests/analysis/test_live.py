"""Running figures for the live display."""
from __future__ import annotations

import pytest

from adev.analysis.live import running_figures


def _scr(t, target, ext, gpu, prompt):
    lab = '{engine="0"}'
    return {"target": target, "t": t, "ok": True,
            "samples": {f"vllm:external_prefix_cache_hits_total{lab}": ext,
                        f"vllm:prefix_cache_hits_total{lab}": gpu,
                        f"vllm:prompt_tokens_total{lab}": prompt}}


def test_running_figures_exact():
    calls = [{"endpoint": "coder", "t_sent": 100.0, "t_end": 104.0, "status": "ok",
              "t_first_content": 101.0, "server": {"put_blocks": 10, "put_refused_blocks": 5}},
             {"endpoint": "coder", "t_sent": 102.0, "t_end": 106.0, "status": "ok",
              "t_first_content": 105.0, "server": None}]
    scr = [_scr(100.0, "coder", 0, 0, 0), _scr(110.0, "coder", 1485, 500, 5000),
           {"target": "master", "t": 110.0, "ok": True, "samples": {}}]
    f = running_figures(calls, scr, 100.0, 110.0, prefill_tokens_per_s=1485.0)
    assert f["busy_share"] == {"coder": pytest.approx(0.6)}
    assert f["gross_saving"] == pytest.approx((1485 / 1485.0) / 6.0)
    assert f["gpu_hit_share"] == pytest.approx(0.1) and f["store_hit_share"] == pytest.approx(0.297)
    assert f["refused_share"] == pytest.approx(0.5) and f["ttft_p50_s"] == pytest.approx(2.0)


def test_running_figures_before_any_scrape():
    f = running_figures([], [], 0.0, 0.0)
    assert f["gross_saving"] is None and f["busy_share"] == {} and f["calls"] == 0
