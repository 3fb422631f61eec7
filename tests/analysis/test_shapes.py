"""The source's shapes held against runs: the data file, each kind's rule, the table."""
from __future__ import annotations

import math

import pytest

from adev.analysis.aggregate import RunSummary
from adev.analysis.shapes import Shape, criterion, judge, judge_all, load, shapes_markdown


def summary(width, *, protocol="steady", pause_s=300.0, lease=5.0, conf="store-ram+disk",
            disk_tier="local-raid0", reuse=None, interval=None, **means):
    stats = {k: {"n": 3, "mean": v, "cv": 0.1} for k, v in means.items()}
    return RunSummary(run_id=f"r{width}", label=f"w{width}", path="", width=width,
                      protocol=protocol, configuration=conf, lease_ttl_s=lease, pause_s=pause_s,
                      windows=3, invalid_windows=0, burst_windows=0, stats=stats, quiet={},
                      interval=interval or {}, reuse=reuse, missing={}, disk_tier=disk_tier)


W6, W12, W18 = ({"width": w, "protocol": "steady", "pause_s": 300} for w in (6, 12, 18))


def shape(kind, points, figure="gross_saving", **kw):
    return Shape(kind, figure, tuple(points), "says", "where", **kw)


def test_data_file_loads_every_shape_with_the_source_cited():
    shapes = load()
    assert len(shapes) >= 12
    assert all(s.says and s.where for s in shapes)
    kinds = {s.kind for s in shapes}
    assert kinds == {"rises", "falls", "ratio", "range", "not_above", "overlap"}
    lease = [s for s in shapes if s.kind == "ratio"][0]
    assert (lease.lo, lease.hi) == (0.35, 0.65) and lease.points[0] == {"width": 12, "lease": 300}


def test_rises_and_falls_need_every_step():
    runs = [summary(6, gross_saving=0.09), summary(12, gross_saving=0.15),
            summary(18, gross_saving=0.14)]
    assert judge(shape("rises", [W6, W12]), runs).holds is True
    assert judge(shape("rises", [W6, W12, W18]), runs).holds is False   # 0.15 -> 0.14 falls
    assert judge(shape("falls", [W12, W18]), runs).holds is True
    equal = [summary(6, gross_saving=0.1), summary(12, gross_saving=0.1)]
    assert judge(shape("rises", [W6, W12]), equal).holds is False       # strictly up
    assert judge(shape("falls", [W6, W12]), equal).holds is False


def test_a_point_with_several_runs_takes_their_mean():
    runs = [summary(6, gross_saving=0.10), summary(6, gross_saving=0.30),
            summary(12, gross_saving=0.19)]
    j = judge(shape("rises", [W6, W12]), runs)
    assert j.values == [pytest.approx(0.20), pytest.approx(0.19)] and j.holds is False


def test_ratio_and_range_bounds_are_inclusive():
    p300, p5 = {"width": 12, "lease": 300}, {"width": 12, "lease": "short"}
    runs = [summary(12, lease=300.0, gross_saving=0.06), summary(12, gross_saving=0.12)]
    j = judge(shape("ratio", [p300, p5], lo=0.35, hi=0.5), runs)
    assert j.measure == pytest.approx(0.5) and j.holds is True
    assert judge(shape("ratio", [p300, p5], hi=0.49), runs).holds is False
    assert "(ratio 0.50)" in j.ours_text()
    r = [summary(12, refused_share=0.6)]
    assert judge(shape("range", [W12], figure="refused_share", lo=0.6), r).holds is True
    assert judge(shape("range", [W12], figure="refused_share", lo=0.61), r).holds is False
    assert judge(shape("range", [W12], figure="refused_share", hi=0.59), r).holds is False
    zero = [summary(12, lease=300.0, gross_saving=0.06), summary(12, gross_saving=0.0)]
    z = judge(shape("ratio", [p300, p5], lo=0.35, hi=0.65), zero)
    assert z.holds is None and z.why.startswith("zero at")


def test_not_above_allows_its_tolerance():
    fig = "reuse_owner_share_cross_session"
    runs = [summary(12, reuse={"owner_share_cross_session": 0.040}),
            summary(18, reuse={"owner_share_cross_session": 0.045})]
    assert judge(shape("not_above", [W12, W18], figure=fig, tol=0.005), runs).holds is True
    assert judge(shape("not_above", [W12, W18], figure=fig, tol=0.004), runs).holds is False


