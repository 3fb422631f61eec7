"""``adev trace``: statistics worked by hand, prompt-length groups, CLI errors (exit 2)."""
from __future__ import annotations

import orjson
import pytest

from adev.cli import main
from adev.replay.format import Call, Trace, write_trace
from adev.replay.traces import length_group, trace_stats


def test_length_groups_edges():
    assert [length_group(n) for n in (1, 32768, 32769, 65536, 65537, 98304, 98305)] == [
        "<=32K", "<=32K", "32-64K", "32-64K", "64-96K", "64-96K", ">96K"]


def _trace():
    return Trace(block_tokens=512, calls=[
        Call("a", 0, 100, 10, t=0.0), Call("b", 0, 100000, 30, t=5.0),
        Call("a", 1, 40000, 20, t=10.0), Call("a", 2, 70000, 40, t=30.0)])


def test_stats_by_hand():
    s = trace_stats(_trace())
    assert (s.sessions, s.calls, s.turns_max) == (2, 4, 3)
    assert s.prompt_tokens_p50 == 55000          # median of 100, 40000, 70000, 100000
    assert s.groups == {"<=32K": 1, "32-64K": 1, "64-96K": 1, ">96K": 1}
    assert s.growth_per_turn_p50 == 34950        # 39900 and 30000
    assert s.gap_p50_s == 15.0                   # 10 and 20 s within session a
    assert s.interarrival_mean_s == 10.0         # 5, 5, 20
    assert s.duration_s == 30.0
    assert s.output_tokens_mean == 25.0


def test_new_prompt_tokens_past_the_longest_prefix_sent_before():
    from adev.replay.traces import new_prompt_tokens
    tr = Trace(block_tokens=4, calls=[
        Call("a", 0, 12, 1, blocks=[1, 2, 3], t=0.0),      # nothing sent before: 12 new
        Call("b", 0, 14, 1, blocks=[1, 2, 9], t=5.0),      # 1, 2 sent by a: 14 - 8 = 6
        Call("a", 1, 16, 1, blocks=[1, 2, 3, 4], t=10.0),  # 1, 2, 3 sent: 16 - 12 = 4
        # sent at 2.0, before b: blocks 2, 3 were sent by a, but after block 1, not first
        Call("c", 0, 8, 1, blocks=[2, 3], t=2.0),
        Call("d", 0, 6, 1, blocks=[1, 2], t=11.0)])        # 2 blocks (8 tokens) sent: 0 new
    assert new_prompt_tokens(tr).tolist() == [12, 6, 4, 8, 0]
    s = trace_stats(tr)
    assert s.new_tokens_mean == pytest.approx(30 / 5)
    assert s.new_share == pytest.approx(30 / 56)
    # without times the file order decides: c's blocks 2, 3 are then new either way, and b
    # still follows a
    untimed = Trace(4, [Call(c.session, c.turn, c.prompt_tokens, 1, blocks=c.blocks)
                        for c in tr.calls])
    assert new_prompt_tokens(untimed).tolist() == [12, 6, 4, 8, 0]
    d_first = Trace(4, [Call("d", 0, 6, 1, blocks=[1, 2], t=-1.0), *tr.calls[:1]])
    assert new_prompt_tokens(d_first).tolist() == [6, 4]   # a finds d's 1, 2: 12 - 8


def test_cli_stats_and_import(tmp_path, capsys):
    p = write_trace(_trace(), tmp_path / "t.jsonl")
    assert main(["trace", "stats", str(p)]) == 0
    out = capsys.readouterr().out
    assert "sessions 2, calls 4" in out
    # no call has block ids: every prompt token is new
    assert "new prompt tokens (past the longest prefix an earlier call sent): mean 52,525 per " \
           "call, 100.0% of prompt tokens" in out
    src = tmp_path / "mc.jsonl"
    src.write_bytes(orjson.dumps({"timestamp": 0, "input_length": 10, "output_length": 1,
                                  "hash_ids": [3]}) + b"\n")
    out = tmp_path / "out.jsonl"
    assert main(["trace", "import", "mooncake", str(src), "--out", str(out)]) == 0
    assert main(["trace", "stats", str(out), "--json"]) == 0
    assert '"calls": 1' in capsys.readouterr().out
    # an existing --out is never overwritten
    before = out.read_bytes()
    assert main(["trace", "import", "mooncake", str(src), "--out", str(out)]) == 2
    assert "file exists" in capsys.readouterr().err and out.read_bytes() == before


@pytest.mark.parametrize("content, msg", [
    (b'{"format": "adev-trace", "version": 1, "block_tokens": 0}\n', "field 'block_tokens'"),
    (b"", "empty file"),
])
def test_cli_bad_trace_exit_2(tmp_path, capsys, content, msg):
    p = tmp_path / "bad.jsonl"
    p.write_bytes(content)
    assert main(["trace", "stats", str(p)]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1
