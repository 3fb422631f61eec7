"""The stack lifecycle: commands, state, reuse, errors, and that nothing is left running.

Unit tests need no processes. Tests marked ``integration`` start a real ``mooncake_master``; the
lifecycle tests use a stand-in endpoint (``tests/stack_fake_endpoint.py``, same command line as the
emulator) so they test the stack alone; ``test_embedded_stack_with_emulator`` runs the real one.
"""
from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from adev.config import ROOT, ConfigError, StackConfig, from_dict, load_stack
from adev.stack import (
    MASTER_ENV,
    MissingBinaryError,
    MissingLibraryError,
    PortInUseError,
    StackError,
    StackInUseError,
    config_diff,
    endpoint_command,
    external_info,
    master_flags,
    master_lease_ms,
    process_usage,
    read_state,
    release_user,
    running_stack,
    small_config,
    stack_status,
    start_stack,
    stop_stack,
)
from adev.stack.commands import endpoint_env, offload_heartbeat_real_s
from adev.stack.plan import render, vllm_plan

FAKE = str(Path(__file__).with_name("stack_fake_endpoint.py"))


@pytest.fixture
def sdir():
    d = Path(tempfile.mkdtemp(prefix="adev-st-"))
    yield d
    st = read_state(d)
    if st is not None:  # a failing test must not leave processes behind
        stop_stack(d)
    shutil.rmtree(d, ignore_errors=True)


def children() -> set[int]:
    # compared as ``children() <= before``: nothing new is left running; a child of an earlier
    # test (a ledger or resource-tracker process) may end meanwhile
    return {p.pid for p in psutil.Process().children(recursive=True)
            if p.status() != psutil.STATUS_ZOMBIE}


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status


# ------------------------------------------------------------------------------------------
# Unit


def test_lease_is_real_milliseconds_of_model_seconds():
    cfg = small_config("/tmp/x", time_scale=10.0, store={"lease_ttl_s": 5.0}, model_clock="free")
    assert master_lease_ms(cfg) == 500
    cfg = small_config("/tmp/x", time_scale=1.0, store={"lease_ttl_s": 300.0})
    assert master_lease_ms(cfg) == 10_000   # split in 30, renewed in model time (test_leases)
    cfg = small_config("/tmp/x", time_scale=100.0, store={"lease_ttl_s": 0.01})
    assert master_lease_ms(cfg) == 1  # never 0: Mooncake would read it as no lease


@pytest.mark.parametrize("time_scale,heartbeat,real", [
    (10.0, 10.0, 1), (2.0, 10.0, 5), (1.0, 10.0, 10), (50.0, 10.0, 1), (4.0, 10.0, 2),
])
def test_the_offload_heartbeat_is_model_seconds(time_scale, heartbeat, real, tmp_path):
    cfg = small_config("/tmp/x", time_scale=time_scale, configuration="store-ram+disk",
                       store={"offload_heartbeat_s": heartbeat})
    assert offload_heartbeat_real_s(cfg) == real
    env = endpoint_env(cfg, tmp_path)
    assert env["MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS"] == str(real)


@pytest.mark.parametrize("configuration,offload", [
    ("store-ram", []), ("gpu-only", []), ("recompute", []),
    ("store-ram+disk", ["--enable_offload=true", "--offload_on_evict=true"]),
    ("disk-only", ["--enable_offload=true"]),
])
def test_master_flags(configuration, offload):
    cfg = small_config("/tmp/x", configuration=configuration)
    flags = master_flags(cfg, rpc_port=1234, metrics_port=5678)
    assert flags[:6] == ["--rpc_port=1234", "--rpc_address=127.0.0.1", "--metrics_port=5678",
                         "--metrics_host=127.0.0.1", "--default_kv_lease_ttl=100",  # 5 s / 10 / 5
                         "--client_ttl=10"]
    assert flags[6:] == offload


