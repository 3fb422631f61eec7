"""The source study's figures beside ours: the data file, point matching, the comparison."""
from __future__ import annotations

import math

import pytest

from adev.analysis.aggregate import RunSummary
from adev.analysis.source import SourceFigure, beside, beside_markdown, load, ours


def summary(width, protocol="steady", pause_s=300.0, lease=5.0, conf="store-ram+disk",
            gross=0.2, reuse=None, disk_tier="local-raid0"):
    stats = {"gross_saving": {"n": 3, "mean": gross, "cv": 0.1}}
    return RunSummary(run_id=f"r{width}", label=f"w{width}", path="", width=width,
                      protocol=protocol, configuration=conf, lease_ttl_s=lease, pause_s=pause_s,
                      windows=3, invalid_windows=0, burst_windows=0, stats=stats, quiet={},
                      interval={}, reuse=reuse, missing={}, disk_tier=disk_tier)


def test_data_file_loads_and_cites_the_source():
    figs = load()
    assert len(figs) >= 15
    assert all(f.where and (f.value is not None or (f.lo is not None and f.hi is not None))
               for f in figs)
    by = {(f.figure, tuple(sorted(f.point.items()))): f for f in figs}
    assert by[("gross_saving", (("pause_s", 300), ("protocol", "steady"), ("width", 18)))].value \
        == pytest.approx(0.3230)
    assert by[("refused_share", (("lease", 300), ("width", 12)))].value == pytest.approx(0.872)


def test_point_matching_rules():
    f = SourceFigure("gross_saving", {"width": 12, "lease": "short", "pause_s": 300}, "x", 0.17)
    assert f.matches(summary(12))
    assert not f.matches(summary(12, lease=300.0))       # "short" is under 300 s
    assert not f.matches(summary(12, pause_s=0.0))
    assert not f.matches(summary(18))
    g = SourceFigure("refused_share", {"width": 12, "lease": 300}, "x", 0.872)
    assert g.matches(summary(12, lease=300.0)) and not g.matches(summary(12, lease=5.0))
    b = SourceFigure("gross_saving", {"width": 6, "protocol": "batch", "pause_s": 0}, "x", 0.16)
    assert b.matches(summary(6, protocol="batch", pause_s=None))   # no pause recorded = 0
    assert not b.matches(summary(6))


def test_beside_means_matching_runs_and_says_why_missing():
    f1 = SourceFigure("gross_saving", {"width": 12}, "T12", 0.1753)
    f2 = SourceFigure("reuse_owner_share_cross_session", {"width": 12}, "T15", lo=0.04, hi=0.05)
    f3 = SourceFigure("gross_saving", {"width": 18}, "T12", 0.3230)
    runs = [summary(12, gross=0.10, reuse={"owner_share_cross_session": 0.045}),
            summary(12, gross=0.20, reuse={"owner_share_cross_session": 0.047}), summary(6)]
    rows = beside(runs, [f1, f2, f3])
    assert rows[0].runs == 2 and rows[0].ours == pytest.approx(0.15)
    assert rows[0].within is False                          # |0.15 - 0.1753| > 1.5 points
    assert rows[1].ours == pytest.approx(0.046) and rows[1].within is True
    assert rows[2].ours is None and rows[2].why_missing == "no run at this point"
    md = beside_markdown(rows)
    assert "| 12 sessions | Gross saving | 17.53% | 15.00% | T12 |" in md
    assert "| 12 sessions | Cross-session reuse (ownership) | 4.00-5.00% | 4.60% | T15 |" in md
    assert "18 sessions" not in md                          # unmatched rows are left out
    nan_run = summary(12, gross=math.nan)
    r = beside([nan_run], [f1])[0]
    assert r.ours is None and r.why_missing == "not measured in the runs at this point"


