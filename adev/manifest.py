"""Run manifests: what produced a run (config, package versions, git commit, host, seeds).

Secrets never land here: any key whose name contains ``key``, ``token``, ``secret`` or
``password`` is replaced by ``"<redacted>"`` before writing, and so are credentials inside any
string (the command line included): the user-info part of a URL (``http://user:secret@host`` ->
``http://<redacted>@host``) and secret-named query parameters (``?api_key=...``).
"""
from __future__ import annotations

import datetime
import importlib.metadata as md
import os
import platform
import re
import socket
import sys
from typing import Any

from . import event_loop
from .config import ROOT, to_dict

PACKAGES = ("adev", "mooncake-transfer-engine-non-cuda", "openai", "httpx", "aiohttp", "pandas",
            "pyarrow", "numpy", "asyncssh", "libvirt-python", "gitpython", "rich", "matplotlib",
            "prometheus_client", "uvloop", "orjson")
_SECRET_MARKERS = ("key", "token", "secret", "password", "passwd")
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#@\s]+@")
_SECRET_QUERY = re.compile(
    r"(?i)([?&;][^=&#\s]*(?:key|token|secret|password|passwd|sig)[^=&#\s]*=)[^&#\s]+")


def redact_text(text: str) -> str:
    """``text`` with URL credentials and secret-named query values replaced by <redacted>."""
    if "@" not in text and "=" not in text:
        return text
    return _SECRET_QUERY.sub(r"\1<redacted>", _URL_USERINFO.sub(r"\1<redacted>@", text))


def redact(obj: Any) -> Any:
    """Copy of ``obj`` with secret-looking keys and credentials in strings redacted
    (recursively)."""
    if isinstance(obj, dict):
        return {k: ("<redacted>" if isinstance(k, str) and any(m in k.lower() for m in _SECRET_MARKERS)
                    and v not in (None, "") and not isinstance(v, (int, float, bool)) else redact(v))
                for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [redact(v) for v in obj]
    if isinstance(obj, str):
        return redact_text(obj)
    return obj


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


def git_state() -> dict[str, Any]:
    """Commit and dirtiness of the project checkout (null with a reason when not a repo)."""
    try:
        import git
        repo = git.Repo(ROOT, search_parent_directories=False)
        return {"commit": repo.head.commit.hexsha, "dirty": repo.is_dirty(untracked_files=False),
                "branch": None if repo.head.is_detached else repo.active_branch.name}
    except Exception as e:  # not a repo, no commits yet, git missing
        return {"commit": None, "dirty": None, "branch": None, "why": f"{type(e).__name__}: {e}"}


def build_manifest(run_id: str, *, command: list[str] | None = None, config: Any = None,
                   seeds: dict[str, Any] | None = None, time_scale: float = 1.0,
                   extra: dict[str, Any] | None = None) -> dict[str, Any]:
    cfg = {k: to_dict(v) for k, v in config.items()} if isinstance(config, dict) else to_dict(config)
    return redact({
        "run_id": run_id,
        "started_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "command": command if command is not None else sys.argv,
        "time_scale": time_scale,
        "config": cfg,
        "seeds": seeds or {},
        "packages": package_versions(),
        "python": sys.version.split()[0],
        "event_loop": event_loop.loop_name(),
        "loop_scheduling": event_loop.scheduling(),
        "git": git_state(),
        "host": {"hostname": socket.gethostname(), "platform": platform.platform(),
                 "cpus": os.cpu_count()},
        **(extra or {}),
    })
