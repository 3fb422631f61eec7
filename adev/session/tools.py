"""Workspace tools the roles call through real OpenAI tool calls.

Every path a model names is confined to the session's workspace: absolute paths, ``..``
components, NUL bytes, backslashes and any existing symlink on the way are refused. A file with
more than one hard link (its inode may lie outside the workspace: code run by a gate can link
one in) is not read. A write never goes through an existing file (hard link or not): the content
goes to a new file in the same folder, which then replaces the old name atomically. Files over
``max_file_bytes`` are refused in both directions, a write that would bring the workspace's
regular files over ``max_total_bytes`` in all is refused, listings are capped at
``max_list_entries``. Model output is untrusted: malformed JSON arguments,
missing or mistyped arguments, unknown tools and tools the role may not use all come back as a
:class:`ToolOutcome` with ``ok=False`` whose text is answered to the model as the tool's result.
Nothing here raises on bad model input.
"""
from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Callable

# OpenAI tool schemas, by tool name. Roles pick a subset (roles/*.md front matter ``tools``).
def _tool(name: str, description: str, required: list[str], **params: str) -> dict[str, Any]:
    """An OpenAI function-tool schema whose parameters are all strings (``params``: name -> doc)."""
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": {
            k: {"type": "string", "description": v} for k, v in params.items()},
            "required": required}}}


SCHEMAS: dict[str, dict[str, Any]] = {t["function"]["name"]: t for t in (
    _tool("write_file", "Create or overwrite a UTF-8 text file in the workspace. Parent "
                        "folders are created. Paths are relative to the workspace root.",
          ["path", "content"], path="relative path, e.g. pkg/mod.py",
          content="the whole new file content"),
    _tool("read_file", "Read a UTF-8 text file from the workspace.", ["path"],
          path="relative path"),
    _tool("list_files", "List files (recursively, with sizes in bytes) under a workspace "
                        "folder.", [], path="relative folder; default '.'"),
    _tool("finish", "End your turn with a short report for the next role.", ["summary"],
          summary="what you did and what is left"),
)}


@dataclass
class ToolOutcome:
    ok: bool
    text: str  # answered to the model as the tool message content
    error: str | None = None
    bytes_out: int = 0
    finished: bool = False  # the role ended its turn (finish)
    summary: str = ""  # finish's summary, or a short description for records


class ToolError(Exception):
    pass