def test_promotion_on_hit_and_disk_writes_flags_for_a_ram_and_disk_tier_only():
    on = {"promotion_on_hit": True, "promotion_threshold": 3}
    cfg = small_config("/tmp/x", configuration="store-ram+disk", store=on)
    assert master_flags(cfg, rpc_port=1, metrics_port=2)[6:] == [
        "--enable_offload=true", "--offload_on_evict=true", "--promotion_on_hit=true",
        "--promotion_admission_threshold=3", "--promotion_max_per_heartbeat=50000"]
    capped = small_config("/tmp/x", configuration="store-ram+disk",
                          store={**on, "promotion_per_heartbeat": 8})
    assert master_flags(capped, rpc_port=1, metrics_port=2)[-1] == "--promotion_max_per_heartbeat=8"
    # disk-only writes every object to disk at put time: nothing to promote; RAM-only has no disk
    for c, tail in (("disk-only", ["--enable_offload=true"]), ("store-ram", [])):
        assert master_flags(small_config("/tmp/x", configuration=c, store=on),
                            rpc_port=1, metrics_port=2)[6:] == tail
    put = small_config("/tmp/x", configuration="store-ram+disk", store={"disk_writes": "put"})
    assert master_flags(put, rpc_port=1, metrics_port=2)[6:] == ["--enable_offload=true"]
    assert any(n.startswith("disk writes at put") for n in vllm_plan(put).notes)
    with pytest.raises(ConfigError, match="disk_writes: 'never' is not allowed; allowed values: "
                                          "'evict', 'put'"):
        small_config("/tmp/x", store={"disk_writes": "never"})
    with pytest.raises(ConfigError, match="promotion_threshold"):
        small_config("/tmp/x", configuration="store-ram+disk", store={"promotion_threshold": 0})


def test_endpoint_command_line(tmp_path):
    cmd = endpoint_command("adev.emulator.server", tmp_path / "stack.json", "coder", 8001,
                           "127.0.0.1:5000", tmp_path / "disk")
    assert cmd == [sys.executable, "-m", "adev.emulator.server", "--config",
                   str(tmp_path / "stack.json"), "--endpoint", "coder", "--port", "8001",
                   "--master", "127.0.0.1:5000", "--disk-dir", str(tmp_path / "disk")]
    assert "--disk-dir" not in endpoint_command("m", tmp_path, "c", 1, "h:2", None)


def test_config_diff_port_zero_matches_any_port():
    want = small_config("/tmp/x")
    run = dataclasses.asdict(want)
    run["store"]["master_port"] = 40000
    run["endpoints"][0]["port"] = 40001
    assert config_diff(run, want) == []
    run["time_scale"] = 1.0
    run["store"]["lease_ttl_s"] = 60.0
    diffs = config_diff(run, want)
    assert any(d.startswith("stack.time_scale") for d in diffs)
    assert any(d.startswith("stack.store.lease_ttl_s") for d in diffs)


def test_config_diff_sees_the_oracle_settings():
    """A running stack whose endpoints play the oracle with other settings is not reused."""
    run = dataclasses.asdict(load_stack(None))
    want = load_stack(None, oracle={"one_call_per_turn": True})
    assert config_diff(run, want) == ["stack.oracle.one_call_per_turn: running None, wanted True"]
    assert config_diff(dataclasses.asdict(want), want) == []


def test_external_info_starts_nothing():
    cfg = from_dict(StackConfig, {
        "mode": "external", "time_scale": 10.0,
        "endpoints": [{"name": "coder", "base_url": "http://gpu1:8000/v1"},
                      {"name": "reasoner", "base_url": "http://gpu2:8000", "model": "qc"}],
        "store": {"metrics_url": "http://master:9003/metrics"}}, "stack")
    info = external_info(cfg)
    assert info.endpoints == {"coder": "http://gpu1:8000/v1", "reasoner": "http://gpu2:8000/v1"}
    assert info.metrics_urls == {"coder": "http://gpu1:8000/metrics",
                                 "reasoner": "http://gpu2:8000/metrics"}
    assert info.master_metrics_url == "http://master:9003/metrics"
    assert info.time_scale == 1.0 and not info.started_here
    assert info.model == "Qwen3-Coder-30B-A3B-Instruct"
    assert info.model_for("coder") == info.model and info.model_for("reasoner") == "qc"
    assert start_stack(cfg).endpoints == info.endpoints  # external: start_stack starts nothing


def test_external_mode_needs_base_urls():
    with pytest.raises(ConfigError, match="base_url"):
        from_dict(StackConfig, {"mode": "external", "endpoints": [{"name": "coder"}]}, "stack")


async def test_running_stack_external_yields_info():
    cfg = from_dict(StackConfig, {"mode": "external", "endpoints": [
        {"name": "coder", "base_url": "http://127.0.0.1:9/v1"}]}, "stack")
    async with running_stack(cfg) as info:
        assert info.endpoints["coder"] == "http://127.0.0.1:9/v1" and not info.started_here