def test_malformed_entry_names_index_and_field(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text('[[figure]]\nfigure = "gross_saving"\npoint = { width = 1 }\nwhere = "x"\n'
                 'value = 0.1\n[[figure]]\nfigure = "x"\npoint = { widht = 1 }\nwhere = "y"\n'
                 'value = 0.2\n')
    with pytest.raises(ValueError, match=r"figure\[1\]\.point: unknown key\(s\) \['widht'\]"):
        load(p)
    p.write_text('[[figure]]\nfigure = "x"\npoint = {}\nwhere = "y"\nlo = 0.1\n')
    with pytest.raises(ValueError, match=r"figure\[0\]: needs 'value' or both 'lo' and 'hi'"):
        load(p)


def test_point_text_and_value_text_of_every_key():
    f = SourceFigure("gross_saving", {"width": 1, "protocol": "batch", "pause_s": 0,
                           "configuration": "store-ram", "disk_tier": "nvmeof", "lease": "short"},
                     "w", lo=0.0, hi=0.05)
    assert f.point_text() == "1 session, batch, pause 0 s, store-ram, nvmeof, short lease"
    assert f.text() == "0.00-5.00%"                      # fmt(0.0) = "0.00%", its "%" dropped
    assert SourceFigure("x", {"width": 12, "lease": 300}, "w", 0.5).point_text() == \
        "12 sessions, lease 300 s"
    assert SourceFigure("x", {}, "w", 0.5).point_text() == ""
    assert SourceFigure("gross_saving", {}, "w", lo=-0.01, hi=0.0).text() == "-1.00-0.00%"


def test_point_matching_protocol_configuration_disk_tier_and_missing_lease():
    f = SourceFigure("x", {"protocol": "batch"}, "w", 0.1)
    assert f.matches(summary(6, protocol="batch")) and not f.matches(summary(6, protocol="steady"))
    g = SourceFigure("x", {"configuration": "store-ram", "disk_tier": "nvmeof"}, "w", 0.1)
    assert g.matches(summary(6, conf="store-ram", disk_tier="nvmeof"))
    assert not g.matches(summary(6, conf="store-ram+disk", disk_tier="nvmeof"))
    assert not g.matches(summary(6, conf="store-ram", disk_tier="local-raid0"))
    for lease in ("short", 300):
        assert not SourceFigure("x", {"lease": lease}, "w", 0.1).matches(summary(6, lease=None))


def test_load_an_empty_file_and_a_missing_field(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text("# no figures\n")
    assert load(p) == []
    p.write_text('[[figure]]\nfigure = "x"\npoint = {}\nvalue = 0.1\n')
    with pytest.raises(ValueError, match=r"^s\.toml: figure\[0\]: missing field 'where'$"):
        load(p)


def test_ours_of_a_reuse_figure_without_a_ledger():
    assert math.isnan(ours(summary(12, reuse=None), "reuse_owner_share_cross_session"))
    assert math.isnan(ours(summary(12, reuse={"other": 0.1}), "reuse_owner_share_cross_session"))
    assert ours(summary(12, reuse={"x": 1}), "reuse_x") == 1.0


def test_beside_reads_the_data_file_by_default_and_markdown_exactly():
    rows = beside([summary(12)])
    assert len(rows) == len(load())
    f1 = SourceFigure("gross_saving", {"width": 12}, "T12", 0.1753)
    r = beside([summary(12, gross=0.15)], [f1])
    assert r[0].why_missing is None and r[0].ours == 0.15
    assert beside_markdown(r) == ("| Point | Figure | Source | adev | Where in the source |\n"
                                  "|---|---|---:|---:|---|\n"
                                  "| 12 sessions | Gross saving | 17.53% | 15.00% | T12 |\n")
    nan = beside([summary(12, gross=math.nan)], [f1])
    assert beside_markdown(nan).splitlines()[2] == \
        "| 12 sessions | Gross saving | 17.53% | not measured in the runs at this point | T12 |"
    none = beside([summary(6)], [f1])
    assert beside_markdown(none) == (
        "_No run of this report was made at a point the source measured (widths 1, 2, "
        "6, 12, 18; see `adev nightly`)._\n")
    assert "| 12 sessions | Gross saving | 17.53% | no run at this point | T12 |" in \
        beside_markdown(none, only_matched=False)


def test_a_figure_in_seconds_is_printed_and_judged_in_seconds():
    mx = SourceFigure("reuse_distance_max_s", {"width": 6, "pause_s": 0}, "A", 121.5)
    p99 = SourceFigure("reuse_distance_p99_s", {"width": 6}, "B", lo=328.0, hi=443.0)
    assert not mx.share and mx.text() == "121.5" and p99.text() == "328-443"
    runs = [summary(6, pause_s=0.0, reuse={"distance_max_s": 130.0, "distance_p99_s": 400.0}),
            summary(6, pause_s=0.0, reuse={"distance_max_s": 140.0, "distance_p99_s": 500.0})]
    rows = beside(runs, [mx, p99])
    assert rows[0].ours == pytest.approx(135.0)
    assert rows[0].within is False                  # 13.5 s off 121.5: over 10% of it
    assert beside(runs[:1], [mx])[0].within is True  # 8.5 s off: within 10%
    assert rows[1].ours == pytest.approx(450.0) and rows[1].within is False
    md = beside_markdown(rows).splitlines()
    assert md[2] == "| 6 sessions, pause 0 s | Reuse distance max (s) | 121.5 | 135 | A |"
    assert md[3] == "| 6 sessions | Reuse distance p99 (s) | 328-443 | 450 | B |"


def test_the_data_file_holds_the_reuse_distances_in_seconds():
    by = {(f.figure, tuple(sorted(f.point.items()))): f for f in load()}
    assert by[("reuse_distance_max_s", (("pause_s", 0), ("width", 6)))].value == 121.5
    p99 = by[("reuse_distance_p99_s", (("pause_s", 300), ("width", 6)))]
    assert (p99.lo, p99.hi) == (328.0, 443.0)
    mx = by[("reuse_distance_max_s", (("pause_s", 300), ("width", 6)))]
    assert (mx.lo, mx.hi) == (330.0, 694.0) and mx.text() == "330-694"
