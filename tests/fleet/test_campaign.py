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
    assert "MOVED" in (n2 / "comparison.md").read_text()


def test_compare_rules():
    rows = C.compare({"p": {"x": 0.5, "y": 0.0, "z": 1.0}}, {"p": {"x": 0.0, "y": 0.0, "w": 1.0}},
                     threshold=0.25, abs_floor=0.01)
    r = {x["figure"]: x for x in rows}
    assert r["x"]["flag"] and not r["y"]["flag"]
    assert r["z"]["missing"] == "previous night" and r["w"]["missing"] == "this night"