def test_plan_vllm_store_ram_disk():
    cfg = small_config("/tmp/x", configuration="store-ram+disk", time_scale=10.0,
                       store={"ram_gb": 32.0, "lease_ttl_s": 5.0}, seed=7)
    plan = vllm_plan(cfg, master_host="10.0.0.5", protocol="tcp")
    # GPU nodes run at time scale 1: the lease is the model lease in real ms.
    assert "--default_kv_lease_ttl=5000" in plan.master_cmd
    assert "--enable_offload=true" in plan.master_cmd
    mc = plan.mooncake_config
    assert mc == {"mode": "embedded", "metadata_server": "P2PHANDSHAKE",
                  "master_server_address": "10.0.0.5:50051", "global_segment_size": "16GB",
                  "local_buffer_size": "4GB", "protocol": "tcp", "device_name": "",
                  "enable_offload": True}
    assert plan.env["PYTHONHASHSEED"] == "7"
    assert set(plan.serve_cmds) == {"coder", "reasoner"}
    assert not any("promotion" in n for n in plan.notes)
    promo = small_config("/tmp/x", configuration="store-ram+disk",
                         store={"promotion_on_hit": True})
    p2 = vllm_plan(promo)
    assert "--promotion_on_hit=true" in p2.master_cmd
    assert any(n.startswith("promotion on hit: ") and "after 2 read(s)" in n for n in p2.notes)
    for cmd in plan.serve_cmds.values():
        assert cmd[:2] == ["vllm", "serve"]
        i = cmd.index("--kv-transfer-config")
        assert json.loads(cmd[i + 1]) == {"kv_connector": "MooncakeStoreConnector",
                                          "kv_role": "kv_both"}
        assert "--enable-prompt-tokens-details" in cmd and "--enable-prefix-caching" in cmd
        assert cmd[cmd.index("--block-size") + 1] == "16"
        assert cmd[cmd.index("--max-model-len") + 1] == "65536"
    text = render(plan)
    assert text.count("PYTHONHASHSEED=7") == 2 and "MOONCAKE_CONFIG_PATH=" in text
    # the external config it prints loads back as a valid external stack
    import tomllib
    ext = from_dict(StackConfig, tomllib.loads(plan.external_toml)["stack"], "stack")
    assert ext.mode == "external" and ext.store.metrics_url == "http://10.0.0.5:9003/metrics"


def test_plan_vllm_without_store():
    rec = vllm_plan(small_config("/tmp/x", configuration="recompute"))
    assert rec.master_cmd is None and rec.mooncake_config is None
    for cmd in rec.serve_cmds.values():
        assert "--no-enable-prefix-caching" in cmd and "--kv-transfer-config" not in cmd
    gpu = vllm_plan(small_config("/tmp/x", configuration="gpu-only"))
    assert gpu.master_cmd is None
    for cmd in gpu.serve_cmds.values():
        assert "--enable-prefix-caching" in cmd and "--kv-transfer-config" not in cmd


def test_missing_binary_env_is_a_clear_error(monkeypatch, sdir):
    monkeypatch.setenv(MASTER_ENV, "/nonexistent/mooncake_master")
    before = children()
    with pytest.raises(MissingBinaryError, match=MASTER_ENV):
        start_stack(small_config(sdir), endpoint_module=FAKE)
    assert children() <= before and read_state(sdir) is None


def test_read_state_missing_or_corrupt(sdir):
    assert read_state(sdir) is None
    (sdir / "state.json").write_text("{not json")
    assert read_state(sdir) is None


# ------------------------------------------------------------------------------------------
# Integration: real mooncake_master, stand-in endpoints


