"""``adev trace synth``: the source's counts exactly, growing sessions, shared and own blocks."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from adev.cli import main
from adev.replay.format import read_trace
from adev.replay.synth import SOURCE_GROUP_CALLS, SynthParams, synth_trace, target_lengths
from adev.replay.traces import trace_stats


@pytest.fixture(scope="module")
def source_like():
    return synth_trace()


def test_the_source_counts_exactly(source_like):
    s = trace_stats(source_like)
    assert (s.sessions, s.calls) == (256, 7903)
    assert tuple(s.groups.values()) == SOURCE_GROUP_CALLS == (1116, 3061, 2779, 947)


def test_sessions_only_grow_and_each_prompt_holds_the_one_before(source_like):
    for cs in source_like.sessions().values():
        assert len(cs) >= 2
        for a, b in zip(cs, cs[1:], strict=False):
            # the next prompt holds this prompt and its recorded output, then tool output
            assert a.prompt_tokens + a.output_tokens < b.prompt_tokens
            assert b.blocks[:len(a.blocks)] == a.blocks
        assert cs[-1].prompt_tokens + cs[-1].output_tokens <= 131072


def test_sessions_share_the_system_prompt_blocks_only(source_like):
    sessions = list(source_like.sessions().values())
    owner: dict[int, str] = {}
    for cs in sessions:
        assert cs[0].blocks[:8] == list(range(8))  # 4,096 shared tokens in 512-token blocks
        for b in cs[-1].blocks[8:]:
            assert owner.setdefault(b, cs[0].session) == cs[0].session


def test_first_calls_are_the_shortest_prompts(source_like):
    first = [cs[0].prompt_tokens for cs in source_like.sessions().values()]
    # 256 first calls take the lowest ranks: lengths 8192 + 24576 * i / 1116, i = 1..256
    assert min(first) == 8192 + 24576 // 1116 and max(first) == int(8192 + 24576 * 256 / 1116)


def test_target_lengths_by_hand():
    p = SynthParams(sessions=2, calls=8, group_calls=(1, 1, 1, 1))
    # two per group, evenly spaced in (lo, hi]: lo + (hi - lo) * (i + 1) / 2
    assert target_lengths(p).tolist() == [20480, 32768, 49152, 65536, 81920, 98304,
                                          112640, 126976]
    # 7 calls over equal shares: the largest remainders go to the first groups
    assert len(target_lengths(dataclasses.replace(p, calls=7))) == 7


def test_turns_add_up_and_the_seed_decides():
    p = SynthParams(sessions=20, calls=300, seed=3)
    a, b = synth_trace(p), synth_trace(p)
    assert [(c.session, c.prompt_tokens, c.output_tokens) for c in a.calls] == \
        [(c.session, c.prompt_tokens, c.output_tokens) for c in b.calls]
    c = synth_trace(dataclasses.replace(p, seed=4))
    assert [x.prompt_tokens for x in c.calls] != [x.prompt_tokens for x in a.calls]
    assert len(a.calls) == 300 and min(len(v) for v in a.sessions().values()) >= 2
    outs = np.array([x.output_tokens for x in a.calls])
    assert outs.min() >= 1


@pytest.mark.parametrize("field,value,words", [
    ("calls", 3, "calls: 3 is not allowed; allowed values: >= sessions x min_turns = 512"),
    ("max_prompt", 140000, "max_prompt: 140000 is not allowed"),
    ("first_prompt", 1000, "first_prompt: 1000 is not allowed"),
    ("group_calls", (0, 0, 0, 0), "group_calls: (0, 0, 0, 0) is not allowed"),
])
def test_bad_parameters_name_the_field(field, value, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        synth_trace(SynthParams(**{field: value}))


def test_cli_writes_a_trace_and_never_overwrites(tmp_path, capsys):
    out = tmp_path / "synth.jsonl"
    assert main(["trace", "synth", "--out", str(out), "--sessions", "4", "--calls", "40"]) == 0
    text = capsys.readouterr().out
    assert "40 calls, 4 sessions" in text and "prompt-length groups" in text
    t = read_trace(out)
    assert len(t.calls) == 40 and t.source["kind"] == "synth" and t.source["sessions"] == 4
    assert main(["trace", "synth", "--out", str(out)]) == 2
    assert "file exists" in capsys.readouterr().err
    assert main(["trace", "synth", "--out", str(tmp_path / "x.jsonl"), "--calls", "5"]) == 2
    assert "--calls: 5 is not allowed" in capsys.readouterr().err
