"""Output planning under the request's limits: exact lengths worked out by hand."""
from __future__ import annotations

from adev.emulator.planning import build_output, message_parts, text_of
from adev.emulator.policies.base import PolicyReply, ToolCall
from adev.emulator.tokenizer import IM_END, Tokenizer

TOK = Tokenizer()


def test_natural_length_and_eos():
    # "hello there" = 2 pieces, + EOS
    p = build_output(TOK, PolicyReply(content="hello there"), None, "r")
    assert len(p.ids) == 3 and p.ids[-1] == IM_END and p.finish_reason == "stop"
    assert message_parts(p, 3) == ("", "hello there") and text_of(p, 0, 3) == "hello there"


def test_ignore_eos_pads_to_exactly_max_tokens():
    p = build_output(TOK, PolicyReply(content="hello there"), 700, "r", ignore_eos=True)
    assert len(p.ids) == 700 and IM_END not in p.ids and p.finish_reason == "length"
    reasoning, content = message_parts(p, 700)
    assert content == "hello there" and reasoning        # padding is reasoning, content intact
    # a reply longer than the limit is cut there
    p = build_output(TOK, PolicyReply(content="a b c d e f"), 4, "r", ignore_eos=True)
    assert len(p.ids) == 4 and p.finish_reason == "length"


def test_ignore_eos_keeps_complete_tool_calls():
    reply = PolicyReply(content="ok", tool_calls=[ToolCall("bash", '{"cmd": "ls"}')])
    p = build_output(TOK, reply, 200, "r", ignore_eos=True)
    assert len(p.ids) == 200 and p.finish_reason == "tool_calls" and len(p.tool_calls) == 1


def test_min_tokens_moves_eos_to_position_min_plus_one():
    p = build_output(TOK, PolicyReply(content="hello there"), None, "r", min_tokens=10)
    assert len(p.ids) == 11 and p.ids[-1] == IM_END and IM_END not in p.ids[:-1]
    # already longer: unchanged
    assert len(build_output(TOK, PolicyReply(content="hello there"), None, "r", min_tokens=2).ids) == 3


def test_token_ids_reply():
    ids = [100, 101, 102, IM_END]
    p = build_output(TOK, PolicyReply(token_ids=ids), None, "r")
    assert p.ids == ids and p.finish_reason == "stop"
    p = build_output(TOK, PolicyReply(token_ids=ids), 2, "r")
    assert p.ids == [100, 101] and p.finish_reason == "length"
    # ignore_eos: the EOS is an ordinary token and the reply is padded to max_tokens
    p = build_output(TOK, PolicyReply(token_ids=ids), 9, "r", ignore_eos=True)
    assert p.ids[:4] == ids and len(p.ids) == 9 and p.finish_reason == "length"
    # min_tokens: padding goes before the EOS
    p = build_output(TOK, PolicyReply(token_ids=ids), None, "r", min_tokens=6)
    assert p.ids[:3] == [100, 101, 102] and len(p.ids) == 7 and p.ids[-1] == IM_END