@pytest.mark.integration
def test_up_status_down_leaves_nothing_running(sdir):
    cfg = small_config(sdir, configuration="store-ram+disk")
    before = children()
    info = start_stack(cfg, endpoint_module=FAKE)
    try:
        assert info.started_here and set(info.endpoints) == {"coder", "reasoner"}
        assert set(info.pids) == {"coder", "reasoner", "master"}
        assert all(running(p) for p in info.pids.values())
        for url in info.endpoints.values():
            assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
            assert get(url[:-3] + "/health") == 200
        master_metrics = urllib.request.urlopen(info.master_metrics_url, timeout=5).read().decode()
        assert "master_key_count" in master_metrics
        st = read_state(sdir)
        assert st.lease_ttl_real_ms == master_lease_ms(cfg) and "--enable_offload=true" in st.master_flags
        # each endpoint got its own disk dir under the state dir, passed on its command line
        disks = {n: p.disk_dir for n, p in st.endpoints.items()}
        assert len(set(disks.values())) == 2
        assert all(Path(d).is_dir() and Path(d).is_relative_to(sdir) for d in disks.values())
        # stack.json = endpoint_command's STACK_JSON, with the actual ports
        sj = from_dict(StackConfig, json.loads((sdir / "stack.json").read_text()), "stack")
        assert sj.store.master_port == st.master.port
        status = stack_status(cfg)
        assert status["running"] and status["master"]["metrics_url"] == info.master_metrics_url
        assert status["master"]["cpu_s"] >= 0 and status["master"]["rss_mb"] > 1
        assert all(e["rss_mb"] > 1 for e in status["endpoints"].values())
        assert {n: e["base_url"] for n, e in status["endpoints"].items()} == info.endpoints
        assert all(Path(p).exists() for p in info.logs.values())
    finally:
        res = stop_stack(info)
    assert res == {"coder": "stopped", "reasoner": "stopped", "master": "stopped"}
    assert not any(running(p) for p in info.pids.values())
    assert children() <= before
    assert read_state(sdir) is None and not stack_status(cfg)["running"]
    assert not any(Path(d).exists() for d in disks.values())


@pytest.mark.integration
def test_double_start_errors_or_reuses(sdir):
    cfg = small_config(sdir, endpoints=["coder"])
    info = start_stack(cfg, endpoint_module=FAKE)
    try:
        with pytest.raises(StackError, match="already running"):
            start_stack(cfg, reuse=False, endpoint_module=FAKE)
        again = start_stack(cfg, endpoint_module=FAKE)  # reuse: same processes
        assert not again.started_here and again.endpoints == info.endpoints
        assert again.pids == info.pids
        with pytest.raises(StackError, match="stack.time_scale"):
            start_stack(dataclasses.replace(cfg, time_scale=1.0), endpoint_module=FAKE)
        assert all(running(p) for p in info.pids.values())
    finally:
        stop_stack(info)


@pytest.mark.integration
def test_port_in_use_is_a_clear_error_and_nothing_runs(sdir):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        before = children()
        cfg = small_config(sdir, endpoints=[{"name": "coder", "port": port}, "reasoner"])
        with pytest.raises(PortInUseError, match=rf"stack.endpoints\[coder\].port: port {port}"):
            start_stack(cfg, endpoint_module=FAKE)
        cfg = small_config(sdir, store={"metrics_port": port})
        with pytest.raises(PortInUseError, match="stack.store.metrics_port"):
            start_stack(cfg, endpoint_module=FAKE)
        assert children() <= before and read_state(sdir) is None


@pytest.mark.integration
def test_endpoint_failure_stops_the_master_too(sdir, monkeypatch):
    monkeypatch.setenv("FAKE_ENDPOINT_FAIL", "reasoner")
    before = children()
    with pytest.raises(StackError, match=r"reasoner exited during start-up \(exit status 3\)"):
        start_stack(small_config(sdir), endpoint_module=FAKE)
    assert children() <= before and read_state(sdir) is None


@pytest.mark.integration
def test_endpoint_missing_library_names_the_packages(sdir, monkeypatch):
    monkeypatch.setenv("FAKE_ENDPOINT_FAIL", "nolib")
    before = children()
    with pytest.raises(MissingLibraryError) as e:
        start_stack(small_config(sdir, endpoints=["coder"]), endpoint_module=FAKE)
    assert "libibverbs.so.1" in str(e.value) and "libibverbs1 librdmacm1 libnuma1" in str(e.value)
    assert children() <= before and read_state(sdir) is None


@pytest.mark.integration
def test_stale_state_file_is_replaced(sdir):
    cfg = small_config(sdir, endpoints=["coder"])
    info = start_stack(cfg, endpoint_module=FAKE)
    st = read_state(sdir)
    for p in st.processes:  # the processes die without `down`
        psutil.Process(p.pid).kill()
        psutil.Process(p.pid).wait(5)
    info2 = start_stack(cfg, endpoint_module=FAKE)
    try:
        assert info2.started_here and info2.pids != info.pids
    finally:
        stop_stack(info2)


