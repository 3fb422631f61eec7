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


# ---- exact plans (pieces, segments, finish) worked out from the texts -------------------------
def test_filler_cycles_through_every_word():
    from adev.emulator.planning import _filler
    # crc32("r") = 1812594589 = 12 x 151049549 + 1: word (1 + 7 i) mod 12 for i = 0..11 visits
    # all 12 words: 1 then, 8 it, 3 check, 10 fine, 5 next, 0 so, 7 and, 2 we, 9 is, 4 the, 11 ok,
    # 6 step
    assert _filler(12, "r") == " then it check fine next so and we is the ok step"
    assert _filler(0, "r") == "" and _filler(-3, "r") == ""


def test_plan_without_filler():
    p = build_output(TOK, PolicyReply(content="hello there", reasoning="so then"), None, "r")
    assert p.pieces == ["so", " then", "hello", " there", ""] and p.ends == [7, 18, 18]
    assert p.segments == [("reasoning", 0), ("content", 0), ("eos", 0)]
    assert p.finish_reason == "stop" and p.tool_calls == []


def test_filler_pads_to_the_target_before_the_content():
    # natural: "hello there" 2 + EOS = 3; target 8: 5 filler words as the reasoning
    p = build_output(TOK, PolicyReply(content="hello there", output_tokens=8), None, "r")
    assert p.pieces == [" then", " it", " check", " fine", " next", "hello", " there", ""]
    # " then it check fine next" is 24 characters, "hello there" 11 more
    assert p.ends == [24, 35, 35] and p.finish_reason == "stop"


def test_reasoning_filler_keeps_the_content_whole():
    # natural: "so" 1 + "hello there" 2 + EOS = 4; target 8: the line break after "so" is one
    # token, so 8 - 4 - 1 = 3 filler words, and the content is not cut
    p = build_output(TOK, PolicyReply(content="hello there", reasoning="so", output_tokens=8),
                     None, "r")
    assert p.pieces == ["so", "\n", " then", " it", " check", "hello", " there", ""]
    assert message_parts(p, 8) == ("so\n then it check", "hello there")
    assert p.segments == [("reasoning", 0), ("content", 0), ("eos", 0)]


def test_padded_reply_keeps_every_tool_call_whole():
    # reasoning, content and 8 calls padded to 400 tokens: the line breaks before each call's
    # head are counted, so the filler leaves the last call intact
    calls = [ToolCall("read_file", f'{{"path": "a{i}.py"}}') for i in range(8)]
    p = build_output(TOK, PolicyReply(reasoning="plan", content="ok", tool_calls=calls,
                                      output_tokens=400), None, "r")
    assert len(p.ids) == 400 and p.ids[-1] == IM_END and p.finish_reason == "tool_calls"
    assert [tc["function"]["arguments"] for tc in p.tool_calls] == [c.arguments for c in calls]
    assert text_of(p, 0, 399).endswith('\n<tool_call>\n{"name": "read_file", "arguments": '
                                       '{"path": "a7.py"}}\n</tool_call>')


TWO = [ToolCall("bash", '{"cmd": "ls"}'), ToolCall("read", "{}")]


def test_tool_calls_text_segments_and_objects():
    p = build_output(TOK, PolicyReply(tool_calls=TWO), None, "r")
    # no content: the first head starts the reply, the second follows a line break
    assert text_of(p, 0, len(p.ids)) == ('<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}'
                                         '\n</tool_call>\n<tool_call>\n{"name": "read", "arguments": '
                                         '{}}\n</tool_call>')
    assert p.segments == [("tool_head", 0), ("tool_args", 0), ("tool_tail", 0), ("tool_head", 1),
                          ("tool_args", 1), ("tool_tail", 1), ("eos", 0)]
    assert p.finish_reason == "tool_calls"
    for tc, c in zip(p.tool_calls, TWO, strict=True):
        assert tc["id"].startswith("chatcmpl-tool-") and len(tc["id"]) == 14 + 24
        int(tc["id"][14:], 16)
        assert {k: v for k, v in tc.items() if k != "id"} == {
            "type": "function", "function": {"name": c.name, "arguments": c.arguments}}


# The first call of TWO, tokenized as one string with what follows the head:
#   '<' 'tool' '_' 'call' '>' '\n' '{"' 'name' '":' ' "' 'bash' '",' ' "' 'argum' 'ents' '":'
#   ' {"' 'cmd' '":' ' "' 'ls' '"}' '}' '\n' '</' 'tool' '_' 'call' '>'
# 29 tokens; ' {"' holds the head's last character and the arguments' first two.
FIRST_CALL = 29


