"""``adev replay`` argument errors: one line, exit 2, nothing started."""
from __future__ import annotations

from pathlib import Path

import pytest

from adev.cli import main
from adev.replay.cli import _experiments, _names, _seeds, default_stack
from adev.replay.experiment import CONFIGURATIONS, stack_for
from adev.replay.format import Call, Trace, write_trace
from adev.stack.state import state_dir_path


def test_configurations_and_seeds():
    assert _names("all") == list(CONFIGURATIONS) and len(CONFIGURATIONS) == 6
    assert _names("recompute, disk-only") == ["recompute", "disk-only"]
    assert _seeds("2") == [0, 1] and _seeds("3,5") == [3, 5]
    assert _experiments("short") == ["short"]
    assert _experiments("short, long,short") == ["short", "long"]


def test_stack_for_each_configuration(tmp_path, monkeypatch):
    base = default_stack()
    s = stack_for(base, "store-ram+nvmeof", tmp_path)
    assert (s.configuration, s.store.disk_tier) == ("store-ram+disk", "remote-nvmeof")
    assert s.state_dir == str(tmp_path / "store-ram+nvmeof")
    assert stack_for(base, "store-ram+raid0", tmp_path).store.disk_tier == "local-raid0"
    assert stack_for(base, "recompute", tmp_path).configuration == "recompute"
    # a relative output folder: the stacks' state under it in the current directory, not under
    # the repository root, where a relative stack state directory would be taken from
    monkeypatch.chdir(tmp_path)
    rel = stack_for(base, "recompute", Path("out") / ".stacks")
    assert rel.state_dir == str(tmp_path / "out" / ".stacks" / "recompute")
    assert state_dir_path(rel.state_dir) == tmp_path / "out" / ".stacks" / "recompute"
    assert [e.name for e in base.endpoints][:2] == ["p0", "p1"]
    bigger = default_stack(store={"chunk_blocks": 64, "ram_gb": 275.0})
    assert (bigger.store.chunk_blocks, bigger.store.ram_gb) == (64, 275.0)
    assert bigger.store.lease_ttl_s == base.store.lease_ttl_s


