"""The report's plots: what each draws (the series in the plot's units), its axes, legend and
caption, and why a figure is missing, on hand-made run summaries whose figures are round numbers.

The PNG encoder is replaced by a recorder of the matplotlib figure (``_png`` is tested on its own),
so the axes can be read back."""
from __future__ import annotations

import math
from types import SimpleNamespace as NS

import numpy as np
import pandas as pd
import pytest

from adev.analysis import plots as P
from adev.analysis.aggregate import KEY_FIGURES, RunSummary


def _rs(width, gross=None, lo=None, hi=None, net=None, disk=None, quiet=None, gpu=None,
        store=None, refused=None, conf="store-ram", lease=5.0, pause=0.0, label=None):
    """A summary with the given means (None: no valid window) and gross saving interval."""
    vals = {"gross_saving": gross, "net_saving": net, "gross_saving_disk": disk,
            "gpu_hit_share": gpu, "store_hit_share": store, "refused_share": refused}
    nan = math.nan

    def st(v):
        return {"n": 0 if v is None else 2, "mean": nan if v is None else v, "cv": 0.0}
    stats = {f: st(vals.get(f)) for f in KEY_FIGURES}
    qs = {f: st(None) for f in KEY_FIGURES}
    qs["gross_saving"] = st(quiet)
    iv = {f: {"n": 0, "lo": nan, "hi": nan} for f in KEY_FIGURES}
    iv["gross_saving"] = {"n": 2, "lo": nan if lo is None else lo, "hi": nan if hi is None else hi}
    return RunSummary(run_id=f"r{width}", label=label or f"w{width}", path="", width=width,
                      protocol="steady", configuration=conf, lease_ttl_s=lease, pause_s=pause,
                      windows=2, invalid_windows=0, burst_windows=0, stats=stats, quiet=qs,
                      interval=iv, reuse=None, missing={})


@pytest.fixture
def figs(monkeypatch):
    """The matplotlib figures the plots hand to ``_png``, in order."""
    got = []

    def rec(fig):
        got.append(fig)
        return b"PNG"
    monkeypatch.setattr(P, "_png", rec)
    yield got
    import matplotlib.pyplot as plt
    for f in got:
        plt.close(f)


def _xy(a, b):
    return np.asarray(a, float), np.asarray(b, float)


def test_png_encodes_and_closes():
    plt = P._plt()
    import matplotlib
    assert matplotlib.get_backend().lower() == "agg"
    fig, ax = plt.subplots(figsize=(2, 1))
    ax.plot([0, 1], [0, 1])
    png = P._png(fig)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert fig.number not in plt.get_fignums()
    # 90 dpi: the pHYs chunk holds 90 / 0.0254 = 3543 pixels per metre on both axes
    i = png.index(b"pHYs")
    assert int.from_bytes(png[i + 4:i + 8], "big") == int.from_bytes(png[i + 8:i + 12], "big") \
        == round(90 / 0.0254)


def test_cdf_exact_and_sampled():
    x, y = P._cdf(np.array([3.0, 1.0, 2.0, 2.0]))
    np.testing.assert_array_equal(x, [1, 2, 2, 3])
    np.testing.assert_array_equal(y, [0.25, 0.5, 0.75, 1.0])
    # 5 values at 3 points: order statistics 0, 2, 4 -> fractions 1/5, 3/5, 5/5
    x, y = P._cdf(np.array([50, 40, 30, 20, 10]), points=3)
    np.testing.assert_array_equal(x, [10, 30, 50])
    np.testing.assert_array_equal(y, [0.2, 0.6, 1.0])
    # 7 values at 4 points: linspace(0, 6, 4) = 0, 2, 4, 6
    x, y = P._cdf(np.arange(7.0), points=4)
    np.testing.assert_array_equal(x, [0, 2, 4, 6])
    np.testing.assert_array_equal(y, np.array([1, 3, 5, 7]) / 7)
    # exactly `points` values: exact; the default is 2000 points
    x, y = P._cdf(np.arange(4.0), points=4)
    np.testing.assert_array_equal(y, [0.25, 0.5, 0.75, 1.0])
    x, y = P._cdf(np.arange(2000.0))
    assert len(x) == 2000 and y[0] == 1 / 2000
    x, y = P._cdf(np.arange(2001.0))
    assert len(x) == 2000 and x[-1] == 2000 and y[-1] == 1.0 and y[1] == 2 / 2001
    x, y = P._cdf(np.array([2, 1]))                        # integers: as floats
    assert x.dtype == float and x.tolist() == [1.0, 2.0]


