"""What a state dir tracks besides ``state.json``, and stopping what it records.

- ``lock``: :func:`locked` serialises start, stop, reuse and faults on one state dir;
- ``users/``: one file per live :func:`~adev.stack.lifecycle.running_stack` user
  (:func:`add_user`, :func:`live_users`), so the last user out can stop a shared stack;
- ``pending.json``: the processes of a start-up in progress (:class:`Pending`), so a start-up
  killed half-way leaves nothing ``adev stack down`` cannot find (:func:`stop_pending`);
- :func:`stop_recorded` stops a recorded stack (endpoints together, then the master) and
  :func:`remove_disk` removes its endpoints' disk tier directories.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from ..config import StackConfig
from .procs import Proc, stop_process
from .state import StackInfo, StackState, state_dir_path


@contextlib.contextmanager
def locked(sdir: Path) -> Iterator[None]:
    """Hold ``<sdir>/lock`` (an exclusive flock) for the duration of the block."""
    sdir.mkdir(parents=True, exist_ok=True)
    with open(sdir / "lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def target_dir(target: StackInfo | StackConfig | str | Path | None) -> Path:
    """The state dir of ``target`` (a StackInfo, StackConfig or path; default the default stack)."""
    if isinstance(target, StackInfo):
        return state_dir_path(target.config.state_dir)
    if isinstance(target, StackConfig):
        return state_dir_path(target.state_dir)
    return state_dir_path(target if target is not None else StackConfig().state_dir)


USERS_DIR = "users"
"""``<state_dir>/users/<pid>-<token>``: one file per live ``running_stack`` user of the stack."""


def add_user(sdir: Path, token: str, exclusive: bool = False) -> None:
    """Register a live user of the stack; ``exclusive``: it measures the endpoints' counters, so
    no other client may share the stack while it runs (see :func:`sharing_conflict`)."""
    d = sdir / USERS_DIR
    d.mkdir(parents=True, exist_ok=True)
    import psutil
    ct = psutil.Process().create_time()
    (d / f"{os.getpid()}-{token}").write_text(json.dumps({"pid": os.getpid(), "create_time": ct,
                                                         "exclusive": exclusive}))


def live_users(sdir: Path) -> dict[str, dict]:
    """Live users of the stack in ``sdir`` (file name -> its record); dead users' files go."""
    from .procs import is_alive
    out = {}
    for f in sorted((sdir / USERS_DIR).glob("*")):
        try:
            d = json.loads(f.read_text())
            if is_alive(int(d["pid"]), float(d["create_time"])):
                out[f.name] = d
                continue
        except (OSError, ValueError, KeyError, TypeError):
            pass
        f.unlink(missing_ok=True)  # a user that died without releasing
    return out


def sharing_conflict(sdir: Path, exclusive: bool) -> str | None:
    """Why a new user (``exclusive`` or not) may not join the stack in ``sdir``, or None.

    A fleet or a replay reads its figures from the endpoints' counters and loads them with its
    own traffic only; another client's requests on the same endpoints would enter both its
    counters and its latencies, with nothing in the records to tell them apart. So an exclusive
    user joins only a stack no one else uses, and nobody joins a stack an exclusive user holds."""
    users = live_users(sdir)
    holder = next((d for d in users.values() if d.get("exclusive")), None)
    if holder is not None:
        return (f"the stack in {sdir} is held by a measuring run (pid {holder['pid']}): its "
                "figures come from the endpoints' counters, which this client's requests would "
                "enter; wait for it to end, or give this run its own stack (stack.state_dir)")
    if exclusive and users:
        pids = sorted({int(d["pid"]) for d in users.values()})
        return (f"the stack in {sdir} is in use by {len(users)} other client(s) (pid "
                f"{', '.join(map(str, pids))}): a measuring run reads its figures from the "
                "endpoints' counters, which their requests would enter; wait for them to end, "
                "or give this run its own stack (stack.state_dir)")
    return None


def remove_disk(st: StackState) -> None:
    for p in st.endpoints.values():
        if p.disk_dir:
            shutil.rmtree(p.disk_dir, ignore_errors=True)
            with contextlib.suppress(OSError):
                Path(p.disk_dir).parent.rmdir()  # the disk root, once empty


PENDING_FILE = "pending.json"


class Pending(list):
    """Processes started but not yet in the state file, mirrored to ``pending.json`` so that a
    start-up killed half-way (SIGKILL of adev) leaves nothing ``down`` cannot find."""

    def __init__(self, sdir: Path):
        super().__init__()
        self.path = sdir / PENDING_FILE

    def _sync(self) -> None:
        if not self:
            self.path.unlink(missing_ok=True)
            return
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps([{"name": p.name, "pid": p.pid, "create_time": p.create_time}
                                   for p in self]))
        os.replace(tmp, self.path)

    def append(self, p: Proc) -> None:
        super().append(p)
        self._sync()

    def remove(self, p: Proc) -> None:
        super().remove(p)
        self._sync()

    def clear(self) -> None:
        super().clear()
        self._sync()


def stop_pending(sdir: Path) -> dict[str, str]:
    """Stop what an interrupted start-up left in ``pending.json`` (endpoints first)."""
    p = sdir / PENDING_FILE
    try:
        entries = json.loads(p.read_text())
    except (OSError, ValueError):
        p.unlink(missing_ok=True)
        return {}
    out = {}
    for e in reversed(entries):
        try:
            out[e["name"]] = stop_process(int(e["pid"]), float(e["create_time"]), timeout=10.0)
        except (KeyError, TypeError, ValueError):
            continue
    p.unlink(missing_ok=True)
    return out


def stop_recorded(st: StackState, timeout: float = 15.0) -> dict[str, str]:
    """Stop the processes of ``st``: endpoints together, then the master."""
    out: dict[str, str] = {}
    eps = list(st.endpoints.values())
    if eps:
        with concurrent.futures.ThreadPoolExecutor(len(eps)) as ex:
            for p, r in zip(eps, ex.map(lambda q: stop_process(q.pid, q.create_time,
                                                               timeout=timeout), eps), strict=True):
                out[p.name] = r
    out[st.master.name] = stop_process(st.master.pid, st.master.create_time, timeout=timeout)
    return out