@pytest.mark.parametrize("args, msg", [
    (["--configurations", "ram-only"], "--configurations: ['ram-only'] not allowed"),
    (["--seeds", "x"], "--seeds: 'x' is not allowed"),
    (["--experiment", "short,both"], "--experiment: ['both'] not allowed; allowed values: one of "
                                     "short, long, timestamps or a comma list"),
    (["--chunk-blocks", "0"], "stack.store.chunk_blocks: 0 must be greater than 0"),
    (["--time-scale", "0"], "--time-scale: '0' is not allowed; allowed values: auto or a number"),
    (["--time-scale", "fast"], "--time-scale: 'fast' is not allowed"),
    (["--time-scale", "nan"], "--time-scale: 'nan' is not allowed"),
    (["--min-time-scale", "-1"], "--min-time-scale: -1.0 is not allowed; allowed values: a number > 0"),
    (["--stream-interval", "-1"], "--stream-interval: -1 is not allowed; allowed values: an integer >= 0"),
    (["--payload-scale", "0"], "--payload-scale: 0 is not allowed; allowed values: an integer >= 1"),
    (["--jobs", "0"], "--jobs: 0 is not allowed; allowed values: an integer >= 1"),
    (["--promotion-on-hit", "0"], "--promotion-on-hit: 0 is not allowed; allowed values: an "
                                  "integer >= 1"),
    # the replay profile's context is 131,072 tokens: a smaller pool cannot hold one request
    (["--gpu-pool-tokens", "131071"], "--gpu-pool-tokens: 131071 is not allowed; allowed values: at "
                                      "least the model's context, 131072 tokens"),
    # 32 GB over 4 endpoints at 1/1024: 7.45 MiB segments; 1/256 gives 29.8 MiB
    (["--ram-gb", "32", "--gpu-pool-tokens", "131072", "--payload-scale", "1024", "--time-scale", "10"],
     "--payload-scale: 1024 is not allowed for a RAM store of 32.0 GB over 4 endpoints (segments "
     "of 7.5 MiB, below Mooncake's 16 MiB minimum); allowed values: at most 256"),
])
def test_bad_arguments_exit_2(tmp_path, capsys, args, msg):
    p = write_trace(Trace(16, [Call("s", 0, 10, 1), Call("s", 1, 20, 1)]), tmp_path / "t.jsonl")
    assert main(["replay", str(p), *args, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1


def test_bad_trace_and_no_sessions_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0}\n')
    assert main(["replay", str(bad)]) == 2
    assert "bad.jsonl:1: field 'format'" in capsys.readouterr().err
    p = write_trace(Trace(16, [Call("s", 0, 10, 1)]), tmp_path / "t.jsonl")
    assert main(["replay", str(p), "--min-turns", "2"]) == 2
    assert "no session" in capsys.readouterr().err


class _Stop(Exception):
    pass


@pytest.fixture
def bases(monkeypatch):
    """The stack each ``adev replay`` would run its matrix on."""
    seen: list = []

    async def fake_matrix(trace, sessions, base, *a, **kw):
        seen.append(base)
        raise _Stop

    monkeypatch.setattr("adev.replay.cli.run_matrix", fake_matrix)
    return seen


def _replay(tmp_path, *args):
    p = write_trace(Trace(16, [Call("s", 0, 10, 1), Call("s", 1, 20, 1)]), tmp_path / "t.jsonl")
    with pytest.raises(_Stop):
        main(["replay", str(p), "--time-scale", "10", *args, "--out", str(tmp_path / "o")])


@pytest.mark.parametrize("args, expected", [([], 0), (["--stream-interval", "1"], 1),
                                            (["--stream-interval", "8"], 8)])
def test_stream_interval_reaches_the_replay_stack(tmp_path, bases, args, expected):
    _replay(tmp_path, *args)
    assert [b.stream_interval for b in bases] == [expected]


def test_payload_scale_is_the_largest_that_keeps_mooncakes_minimum_segment():
    from adev.replay.experiment import replay_payload_scale, segment_bytes
    # 16 MiB = 16,777,216 bytes. 275 GB over 4 endpoints at 1/1024: 67.1 MB per segment;
    # 58.03 GB: 14.2 MB at 1/1024, 28.3 MB at 1/512; 32 GB: 15.6 MB at 1/512, 31.3 MB at 1/256
    assert segment_bytes(275, 1024, 4) == pytest.approx(67_138_671.875)
    assert [replay_payload_scale(g, 4) for g in (275, 58.03, 32, 0.5)] == [1024, 512, 256, 4]
    assert replay_payload_scale(0.01, 4) == 1          # even full-size payloads need more
    assert replay_payload_scale(275, 4, want=300) == 256


def test_payload_scale_reaches_the_replay_stack(tmp_path, bases):
    _replay(tmp_path, "--ram-gb", "275")
    _replay(tmp_path, "--ram-gb", "32")
    _replay(tmp_path, "--ram-gb", "275", "--payload-scale", "128")
    stack = tmp_path / "s.toml"
    stack.write_text("[stack]\npayload_scale = 64\n")
    _replay(tmp_path, "--stack", str(stack))
    assert [b.payload_scale for b in bases] == [1024, 256, 128, 64]


def test_the_replay_prints_the_slices_new_prompt_tokens(tmp_path, bases, capsys):
    # turn 0 (blocks 1, 2: 10 tokens of 16-token blocks, so 10 new), turn 1 (blocks 1, 2, 3: the
    # first two were sent, 40 - 32 = 8 new): 9 per call, 18 of 50 prompt tokens
    p = write_trace(Trace(16, [Call("s", 0, 10, 1, blocks=[1, 2]),
                               Call("s", 1, 40, 1, blocks=[1, 2, 3])]), tmp_path / "t.jsonl")
    with pytest.raises(_Stop):
        main(["replay", str(p), "--time-scale", "10", "--out", str(tmp_path / "o")])
    assert "new prompt tokens: 9 per call, 36.0% of prompt tokens" in capsys.readouterr().err


def test_promotion_on_hit_and_disk_writes_reach_the_replay_stack(tmp_path, bases, capsys):
    _replay(tmp_path)
    _replay(tmp_path, "--promotion-on-hit", "1")
    assert [(b.store.promotion_on_hit, b.store.promotion_threshold) for b in bases] == [
        (False, 2), (True, 1)]
    _replay(tmp_path, "--disk-writes", "evict")
    stack = tmp_path / "s.toml"
    stack.write_text("[stack]\n")
    _replay(tmp_path, "--stack", str(stack))
    # the replay's own stack writes its disk tier at put; a stack file keeps the stack's default
    assert [b.store.disk_writes for b in bases] == ["put", "put", "evict", "evict"]


@pytest.mark.parametrize("flag, value", [("--promotion-on-hit", "2"), ("--disk-writes", "put"),
                                         ("--load-threads", "1"), ("--staging", "serial")])
def test_store_flags_are_refused_with_a_stack_file(tmp_path, capsys, flag, value):
    stack = tmp_path / "s.toml"
    stack.write_text("[stack]\n")
    p = write_trace(Trace(16, [Call("s", 0, 10, 1), Call("s", 1, 20, 1)]), tmp_path / "t.jsonl")
    assert main(["replay", str(p), "--stack", str(stack), flag, value]) == 2
    assert f"{flag}: not with --stack" in capsys.readouterr().err


def test_load_threads_and_staging_reach_the_replay_stack(tmp_path, bases, capsys):
    _replay(tmp_path)
    _replay(tmp_path, "--load-threads", "0", "--staging", "overlap")
    # the defaults are vLLM's one receiving thread and Mooncake's staging of a batch before its copy
    assert [(b.store.load_threads, b.store.staging) for b in bases] == [(1, "serial"), (0, "overlap")]
    p = write_trace(Trace(16, [Call("s", 0, 10, 1), Call("s", 1, 20, 1)]), tmp_path / "t.jsonl")
    assert main(["replay", str(p), "--load-threads", "-1"]) == 2
    assert "allowed values: an integer >= 0" in capsys.readouterr().err


def test_the_replay_stack_serves_the_replay_studys_model_variant(tmp_path, bases, capsys):
    _replay(tmp_path)
    _replay(tmp_path, "--profile", "qwen3-coder-30b-a3b")
    stack = tmp_path / "s.toml"
    stack.write_text("[stack]\n")
    _replay(tmp_path, "--stack", str(stack))
    # the replay's own stack: the FP8 variant with a 131,072-token context; a stack file: its own
    assert [b.profile for b in bases] == ["qwen3-coder-30b-a3b-128k", "qwen3-coder-30b-a3b",
                                          "qwen3-coder-30b-a3b"]
    prof = bases[0].model_profile()
    assert (prof.name, prof.max_model_len) == ("Qwen3-Coder-30B-A3B-Instruct-FP8", 131072)
    p = write_trace(Trace(16, [Call("s", 0, 10, 1), Call("s", 1, 20, 1)]), tmp_path / "t.jsonl")
    assert main(["replay", str(p), "--stack", str(stack), "--profile", "qwen3-coder-30b-a3b"]) == 2
    assert "--profile: not with --stack; set [stack] profile in the stack file" in capsys.readouterr().err


def test_stream_interval_with_a_stack_file_is_the_files_unless_given(tmp_path, bases):
    stack = tmp_path / "s.toml"
    stack.write_text("[stack]\nstream_interval = 4\n")
    _replay(tmp_path, "--stack", str(stack))
    _replay(tmp_path, "--stack", str(stack), "--stream-interval", "2")
    assert [b.stream_interval for b in bases] == [4, 2]


def test_the_source_mean_prompt_from_its_prompt_length_groups():
    # 1,116 / 3,061 / 2,779 / 947 calls evenly spaced in (8,192, 32,768], (32,768, 65,536],
    # (65,536, 98,304], (98,304, 126,976]: group means 20,491.0, 49,157.4, 81,925.9 and
    # 112,655.1 (lo + (hi - lo) (c + 1) / 2c), 64,240.8 over the 7,903 calls; each length is
    # rounded down to a whole token, about 0.5 less on average
    from adev.replay.experiment import source_mean_prompt
    assert source_mean_prompt() == pytest.approx(64240.3, abs=0.5)


def test_the_ram_store_is_the_sources_scaled_by_the_working_set_unless_given(tmp_path, bases):
    from adev.replay.experiment import source_mean_prompt
    m = 15 / source_mean_prompt()           # the trace's calls: 10 and 20 prompt tokens
    _replay(tmp_path)                       # short gap, --active auto: its one session
    _replay(tmp_path, "--experiment", "short,long")
    _replay(tmp_path, "--experiment", "long", "--gap", "64")
    _replay(tmp_path, "--active", "8")
    _replay(tmp_path, "--ram-gb", "32")
    stack = tmp_path / "s.toml"
    stack.write_text("[stack]\n[stack.store]\nram_gb = 8.0\n")
    _replay(tmp_path, "--stack", str(stack))
    # 256 GiB = 274.877906944 GB, times the working set over the source's: short gap, active /
    # 16 x the mean prompt over the source's; long gap, gap / 128 x the same
    src = 274.877906944
    assert [b.store.ram_gb for b in bases] == [
        pytest.approx(src / 16 * m), pytest.approx(src / 16 * m), pytest.approx(src / 2 * m),
        pytest.approx(src / 2 * m), 32.0, 8.0]


def test_each_experiment_of_one_replay_gets_the_stack_sized_to_its_working_set(tmp_path, monkeypatch):
    from adev.replay.experiment import source_mean_prompt
    seen = []

    async def fake_matrix(trace, sessions, base, names, seeds, opts, *a, **kw):
        seen.append((opts.experiment, opts.active, base.store.ram_gb, base.gpu_pool_tokens))
        return []

    def stop(*a, **kw):
        raise _Stop
    monkeypatch.setattr("adev.replay.cli.run_matrix", fake_matrix)
    monkeypatch.setattr("adev.replay.report.build", stop)
    calls = [Call(f"s{i}", t, 32_120, 1) for i in range(40) for t in range(2)]
    p = write_trace(Trace(16, calls), tmp_path / "t.jsonl")
    with pytest.raises(_Stop):
        main(["replay", str(p), "--experiment", "short,long", "--time-scale", "10", "--profile",
              "qwen3-coder-30b-a3b-128k", "--out", str(tmp_path / "o")])
    m = 32_120 / source_mean_prompt()       # 0.5000 (the source's 64,240.3)
    # short gap: the source's 16 x 4.4695 s / 1.4658 s (auto_active's test) = 48.79 -> 49,
    # at most the 40 sessions: the source's store and pool x 40 / 16 x 0.5; long gap: x 0.5
    # (the source's gap and calls in flight); both pools above the profile's 131,072-token floor
    assert seen == [
        ("short", 40, pytest.approx(274.877906944 * 2.5 * m),
         pytest.approx(476_774 * 2.5 * m, abs=1)),
        ("long", 40, pytest.approx(274.877906944 * m), pytest.approx(476_774 * m, abs=1))]


def test_the_store_is_sized_to_the_sessions_working_set(tmp_path, monkeypatch, capsys):
    from adev.replay.experiment import source_mean_prompt
    seen = []

    async def fake_matrix(trace, sessions, base, names, seeds, opts, *a, **kw):
        seen.append((base.store.ram_gb, base.gpu_pool_tokens))
        raise _Stop
    monkeypatch.setattr("adev.replay.cli.run_matrix", fake_matrix)
    # each session two agents, A and B, sharing block 0, each call 2,008 blocks (32,128 tokens):
    # A1, B1, A2, B2, the second call of each agent continuing its first. Working sets (block 0
    # counted once): A1 32,128; B1 32,128 + A1's other 2,007 blocks x 16 = 64,240; A2 the same
    # (B1 held for B2); B2 32,128 (A has no later call): mean 48,184. The pool: the mean prompt
    def agent(tag: int, n: int) -> list[int]:
        return [0] + [tag * 10_000 + k for k in range(1, n)]
    calls = []
    for i in range(16):
        a, b = agent(1, 2008), agent(2, 2008)
        calls += [Call(f"s{i}", 0, 32_128, 1, blocks=a), Call(f"s{i}", 1, 32_128, 1, blocks=b),
                  Call(f"s{i}", 2, 32_128, 1, blocks=a), Call(f"s{i}", 3, 32_128, 1, blocks=b)]
    p = write_trace(Trace(16, calls), tmp_path / "t.jsonl")
    with pytest.raises(_Stop):
        main(["replay", str(p), "--experiment", "long", "--time-scale", "10", "--profile",
              "qwen3-coder-30b-a3b-128k", "--out", str(tmp_path / "o")])
    src = source_mean_prompt()
    assert seen == [(pytest.approx(274.877906944 * 48_184 / src),
                     pytest.approx(476_774 * 32_128 / src, abs=1))]
    assert "working set per session: 48,184 tokens, 1.50 x the mean prompt" in capsys.readouterr().err


def test_auto_active_offers_the_sources_prefill_work_and_the_working_set_scale():
    from adev.config import PrefillTime, load_model_profile
    from adev.replay.experiment import (
        ReplayOptions,
        auto_active,
        prompt_prefill_s,
        source_prefill_s,
        working_set_scale,
    )
    # a flat rate: the work is the prompt tokens, 16 x 64,240.3 / mean: 16.0 -> 16; 29.08 -> 29;
    # 22.84 -> 23; 5.14 -> 5; no prompt: 16
    flat = PrefillTime(1 / 14_850)
    assert [auto_active([x], flat) for x in (64_240.3, 35_340, 45_000, 200_000)] == [16, 29, 23, 5]
    assert auto_active([], flat) == 16
    assert auto_active([30_000, 40_680], flat) == 29      # the mean, 35,340
    # with attention: t(L) = L a + b L (L - 1) / 2; a = 1e-5, b = 1e-9: t(1,000) = 0.01 + 0.0004995
    assert prompt_prefill_s([1_000, 3_000], PrefillTime(1e-5, 1e-9)) == pytest.approx(
        (0.0104995 + 0.0344985) / 2)
    # the replay's profile: a = 2.8569e-5 s, b = 1.0627e-9 s; the source's prompts 4.4695 s
    # (1.8353 s of it a x 64,240.3); a prompt of 32,120 tokens 0.91764 + 0.54820 = 1.46584 s,
    # 16 x 4.4695 / 1.46584 = 48.79 -> 49 where the tokens give 32
    pt = load_model_profile("qwen3-coder-30b-a3b-128k").prefill_time
    assert source_prefill_s(pt) == pytest.approx(4.4695, abs=1e-4)
    assert prompt_prefill_s([32_120], pt) == pytest.approx(1.46584, abs=1e-5)
    assert auto_active([32_120], pt) == 49
    # short gap: 29 / 16 x 35,340 / 64,240.3 = 1.8125 x 0.55012 = 0.99710, RAM and pool alike
    ram, pool = working_set_scale(ReplayOptions("short", active=29), 35_340)
    assert (ram, pool) == (pytest.approx(0.99710, abs=1e-5), pytest.approx(0.99710, abs=1e-5))
    # long gap: gap 64 / 128 x 0.5 = 0.25 for RAM; 8 in flight / 16 x 0.5 = 0.25 for the pool;
    # with the source's gap and 32 in flight: 0.5 and 1.0
    half = 64_240.3 / 2
    assert working_set_scale(ReplayOptions("long", gap=64, max_in_flight=8), half) == (
        pytest.approx(0.25), pytest.approx(0.25))
    assert working_set_scale(ReplayOptions("long", max_in_flight=32), half) == (
        pytest.approx(0.5), pytest.approx(1.0))
    assert working_set_scale(ReplayOptions("timestamps", active=29), half) == (
        pytest.approx(0.5), pytest.approx(0.5))
    # sessions that keep two prompts' worth (agents of their own): the store holds the working
    # set, the pool the calls' contexts: half-size prompts, a full-size working set
    full = 64_240.3
    for exp in ("short", "long", "timestamps"):
        assert working_set_scale(ReplayOptions(exp), half, full) == (
            pytest.approx(1.0), pytest.approx(0.5))


def test_active_must_be_auto_or_a_positive_integer(tmp_path, capsys):
    p = write_trace(Trace(16, [Call("s", 0, 10, 1)]), tmp_path / "t.jsonl")
    for bad in ("0", "x"):
        with pytest.raises(SystemExit) as e:
            main(["replay", str(p), "--active", bad])
        assert e.value.code == 2
        assert f"--active: {bad!r} is not allowed; allowed values: auto or an integer >= 1" \
            in capsys.readouterr().err


def test_the_sources_gpu_pool_from_its_fleet_studys_and_fp8_weights():
    from adev.replay.experiment import scaled_gpu_pool, source_pool_tokens
    # 166,512 + 30.5e9 bytes / 98,304 bytes per token (48 layers x 4 KV heads x 128 x 2 x 2 B)
    # = 166,512 + 310,262.04 = 476,774.04
    assert source_pool_tokens(98_304) == pytest.approx(476_774.04, abs=0.01)
    # x 0.550122 (35,340 / 64,240.3) = 262,283.8; x 0.1 = 47,677 -> the floor
    assert scaled_gpu_pool(35_340 / 64_240.3, 98_304, 131_072) == 262_283
    assert scaled_gpu_pool(0.1, 98_304, 65_536) == 65_536
    assert scaled_gpu_pool(1.0, 98_304, 131_072) == 476_774


def test_the_gpu_pool_is_the_sources_scaled_by_the_working_set_unless_given(tmp_path, bases):
    long = Trace(16, [Call("s", 0, 40_000, 1), Call("s", 1, 50_000, 1)])
    p = write_trace(long, tmp_path / "long.jsonl")
    for args in (["--experiment", "long"], ["--gpu-pool-tokens", "200000"]):
        with pytest.raises(_Stop):
            main(["replay", str(p), "--time-scale", "10", "--profile", "qwen3-coder-30b-a3b-128k",
                  *args, "--out", str(tmp_path / "o")])
    _replay(tmp_path)            # a mean prompt of 15 tokens: the floor, the profile's context
    stack = tmp_path / "s.toml"
    stack.write_text("[stack]\ngpu_pool_tokens = 100000\n")
    _replay(tmp_path, "--stack", str(stack))
    # the long gap's 16 calls in flight: 476,774.04 x 16 / 16 x 45,000 / 64,240.3 = 333,977.7
    assert [b.gpu_pool_tokens for b in bases] == [333_977, 200_000, 131_072,
                                                  100_000]
    assert bases[0].model_profile().gpu_pool_blocks == bases[0].gpu_pool_tokens // 16


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_replay_and_what_it_was_running_cleans_up(tmp_path, capsys, monkeypatch, sig):
    import asyncio
    import os
    import signal
    events = []

    async def slow_matrix(trace, sessions, base, names, seeds, opts, out, **kw):
        events.append("started")
        asyncio.get_running_loop().call_later(0.05, os.kill, os.getpid(), getattr(signal, sig))
        try:
            await asyncio.sleep(30)
        finally:
            events.append("cleaned up")   # where a run stops its stack
        return []
    monkeypatch.setattr("adev.replay.cli.run_matrix", slow_matrix)
    p = write_trace(Trace(16, [Call("s", 0, 10, 1), Call("s", 1, 20, 1)]), tmp_path / "t.jsonl")
    assert main(["replay", str(p), "--time-scale", "10", "--out", str(tmp_path / "o")]) == 130
    assert events == ["started", "cleaned up"]
    assert "adev replay: stopped by a signal; the runs finished before it are in" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL     # handlers gone with the loop


def test_an_error_on_the_way_out_after_a_signal_counts_as_stopped():
    """With --jobs, a worker the same SIGINT ended first makes its run fail (status 130) while
    the matrix is being cancelled: that is a stop, not an error. Without a signal an error
    stays an error."""
    import asyncio
    import os
    import signal

    from adev.replay.cli import run_stoppable
    from adev.replay.experiment import RunFailed

    async def failing_after_signal():
        asyncio.get_running_loop().call_later(0.02, os.kill, os.getpid(), signal.SIGTERM)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            raise RunFailed("replay x-s0: its process exited with status 130") from None

    async def failing():
        raise RunFailed("replay x-s0: its process exited with status 1")
    assert run_stoppable(failing_after_signal()) is None
    with pytest.raises(RunFailed, match="status 1"):
        run_stoppable(failing())


def test_split_chains_replays_each_agent_as_a_session(tmp_path, monkeypatch, capsys):
    seen = []

    async def fake_matrix(trace, sessions, base, *a, **kw):
        seen.append([[(c.session, c.turn) for c in cs] for cs in sessions])
        raise _Stop
    monkeypatch.setattr("adev.replay.cli.run_matrix", fake_matrix)
    # two agents sharing block 1, two calls each: two sessions of two turns with --split-chains,
    # one of four without
    calls = [Call("s", 0, 64, 1, blocks=[1, 3, 4, 7]), Call("s", 1, 64, 1, blocks=[1, 5, 6, 8]),
             Call("s", 2, 96, 1, blocks=[1, 3, 4, 7, 9, 10]),
             Call("s", 3, 80, 1, blocks=[1, 5, 6, 8, 11])]
    p = write_trace(Trace(16, calls), tmp_path / "t.jsonl")
    for extra in ([], ["--split-chains"]):
        with pytest.raises(_Stop):
            main(["replay", str(p), "--time-scale", "10", *extra, "--out", str(tmp_path / "o")])
    assert seen == [[[("s", 0), ("s", 1), ("s", 2), ("s", 3)]],
                    [[("s/0", 0), ("s/0", 1)], [("s/1", 0), ("s/1", 1)]]]
    assert "--split-chains: 1 sessions -> 2 chains, each replayed as a session" in \
        capsys.readouterr().err