def test_widths_with_the_figure():
    s = [_rs(3, gross=0.1), _rs(1, gross=0.2), _rs(3, gross=0.3), _rs(6), _rs(None, gross=0.1)]
    assert P._widths(s, "gross_saving") == [1, 3]
    assert P._widths(s, "net_saving") == []


def test_saving_vs_width_series_axes_and_caption(figs):
    s = [_rs(1, gross=0.02, lo=0.01, hi=0.04, net=0.015, disk=0.005, quiet=0.025),
         _rs(4, gross=0.10, lo=0.05, hi=0.12, net=0.08, disk=0.04, quiet=0.125)]
    f = P.fig_saving_vs_width(s)
    assert (f.key, f.title, f.png, f.reason) == ("saving_vs_width", "Busy time saved vs width",
                                                 b"PNG", None)
    # one group: each line named by its operating point
    op = "store-ram, lease 5 s, pause 0 s"
    assert list(f.series) == [f"{op}: gross", f"{op}: net", f"{op}: disk", f"{op}: quiet"]
    for k, y in (("gross", [2, 10]), ("net", [1.5, 8]), ("disk", [0.5, 4]), ("quiet", [2.5, 12.5])):
        np.testing.assert_allclose(f.series[f"{op}: {k}"][0], [1, 4])
        np.testing.assert_allclose(f.series[f"{op}: {k}"][1], y)
    [ax] = figs[0].axes
    assert ax.get_xlabel() == "width (sessions)"
    assert ax.get_ylabel() == "% of endpoint busy time"
    # y from -5% of 1.6 x the largest gross (quiet: 12.5%) to 1.6 x it
    assert ax.get_ylim() == pytest.approx((-0.05 * 12.5 * 1.6, 12.5 * 1.6))
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [op]
    # the caption's line styles: solid with bars (gross), dashed (net), dotted (disk), x (quiet)
    st = [(ln.get_linestyle(), ln.get_marker()) for ln in ax.lines if ln.get_marker() != "_"]
    assert st == [("-", "o"), ("--", "s"), (":", "^"), ("None", "x")]
    # error bars: gross - lo below, hi - gross above, in percent
    bars = ax.containers[0]
    segs = bars.lines[2][0].get_segments()
    np.testing.assert_allclose([(s_[0][1], s_[1][1]) for s_ in segs], [(1, 4), (5, 12)])
    assert f.caption == (
        "solid with bars: gross saving = (store-served tokens / prefill rate) / busy time, "
        "95% t-interval (bars may run off the axis when few windows/runs); dashed: net "
        "(read paths charged pro rata); dotted: the disk tier's part; x: gross over "
        "quiet windows (no preemption burst).")


def test_saving_vs_width_negative_and_nan_intervals(figs):
    # all savings <= 0: the axis keeps matplotlib's lower limit (or 0) and tops out at 1
    s = [_rs(1, gross=-0.02, net=-0.03, disk=0.0, quiet=-0.01),
         _rs(2, gross=-0.01, net=-0.02, disk=0.0, quiet=-0.02)]
    f = P.fig_saving_vs_width(s)
    [ax] = figs[0].axes
    lo, hi = ax.get_ylim()
    assert hi == 1 and lo <= -3.0
    # the interval is NaN (one window): no bar, not an error
    segs = ax.containers[0].lines[2][0].get_segments()
    np.testing.assert_allclose([(a[0][1], a[1][1]) for a in segs], [(-2, -2), (-1, -1)])
    assert f.png == b"PNG"


