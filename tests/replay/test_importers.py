"""Importers: Mooncake (sessions from shared prefixes, worked by hand), adev runs, OpenAI
messages, ShareGPT; every bad input names its line (or item) and field."""
from __future__ import annotations

import json

import orjson
import pytest

from adev.analysis.ledger import LedgerWriter, block_keys
from adev.emulator.tokenizer import Tokenizer
from adev.records import CallRecord, RunDir
from adev.replay.format import TraceError, prompt_ids, read_trace, write_trace
from adev.replay.importers import import_adev_run, import_mooncake, import_openai, import_sharegpt


def _jsonl(tmp_path, rows, name="in.jsonl"):
    p = tmp_path / name
    p.write_bytes(b"\n".join(orjson.dumps(r) for r in rows) + b"\n")
    return p


MOONCAKE = [
    {"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [0, 1]},
    {"timestamp": 100, "input_length": 600, "output_length": 5, "hash_ids": [0, 2]},
    {"timestamp": 200, "input_length": 1600, "output_length": 7, "hash_ids": [0, 1, 3, 4]},
    {"timestamp": 300, "input_length": 1100, "output_length": 3, "hash_ids": [0, 2, 5]},
    {"timestamp": 400, "input_length": 2000, "output_length": 9, "hash_ids": [0, 1, 3, 9]},
    {"timestamp": 500, "input_length": 100, "output_length": 1, "hash_ids": [0]},
]


def test_mooncake_sessions_by_hand(tmp_path):
    t = import_mooncake(_jsonl(tmp_path, MOONCAKE))
    got = [(c.session, c.turn) for c in t.calls]
    # 0: new; 1: shares only block 0 (the common first block) -> new; 2: extends call 0;
    # 3: extends call 1 (its blocks [0, 2], the last partial); 4: extends call 2 through its
    # complete blocks [0, 1, 3] (call 2's last block is partial); 5: one block only -> new
    assert got == [("s00000", 0), ("s00001", 0), ("s00000", 1), ("s00001", 1), ("s00000", 2),
                   ("s00002", 0)]
    assert [c.t for c in t.calls] == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
    assert t.block_tokens == 512 and t.calls[2].output_tokens == 7
    # the shared block yields the same 512 tokens in both sessions
    a, b = prompt_ids(t, t.calls[0]), prompt_ids(t, t.calls[2])
    assert len(b) == 1600 and (a == b[:1024]).all()


def test_mooncake_conversation_trace_imports(tmp_path):
    from pathlib import Path
    p = Path("/work/shared/traces/mooncake_conversation_trace.jsonl")
    if not p.exists():
        pytest.skip("the shared Mooncake trace is not on this machine")
    t = import_mooncake(p)
    assert len(t.calls) == 12031
    assert sum(c.prompt_tokens for c in t.calls) / len(t.calls) == pytest.approx(12035, abs=1)
    u = read_trace(write_trace(t, tmp_path / "mc.jsonl"))
    assert len(u.sessions()) == len(t.sessions())


@pytest.mark.parametrize("bad, msg", [
    ({"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [0]},
     r"in\.jsonl:2: field 'hash_ids': 1 ids for input_length 1024; expected"),
    ({"timestamp": 0, "input_length": 10, "hash_ids": [0]}, r":2: field 'output_length'"),
    ({"timestamp": -5, "input_length": 10, "output_length": 1, "hash_ids": [0]},
     r":2: field 'timestamp'"),
    ({"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": []},
     r":2: field 'hash_ids'"),
])
def test_mooncake_bad_line(tmp_path, bad, msg):
    with pytest.raises(TraceError, match=msg):
        import_mooncake(_jsonl(tmp_path, [MOONCAKE[0], bad]))


def test_mooncake_not_json(tmp_path):
    p = tmp_path / "in.jsonl"
    p.write_text(json.dumps(MOONCAKE[0]) + "\n{oops\n")
    with pytest.raises(TraceError, match=r"in\.jsonl:2: not JSON"):
        import_mooncake(p)


CONV = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Write a haiku about caches"},
        {"role": "assistant", "content": "Blocks kept warm in RAM"}]


def test_openai_each_assistant_message_is_a_call(tmp_path):
    t = import_openai(_jsonl(tmp_path, [{"id": "x", "messages": CONV}]), block_tokens=8)
    tok = Tokenizer()
    assert [(c.session, c.turn) for c in t.calls] == [("x", 0), ("x", 1)]
    for c, k in zip(t.calls, (2, 4), strict=True):
        want = tok.apply_chat_template(CONV[:k], None, True)
        assert prompt_ids(t, c).tolist() == want
        assert c.prompt_tokens == len(want)
        assert c.blocks == block_keys(want, 8).tolist()
        assert c.output == CONV[k]["content"]
        assert c.output_tokens == len(tok.encode(CONV[k]["content"])) + 1
    # the second prompt holds the recorded first answer: its first blocks are the first's
    assert t.calls[1].blocks[:len(t.calls[0].blocks)] == t.calls[0].blocks


def test_openai_bad_role_names_line_and_field(tmp_path):
    bad = [CONV[0], {"role": "robot", "content": "x"}, CONV[2]]
    with pytest.raises(TraceError, match=r"in\.jsonl:2: field 'messages\[1\]\.role': 'robot' "
                                         r"is not allowed; allowed values"):
        import_openai(_jsonl(tmp_path, [{"messages": CONV}, {"messages": bad}]))


def test_sharegpt_json_array_and_bad_item(tmp_path):
    conv = [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"},
            {"from": "human", "value": "Bye"}, {"from": "gpt", "value": "Bye!"}]
    p = tmp_path / "sg.json"
    p.write_text(json.dumps([{"id": "c1", "conversations": conv}]))
    t = import_sharegpt(p, block_tokens=8)
    assert [(c.session, c.turn, c.output) for c in t.calls] == [("c1", 0, "Hello"),
                                                                 ("c1", 1, "Bye!")]
    p.write_text(json.dumps([{"id": "c1", "conversations": conv},
                             {"id": "c2", "conversations": [{"from": "bot", "value": "x"}]}]))
    with pytest.raises(TraceError, match=r"sg\.json: item 1: field 'conversations\[0\]\.from': "
                                         r"'bot' is not allowed"):
        import_sharegpt(p)
    # a "from" that is no string (a list is not even hashable) is named the same way
    p.write_text(json.dumps([{"id": "c1", "conversations": [{"from": ["gpt"], "value": "x"}]}]))
    with pytest.raises(TraceError, match=r"sg\.json: item 0: field 'conversations\[0\]\.from': "
                                         r"\['gpt'\] is not allowed"):
        import_sharegpt(p)


def test_adev_run_export(tmp_path):
    rd = RunDir.create("r1", base=tmp_path)
    led = LedgerWriter(rd, block_size=16)
    p0 = list(range(40))            # 2 full blocks + 8 tokens
    p1 = p0 + list(range(100, 130))  # 4 full blocks + 6 tokens
    led.add(10.0, "s1", "c0", p0)
    led.add(25.0, "s1", "c1", p1)
    led.add(12.0, "s2", "c0", list(range(500, 520)))  # no OK record: left out
    led.close()
    rd.append(CallRecord(run_id="r1", session_id="s1", call_id="c0", endpoint="e",
                         completion_tokens=7))
    rd.append(CallRecord(run_id="r1", session_id="s1", call_id="c1", endpoint="e",
                         completion_tokens=9))
    rd.append(CallRecord(run_id="r1", session_id="s2", call_id="c0", endpoint="e",
                         status="error", completion_tokens=None))
    rd.close()
    t = import_adev_run(rd.path)
    assert t.block_tokens == 16 and t.source["skipped_calls"] == 1
    assert [(c.session, c.turn, c.t, c.prompt_tokens, c.output_tokens) for c in t.calls] == [
        ("s1", 0, 0.0, 40, 7), ("s1", 1, 15.0, 70, 9)]
    assert t.calls[0].blocks == block_keys(p0, 16).tolist()
    assert t.calls[1].blocks == block_keys(p1, 16).tolist()
    assert t.calls[1].blocks[:2] == t.calls[0].blocks


def test_adev_run_export_errors(tmp_path):
    with pytest.raises(TraceError, match="not a run directory"):
        import_adev_run(tmp_path)
    rd = RunDir.create("r2", base=tmp_path)
    rd.append(CallRecord(run_id="r2", session_id="s", call_id="c", endpoint="e"))
    rd.close()
    with pytest.raises(TraceError, match="without a reuse ledger"):
        import_adev_run(rd.path)
    led = LedgerWriter(rd, block_size=16)
    led.add(1.0, "s", "c", list(range(20)))
    led.close()
    with pytest.raises(TraceError, match=r"calls\.jsonl:1: field 'completion_tokens'"):
        import_adev_run(rd.path)