def test_max_tokens_keeps_only_the_calls_it_does_not_cut():
    p = build_output(TOK, PolicyReply(tool_calls=TWO), FIRST_CALL, "r")
    assert len(p.ids) == FIRST_CALL and [tc["function"]["name"] for tc in p.tool_calls] == ["bash"]
    assert p.finish_reason == "length"
    p = build_output(TOK, PolicyReply(tool_calls=TWO), FIRST_CALL - 1, "r")   # its tail's '>' cut
    assert p.tool_calls == [] and p.finish_reason == "length"
    # ignore_eos keeps "tool_calls" only while a call is complete
    p = build_output(TOK, PolicyReply(tool_calls=TWO), FIRST_CALL - 1, "r", ignore_eos=True)
    assert p.tool_calls == [] and p.finish_reason == "length"
    p = build_output(TOK, PolicyReply(tool_calls=TWO), FIRST_CALL, "r", ignore_eos=True)
    assert len(p.tool_calls) == 1 and p.finish_reason == "tool_calls"


def test_reasoning_only_empty_and_tiny_targets():
    p = build_output(TOK, PolicyReply(reasoning="so"), None, "r")
    assert p.pieces == ["so", ""] and message_parts(p, 2) == ("so", "")
    assert p.segments == [("reasoning", 0), ("eos", 0)]
    assert build_output(TOK, PolicyReply(content=""), None, "r").ids == [IM_END]
    # a target of 1: only the EOS; of 2: one token and the EOS
    assert build_output(TOK, PolicyReply(content="hello there", output_tokens=1), None, "r").ids == [IM_END]
    p = build_output(TOK, PolicyReply(content="hello there", output_tokens=2), None, "r")
    assert p.pieces == ["hello", ""] and p.ends == [5, 5]      # the cut text ends the segments
    # a target of 0 is no target; a target equal to the reply's length adds nothing
    assert build_output(TOK, PolicyReply(content="hello there", output_tokens=0), None,
                        "r").pieces == ["hello", " there", ""]
    assert build_output(TOK, PolicyReply(reasoning="so", content="hello there", output_tokens=4),
                        None, "r").pieces == ["so", "hello", " there", ""]
    # min_tokens 1 on an empty reply: EOS is token 2 at the earliest, after one filler word
    assert build_output(TOK, PolicyReply(content=""), None, "r", min_tokens=1).pieces == [" then", ""]
    p = build_output(TOK, PolicyReply(content="hello there"), 0, "r")         # max_tokens 0
    assert p.ids == [] and p.finish_reason == "length"


def test_min_tokens_raises_an_output_target():
    # target max(5, 7 + 1) = 8: 5 filler words; max(5, 2 + 1) = 5: 2 filler words
    p = build_output(TOK, PolicyReply(content="hello there", output_tokens=5), None, "r", min_tokens=7)
    assert len(p.ids) == 8 and p.ids[-1] == IM_END
    p = build_output(TOK, PolicyReply(content="hello there", output_tokens=5), None, "r", min_tokens=2)
    assert p.pieces == [" then", " it", "hello", " there", ""]


def test_token_ids_reply_exactly():
    ids = TOK.encode(" so then we") + [IM_END]
    p = build_output(TOK, PolicyReply(token_ids=ids), None, "r")
    assert p.pieces == [" so", " then", " we", ""]
    assert p.ends == [11, 11] and p.segments == [("content", 0), ("eos", 0)]
    assert p.tool_calls == [] and p.finish_reason == "stop"
    # a limit at or above the reply's length leaves it alone (no padding without ignore_eos)
    for limit in (4, 9):
        p = build_output(TOK, PolicyReply(token_ids=ids), limit, "r")
        assert p.ids == ids and p.finish_reason == "stop"
    # no EOS at the end: min_tokens 5 pads 2 filler ids (" then", " it"), no EOS added
    p = build_output(TOK, PolicyReply(token_ids=ids[:3]), None, "r", min_tokens=5)
    assert p.ids == ids[:3] + TOK.encode(" then it") and p.finish_reason == "length"
    assert p.ends == [19, 19]                                    # " so then we then it"
    # only an EOS, min_tokens 1: one filler id before it
    p = build_output(TOK, PolicyReply(token_ids=[IM_END]), None, "r", min_tokens=1)
    assert p.ids == TOK.encode(" then") + [IM_END] and p.ends == [5, 5]
    p = build_output(TOK, PolicyReply(token_ids=[]), None, "r")
    assert p.ids == [] and p.finish_reason == "length"