def test_saving_vs_width_several_points_and_groups(figs):
    a = [_rs(1, gross=0.02, lo=0.01, hi=0.03, net=0.01, disk=0.0, quiet=0.02),
         _rs(2, gross=0.04, lo=0.03, hi=0.05, net=0.02, disk=0.0, quiet=0.04),
         _rs(1, gross=0.06, lo=0.05, hi=0.07, net=0.03, disk=0.01, quiet=0.06, lease=60.0),
         _rs(2, gross=0.08, lo=0.07, hi=0.09, net=0.04, disk=0.02, quiet=0.08, lease=60.0)]
    f = P.fig_saving_vs_width(a)
    op5, op60 = "store-ram, lease 5 s, pause 0 s", "store-ram, lease 60 s, pause 0 s"
    assert list(f.series)[::4] == [f"{op5}: gross", f"{op60}: gross"]
    np.testing.assert_allclose(f.series[f"{op60}: gross"][1], [6, 8])
    [ax] = figs[0].axes
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [op5, op60]
    # two groups (a comparison): one operating point each, named by the group only
    g = P.fig_saving_vs_width(a[:2] + [a[0]], labels=["A", "B"], groups=[a[:2], [a[0]]])
    assert list(g.series) == ["A: gross", "A: net", "A: disk", "A: quiet",
                              "B: gross", "B: net", "B: disk", "B: quiet"]
    np.testing.assert_allclose(g.series["B: gross"][0], [1])
    # two groups, one with two operating points: both named
    h = P.fig_saving_vs_width(a, labels=["A", "B"], groups=[a, a[:2]])
    assert list(h.series)[::4] == [f"A, {op5}: gross", f"A, {op60}: gross", "B: gross"]
    # a group without any width: nothing drawn for it, no error
    k = P.fig_saving_vs_width(a[:2], labels=["A", "B"], groups=[a[:2], [_rs(None, gross=0.1)]])
    assert list(k.series)[::4] == ["A: gross"] and k.png == b"PNG"
    # groups without labels: lines named "gross"
    u = P.fig_saving_vs_width(a[:2], labels=["", ""], groups=[a[:2], a[:2]])
    assert list(u.series)[:4] == ["gross: gross", "gross: net", "gross: disk", "gross: quiet"]
    assert [t.get_text() for t in figs[-1].axes[0].get_legend().get_texts()] == ["gross", "gross"]


def test_saving_vs_width_missing_reasons():
    f = P.fig_saving_vs_width([_rs(3, gross=0.1), _rs(None, gross=0.1, label="nowidth"),
                               _rs(5, label="nogross")])
    assert (f.png, f.reason) == (None, "needs runs at >= 2 widths with a gross saving "
                                       "(have widths [3]; runs without a width: nowidth)")
    assert P.fig_saving_vs_width([]).reason == ("needs runs at >= 2 widths with a gross saving "
                                                "(have widths none)")
    assert P.fig_saving_vs_width([_rs(None, label="a"), _rs(None, label="b")]).reason.endswith(
        "(have widths none; runs without a width: a, b)")


def test_hit_shares(figs):
    s = [_rs(1, gpu=0.4, store=0.3), _rs(3, gpu=0.2, store=0.5), _rs(None, gpu=0.9, store=0.9)]
    f = P.fig_hit_shares(s)
    assert (f.key, f.title, f.png) == ("hit_shares_vs_width", "GPU vs store hit share vs width",
                                       b"PNG")
    assert list(f.series) == ["GPU prefix cache", "store (RAM + disk)"]
    np.testing.assert_allclose(f.series["GPU prefix cache"][0], [1, 3])
    np.testing.assert_allclose(f.series["GPU prefix cache"][1], [40, 20])
    np.testing.assert_allclose(f.series["store (RAM + disk)"][1], [30, 50])
    [ax] = figs[0].axes
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("width (sessions)", "% of prompt tokens")
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(f.series)
    assert [(ln.get_linestyle(), ln.get_marker()) for ln in ax.lines] == [("-", "o"),
                                                                           ("--", "s")]
    two = s[:2] + [_rs(1, gpu=0.1, store=0.6, lease=60.0), _rs(3, gpu=0.05, store=0.7, lease=60.0)]
    g = P.fig_hit_shares(two)
    op5, op60 = "store-ram, lease 5 s, pause 0 s", "store-ram, lease 60 s, pause 0 s"
    assert list(g.series) == [f"GPU prefix cache ({op5})", f"store (RAM + disk) ({op5})",
                              f"GPU prefix cache ({op60})", f"store (RAM + disk) ({op60})"]
    np.testing.assert_allclose(g.series[f"store (RAM + disk) ({op60})"][1], [60, 70])
    m = P.fig_hit_shares([_rs(1, store=0.3), _rs(2)])
    assert (m.png, m.reason) == (None, "needs runs at >= 2 widths with hit shares "
                                       "(have widths [1])")
    assert P.fig_hit_shares([]).reason.endswith("(have widths none)")