def _compile_binary_with_missing_lib(d: Path) -> Path:
    (d / "lib.c").write_text("int adev_fake_fn(void) { return 0; }\n")
    (d / "main.c").write_text("int adev_fake_fn(void);\nint main(void) { return adev_fake_fn(); }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(d / "libadevfake.so"), str(d / "lib.c")],
                   check=True)
    subprocess.run(["gcc", "-o", str(d / "mooncake_master"), str(d / "main.c"), f"-L{d}",
                    "-ladevfake"], check=True)
    (d / "libadevfake.so").unlink()
    return d / "mooncake_master"


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build a broken binary")
def test_missing_system_library_is_a_clear_error(sdir, tmp_path, monkeypatch):
    binary = _compile_binary_with_missing_lib(tmp_path)
    before = children()
    # found by ldd before anything starts
    with pytest.raises(MissingLibraryError) as e:
        start_stack(small_config(sdir), endpoint_module=FAKE, master_binary=binary)
    assert "libadevfake.so" in str(e.value)
    assert "libibverbs1 librdmacm1 libnuma1" in str(e.value)
    # and, without ldd, from the loader's own message when the binary fails to start
    import adev.stack.procs as procs
    monkeypatch.setattr(procs, "missing_libraries", lambda b: [])
    monkeypatch.setenv(MASTER_ENV, str(binary))
    with pytest.raises(MissingLibraryError, match="libibverbs1 librdmacm1 libnuma1"):
        start_stack(small_config(sdir), endpoint_module=FAKE)
    assert children() <= before and read_state(sdir) is None


@pytest.mark.integration
async def test_running_stack_starts_and_stops(sdir):
    cfg = small_config(sdir, endpoints=["coder"])
    before = children()
    async with running_stack(cfg, endpoint_module=FAKE) as info:
        assert info.started_here and get(info.endpoints["coder"][:-3] + "/health") == 200
        pids = dict(info.pids)
        # a nested user reuses it and does not stop it
        async with running_stack(cfg, endpoint_module=FAKE) as inner:
            assert not inner.started_here and inner.pids == pids
        assert all(running(p) for p in pids.values())
    assert not any(running(p) for p in pids.values()) and children() == before
    # stopped on an exception too
    with pytest.raises(RuntimeError, match="boom"):
        async with running_stack(cfg, endpoint_module=FAKE) as info:
            pids = dict(info.pids)
            raise RuntimeError("boom")
    assert not any(running(p) for p in pids.values()) and read_state(sdir) is None