def test_deltas_of_reasoning_content_and_calls():
    from adev.emulator.planning import deltas
    p = build_output(TOK, PolicyReply(reasoning="so", content="ok", tool_calls=TWO), None, "r")
    n = len(p.ids)
    ids = [tc["id"] for tc in p.tool_calls]

    def start(j, name):
        return {"tool_calls": [{"index": j, "id": ids[j], "type": "function",
                                "function": {"name": name, "arguments": ""}}]}

    def args(j, text):
        return {"tool_calls": [{"index": j, "function": {"arguments": text}}]}
    # one delta per run of a segment: the heads open the calls, the arguments follow, the tails
    # and the EOS add nothing
    assert deltas(p, 0, n, set()) == [{"reasoning_content": "so"}, {"content": "ok"},
                                      start(0, "bash"), args(0, '{"cmd": "ls"}'),
                                      start(1, "read"), args(1, "{}")]
    # streamed in two ranges: a call is opened once (the second range starts inside the first
    # call's arguments: the token ' {"' ends the head and starts the arguments, whose delta is '{"')
    started: set[int] = set()
    k = 2 + 18     # so, ok, then '\n' and the call's 17 tokens to ' {"' (FIRST_CALL above)
    first, rest = deltas(p, 0, k, started), deltas(p, k, n, started)
    assert first[-1] == args(0, '{"') and rest[0] == args(0, 'cmd": "ls"}') and started == {0, 1}
    assert start(0, "bash") not in rest
    # a range that ends with the head opens the call before any argument streams
    assert deltas(p, 0, k - 1, set())[-1] == start(0, "bash")
    # a call cut off by max_tokens (the second: 2 tokens of its head kept) streams nothing
    n1 = 2 + 1 + FIRST_CALL + 2    # so, ok, '\n', the first call, '\n' '<'
    p = build_output(TOK, PolicyReply(reasoning="so", content="ok", tool_calls=TWO), n1, "r")
    ids = [tc["id"] for tc in p.tool_calls]
    assert len(ids) == 1 and deltas(p, 0, n1, set()) == [
        {"reasoning_content": "so"}, {"content": "ok"}, start(0, "bash"), args(0, '{"cmd": "ls"}')]


class MergingTok:
    """The tokenizer, except that the filler's first two words " then it" are one token (a
    tokenizer whose filler takes fewer tokens than words: the plan pads with " x")."""

    def encode_pieces(self, text):
        ids, pieces = TOK.encode_pieces(text)
        if pieces[:2] == [" then", " it"]:
            return [ids[0]] + ids[2:], [" then it"] + pieces[2:]
        return ids, pieces

    def encode(self, text):
        return self.encode_pieces(text)[0]

    def decode(self, ids):
        return TOK.decode(ids)


def test_filler_short_of_the_target_is_padded_with_x():
    x = TOK.encode(" x")[0]
    # target 8, natural 3: 5 filler words in 4 tokens, so one " x" before the EOS
    p = build_output(MergingTok(), PolicyReply(content="hello there", output_tokens=8), None, "r")
    assert p.pieces == [" then it", " check", " fine", " next", "hello", " there", " x", ""]
    assert p.ids[-2:] == [x, IM_END] and p.ends == [24, 35, 37, 37]
    assert p.segments == [("reasoning", 0), ("content", 0), ("reasoning", 0), ("eos", 0)]
    # recorded ids: min_tokens 3 before the EOS: 3 filler words in 2 ids, then one " x"
    p = build_output(MergingTok(), PolicyReply(token_ids=[IM_END]), None, "r", min_tokens=3)
    assert p.ids == TOK.encode(" then")[:1] + TOK.encode(" check") + [x, IM_END]


def test_a_reply_sent_back_renders_to_its_own_tokens():
    # The next request carries the reply as an assistant message; its rendering must start with
    # exactly the reply's tokens (EOS = <|im_end|> included), so the decode blocks the reply
    # filled are a prefix hit, as in vLLM. With the call's head and arguments tokenized apart,
    # ' ' and '{"' would be two tokens where the rendering has one, ' {"'.
    import json

    msgs = [{"role": "user", "content": "write a.py"}]
    prompt = TOK.apply_chat_template(msgs)
    write = ToolCall("write_file", json.dumps({"path": "a.py", "content": "def f():\n    return 1\n"}))
    for content, calls in (("I write it.", [write]), (None, [write, ToolCall("read", "{}")]),
                           ("Done.", [])):
        p = build_output(TOK, PolicyReply(content=content, tool_calls=calls), None, "r")
        back = TOK.apply_chat_template(msgs + [{"role": "assistant", "content": content,
                                                "tool_calls": p.tool_calls}], None, False)
        assert p.ids[-1] == IM_END and back[:len(prompt) + len(p.ids)] == prompt + p.ids
        assert back[len(prompt) + len(p.ids):] == TOK.encode("\n")
