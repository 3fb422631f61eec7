"""A deterministic, fast tokenizer and a Qwen3-style chat template for the emulated endpoint.

The emulator needs token *counts* and stable token *ids* (block hashes, ``return_token_ids``), not a
real vocabulary. Text is split by a GPT-style regex into pieces of at most a few characters (about
4 characters per token on English/code, like BPE tokenizers); each piece maps to an id by a stable
hash (crc32, the same in every process and run) into ``[0, 151643)``; the Qwen special tokens keep
their real ids. The pieces partition the text exactly, so ``"".join(pieces) == text`` (streamed
deltas concatenate to the exact content and tool-call arguments).

The chat template follows Qwen3's: an optional system turn that also carries the tool signatures
(``# Tools ... <tools></tools>``), ``<|im_start|>role\\n ... <|im_end|>\\n`` turns, assistant tool
calls as ``<tool_call>{json}</tool_call>``, consecutive tool results merged into one user turn of
``<tool_response>`` blocks, and ``<|im_start|>assistant\\n`` as the generation prompt.

Contexts grow by appending messages, so each rendered message is tokenized once and cached
(bounded LRU keyed by the message's content); a prompt whose messages were all seen before costs a
list concatenation.
"""
from __future__ import annotations

import json
import re
import zlib
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, cast

import orjson

ENDOFTEXT = 151643
IM_START = 151644
IM_END = 151645
SPECIALS = {"<|endoftext|>": ENDOFTEXT, "<|im_start|>": IM_START, "<|im_end|>": IM_END}
NUM_PLAIN = 151643  # plain-piece ids live in [0, NUM_PLAIN)

_PIECE = re.compile(
    r" ?[A-Za-z]{1,5}"        # words, split every 5 letters
    r"| ?[0-9]{1,3}"          # numbers, 3 digits per token
    r"| ?[^\sA-Za-z0-9]{1,2}"  # punctuation / other scripts, 2 per token
    r"|\n+|[ \t]+(?=\S)|\s"   # newlines, indentation runs, any other whitespace
)


