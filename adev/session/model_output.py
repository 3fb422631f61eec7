"""Model output is untrusted: :func:`clean_text` makes its text safe to send back,
:func:`call_tool` runs one of its tool calls in the session's workspace (whatever the arguments
make a tool raise is answered to the model as an error), :func:`args_summary` describes a call for
its ``ToolEvent`` without its content."""
from __future__ import annotations

import json
from typing import Any, overload

from .tools import ToolOutcome, Workspace


@overload
def clean_text(s: str) -> str: ...
@overload
def clean_text(s: str | None) -> str | None: ...
def clean_text(s: str | None) -> str | None:
    """``s`` with any lone surrogate (model output may hold one, e.g. a ``\\ud800`` escape in
    a tool call's JSON) replaced by U+FFFD, so that the messages sent back stay valid UTF-8."""
    if not s:
        return s
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def call_tool(ws: Workspace, name: str, arguments: str, allowed: list[str]) -> ToolOutcome:
    """Run one tool call of the model. Model output is untrusted: whatever its arguments make a
    tool raise (JSON or a path nested past the recursion limit, a lone surrogate in a path, a
    name the file system refuses) is answered to the model as an error, never ends the
    session."""
    try:
        return ws.call(clean_text(name) or "", arguments, allowed=allowed)
    except RecursionError:
        why = ("arguments nested too deeply (JSON or a path deeper than this workspace "
               "handles); send a flat JSON object and a shorter path")
    except UnicodeError:
        why = ("arguments hold text that is not valid Unicode (a lone surrogate, e.g. "
               "\\ud800); paths and contents must be valid UTF-8")
    except (OSError, ValueError, TypeError, OverflowError) as e:
        why = f"the tool failed on these arguments: {type(e).__name__}: {clean_text(str(e))[:300]}"
    return ToolOutcome(False, f"error: {why}", error=why)


def args_summary(name: str, arguments: str, out: Any) -> str:
    """A short, content-free description of a tool call for ToolEvent (never file content)."""
    try:
        args = json.loads(arguments) if arguments else {}
    except (ValueError, TypeError):
        return f"<malformed JSON, {len(arguments)} chars>"
    except RecursionError:
        return f"<JSON nested too deeply, {len(arguments)} chars>"
    if not isinstance(args, dict):
        return f"<{type(args).__name__}>"
    path = args.get("path")
    parts = []
    if isinstance(path, str):
        parts.append(path[:160])
    if isinstance(args.get("content"), str):
        parts.append(f"{len(args['content'])} chars")
    if name == "finish" and isinstance(args.get("summary"), str):
        parts.append(f"summary {len(args['summary'])} chars")
    return " ".join(parts)[:200]