@pytest.mark.integration
async def test_running_stack_cancelled_during_startup_leaves_nothing(sdir, monkeypatch):
    monkeypatch.setenv("FAKE_ENDPOINT_FAIL", "hang")  # endpoints never become healthy
    before = children()

    async def use():
        async with running_stack(small_config(sdir), endpoint_module=FAKE):
            pytest.fail("should not get here")

    task = asyncio.create_task(use())
    await asyncio.sleep(1.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert children() <= before and read_state(sdir) is None


@pytest.mark.integration
def test_cli_up_status_down(sdir):
    env = {**os.environ, "ADEV_ENDPOINT_MODULE": FAKE}
    adev = [sys.executable, "-m", "adev.cli", "stack"]

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*adev, *args, "--state-dir", str(sdir)], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=120)

    up = run("up", "--time-scale", "5", "--configuration", "store-ram", "--lease-ttl", "2",
             "--policy", "length")
    assert up.returncode == 0, up.stderr
    st = run("status", "--json")
    assert st.returncode == 0, st.stderr
    status = json.loads(st.stdout)
    assert status["running"] and status["time_scale"] == 5.0
    assert status["master"]["lease_ttl_real_ms"] == 400
    assert status["master"]["metrics_url"].startswith("http://127.0.0.1:")
    assert set(status["endpoints"]) == {"coder", "reasoner"}
    for e in status["endpoints"].values():
        assert e["healthy"] and e["base_url"].endswith("/v1") and e["metrics_url"]
    pids = [status["master"]["pid"], *(e["pid"] for e in status["endpoints"].values())]
    again = run("up")
    assert again.returncode == 1 and "already running" in again.stderr
    down = run("down")
    assert down.returncode == 0, down.stderr
    deadline = time.monotonic() + 10
    while any(running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(running(p) for p in pids)
    gone = run("status", "--json")
    assert gone.returncode == 1 and json.loads(gone.stdout)["running"] is False


@pytest.mark.integration
def test_cli_missing_binary(sdir):
    env = {**os.environ, MASTER_ENV: "/nonexistent/mooncake_master", "ADEV_ENDPOINT_MODULE": FAKE}
    r = subprocess.run([sys.executable, "-m", "adev.cli", "stack", "up", "--state-dir", str(sdir)],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "mooncake_master not found" in r.stderr
    assert read_state(sdir) is None


# ------------------------------------------------------------------------------------------
# Integration: the real emulator (once adev.emulator.server exists)


@pytest.mark.integration
@pytest.mark.skipif(importlib.util.find_spec("adev.emulator.server") is None,
                    reason="adev.emulator.server not built yet")
def test_embedded_stack_with_emulator(embedded_stack):
    info = embedded_stack(endpoints=["coder"])
    base = info.endpoints["coder"]
    assert get(base[:-3] + "/health") == 200
    models = json.loads(urllib.request.urlopen(base + "/models", timeout=5).read())
    assert [m["id"] for m in models["data"]] == [info.model]
    assert "vllm:" in urllib.request.urlopen(info.metrics_urls["coder"], timeout=5).read().decode()
    # what the fleet reads for its stack_cpu event: every process, CPU seconds since start
    u = process_usage(info)
    assert set(u) == set(info.pids) and all(v["cpu_s"] > 0 and v["rss_mb"] > 0 for v in u.values())


@pytest.mark.integration
def test_kill_and_restart_master_on_the_same_ports(sdir):
    from adev.stack import kill_master, restart_master
    info = start_stack(small_config(sdir, endpoints=["coder"]), endpoint_module=FAKE)
    try:
        old = info.pids["master"]
        assert kill_master(info) == "killed" and not running(old)
        assert not stack_status(info.config)["running"]
        assert all(running(p) for n, p in info.pids.items() if n != "master")
        new = restart_master(info)
        assert new.pids["master"] != old and running(new.pids["master"])
        assert new.master_address == info.master_address
        assert new.master_metrics_url == info.master_metrics_url
        assert get(new.master_metrics_url) == 200 and stack_status(info.config)["running"]
    finally:
        res = stop_stack(info)
    assert res["master"] == "stopped" and not running(new.pids["master"])


_USER_SCRIPT = """
import asyncio, sys
from adev.stack import running_stack, small_config
async def main():
    async with running_stack(small_config(sys.argv[1], endpoints=["coder"]),
                             endpoint_module=sys.argv[2]) as info:
        print("UP", info.started_here, info.pids["master"], flush=True)
        sys.stdin.readline()  # hold the stack until told to go
asyncio.run(main())
"""


@pytest.mark.integration
def test_shared_running_stack_is_stopped_by_the_last_user_out(sdir):
    """Two processes use one stack via running_stack: the starter leaving first must not stop it
    under the other; the last one out stops it."""
    def user():
        p = subprocess.Popen([sys.executable, "-c", _USER_SCRIPT, str(sdir), FAKE], cwd=ROOT,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = p.stdout.readline().split()
        assert line[0] == "UP", line
        return p, line[1] == "True", int(line[2])

    a, a_started, master = user()
    b, b_started, master_b = user()
    try:
        assert a_started and not b_started and master == master_b
        a.communicate("\n", timeout=60)  # the starter leaves first
        assert running(master) and stack_status(small_config(sdir))["running"]
        b.communicate("\n", timeout=60)
        assert not running(master) and read_state(sdir) is None
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.kill()


@pytest.mark.integration
def test_a_measuring_run_shares_its_stack_with_no_one(sdir):
    """A fleet or replay (exclusive) joins only a stack no one else uses, and nobody joins a
    stack it holds: another client's requests would enter its counters unseen."""
    cfg = small_config(sdir, endpoints=["coder"])
    info = start_stack(cfg, endpoint_module=FAKE, user="fleet", exclusive=True)
    try:
        with pytest.raises(StackInUseError, match=rf"held by a measuring run \(pid {os.getpid()}\)"):
            start_stack(cfg, endpoint_module=FAKE, user="session")
        with pytest.raises(StackInUseError, match="held by a measuring run"):
            start_stack(cfg, endpoint_module=FAKE, user="fleet2", exclusive=True)
        release_user(sdir, "fleet")
        start_stack(cfg, endpoint_module=FAKE, user="session")  # shared use is still allowed
        start_stack(cfg, endpoint_module=FAKE, user="session2")
        with pytest.raises(StackInUseError, match=rf"in use by 2 other client\(s\) \(pid "
                                                  rf"{os.getpid()}\)"):
            start_stack(cfg, endpoint_module=FAKE, user="fleet2", exclusive=True)
        release_user(sdir, "session")
        release_user(sdir, "session2")
        again = start_stack(cfg, endpoint_module=FAKE, user="fleet2", exclusive=True)
        assert again.pids == info.pids and not again.started_here
    finally:
        stop_stack(info)


@pytest.mark.integration
def test_the_last_user_out_gives_this_process_the_hosts_clock_back(sdir):
    """A stack that ``running_stack`` started and its last user stopped leaves no held clock as
    this process's stamp source: a later run clock in the process (another replay's, a run on
    an external stack) would read a clock nobody moves."""
    from adev.clock import held_source, mono, stack_run_clock
    cfg = small_config(sdir, endpoints=["coder"])
    assert cfg.model_clock == "held"
    info = start_stack(cfg, endpoint_module=FAKE, user="replay", exclusive=True, auto_stop=True)
    try:
        stack_run_clock(info)
        assert held_source() is not None
        release_user(sdir, "replay")
        assert read_state(sdir) is None and held_source() is None
        a = mono()
        time.sleep(0.05)
        assert mono() - a >= 0.05
    finally:
        stop_stack(info)


@pytest.mark.integration
def test_the_command_line_says_why_a_held_stack_is_refused(sdir, tmp_path, capsys):
    """`adev session` on the stack a fleet holds: one line naming the holder, exit 1."""
    from adev.cli import main
    cfg = small_config(sdir)
    info = start_stack(cfg, endpoint_module=FAKE, user="fleet", exclusive=True)
    stack_file = tmp_path / "stack.toml"
    stack_file.write_text(
        f'[stack]\nmode = "embedded"\ntime_scale = 10.0\nconfiguration = "store-ram"\n'
        f'policy = "length"\npayload_scale = 64\nstate_dir = "{sdir}"\n'
        f'[stack.store]\nram_gb = 2.0\nlease_ttl_s = 5.0\n'
        f'[[stack.endpoints]]\nname = "coder"\n[[stack.endpoints]]\nname = "reasoner"\n')
    try:
        rc = main(["session", "--task", "kvblock-store", "--stack", str(stack_file),
                   "--runs-dir", str(tmp_path / "runs")])
        err = capsys.readouterr().err
        assert rc == 1 and err.startswith("adev: stack: the stack in ") and err.count("\n") == 1
        assert f"held by a measuring run (pid {os.getpid()})" in err
        assert all(running(p) for p in info.pids.values())
    finally:
        stop_stack(info)


@pytest.mark.integration
async def test_running_stack_reusing_a_started_stack_leaves_it_up(sdir):
    cfg = small_config(sdir, endpoints=["coder"])
    info = start_stack(cfg, endpoint_module=FAKE)  # like a fixture or `adev stack up`
    try:
        async with running_stack(cfg, endpoint_module=FAKE) as used:
            assert not used.started_here
        assert all(running(p) for p in info.pids.values())
    finally:
        stop_stack(info)


@pytest.mark.integration
def test_startup_killed_half_way_is_cleaned_by_down(sdir):
    """SIGKILL of `adev stack up` while endpoints start: `down` still finds the processes."""
    env = {**os.environ, "ADEV_ENDPOINT_MODULE": FAKE, "FAKE_ENDPOINT_FAIL": "hang"}
    up = subprocess.Popen([sys.executable, "-m", "adev.cli", "stack", "up", "--state-dir",
                           str(sdir)], env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    pending = sdir / "pending.json"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if pending.exists() and len(json.loads(pending.read_text() or "[]")) == 3:
            break
        time.sleep(0.1)
    entries = json.loads(pending.read_text())
    assert {e["name"] for e in entries} == {"master", "coder", "reasoner"}
    up.kill()
    up.wait()
    assert all(running(e["pid"]) for e in entries)  # orphans, not in any state file
    assert read_state(sdir) is None
    res = stop_stack(sdir)
    assert set(res) == {"master", "coder", "reasoner"}
    assert not any(running(e["pid"]) for e in entries) and not pending.exists()


@pytest.mark.integration
@pytest.mark.skipif(importlib.util.find_spec("adev.emulator.server") is None,
                    reason="adev.emulator.server not built yet")
def test_session_stack_fixture(session_stack):
    assert set(session_stack.endpoints) == {"coder", "reasoner"}
    assert stack_status(session_stack.config)["running"]


def test_stop_process_never_signals_a_recycled_pid():
    from adev.stack.procs import is_alive, stop_process
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ct = psutil.Process(p.pid).create_time()
        # same pid, other start time: another process now owns the pid -> untouched
        assert not is_alive(p.pid, ct + 100)
        assert stop_process(p.pid, ct + 100) == "gone"
        assert p.poll() is None
        assert stop_process(p.pid, ct, timeout=10) == "stopped" and p.wait(5) is not None
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


@pytest.mark.integration
@pytest.mark.parametrize("stolen", [0, 1, 2], ids=["master-rpc", "master-metrics", "endpoint"])
def test_lost_race_for_an_ephemeral_port_is_retried(sdir, monkeypatch, stolen):
    """Another process grabs a port between our pick and the child's bind: the stack notices
    (our child does not listen there), picks again and comes up on other ports."""
    import adev.stack.lifecycle as lc
    real = lc.free_port
    calls = {"n": 0}
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]

        def fake_free_port(host, avoid=None):
            i = calls["n"]
            calls["n"] += 1
            return taken if i == stolen else real(host, avoid)

        monkeypatch.setattr(lc, "free_port", fake_free_port)
        info = start_stack(small_config(sdir, endpoints=["coder"]), endpoint_module=FAKE)
        try:
            st = read_state(sdir)
            used = {st.master.port, st.master.metrics_port, st.endpoints["coder"].port}
            assert taken not in used
            assert get(info.endpoints["coder"][:-3] + "/health") == 200
        finally:
            stop_stack(info)


@pytest.mark.integration
async def test_external_mode_uses_given_urls_and_starts_nothing(sdir, tmp_path):
    """Point an external config at a running stack's URLs: status probes them, running_stack
    yields them and starts nothing; a dead URL shows as unhealthy."""
    info = start_stack(small_config(sdir, endpoints=["coder"]), endpoint_module=FAKE)
    try:
        f = tmp_path / "ext.toml"
        f.write_text(f'[stack]\nmode = "external"\n[[stack.endpoints]]\nname = "coder"\n'
                     f'base_url = "{info.endpoints["coder"]}"\n[[stack.endpoints]]\n'
                     f'name = "reasoner"\nbase_url = "http://127.0.0.1:9/v1"\n'
                     f'[stack.store]\nmetrics_url = "{info.master_metrics_url}"\n')
        from adev.config import load_stack
        ext = load_stack(f)
        before = children()
        async with running_stack(ext) as got:
            assert got.endpoints["coder"] == info.endpoints["coder"] and not got.started_here
            assert got.master_metrics_url == info.master_metrics_url
        assert children() <= before
        st = stack_status(ext)
        assert st["mode"] == "external" and st["master"]["healthy"]
        assert st["endpoints"]["coder"]["healthy"] and not st["endpoints"]["reasoner"]["healthy"]
        assert not st["running"]
        r = subprocess.run([sys.executable, "-m", "adev.cli", "stack", "status", "--json",
                            "--config", str(f)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 1 and json.loads(r.stdout)["endpoints"]["coder"]["healthy"]
    finally:
        stop_stack(info)


def test_cpus_are_validated_and_pinning_uses_taskset():
    from adev.config import HOST_CPUS
    from adev.stack.lifecycle import cpu_pin
    with pytest.raises(ConfigError, match=r"stack\.cpus: \[9999\] is not allowed; allowed values"):
        small_config("/tmp/x", cpus=[9999])
    with pytest.raises(ConfigError, match="distinct"):
        small_config("/tmp/x", cpus=[HOST_CPUS[0], HOST_CPUS[0]])
    assert cpu_pin([]) == []  # this process is not pinned: nothing to undo
    pin = cpu_pin([HOST_CPUS[0]])
    assert Path(pin[0]).name == "taskset" and pin[1:] == ["--cpu-list", str(HOST_CPUS[0])]


@pytest.mark.integration
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_stack_cpus_pin_every_process_and_a_pinned_parent_is_not_inherited(sdir):
    from adev.config import HOST_CPUS
    first, last = HOST_CPUS[0], HOST_CPUS[-1]
    info = start_stack(small_config(sdir, cpus=[first]), endpoint_module=FAKE)
    try:
        assert {n: psutil.Process(p).cpu_affinity() for n, p in info.pids.items()} == \
            {n: [first] for n in info.pids}
    finally:
        stop_stack(info)
    # a fleet pinned to its client core starts a stack with cpus = []: every core, not the fleet's
    os.sched_setaffinity(0, {last})
    try:
        info = start_stack(small_config(sdir), endpoint_module=FAKE)
        try:
            assert all(sorted(psutil.Process(p).cpu_affinity()) == HOST_CPUS
                       for p in info.pids.values())
        finally:
            stop_stack(info)
    finally:
        os.sched_setaffinity(0, set(HOST_CPUS))