def test_operating_points_bars(figs):
    s = [_rs(12, gross=0.1, net=0.08, disk=0.02, refused=0.5, lease=60.0),
         _rs(12, gross=0.2, net=None, disk=0.05, refused=0.1),
         _rs(6, gross=0.3, net=0.3, disk=0.3, refused=0.3)]
    f = P.fig_operating_points(s)
    assert (f.key, f.title, f.png) == ("operating_points", "12-session operating points", b"PNG")
    assert list(f.series) == ["gross", "net", "disk part", "refused share of writes"]
    # sorted by lease: 5 s first; four bars 0.2 wide around each point
    for i, name in enumerate(f.series):
        np.testing.assert_allclose(f.series[name][0], np.array([0, 1]) + (i - 1.5) * 0.2)
    np.testing.assert_allclose(f.series["gross"][1], [20, 10])
    np.testing.assert_allclose(f.series["net"][1], [0, 8])               # missing: 0
    np.testing.assert_allclose(f.series["disk part"][1], [5, 2])
    np.testing.assert_allclose(f.series["refused share of writes"][1], [10, 50])
    [ax] = figs[0].axes
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        "store-ram\nlease 5 s\npause 0 s", "store-ram\nlease 60 s\npause 0 s"]
    np.testing.assert_allclose(ax.get_xticks(), [0, 1])
    assert ax.get_ylabel() == "%"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(f.series)
    assert [round(p.get_width(), 9) for p in ax.patches] == [0.2] * 8
    assert P.fig_operating_points(s, width=6).title == "6-session operating points"
    m = P.fig_operating_points(s, width=3)
    assert (m.png, m.reason) == (None, "no run at width 3 with a gross saving (widths present: "
                                       "[6, 12])")
    m = P.fig_operating_points([_rs(12), _rs(None)])
    assert m.reason == "no run at width 12 with a gross saving (widths present: [12])"
    assert P.fig_operating_points([]).reason.endswith("(widths present: none)")


def _calls(ttft_send, ttft_sched, status=None):
    n = len(ttft_send)
    return pd.DataFrame({"status": status or ["ok"] * n, "t_sent": [10.0] * n,
                         "t_scheduled": [10.0 + a - b for a, b in zip(ttft_send, ttft_sched, strict=True)],
                         "t_first_content": [10.0 + a for a in ttft_send]})


def _ld(label, calls=None, ledger=None, lease=None, missing=None):
    return NS(summary=NS(label=label),
              run=NS(calls=pd.DataFrame() if calls is None else calls, ledger=ledger,
                     lease_ttl_s=lease, missing=missing or {}))