class Workspace:
    """A session's workspace folder and the tools that act on it."""

    def __init__(self, root: str | Path, *, max_file_bytes: int = 256 * 1024,
                 max_list_entries: int = 500, max_total_bytes: int = 32 << 20):
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_file_bytes = max_file_bytes
        self.max_total_bytes = max_total_bytes
        self.max_list_entries = max_list_entries
        self._tools: dict[str, Callable[[dict[str, Any]], ToolOutcome]] = {
            "write_file": self._write_file, "read_file": self._read_file,
            "list_files": self._list_files, "finish": self._finish}

    # ---- confinement ------------------------------------------------------------------
    def resolve(self, path: Any, *, allow_root: bool = False) -> Path:
        """The host path for a model-given relative path, or ToolError saying why not."""
        if not isinstance(path, str):
            raise ToolError(f"path must be a string, got {type(path).__name__}")
        if "\x00" in path or "\\" in path:
            raise ToolError(f"path {path!r} holds a NUL byte or backslash")
        p = PurePosixPath(path.strip() or ".")
        if p.is_absolute():
            raise ToolError(f"path {path!r} is absolute; use a path relative to the workspace")
        if ".." in p.parts:
            raise ToolError(f"path {path!r} leaves the workspace ('..' is not allowed)")
        parts = [x for x in p.parts if x not in ("", ".")]
        if not parts and not allow_root:
            raise ToolError("path names the workspace root, not a file")
        cur = self.root
        for part in parts:
            cur = cur / part
            try:
                st = os.lstat(cur)
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(st.st_mode):
                raise ToolError(f"path {path!r} goes through a symlink; not allowed")
        if not str(cur).startswith(str(self.root)):
            raise ToolError(f"path {path!r} leaves the workspace")
        return cur

    def rel(self, p: Path) -> str:
        return p.relative_to(self.root).as_posix()

    # ---- dispatch ---------------------------------------------------------------------
    def call(self, name: str, arguments: str, allowed: list[str] | None = None) -> ToolOutcome:
        """Run tool ``name`` with raw JSON ``arguments``; every failure is a ToolOutcome."""
        fn = self._tools.get(name)
        if fn is None:
            known = sorted(self._tools if allowed is None else allowed)
            return _err(f"unknown tool {name!r}; available tools: {', '.join(known)}")
        if allowed is not None and name not in allowed:
            return _err(f"tool {name!r} is not available to this role; available: "
                        f"{', '.join(sorted(allowed))}")
        try:
            args = json.loads(arguments) if arguments and arguments.strip() else {}
        except (ValueError, TypeError) as e:
            return _err(f"arguments are not valid JSON ({e}); send a JSON object such as "
                        + _example(name))
        if not isinstance(args, dict):
            return _err(f"arguments must be a JSON object, got {type(args).__name__}; e.g. "
                        + _example(name))
        try:
            return fn(args)
        except ToolError as e:
            return _err(str(e))
        except OSError as e:
            return _err(f"{type(e).__name__}: {e.strerror or e}")

    # ---- tools ------------------------------------------------------------------------
    def _write_file(self, args: dict[str, Any]) -> ToolOutcome:
        _require(args, "write_file", path=str, content=str)
        data = args["content"].encode("utf-8", "surrogatepass")
        if len(data) > self.max_file_bytes:
            raise ToolError(f"content is {len(data)} bytes; the limit is {self.max_file_bytes}")
        p = self.resolve(args["path"])
        # create parents one by one, refusing symlinks (resolve() checked existing ones)
        p.parent.mkdir(parents=True, exist_ok=True)
        old = _lstat(p)
        if old is not None:
            if not stat.S_ISREG(old.st_mode):
                raise ToolError(f"{args['path']!r} exists and is not a regular file")
        total = self.total_bytes() - (old.st_size if old is not None else 0) + len(data)
        if total > self.max_total_bytes:
            raise ToolError(f"workspace full: this write would bring its files to {total} bytes; "
                            f"the limit is {self.max_total_bytes} bytes in all. Shorten or empty "
                            "files you no longer need")
        tmp = p.parent / f".adev-write-{os.getpid()}-{os.urandom(4).hex()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, p)  # a new inode under the old name; nothing written through
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return ToolOutcome(True, f"wrote {len(data)} bytes to {self.rel(p)}",
                           summary=f"{self.rel(p)} ({len(data)} B)")

    def _read_file(self, args: dict[str, Any]) -> ToolOutcome:
        _require(args, "read_file", path=str)
        p = self.resolve(args["path"])
        if not p.exists():
            raise ToolError(f"no such file: {args['path']!r}")
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            st = os.fstat(fd)  # the inode actually opened, not the name checked before
            if not stat.S_ISREG(st.st_mode):
                raise ToolError(f"{args['path']!r} is not a regular file")
            _check_links(args["path"], st)
            if st.st_size > self.max_file_bytes:
                raise ToolError(f"{args['path']!r} is {st.st_size} bytes; the limit is "
                                f"{self.max_file_bytes}")
        except BaseException:
            os.close(fd)
            raise
        with os.fdopen(fd, "rb") as fh:
            raw = fh.read(self.max_file_bytes + 1)
        text = raw.decode("utf-8", "replace")
        return ToolOutcome(True, text, bytes_out=len(raw), summary=self.rel(p))

    def _list_files(self, args: dict[str, Any]) -> ToolOutcome:
        path = args.get("path", ".")
        if path is None:
            path = "."
        base = self.resolve(path, allow_root=True)
        if not base.exists():
            raise ToolError(f"no such folder: {path!r}")
        if not base.is_dir():
            raise ToolError(f"{path!r} is not a folder")
        lines: list[str] = []
        truncated = False
        for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
            dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", ".pytest_cache"))
            for f in sorted(filenames):
                fp = Path(dirpath) / f
                try:
                    st = os.lstat(fp)
                except OSError:
                    continue
                if not stat.S_ISREG(st.st_mode):
                    continue
                if len(lines) >= self.max_list_entries:
                    truncated = True
                    break
                lines.append(f"{self.rel(fp)}\t{st.st_size}")
            if truncated:
                break
        text = "\n".join(lines) if lines else "(no files)"
        if truncated:
            text += f"\n... listing truncated at {self.max_list_entries} entries"
        return ToolOutcome(True, text, bytes_out=len(text), summary=f"{len(lines)} files")

    def _finish(self, args: dict[str, Any]) -> ToolOutcome:
        summary = args.get("summary", "")
        if not isinstance(summary, str):
            raise ToolError("summary must be a string")
        return ToolOutcome(True, "ok", finished=True, summary=summary[:4000])

    # ---- helpers for the loop ---------------------------------------------------------
    def total_bytes(self) -> int:
        """Bytes in the workspace's regular files (what ``max_total_bytes`` caps)."""
        return sum(self.files(skip_caches=False).values())

    def files(self, skip_caches: bool = True) -> dict[str, int]:
        """Regular files in the workspace -> size (for summaries and tests)."""
        out: dict[str, int] = {}
        for dirpath, dirnames, filenames in os.walk(self.root, followlinks=False):
            if skip_caches:
                dirnames[:] = [d for d in dirnames if d not in ("__pycache__", ".pytest_cache")]
            for f in filenames:
                fp = Path(dirpath) / f
                st = os.lstat(fp)
                if stat.S_ISREG(st.st_mode):
                    out[self.rel(fp)] = st.st_size
        return out


def schemas(names: list[str]) -> list[dict[str, Any]]:
    """The OpenAI ``tools`` list for these tool names (unknown names -> KeyError)."""
    return [SCHEMAS[n] for n in names]


def _lstat(p: Path) -> os.stat_result | None:
    try:
        return os.lstat(p)
    except FileNotFoundError:
        return None


def _check_links(path: str, st: os.stat_result) -> None:
    if st.st_nlink > 1:
        raise ToolError(f"{path!r} is a hard link ({st.st_nlink} names for one file, which may "
                        "lie outside the workspace); not read")


def _err(msg: str) -> ToolOutcome:
    return ToolOutcome(False, f"error: {msg}", error=msg)


def _example(name: str) -> str:
    return {"write_file": '{"path": "pkg/mod.py", "content": "..."}',
            "read_file": '{"path": "pkg/mod.py"}', "list_files": '{"path": "."}',
            "finish": '{"summary": "..."}'}.get(name, "{}")


def _require(args: dict[str, Any], tool: str, **types: type) -> None:
    for k, t in types.items():
        if k not in args:
            raise ToolError(f"{tool}: missing argument {k!r}; e.g. {_example(tool)}")
        if not isinstance(args[k], t):
            raise ToolError(f"{tool}: argument {k!r} must be a {t.__name__}, got "
                            f"{type(args[k]).__name__}")
