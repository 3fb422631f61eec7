"""adev nightly against fakes: folders per night, point configs, comparison with last night."""
import json

import pytest

from adev.config import ConfigError
from adev.fleet import campaign as C
from adev.fleet.config import load_campaign

from .fakes import fake_deps


def _camp(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text(f"""
[campaign]
fleet = "fleets/default.toml"
results_dir = "{tmp_path / 'nights'}"
threshold = 0.25
[campaign.fleet_overrides]
live = "off"
report = false
stagger_s = 5.0
"windows.count" = 1
"windows.length_s" = 100.0
"warmup.kv_usage" = 0.0
[[campaign.points]]
name = "a"
fleet = {{ width = 2 }}
[[campaign.points]]
name = "b"
fleet = {{ width = 3 }}
stack = {{ "store.lease_ttl_s" = 300.0, configuration = "store-ram" }}
[campaign.quick]
points = ["a"]
fleet = {{ time_scale = 2000.0 }}
""")
    return p


def test_point_configs_apply_fleet_and_stack_keys(tmp_path):
    camp, base = load_campaign(_camp(tmp_path))
    b = C.point_fleet(camp, base, camp.points[1], extra={"time_scale": 500.0})
    assert b.width == 3 and b.stack.store.lease_ttl_s == 300.0
    assert b.stack.configuration == "store-ram" and b.stack.time_scale == 500.0
    real, rbase = load_campaign(C.DEFAULT_CAMPAIGN)
    pts = {p.name: C.point_fleet(real, rbase, p) for p in real.points}
    assert pts["w12-nodisk"].stack.configuration == "store-ram"
    assert pts["w12-remote"].stack.store.disk_tier == "remote-nvmeof"
    assert pts["w12-lease300"].stack.store.lease_ttl_s == 300.0
    assert pts["w12"].stack.store.lease_ttl_s < 300.0
    # the source's protocol: 1, 2, 6 in batch without pause; 6, 12, 18 steady with 300 s pause
    assert [(pts[n].width, pts[n].protocol, pts[n].pause_s) for n in ("b01", "b02", "b06")] == \
        [(1, "batch", 0.0), (2, "batch", 0.0), (6, "batch", 0.0)]
    assert all(pts[n].runs == 3 for n in ("b01", "b02", "b06"))
    assert [(pts[n].width, pts[n].protocol, pts[n].pause_s) for n in ("w06", "w12", "w18")] == \
        [(6, "steady", 300.0), (12, "steady", 300.0), (18, "steady", 300.0)]
    q = C.point_fleet(real, rbase, real.points[4], quick=True)
    assert q.width == real.quick.width_cap


def test_bad_point_key_is_named(tmp_path):
    camp, base = load_campaign(_camp(tmp_path))
    bad = C.CampaignPoint(name="x", stack={"store.leese": 1})
    with pytest.raises(ConfigError, match="store.leese"):
        C.point_fleet(camp, base, bad)


def test_two_nights_and_comparison(tmp_path, monkeypatch):
    figs = iter([{"saving": {"gross": 0.10}, "hit": 0.5}, {"saving": {"gross": 0.20}, "hit": 0.51}])
    monkeypatch.setattr(C, "point_figures", lambda p: (C._flatten(next(figs)), None))
    cfile = _camp(tmp_path)
    n1, code1 = C.run_campaign(cfile, quick=True, date="2026-01-01", deps=fake_deps(2000.0))
    n2, code2 = C.run_campaign(cfile, quick=True, date="2026-01-02", deps=fake_deps(2000.0))
    assert code1 == code2 == 0
    assert (n1 / "a" / "windows.jsonl").exists() and not (n1 / "b").exists()
    cmp = json.loads((n2 / "comparison.json").read_text())
    assert cmp["previous"] == "2026-01-01"
    rows = {r["figure"]: r for r in cmp["rows"]}
    assert rows["saving.gross"]["flag"] and not rows["hit"]["flag"]
    md = (n2 / "comparison.md").read_text()
    assert "MOVED" in md
    # no point of this campaign is one the source measured (width 2 in steady state): said so
    assert "## The source study beside this night" in md
    assert "No run of this report was made at a point the source measured" in md
    assert "## Shapes of the source\n\n0 of 0 judged shape(s) hold; 15 could not be judged" in md


def test_source_beside_a_night_at_a_source_point(tmp_path):
    from tests.analysis.synth import make_run
    run = make_run(tmp_path, width=1, windows=2, window_s=120, seed=1, max_prompt=20000,
                   protocol="batch")
    md = C.source_beside_markdown([str(run), str(tmp_path / "missing-run")])
    assert "| 1 session, batch, pause 0 s | Gross saving | 0.28% |" in md
    assert "Runs that could not be read:" in md and "missing-run" in md
    # with a 6-session batch run beside it, the batch width shape is judged (from the two runs)
    six = make_run(tmp_path / "six", width=6, windows=2, window_s=120, seed=2, max_prompt=20000,
                   protocol="batch")
    md = C.source_beside_markdown([str(run), str(six)])
    assert "judged shape(s) hold; 14 could not be judged" in md
    assert ("| Gross saving | the saving rises with width: 0.28% at one session, 16.12% at six "
            "(batch, no pause) | rises over 1 session, batch, pause 0 s → 6 sessions, batch, "
            "pause 0 s |") in md


def test_compare_rules():
    rows = C.compare({"p": {"x": 0.5, "y": 0.0, "z": 1.0}}, {"p": {"x": 0.0, "y": 0.0, "w": 1.0}},
                     threshold=0.25, abs_floor=0.01)
    r = {x["figure"]: x for x in rows}
    assert r["x"]["flag"] and not r["y"]["flag"]
    assert r["z"]["missing"] == "previous night" and r["w"]["missing"] == "this night"


def test_comparison_markdown_words_and_units():
    from adev.fleet.campaign import comparison_markdown
    rows = [{"point": "w12", "figure": "gross_saving", "old": 0.2381, "new": 0.1882,
             "change": 0.1882 - 0.2381, "rel": (0.1882 - 0.2381) / 0.2381, "flag": False},
            {"point": "w12", "figure": "store_gib_served", "old": 470.1, "new": None,
             "change": None, "rel": None, "flag": False, "missing": "this night"},
            {"point": "w12", "figure": "ttft_model_err_p50", "old": 5.255e-13, "new": -1e-14,
             "change": -5.355e-13, "rel": None, "flag": False}]
    assert comparison_markdown(rows, "a", "b", 0.25).splitlines()[4:] == [
        "| Point | Figure | Previous night | This night | Change | |",
        "|---|---|---:|---:|---:|---|",
        "| w12 | Gross saving | 23.81% | 18.82% | -4.99 points (-21.0%) |  |",
        "| w12 | Store served (GiB) | 470.1 | missing |  | missing: this night |",
        "| w12 | TTFT over model, p50 | 0.00% | 0.00% | +0.00 points |  |"]
    assert comparison_markdown([], None, "b", 0.25) == "# Night b\n\nNo previous night to compare with.\n"
