"""The trace format: round trip, synthetic content, prompt assembly, errors naming line/field."""
from __future__ import annotations

import numpy as np
import orjson
import pytest

from adev.replay.format import (
    NUM_PLAIN,
    Call,
    Trace,
    TraceError,
    filler,
    prompt_ids,
    read_trace,
    synth_block,
    synth_blocks,
    write_trace,
)


def test_synth_block_is_deterministic_and_distinct():
    a, b = synth_block(7, 512), synth_block(7, 512)
    assert (a == b).all() and len(a) == 512
    assert (a >= 0).all() and (a < NUM_PLAIN).all()
    assert (synth_block(8, 512) != a).mean() > 0.99
    # a shorter block is the prefix of the longer one (partial last blocks)
    assert (synth_block(7, 100) == a[:100]).all()
    assert (synth_blocks([7, 8], 512) == np.concatenate([a, synth_block(8, 512)])).all()


def test_prompt_ids_blocks_tail_cut_and_filler():
    t = Trace(block_tokens=4, calls=[], contents={5: [1, 2, 3, 4]})
    # explicit block 5, synthetic block 9, a tail of 2 tokens: 4 + 4 + 2 = 10 tokens
    c = Call("s", 0, prompt_tokens=10, output_tokens=1, blocks=[5, 9], tail=[11, 12])
    ids = prompt_ids(t, c)
    assert ids.tolist() == [1, 2, 3, 4] + synth_block(9, 4).tolist() + [11, 12]
    # cut: a partial last block
    c2 = Call("s", 1, prompt_tokens=6, output_tokens=1, blocks=[5, 9])
    assert prompt_ids(t, c2).tolist() == [1, 2, 3, 4] + synth_block(9, 4).tolist()[:2]
    # longer than blocks + tail: filler from (session, turn)
    c3 = Call("s", 2, prompt_tokens=7, output_tokens=1, blocks=[5])
    assert prompt_ids(t, c3).tolist() == [1, 2, 3, 4] + filler("s", 2, 3).tolist()
    assert (filler("s", 2, 3) != filler("s", 3, 3)).any()


def test_round_trip(tmp_path):
    t = Trace(block_tokens=4, source={"kind": "test"}, contents={5: [1, 2, 3, 4]}, calls=[
        Call("a", 0, 6, 3, blocks=[5], tail=[9, 9], t=0.0, output="hi"),
        Call("a", 1, 9, 2, blocks=[5, 77], t=1.5),
        Call("b", 0, 4, 1, blocks=[2**64 - 1])])
    p = write_trace(t, tmp_path / "t.jsonl")
    u = read_trace(p)
    assert u.block_tokens == 4 and u.source == {"kind": "test"}
    assert u.contents == {5: [1, 2, 3, 4]}
    assert u.calls == t.calls
    assert list(u.sessions()) == ["a", "b"]
    # the block line comes once, before its first use
    lines = p.read_bytes().splitlines()
    assert sum(b'"block":5' in ln for ln in lines) == 1


def _write(tmp_path, rows):
    p = tmp_path / "t.jsonl"
    p.write_bytes(b"\n".join(orjson.dumps(r) for r in rows) + b"\n")
    return p


HEADER = {"format": "adev-trace", "version": 1, "block_tokens": 16}


@pytest.mark.parametrize("row, field", [
    ({"session": "a", "turn": 0, "prompt_tokens": -1, "output_tokens": 1}, "prompt_tokens"),
    ({"session": "a", "turn": 0, "prompt_tokens": 5}, "output_tokens"),
    ({"session": "", "turn": 0, "prompt_tokens": 5, "output_tokens": 1}, "session"),
    ({"session": "a", "turn": 0, "prompt_tokens": 5, "output_tokens": 1, "blocks": [1, -2]},
     "blocks"),
    ({"session": "a", "turn": 0, "prompt_tokens": 5, "output_tokens": 1, "t": "x"}, "t"),
])
def test_bad_line_names_line_and_field(tmp_path, row, field):
    p = _write(tmp_path, [HEADER, {"session": "z", "turn": 0, "prompt_tokens": 1,
                                   "output_tokens": 1}, row])
    with pytest.raises(TraceError, match=rf"t\.jsonl:3: field '{field}'"):
        read_trace(p)


def test_turns_must_increase_and_header_checked(tmp_path):
    c = {"session": "a", "turn": 1, "prompt_tokens": 1, "output_tokens": 1}
    with pytest.raises(TraceError, match=r":3: field 'turn': 1 does not follow turn 1"):
        read_trace(_write(tmp_path, [HEADER, c, c]))
    with pytest.raises(TraceError, match=r":1: field 'version'.*allowed values: 1"):
        read_trace(_write(tmp_path, [{**HEADER, "version": 9}]))
    with pytest.raises(TraceError, match=r":1: field 'format'"):
        read_trace(_write(tmp_path, [{"timestamp": 0}]))
