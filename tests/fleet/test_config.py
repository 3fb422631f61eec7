import pytest

from adev.config import ROOT, ConfigError, StackConfig
from adev.fleet.config import fleet_from_dict, load_campaign, load_fleet


def test_default_file_loads_and_overrides_apply():
    cfg, base = load_fleet()
    assert cfg.width == 12 and cfg.protocol == "steady" and cfg.context == "per-role"
    cfg2, _ = load_fleet(None, {"width": 3, "windows.count": 2, "windows.length_s": 60.0,
                                "time_scale": 50.0})
    assert (cfg2.width, cfg2.windows.count, cfg2.windows.length_s) == (3, 2, 60.0)
    st = cfg2.stack_config(base)
    assert isinstance(st, StackConfig) and st.time_scale == 50.0


@pytest.mark.parametrize("data,key", [
    ({"widht": 3}, "fleet.widht"),
    ({"width": 0}, "fleet.width"),
    ({"protocol": "sprint"}, "fleet.protocol"),
    ({"context": "per-agent"}, "fleet.context"),
    ({"windows": {"count": 0}}, "fleet.windows.count"),
    ({"windows": {"length_s": -5}}, "fleet.windows.length_s"),
    ({"windows": {"lenght_s": 5}}, "fleet.windows.lenght_s"),
    ({"warmup": {"kv_usage": 1.5}}, "fleet.warmup.kv_usage"),
    ({"warmup": {"min_s": 100, "max_s": 10}}, "fleet.warmup.min_s"),
    ({"runs": 3}, "fleet.runs"),                       # runs with steady state
    ({"pause_s": -1}, "fleet.pause_s"),
    ({"gate": "docker"}, "fleet.gate"),
    ({"time_scale": 0}, "fleet.time_scale"),
    ({"stack": {"mode": "embeded"}}, "fleet.stack.mode"),
    ({"width": "12"}, "fleet.width"),
])
def test_bad_values_name_the_key(data, key):
    with pytest.raises(ConfigError) as e:
        fleet_from_dict(data)
    assert key in str(e.value)


def test_inline_stack_and_batch():
    cfg = fleet_from_dict({"protocol": "batch", "runs": 3,
                           "stack": {"time_scale": 7.0, "configuration": "store-ram"}})
    st = cfg.stack_config()
    assert cfg.runs == 3 and st.time_scale == 7.0 and st.configuration == "store-ram"


def test_unknown_top_level_table(tmp_path):
    p = tmp_path / "f.toml"
    p.write_text("[fleet]\nwidth = 2\n[flet]\nwidth = 3\n")
    with pytest.raises(ConfigError, match="flet"):
        load_fleet(p)


def test_nightly_campaign_file_is_valid():
    camp, _ = load_campaign(ROOT / "fleets" / "nightly.toml")
    names = [p.name for p in camp.points]
    assert len(names) == len(set(names))
    widths = sorted({p.fleet.get("width") for p in camp.points if p.fleet.get("width")})
    assert widths == [1, 2, 6, 12, 18]


def test_client_and_stack_cpus(monkeypatch):
    import argparse
    import os

    from adev.config import HOST_CPUS
    from adev.fleet import runner
    from adev.fleet.cli import overrides_from_args, register
    ap = argparse.ArgumentParser()
    register(ap.add_subparsers())
    a = ap.parse_args(["fleet", "--client-cpus", f"{HOST_CPUS[-1]}", "--stack-cpus",
                       f"{HOST_CPUS[0]}"])
    cfg, base = load_fleet(None, overrides_from_args(a))
    assert cfg.client_cpus == [HOST_CPUS[-1]] and cfg.stack_config(base).cpus == [HOST_CPUS[0]]
    with pytest.raises(ConfigError, match="--client-cpus: 'x' is not a CPU list"):
        overrides_from_args(ap.parse_args(["fleet", "--client-cpus", "x"]))
    with pytest.raises(ConfigError, match=r"fleet\.client_cpus: \[9999\] is not allowed"):
        load_fleet(None, {"client_cpus": [9999]})
    pinned = []
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cpus: pinned.append(cpus))
    runner.pin_client(cfg, cfg.stack_config(base))
    assert pinned == [{HOST_CPUS[-1]}]
    clash, _ = load_fleet(None, {"client_cpus": [HOST_CPUS[0]], "stack_cpus": [HOST_CPUS[0]]})
    with pytest.raises(ConfigError, match="shares cores"):
        runner.pin_client(clash, clash.stack_config(base))


def test_client_realtime_from_file_cli_and_applied_by_pin_client(monkeypatch):
    import argparse

    from adev import event_loop
    from adev.fleet import runner
    from adev.fleet.cli import overrides_from_args, register
    ap = argparse.ArgumentParser()
    register(ap.add_subparsers())
    cfg, base = load_fleet(None, overrides_from_args(ap.parse_args(["fleet"])))
    assert cfg.client_realtime is False  # the default: normal scheduling
    cfg, base = load_fleet(None, overrides_from_args(ap.parse_args(["fleet", "--client-realtime"])))
    assert cfg.client_realtime is True
    with pytest.raises(ConfigError, match=r"fleet\.client_realtime"):
        load_fleet(None, {"client_realtime": "yes"})
    calls = []
    monkeypatch.setattr(event_loop, "set_realtime", lambda where: calls.append(where))
    runner.pin_client(cfg, cfg.stack_config(base))
    assert calls == ["fleet.client_realtime"]


def test_context_from_cli_reaches_the_sessions():
    """``--context shared`` overrides the file's per-role default, and the fleet's sessions get
    it (``SessionContext.role_context``)."""
    import argparse
    import inspect

    from adev.fleet import wiring
    from adev.fleet.cli import overrides_from_args, register
    ap = argparse.ArgumentParser()
    register(ap.add_subparsers())
    cfg, _ = load_fleet(None, overrides_from_args(ap.parse_args(["fleet", "--context", "shared"])))
    assert cfg.context == "shared"
    cfg2, _ = load_fleet(None, overrides_from_args(ap.parse_args(["fleet"])))
    assert cfg2.context == "per-role"
    assert "role_context=cfg.context" in inspect.getsource(wiring.make_sessions)
    cfg3, _ = load_fleet(None, overrides_from_args(ap.parse_args(
        ["fleet", "--context", "per-round", "--spec", "prompt"])))
    assert (cfg3.context, cfg3.spec, cfg2.spec) == ("per-round", "prompt", "file")
    assert "spec=cfg.spec" in inspect.getsource(wiring.make_sessions)
    with pytest.raises(ConfigError, match="spec"):
        load_fleet(None, {"spec": "inline"})
