"""set_figure: a figure is set, or ``missing`` says exactly why not (worked out by hand)."""
from __future__ import annotations

import math

import numpy as np

from adev.analysis.window_row import WindowFigures, set_figure


def _fig() -> WindowFigures:
    return WindowFigures("r", "lab", 2, 1, 0.0, 10.0, True, "steady", "coder")


def _never(*_):
    raise AssertionError("called with a missing input")


def test_set_figure_sets_the_value_as_a_float():
    f = _fig()
    set_figure(f, "gpu_hit_share", lambda a, b: a // b, 7, 2, need={"a": 7, "b": 2.0})
    assert f.gpu_hit_share == 3.0 and type(f.gpu_hit_share) is float and f.missing == {}
    # an int 0 or a float 0.0 input is present, not missing
    set_figure(f, "store_hit_share", lambda a: a, 0, need={"a": 0, "b": 0.0})
    assert f.store_hit_share == 0.0 and f.missing == {}


def test_set_figure_missing_input_names_it_or_passes_on_its_reason():
    f = _fig()
    set_figure(f, "gross_saving", _never, need={"store_tokens": None})
    assert f.missing == {"gross_saving": "store_tokens unavailable"} and math.isnan(f.gross_saving)
    # a NaN input whose own reason is known: that reason, not "unavailable"
    f.missing["prompt_tokens"] = "no scrapes of coder"
    set_figure(f, "gpu_hit_share", _never, need={"gpu_tokens": 5.0, "prompt_tokens": math.nan})
    assert f.missing["gpu_hit_share"] == "no scrapes of coder"
    # the first missing input decides, inputs before it being present
    set_figure(f, "store_hit_share", _never, need={"a": 1.0, "b": None, "c": math.nan})
    assert f.missing["store_hit_share"] == "b unavailable"
    set_figure(f, "net_saving", _never, need={"a": 1.0, "c": math.nan, "b": None})
    assert f.missing["net_saving"] == "c unavailable" and math.isnan(f.net_saving)


def test_set_figure_division_by_zero_names_the_zero_inputs():
    f = _fig()
    set_figure(f, "gross_saving", lambda a, b: a / b, 1, 0,
               need={"x": 2.0, "busy_span_s": 0, "rate": 0.0})
    assert f.missing["gross_saving"] == "division by zero (busy_span_s, rate is 0)"
    assert math.isnan(f.gross_saving)
    set_figure(f, "net_saving", lambda: 1 / 0)
    assert f.missing["net_saving"] == "division by zero ( is 0)"


def test_set_figure_non_finite_result_names_the_zero_inputs_or_says_not_finite():
    f = _fig()
    # NaN from 0/0 with numpy: both zero inputs named, joined by "and"
    set_figure(f, "gpu_hit_share", lambda a, b: float(np.float64(a) / b) if b else math.nan,
               0.0, 0.0, need={"gpu_tokens": 0.0, "prompt_tokens": 0.0, "other": 3.0})
    assert f.missing["gpu_hit_share"] == "gpu_tokens and prompt_tokens is 0"
    set_figure(f, "store_hit_share", lambda: math.inf, need={"a": 0.0})
    assert f.missing["store_hit_share"] == "a is 0" and math.isnan(f.store_hit_share)
    # no zero input: "not finite"; +inf and -inf alike, and without any need
    set_figure(f, "gross_saving", lambda: math.inf, need={"a": 2.0})
    set_figure(f, "net_saving", lambda: -math.inf)
    set_figure(f, "net_saving_full", lambda: math.nan)
    assert [f.missing[k] for k in ("gross_saving", "net_saving", "net_saving_full")] == \
        ["not finite"] * 3
    assert math.isnan(f.gross_saving) and math.isnan(f.net_saving)
    # a numpy float is a float: checked the same way
    set_figure(f, "disk_share_of_saving", lambda: np.float64("nan"))
    assert f.missing["disk_share_of_saving"] == "not finite"
