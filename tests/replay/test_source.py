"""The source's replay levels beside a matrix's own: the mean over seeds at each point, by hand;
the data file's checks."""
from __future__ import annotations

import pytest

from adev.replay.source import NAMES, SourceLevel, beside, beside_markdown, load


def run(exp: str, conf: str, seed: int, **figs) -> dict:
    return {"experiment": exp, "configuration": conf, "seed": seed, **figs}


def test_mean_over_seeds_groups_and_points_without_runs():
    levels = [
        SourceLevel("ttft_p50_s", {"experiment": "long", "configuration": "disk-only"}, 14.99, "w1"),
        SourceLevel("ttft_by_group_p50_s", {"experiment": "long", "configuration": "disk-only"},
                    22.10, "w2", ">96K"),
        SourceLevel("disk_read_avg_Bps", {"experiment": "long", "configuration": "store-ram+nvmeof"},
                    3.40 * 2**30, "w3"),
        SourceLevel("throughput_rps", {"experiment": "short", "configuration": "store-ram"}, 1.31, "w4"),
    ]
    sums = [
        run("long", "disk-only", 0, ttft_p50_s=2.0, ttft_by_group_p50_s={">96K": 10.0}),
        run("long", "disk-only", 1, ttft_p50_s=4.0, ttft_by_group_p50_s={">96K": None}),
        run("long", "recompute", 0, ttft_p50_s=30.0),
    ]
    rows = beside(sums, levels)
    # the short-gap level is left out: no run of that experiment
    assert [r.source.where for r in rows] == ["w1", "w2", "w3"]
    assert rows[0].ours == pytest.approx(3.0) and rows[0].runs == 2      # (2 + 4) / 2
    assert rows[1].ours == pytest.approx(10.0) and rows[1].runs == 2     # one seed measured it
    assert rows[2].ours is None and rows[2].runs == 0                    # no run at the point
    md = beside_markdown(rows)
    assert "| long gap, disk-only | median user TTFT, prompts >96K | model s | 22.10 | 10.00 | 2 |" in md
    assert "| long gap, store-ram+nvmeof | disk reads per run second | GiB/s | 3.40 | not measured | 0 |" in md
    assert "No level" in beside_markdown([])


def test_the_shipped_file_names_summary_figures():
    levels = load()
    assert levels and all(lv.figure in NAMES for lv in levels)
    assert {lv.point["experiment"] for lv in levels} == {"short", "long"}


@pytest.mark.parametrize("entry,msg", [
    ('figure = "ttft_p50_s"\npoint = { experiment = "long" }\nwhere = "x"\n', "missing field 'value'"),
    ('figure = "ttft_p50_s"\npoint = { width = 6 }\nvalue = 1\nwhere = "x"\n', "unknown key"),
    ('figure = "ttft_p50_s"\ngroup = ">96K"\npoint = {}\nvalue = 1\nwhere = "x"\n', "group"),
    ('figure = "ttft_by_group_p50_s"\ngroup = "huge"\npoint = {}\nvalue = 1\nwhere = "x"\n', "group"),
    ('figure = "ttft_by_group_p50_s"\npoint = {}\nvalue = 1\nwhere = "x"\n', "group"),
])
def test_malformed_entries_name_index_and_field(tmp_path, entry, msg):
    p = tmp_path / "levels.toml"
    p.write_text("[[figure]]\n" + entry)
    with pytest.raises(ValueError, match=rf"levels\.toml: figure\[0\].*{msg}"):
        load(p)


def test_volumes_per_call_print_in_gb_per_call():
    lv = SourceLevel("physical_read_bytes_per_call",
                     {"experiment": "long", "configuration": "disk-only"}, 34.6 * 2**40 / 7903, "w")
    rows = beside([run("long", "disk-only", 0, physical_read_bytes_per_call=5.0e9),
                   run("long", "disk-only", 1, physical_read_bytes_per_call=4.0e9)], [lv])
    # 34.6 TiB / 7,903 calls = 4.8138 GB per call; ours (5.0 + 4.0) / 2 = 4.5
    assert "| long gap, disk-only | disk reads | GB per call | 4.814 | 4.500 | 2 |" in beside_markdown(rows)


def test_the_shipped_volumes_per_call_are_the_source_totals_over_its_calls():
    per_call = {(lv.figure, lv.point["configuration"]): lv.value for lv in load()
                if lv.figure.endswith("_per_call")}
    assert per_call[("stored_bytes_per_call", "store-ram+raid0")] == pytest.approx(1.897 * 2**40 / 7903)
    assert per_call[("physical_read_bytes_per_call", "disk-only")] == pytest.approx(41.53 * 2**40 / 7903)
    assert per_call[("evicted_bytes_per_call", "store-ram")] == pytest.approx(40.97e12 / 7903)
    assert per_call[("evicted_bytes_per_call", "store-ram+nvmeof")] == pytest.approx(1.7e12 / 7903)
