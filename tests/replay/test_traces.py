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


def test_working_set_holds_each_chain_a_later_call_continues():
    from adev.replay.traces import working_set_tokens
    # agents A and B share block 1; A2 continues A1 (4 of A1's 4 blocks), B2 continues B1
    # (4 of 4); B1 shares 1 of A1's 4 blocks (under half): a chain of its own
    a1, b1 = Call("s", 0, 70, 1, blocks=[1, 3, 4, 7]), Call("s", 1, 66, 1, blocks=[1, 5, 6, 8])
    a2 = Call("s", 2, 100, 1, blocks=[1, 3, 4, 7, 9, 10])
    b2 = Call("s", 3, 80, 1, blocks=[1, 5, 6, 8, 11])
    # a1: its prompt, 70; b1: 66 + A1's 4 blocks less block 1 (b1 holds it): 66 + 3 x 16 = 114;
    # a2: 100 + B1's 3 blocks past block 1 = 148; b2: A has no later call: 80
    assert working_set_tokens([[a1, b1, a2, b2]], 16).tolist() == [70, 114, 148, 80]
    # one conversation: each call's prompt; a call sharing exactly half its chain's blocks
    # continues it (c2), one sharing less starts a chain (c3: 50 + the 3 blocks of c2 past
    # block 1, which c4 continues later)
    c1, c2 = Call("t", 0, 40, 1, blocks=[1, 2]), Call("t", 1, 64, 1, blocks=[1, 2, 3, 4])
    c3 = Call("t", 2, 50, 1, blocks=[1, 9, 9, 9])
    c4 = Call("t", 3, 90, 1, blocks=[1, 2, 3, 4, 5])
    assert working_set_tokens([[c1, c2], [c1, c2, c3, c4]], 16).tolist() == [
        40, 64, 40, 64, 50 + 3 * 16, 90]
    # no block ids: every call its own chain, never continued: the prompt alone
    s = trace_stats(_trace())
    assert s.working_set_mean == pytest.approx((100 + 100000 + 40000 + 70000) / 4)


def test_split_chains_makes_each_agent_a_session():
    from adev.replay.traces import split_chains
    a1, b1 = Call("s", 0, 70, 1, blocks=[1, 3, 4, 7], t=0.0), Call("s", 1, 66, 1, blocks=[1, 5, 6, 8], t=1.0)
    a2 = Call("s", 2, 100, 1, blocks=[1, 3, 4, 7, 9, 10], t=2.0)
    b2 = Call("s", 3, 80, 1, blocks=[1, 5, 6, 8, 11], t=3.0)
    c1, c2 = Call("t", 0, 40, 1, blocks=[1, 2], t=0.5), Call("t", 1, 64, 1, blocks=[1, 2, 3, 4], t=4.0)
    out = split_chains(Trace(16, [a1, b1, c1, a2, b2, c2], source={"kind": "x"}))
    got = {sid: [(c.turn, c.prompt_tokens, c.t) for c in cs] for sid, cs in out.sessions().items()}
    assert got == {"s/0": [(0, 70, 0.0), (1, 100, 2.0)], "s/1": [(0, 66, 1.0), (1, 80, 3.0)],
                   "t/0": [(0, 40, 0.5), (1, 64, 4.0)]}
    assert out.block_tokens == 16 and out.source == {"kind": "x"}
    assert a1.session == "s" and a2.turn == 2          # the input trace is left as it was