def test_overlap_uses_each_points_interval():
    loc = {"width": 12, "disk_tier": "local-raid0"}
    rem = {"width": 12, "disk_tier": "remote-nvmeof"}
    a = summary(12, gross_saving=0.15, interval={"gross_saving": {"lo": 0.12, "hi": 0.18}})
    b = summary(12, disk_tier="remote-nvmeof", gross_saving=0.20,
                interval={"gross_saving": {"lo": 0.18, "hi": 0.22}})
    assert judge(shape("overlap", [loc, rem]), [a, b]).holds is True     # touch at 0.18
    c = summary(12, disk_tier="remote-nvmeof", gross_saving=0.21,
                interval={"gross_saving": {"lo": 0.181, "hi": 0.24}})
    assert judge(shape("overlap", [loc, rem]), [a, c]).holds is False
    one = summary(12, disk_tier="remote-nvmeof", gross_saving=0.2,
                  interval={"gross_saving": {"lo": math.nan, "hi": math.nan}})
    j = judge(shape("overlap", [loc, rem]), [a, one])
    assert j.holds is None and "fewer than 2 windows" in j.why
    # several runs at a point: the t-interval of their means (0.1 and 0.3: mean 0.2,
    # sd 0.1414, t(0.975, 1) = 12.706 -> half-width 1.2706)
    two = [summary(12, gross_saving=0.1), summary(12, gross_saving=0.3), c]
    assert judge(shape("overlap", [loc, rem]), two).holds is True


def test_unjudged_shapes_say_why():
    j = judge(shape("rises", [W6, W18]), [summary(6, gross_saving=0.1)])
    assert j.holds is None and j.why == "no run at 18 sessions, steady, pause 300 s"
    k = judge(shape("rises", [W6, W18]), [summary(6, gross_saving=0.1),
                                           summary(18, gross_saving=math.nan)])
    assert k.holds is None and k.why == "not measured at 18 sessions, steady, pause 300 s"


def test_markdown_counts_and_verdicts():
    runs = [summary(6, gross_saving=0.09, gpu_hit_share=0.80),
            summary(18, gross_saving=0.18, gpu_hit_share=0.75)]
    shapes = [shape("rises", [W6, W18]),
              shape("range", [W18], figure="gpu_hit_share", hi=0.2),
              shape("rises", [W6, W12])]
    rows = judge_all(runs, shapes)
    md = shapes_markdown(rows)
    assert md.startswith("1 of 2 judged shape(s) hold; 1 could not be judged from these runs.")
    assert "| Gross saving | says | rises over 6 sessions, steady, pause 300 s → 18 sessions, " \
           "steady, pause 300 s | 9.00% → 18.00% | yes | where |" in md
    assert "| 75.00% | **no** |" in md and "at most 20.00%" in md
    assert "— (no run at 12 sessions" in md
    only = shapes_markdown(rows, only_judged=True)
    assert "no run at 12" not in only and only.count("| where |") == 2
    assert criterion(shape("not_above", [W12, W18], tol=0.005)) == \
        "18 sessions, steady, pause 300 s at most 12 sessions, steady, pause 300 s + 0.50%"


BASE = 'says = "s"\nwhere = "w"\nfigure = "gross_saving"\n'


@pytest.mark.parametrize("text, message", [
    ('kind = "grows"\npoints = [{width = 1}, {width = 2}]\n' + BASE,
     r"shape\[0\]\.kind: 'grows'; allowed: rises"),
    ('kind = "ratio"\npoints = [{width = 1}]\nlo = 0.1\n' + BASE,
     r"shape\[0\]\.points: kind 'ratio' takes 2 point\(s\), got 1"),
    ('kind = "range"\npoints = [{widht = 1}]\nlo = 0.1\n' + BASE,
     r"shape\[0\]\.points\[0\]: unknown key\(s\) \['widht'\]"),
    ('kind = "range"\npoints = [{width = 1}]\n' + BASE,
     r"shape\[0\]: kind 'range' needs 'lo' or 'hi'"),
    ('kind = "rises"\npoints = [{width = 1}]\n' + BASE,
     r"takes two or more point\(s\), got 1"),
    ('kind = "rises"\npoints = [{width = 1}, {width = 2}]\n',
     r"shape\[0\]: missing field 'figure'"),
    ('kind = "rises"\npoints = [1, 2]\n' + BASE,
     r"shape\[0\]\.points: expected a list of point tables"),
])
def test_malformed_shapes_name_index_and_field(tmp_path, text, message):
    p = tmp_path / "s.toml"
    p.write_text("[[shape]]\n" + text)
    with pytest.raises(ValueError, match=message):
        load(p)


def test_the_reuse_distance_shape_is_judged_in_seconds():
    """The data file's p99 reuse distance at 6 sessions with the pause: a band of 300-500 s,
    judged on the run's reuse ledger and printed in seconds."""
    sh = [s for s in load() if s.figure == "reuse_distance_p99_s"]
    assert len(sh) == 1 and (sh[0].lo, sh[0].hi) == (300.0, 500.0) and not sh[0].share
    near = summary(6, reuse={"distance_p99_s": 410.0})
    far = summary(6, reuse={"distance_p99_s": 1500.0})
    assert judge(sh[0], [near]).holds is True
    assert judge(sh[0], [far]).holds is False
    assert judge(sh[0], [summary(6, pause_s=0.0, reuse={"distance_p99_s": 410.0})]).holds is None
    md = shapes_markdown(judge_all([far], sh))
    assert "| 6 sessions, steady, pause 300 s: 300 to 500 | 1500 | **no** |" in md