def test_ttft_cdfs(figs):
    a = _ld("a", _calls([2.0, 1.0, 4.0, math.nan], [1.0, 0.5, 3.0, 1.0],
                        ["ok", "ok", "ok", "ok"]))
    b = _ld("b", _calls([9.0, 3.0], [9.5, 3.5], ["error", "ok"]))
    f = P.fig_ttft_cdfs([_ld("none"), a, b])
    assert (f.key, f.title, f.png) == ("ttft_cdfs", "TTFT CDFs (first content)", b"PNG")
    assert list(f.series) == ["a: from send", "a: from schedule", "b: from send",
                              "b: from schedule"]
    np.testing.assert_allclose(f.series["a: from send"][0], [1, 2, 4])      # NaN left out
    np.testing.assert_allclose(f.series["a: from send"][1], [1 / 3, 2 / 3, 1])
    np.testing.assert_allclose(f.series["a: from schedule"][0], [0.5, 1, 3])
    np.testing.assert_allclose(f.series["b: from send"][0], [3])           # the OK call only
    np.testing.assert_allclose(f.series["b: from schedule"][0], [3.5])
    ax0, ax1 = figs[0].axes
    assert (ax0.get_xlabel(), ax1.get_xlabel()) == ("TTFT from send (model s)",
                                                    "TTFT from schedule (model s)")
    assert ax0.get_ylabel() == "fraction of calls"
    assert ax0.get_xscale() == ax1.get_xscale() == "log"
    assert ax0.get_shared_y_axes().joined(ax0, ax1)
    assert ax0.get_legend() is None
    assert [t.get_text() for t in ax1.get_legend().get_texts()] == ["a", "b"]
    assert all(ln.get_drawstyle() == "steps-post" for ln in ax0.lines + ax1.lines)
    g = P.fig_ttft_cdfs([a, b], labels=["A: a", "B: b"])
    assert list(g.series)[::2] == ["A: a: from send", "B: b: from send"]
    # at most 12 runs drawn
    many = [_ld(f"r{i}", _calls([1.0 + i], [1.0])) for i in range(13)]
    assert len(P.fig_ttft_cdfs(many).series) == 24
    m = P.fig_ttft_cdfs([_ld("x"), _ld("y", _calls([math.nan], [1.0])),
                         _ld("z", _calls([1.0], [1.0], ["error"]))])
    assert (m.png, m.reason) == (None, "no OK call with a first-content stamp in any run")


class _Ledger:
    """A reuse ledger's classified touches, given by hand."""

    def __init__(self, distance, cls, ttl_seen):
        self.touches = np.arange(len(distance))
        self._c = NS(distance=np.asarray(distance, float), cls=np.asarray(cls))
        self.ttl_seen = ttl_seen

    def classified(self, ttl):
        self.ttl_seen.append(ttl)
        return self._c


def test_reuse_profile(figs):
    from adev.analysis.ledger import CROSS_SESSION, NEW, SAME_SESSION
    seen = []
    S, X, N = SAME_SESSION, CROSS_SESSION, NEW
    led = _Ledger([0, 4, 2, 0, 8, 1, 0, 3], [N, S, S, S, X, X, N, S], seen)
    f = P.fig_reuse([_ld("a", ledger=led, lease=5.0)])
    assert (f.key, f.title, f.png) == ("reuse_distance", "Reuse-distance profile (reuse ledger)",
                                       b"PNG")
    assert seen == [5.0]
    # same session: 4 of 8 touches (50%), distances > 0: 2, 3, 4; cross: 2 of 8 (25%): 1, 8
    assert list(f.series) == ["a: same session (50% of touches)", "a: cross (25% of touches)"]
    np.testing.assert_allclose(f.series["a: same session (50% of touches)"][0], [2, 3, 4])
    np.testing.assert_allclose(f.series["a: same session (50% of touches)"][1], [1 / 3, 2 / 3, 1])
    np.testing.assert_allclose(f.series["a: cross (25% of touches)"][0], [1, 8])
    [ax] = figs[0].axes
    assert ax.get_xscale() == "log"
    assert ax.get_xlabel() == "reuse distance (model s); grey line: lease TTL"
    assert ax.get_ylabel() == "fraction of reuse touches"
    assert [(ln.get_linestyle(), ln.get_drawstyle()) for ln in ax.lines[:2]] == [
        ("-", "steps-post"), ("--", "steps-post")]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(f.series)
    # the lease TTL as a vertical line at 5 s
    [vline] = [ln for ln in ax.lines if list(ln.get_xdata()) == [5.0, 5.0]]
    assert vline.get_label().startswith("_")


def test_reuse_profile_without_lease_only_cross_and_missing(figs):
    from adev.analysis.ledger import CROSS_SESSION, SAME_SESSION
    led = _Ledger([0, 3], [SAME_SESSION, CROSS_SESSION], [])
    f = P.fig_reuse([_ld("a", ledger=led, lease=None)])
    # same session has no distance > 0: not drawn; no lease: no vertical line
    assert list(f.series) == ["a: cross (50% of touches)"]
    assert len(figs[0].axes[0].lines) == 1
    # at most 6 runs drawn
    many = [_ld(f"r{i}", ledger=_Ledger([1.0], [SAME_SESSION], []), lease=5.0) for i in range(7)]
    assert len(P.fig_reuse(many).series) == 6
    empty = _Ledger([], [], [])
    m = P.fig_reuse([_ld("x", missing={"ledger": "ledger/meta.json missing"}),
                     _ld("y", ledger=empty)])
    assert (m.png, m.reason) == (None, "x: ledger/meta.json missing; y: empty ledger")
    assert P.fig_reuse([]).reason == "no runs"
    long = P.fig_reuse([_ld("z" * 300), _ld("w" * 300)])
    assert long.reason == (f"{'z' * 300}: empty ledger; {'w' * 300}: empty ledger")[:500]


