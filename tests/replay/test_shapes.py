"""The source's replay shapes against hand-made replay summaries, worked by hand."""
from __future__ import annotations

from pathlib import Path

import pytest

from adev.analysis.shapes import shapes_markdown
from adev.replay.shapes import judge_replay, load_shapes, mean_over, point_matches


def _s(exp, conf, seed=0, **fig):
    return {"experiment": exp, "configuration": conf, "seed": seed, "label": f"{conf}-s{seed}",
            **fig}


def _by(rows, figure, *confs):
    """The judged row of the shape on ``figure`` over these configurations, in order."""
    for r in rows:
        if r.shape.figure == figure and tuple(p["configuration"] for p in r.shape.points) == confs:
            return r
    raise AssertionError(f"no shape on {figure} over {confs}")


def test_the_data_file_loads_and_every_point_names_an_experiment_and_configuration():
    shapes = load_shapes()
    assert len(shapes) >= 20
    for sh in shapes:
        assert sh.kind != "overlap"
        for p in sh.points:
            assert p["experiment"] in ("short", "long")
            assert p["configuration"] in ("recompute", "gpu-only", "store-ram", "store-ram+raid0",
                                          "store-ram+nvmeof", "disk-only")


def test_point_matching_and_the_mean_over_seeds():
    a, b = _s("long", "store-ram", 0, evictions=380), _s("long", "store-ram", 1, evictions=392)
    c = _s("short", "store-ram", 0, evictions=0)
    p = {"experiment": "long", "configuration": "store-ram"}
    assert [point_matches(p, s) for s in (a, b, c)] == [True, True, False]
    assert mean_over([a, b], "evictions") == 386
    assert mean_over([a, _s("long", "store-ram", 2, evictions=None)], "evictions") == 380
    assert mean_over([c], "throughput_rps") is None


def test_long_gap_shapes_by_hand():
    runs = []
    for seed, k in ((0, 1.0), (1, 1.1)):
        runs += [
            _s("long", "recompute", seed, throughput_rps=0.50 * k, ttft_p50_s=10.0, ttft_p99_s=60),
            _s("long", "gpu-only", seed, throughput_rps=0.52 * k, ttft_p50_s=7.0, ttft_p99_s=60),
            _s("long", "store-ram", seed, throughput_rps=0.55 * k, ttft_p99_s=65.0,
               evictions=1600 + 100 * seed, evicted_bytes=40e12),
            _s("long", "store-ram+raid0", seed, throughput_rps=0.76 * k, ttft_p99_s=34.0,
               evictions=80, evicted_bytes=25e12),
            _s("long", "store-ram+nvmeof", seed, throughput_rps=0.76 * k, ttft_p99_s=52.0,
               evictions=None, disk_read_avg_Bps=3.0e9 + 1e9 * seed),
            _s("long", "disk-only", seed, throughput_rps=0.70 * k, ttft_p99_s=29.0,
               disk_read_avg_Bps=4.2e9 + 0.6e9 * seed)]
    rows = judge_replay(runs)
    assert all(all(p["experiment"] == "long" for p in r.shape.points) for r in rows)
    g = _by(rows, "throughput_rps", "gpu-only", "recompute")
    assert g.measure == pytest.approx(0.52 / 0.50) and g.holds       # 1.04 within 0.90-1.10
    t = _by(rows, "ttft_p50_s", "gpu-only", "recompute")
    assert t.measure == pytest.approx(0.7) and t.holds is False      # below 0.80
    r = _by(rows, "throughput_rps", "store-ram+raid0", "store-ram")
    assert r.measure == pytest.approx(0.76 / 0.55) and r.holds
    p = _by(rows, "ttft_p99_s", "store-ram+nvmeof", "store-ram")
    assert p.measure == pytest.approx(52 / 65) and p.holds is False  # 0.8 > 0.75
    e = _by(rows, "evictions", "store-ram", "store-ram+raid0")
    assert e.values == [1650, 80] and e.holds                        # mean over seeds
    v = _by(rows, "evicted_bytes", "store-ram", "store-ram+raid0")
    assert v.measure == pytest.approx(1.6) and v.holds is False      # more cycles, not 2x volume
    n = _by(rows, "evictions", "store-ram", "store-ram+nvmeof")
    assert n.holds is None and "not measured at long gap, store-ram+nvmeof" in n.why
    d = _by(rows, "throughput_rps", "disk-only", "store-ram+nvmeof")
    assert d.holds is False                                          # 0.70 < 0.76
    a = _by(rows, "disk_read_avg_Bps", "disk-only", "store-ram+nvmeof")
    assert a.measure == pytest.approx(4.5 / 3.5) and a.holds         # means 4.5 and 3.5 GB/s
    md = shapes_markdown(rows)
    assert "**no**" in md and "RAM eviction cycles" in md and "1650 → 80 (ratio 20.62)" in md


