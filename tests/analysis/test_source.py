"""The source study's figures beside ours: the data file, point matching, the comparison."""
from __future__ import annotations

import math

import pytest

from adev.analysis.aggregate import RunSummary
from adev.analysis.source import SourceFigure, beside, beside_markdown, load


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