def test_figure_draw_records_what_is_plotted():
    got = []
    f = P.Figure("k", "T")
    assert (f.png, f.reason, f.caption, f.series) == (None, None, "", {})
    f.draw(lambda x, y, **kw: got.append((x, y, kw)), "s", [1, 2], [3, 4], color="C1")
    assert got == [([1, 2], [3, 4], {"color": "C1"})]
    x, y = f.series["s"]
    assert x.dtype == y.dtype == float and x.tolist() == [1.0, 2.0] and y.tolist() == [3.0, 4.0]


def test_saving_vs_width_lines_of_a_point_share_its_colour(figs):
    """Only the gross line is in the legend: net, disk and quiet are told apart by style and
    tied to their operating point by its colour."""
    a = [_rs(1, gross=0.02, lo=0.01, hi=0.03, net=0.01, disk=0.0, quiet=0.02),
         _rs(2, gross=0.04, lo=0.03, hi=0.05, net=0.02, disk=0.0, quiet=0.04),
         _rs(1, gross=0.06, lo=0.05, hi=0.07, net=0.03, disk=0.01, quiet=0.06, lease=60.0),
         _rs(2, gross=0.08, lo=0.07, hi=0.09, net=0.04, disk=0.02, quiet=0.08, lease=60.0)]
    P.fig_saving_vs_width(a)
    from matplotlib.colors import to_hex
    [ax] = figs[0].axes
    data = [ln for ln in ax.lines if ln.get_marker() != "_"]
    assert [to_hex(ln.get_color()) for ln in data] == ["#1f77b4"] * 4 + ["#ff7f0e"] * 4
    # the error bars in the point's colour too
    assert to_hex(ax.containers[0].lines[2][0].get_colors()[0]) == "#1f77b4"
    assert to_hex(ax.containers[1].lines[2][0].get_colors()[0]) == "#ff7f0e"


def test_saving_vs_width_below_one_percent(figs):
    # the source's scale at one session (a fraction of a percent): the axis starts just below 0
    s = [_rs(1, gross=0.0028, lo=0.002, hi=0.0035, net=0.002, disk=0.0, quiet=0.005),
         _rs(2, gross=0.004, lo=0.003, hi=0.005, net=0.003, disk=0.0, quiet=0.003)]
    P.fig_saving_vs_width(s)
    [ax] = figs[0].axes
    assert ax.get_ylim() == pytest.approx((-0.05 * 0.5 * 1.6, 0.5 * 1.6))


def test_saving_vs_width_labels_one_per_group():
    s = [_rs(1, gross=0.02, net=0.01, disk=0.0, quiet=0.02),
         _rs(2, gross=0.04, net=0.02, disk=0.0, quiet=0.04)]
    with pytest.raises(ValueError):
        P.fig_saving_vs_width(s, labels=["A"], groups=[s, s])


def test_ttft_panels_side_by_side_and_lease_line_grey(figs):
    from matplotlib.colors import to_hex

    from adev.analysis.ledger import SAME_SESSION
    P.fig_ttft_cdfs([_ld("a", _calls([1.0, 2.0], [0.5, 1.0]))])
    ax0, ax1 = figs[0].axes
    p0, p1 = ax0.get_position(), ax1.get_position()
    assert p0.x1 <= p1.x0 and p0.y0 == p1.y0                # one row, two columns
    P.fig_reuse([_ld("a", ledger=_Ledger([1.0, 2.0], [SAME_SESSION] * 2, []), lease=5.0)])
    [ax] = figs[1].axes
    [vline] = [ln for ln in ax.lines if list(ln.get_xdata()) == [5.0, 5.0]]
    assert to_hex(vline.get_color()) == "#808080"           # the x label's "grey line"