def test_short_gap_shapes_by_hand_and_a_missing_configuration():
    runs = [_s("short", "recompute", throughput_rps=1.0, ttft_p50_s=28.0, ttft_p90_s=50.0,
               ttft_p99_s=80.0),
            _s("short", "gpu-only", throughput_rps=1.36, ttft_p50_s=12.0, ttft_p90_s=47.0,
               ttft_p99_s=79.0),
            _s("short", "store-ram", throughput_rps=1.31),
            _s("short", "store-ram+raid0", throughput_rps=1.30, physical_read_share=0.01),
            _s("short", "store-ram+nvmeof", throughput_rps=1.20, physical_read_share=0.2)]
    rows = judge_replay(runs)
    assert all(all(p["experiment"] == "short" for p in r.shape.points) for r in rows)
    assert _by(rows, "throughput_rps", "store-ram+raid0", "store-ram").holds
    assert _by(rows, "throughput_rps", "store-ram+nvmeof", "store-ram").holds is False  # 0.916
    assert _by(rows, "throughput_rps", "store-ram", "recompute").holds
    assert _by(rows, "throughput_rps", "gpu-only", "recompute").holds
    assert _by(rows, "ttft_p50_s", "gpu-only", "recompute").measure == pytest.approx(12 / 28)
    assert _by(rows, "ttft_p99_s", "gpu-only", "recompute").holds                      # 0.9875
    assert _by(rows, "physical_read_share", "store-ram+raid0").holds
    assert _by(rows, "physical_read_share", "store-ram+nvmeof").holds is False
    dk = _by(rows, "throughput_rps", "disk-only", "store-ram+nvmeof")
    assert dk.holds is None and dk.why == "no run at short gap, disk-only"


def test_a_malformed_replay_shape_names_its_index_and_field(tmp_path: Path):
    bad = tmp_path / "s.toml"
    bad.write_text('[[shape]]\nkind = "overlap"\nfigure = "ttft_p99_s"\n'
                   'points = [{experiment = "long"}, {experiment = "short"}]\n'
                   'says = "x"\nwhere = "y"\n')
    with pytest.raises(ValueError, match=r"shape\[0\]\.kind: 'overlap'"):
        load_shapes(bad)
    bad.write_text('[[shape]]\nkind = "range"\nfigure = "evictions"\nhi = 1\n'
                   'points = [{width = 12}]\nsays = "x"\nwhere = "y"\n')
    with pytest.raises(ValueError, match=r"points\[0\]: unknown key\(s\) \['width'\]"):
        load_shapes(bad)


def test_shapes_by_prompt_length_by_hand():
    """Table 9's shapes read the per-group medians the summary keeps under GROUP_P50_KEYS."""
    from adev.replay.summary import GROUP_P50_KEYS
    from adev.replay.traces import GROUPS
    assert set(GROUP_P50_KEYS) == {g for _, _, g in GROUPS}
    med = {  # configuration: medians for <=32K, 32-64K, 64-96K, >96K
        "recompute": (2.0, 24.0, 40.0, 50.0), "store-ram+raid0": (1.9, 6.0, 8.0, 8.0),
        "store-ram+nvmeof": (1.8, 6.3, 9.2, 8.4), "disk-only": (2.1, 9.0, 15.0, 20.0)}
    runs = [_s("long", c, 0, **dict(zip(GROUP_P50_KEYS.values(), m, strict=True)))
            for c, m in med.items()]
    rows = judge_replay(runs)
    close = _by(rows, "ttft_p50_upto32k_s", "store-ram+nvmeof", "recompute")
    assert close.measure == pytest.approx(0.9) and close.holds          # within 0.80-1.20
    slower = _by(rows, "ttft_p50_upto32k_s", "disk-only", "recompute")
    assert slower.measure == pytest.approx(1.05) and slower.holds       # at least 1
    assert _by(rows, "ttft_p50_32to64k_s", "store-ram+nvmeof", "store-ram+raid0").holds  # 1.05
    far = _by(rows, "ttft_p50_64to96k_s", "store-ram+nvmeof", "store-ram+raid0")
    assert far.measure == pytest.approx(1.15) and far.holds is False    # above 1.10
    gds = _by(rows, "ttft_p50_over96k_s", "disk-only", "recompute")
    assert gds.measure == pytest.approx(0.4) and gds.holds              # at most 0.60
    vs = _by(rows, "ttft_p50_over96k_s", "disk-only", "store-ram+nvmeof")
    assert vs.measure == pytest.approx(20 / 8.4) and vs.holds is False  # not 5% below staging
    assert "User TTFT p50, prompts >96K (s)" in shapes_markdown(rows)


def test_every_shipped_shape_names_a_replay_summary_figure():
    from adev.replay.summary import GROUP_P50_KEYS
    keys = {"throughput_rps", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "ttft_later_p99_s",
            "evictions", "evicted_bytes", "physical_read_share", "disk_read_avg_Bps",
            *GROUP_P50_KEYS.values()}
    assert {sh.figure for sh in load_shapes()} <= keys