class Tokenizer:
    """Deterministic tokenizer; ids are stable across processes (crc32, not Python's hash)."""

    def __init__(self, cache_messages: int = 65536) -> None:
        self._ids: dict[str, int] = {}
        self._msg_cache: OrderedDict[Any, list[int]] = OrderedDict()
        self._msg_cache_max = cache_messages

    # ---------------------------------------------------------------------------- plain text
    def _id(self, piece: str) -> int:
        i = self._ids.get(piece)
        if i is None:
            i = zlib.crc32(piece.encode("utf-8", "surrogatepass")) % NUM_PLAIN
            self._ids[piece] = i
        return i

    def pieces(self, text: str) -> list[str]:
        """Split ``text`` into token pieces; their concatenation is ``text``."""
        return _PIECE.findall(text)

    def encode(self, text: str) -> list[int]:
        """Token ids of plain text (special-token strings are *not* parsed here)."""
        pieces = _PIECE.findall(text)
        ids = self._ids
        out = list(map(ids.get, pieces))
        if None in out:
            crc = zlib.crc32
            for j, i in enumerate(out):
                if i is None:
                    p = pieces[j]
                    i = ids[p] = crc(p.encode("utf-8", "surrogatepass")) % NUM_PLAIN
                    out[j] = i
        return cast(list[int], out)  # every None was just filled in

    def encode_pieces(self, text: str) -> tuple[list[int], list[str]]:
        ps = _PIECE.findall(text)
        return self.encode_list(ps), ps

    def encode_list(self, pieces: list[str]) -> list[int]:
        return [self._id(p) for p in pieces]

    def encode_with_specials(self, text: str) -> list[int]:
        """Token ids of a prompt string that may contain ``<|im_start|>`` etc."""
        out: list[int] = []
        for part in re.split(r"(<\|im_start\|>|<\|im_end\|>|<\|endoftext\|>)", text):
            if part in SPECIALS:
                out.append(SPECIALS[part])
            elif part:
                out.extend(self.encode(part))
        return out

    def decode(self, ids: list[int]) -> str:
        """Best effort: pieces seen by this process (ids of unseen pieces decode to ''); the reverse
        map is rebuilt only when pieces were added since the last call (detokenize is rare)."""
        if getattr(self, "_rev_n", -1) != len(self._ids):
            rev = {v: k for k, v in SPECIALS.items()}
            for k, v in self._ids.items():
                rev.setdefault(v, k)
            self._rev, self._rev_n = rev, len(self._ids)
        return "".join(self._rev.get(int(i), "") for i in ids)

    # ---------------------------------------------------------------------------- chat template
    def _cached(self, key: Any, render: Callable[..., list[int]], *args: Any) -> list[int]:
        """``render(*args)``, memoised under ``key`` (an LRU of ``_msg_cache_max`` rendered turns)."""
        c = self._msg_cache
        hit = c.get(key)
        if hit is not None:
            c.move_to_end(key)
            return hit
        toks = render(*args)
        c[key] = toks
        if len(c) > self._msg_cache_max:
            c.popitem(last=False)
        return toks

    def apply_chat_template(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                            add_generation_prompt: bool = True) -> list[int]:
        """Token ids of the Qwen3-style rendering of ``messages`` (+ tools in the system turn)."""
        out: list[int] = []
        msgs = list(messages)
        first_system = bool(msgs) and msgs[0].get("role") == "system"
        if tools or first_system:
            sys_text = _content_text(msgs[0].get("content")) if first_system else ""
            tools_key = _key(tools) if tools else b""
            out.extend(self._cached(("sys", sys_text, tools_key), self._render_system, sys_text, tools))
            if first_system:
                msgs = msgs[1:]
        n = len(msgs)
        for i, m in enumerate(msgs):
            role = m.get("role")
            if role == "tool":
                prev_tool = i > 0 and msgs[i - 1].get("role") == "tool"
                next_tool = i + 1 < n and msgs[i + 1].get("role") == "tool"
                content = _content_text(m.get("content"))
                out.extend(self._cached(("tool", content, prev_tool, next_tool),
                                        self._render_tool, content, prev_tool, next_tool))
            elif role == "assistant":
                content = _content_text(m.get("content"))
                calls = m.get("tool_calls") or []
                ck = _key(calls) if calls else b""
                out.extend(self._cached(("assistant", content, ck), self._render_assistant, content, calls))
            else:
                content = _content_text(m.get("content"))
                r = str(role or "user")
                out.extend(self._cached((r, content), self._render_plain, r, content))
        if add_generation_prompt:
            out.extend(self._cached(("genprompt",), self._render_generation_prompt))
        return out

    def _render_plain(self, role: str, content: str) -> list[int]:
        return [IM_START] + self.encode(f"{role}\n{content}") + [IM_END] + self.encode("\n")

    def _render_generation_prompt(self) -> list[int]:
        return [IM_START] + self.encode("assistant\n")

    def _render_system(self, sys_text: str, tools: list[dict[str, Any]] | None) -> list[int]:
        text = sys_text
        if tools:
            lines = [json.dumps(t if "function" in t else {"type": "function", "function": t},
                                ensure_ascii=False) for t in tools]
            text = ((sys_text + "\n\n") if sys_text else "") + (
                "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
                + "\n".join(lines) + "\n</tools>\n\nFor each function call, return a json object with "
                "function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
                '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')
        return [IM_START] + self.encode("system\n" + text) + [IM_END] + self.encode("\n")

    def _render_tool(self, content: str, prev_tool: bool, next_tool: bool) -> list[int]:
        out = [] if prev_tool else [IM_START] + self.encode("user")
        out += self.encode(f"\n<tool_response>\n{content}\n</tool_response>")
        if not next_tool:
            out += [IM_END] + self.encode("\n")
        return out

    def render_tool_call(self, name: str, arguments: str) -> str:
        """The text of one tool call as the model writes it (Qwen3 ``<tool_call>`` block)."""
        return f'<tool_call>\n{{"name": {json.dumps(name)}, "arguments": {arguments}}}\n</tool_call>'

    def _render_assistant(self, content: str, calls: list[dict[str, Any]]) -> list[int]:
        text = "assistant\n" + content
        for j, c in enumerate(calls):
            fn = c.get("function", c)
            args = fn.get("arguments", "{}")
            if not isinstance(args, str):
                args = json.dumps(args, ensure_ascii=False)
            text += ("\n" if (j or content) else "") + self.render_tool_call(str(fn.get("name", "")), args)
        return [IM_START] + self.encode(text) + [IM_END] + self.encode("\n")


def _key(obj: Any) -> bytes:
    """A cache key for JSON-like ``obj`` (tool schemas, tool calls with their arguments): its
    canonical JSON. orjson, not ``json.dumps``: a conversation's assistant turns carry whole
    files as write_file arguments and every request re-keys all of them."""
    try:
        return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # not JSON-serialisable as is (e.g. a non-str dict key)
        return json.dumps(obj, sort_keys=True, default=str).encode()


def _content_text(content: Any) -> str:
    """OpenAI content: a string, None, or a list of parts ({type: text, text})."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)
