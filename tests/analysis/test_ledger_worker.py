"""The ledger in its own process writes exactly what the in-process writer writes."""
from __future__ import annotations

import json

import numpy as np
import pytest

from adev.analysis.ledger import LedgerWriter
from adev.analysis.ledger_worker import LedgerProcess


def _prompts():
    rng = np.random.default_rng(7)
    lead = rng.integers(0, 150_000, 3000).tolist()
    out = []
    for s in range(3):
        ctx = list(lead)
        for c in range(4):
            ctx += rng.integers(0, 150_000, 500 + 37 * c).tolist()
            out.append((10.0 * len(out), f"s{s}", f"s{s}/{c}", list(ctx)))
    return out


def _files(d):
    led = d / "ledger"
    calls = [{k: v for k, v in json.loads(line).items() if k != "hash_s"}  # hash_s: CPU time
             for line in (led / "calls.jsonl").read_text().splitlines()]
    return calls, (led / "touches.bin").read_bytes(), json.loads((led / "meta.json").read_text())


@pytest.mark.parametrize("algo", ["fast", "sha256_cbor"])
def test_process_writes_what_the_writer_writes(tmp_path, algo):
    a, b = tmp_path / "a", tmp_path / "b"
    with LedgerWriter(a, algo=algo) as w:
        for i, (t, sid, cid, ids) in enumerate(_prompts()):
            w.add(t, sid, cid, ids)
            if i == 1:  # s0 forgotten after its second call: its next call hashes every block
                w.forget("s0")
        w.forget("s0")
    with LedgerProcess(b, algo=algo) as p:
        for i, (t, sid, cid, ids) in enumerate(_prompts()):
            if i % 4 == 3:  # three ways in: raw JSON text (the LLM client's), a list, an array
                p.add(t, sid, cid, np.asarray(ids, dtype=np.uint32))
            elif i % 2:
                p.add_json(t, sid, cid, json.dumps(ids, separators=(",", ":")).encode())
            else:
                p.add(t, sid, cid, ids)
            if i == 1:
                p.forget("s0")
        p.forget("s0")
    fa, fb = _files(a), _files(b)
    assert fa[0] == fb[0] and len(fa[0]) == 12
    # s0's third call after the forget: all its blocks hashed; its second one: only the new ones
    assert fb[0][2]["n_hashed"] == fb[0][2]["n_blocks"]
    assert 0 < fb[0][1]["n_hashed"] < fb[0][1]["n_blocks"]
    assert fa[1] == fb[1] and len(fa[1]) > 0
    assert fa[2] == fb[2]
    if algo == "sha256_cbor":
        assert (a / "ledger" / "hashes.bin").read_bytes() == (b / "ledger" / "hashes.bin").read_bytes()


def test_errors_in_the_process_surface_at_close_and_after(tmp_path):
    p = LedgerProcess(tmp_path, algo="fast")
    p.add_json(0.0, "s", "c0", b"[1,2,3")  # malformed: the process fails on it
    with pytest.raises(RuntimeError, match="ledger process"):
        p.close()
    with pytest.raises(ValueError, match="closed"):
        p.add(1.0, "s", "c1", [1, 2, 3])


def test_bad_arguments_are_reported(tmp_path):
    p = LedgerProcess(tmp_path, algo="nope")
    with pytest.raises(RuntimeError, match="algo"):
        p.close()


async def test_large_prompts_from_the_event_loop_never_block_it(tmp_path):
    import asyncio

    prompts = _prompts()
    big = [(t, sid, cid, json.dumps(ids * 8).encode()) for t, sid, cid, ids in prompts]
    p = LedgerProcess(tmp_path)
    try:
        for t, sid, cid, raw in big:  # ~3 MB: far more than a pipe holds
            p.add_json(t, sid, cid, raw)
        pending = len(p._buf)  # what the pipe did not take yet: returned without waiting
        loop = asyncio.get_running_loop()
        assert p._loop is loop
        while p._buf:  # the loop writes the rest as the process reads
            await asyncio.sleep(0.01)
        # all written: the writer is off the loop (a writable pipe would wake it for nothing)
        assert p._loop is None and loop.remove_writer(p._fd) is False
    finally:
        p.close()
    assert pending > 0
    calls = [json.loads(x) for x in (tmp_path / "ledger" / "calls.jsonl").read_text().splitlines()]
    assert [c["call_id"] for c in calls] == [cid for _, _, cid, _ in big]
    assert [c["n_tokens"] for c in calls] == [8 * len(ids) for *_, ids in prompts]


def test_the_process_is_niced_from_its_first_instruction(tmp_path):
    """Its start-up (a spawned interpreter's imports, hundreds of ms) must not compete with the
    client's event loop either: the parent lowers its priority right after the spawn."""
    import os

    from adev.analysis.ledger_worker import NICE
    from adev.records import RunDir
    lp = LedgerProcess(RunDir.create("nice", base=tmp_path))
    try:
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, lp._p.pid) == min(19, mine + NICE)
    finally:
        lp.close()


@pytest.mark.parametrize("when", ["starting", "running"])
def test_stop_signals_reach_only_the_fleet(tmp_path, when):
    """Ctrl-C at a terminal (SIGINT to the process group) and SIGTERM to the group reach the
    ledger process too: it must keep going and end through close(), with every prompt written."""
    import os
    import signal
    import time
    p = LedgerProcess(tmp_path)
    try:
        if when == "running":
            p.add(0.0, "s0", "s0/0", list(range(64)))
            time.sleep(3.0)  # the spawned interpreter has started serving
        for s in (signal.SIGINT, signal.SIGTERM):
            os.kill(p._p.pid, s)
        time.sleep(0.5)
        assert p._p.is_alive(), f"ledger process died of a stop signal (exit {p._p.exitcode})"
        for t, sid, cid, ids in _prompts():
            p.add(t, sid, cid, ids)
    finally:
        p.close()  # raises 'ledger process failed' when a signal killed it
    assert len(_files(tmp_path)[0]) == 12 + (when == "running")


# -- the process's parts, run in this process ----------------------------------------------------

def test_stop_signals_ignored_then_unblocked():
    import signal

    from adev.analysis import ledger_worker as LW
    assert LW.STOP_SIGNALS == (signal.SIGINT, signal.SIGTERM)
    old_h = {s: signal.getsignal(s) for s in LW.STOP_SIGNALS}
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, LW.STOP_SIGNALS)
    try:
        LW._ignore_stop_signals()
        assert all(signal.getsignal(s) == signal.SIG_IGN for s in LW.STOP_SIGNALS)
        now = signal.pthread_sigmask(signal.SIG_BLOCK, [])
        assert not set(LW.STOP_SIGNALS) & set(now)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        for s, h in old_h.items():
            signal.signal(s, h)


def _frames(prompts, forget=None):
    """The frames LedgerProcess sends: a JSON head line, then the token ids' JSON."""
    out = [json.dumps(["add", t, sid, cid]).encode() + b"\n" + json.dumps(ids).encode()
           for t, sid, cid, ids in prompts]
    if forget:
        out.append(json.dumps(["forget", forget]).encode() + b"\n")
    return out


def _serve_here(tmp_path, monkeypatch, frames, kw, end=True):
    """Run the process's loop in this process over a pipe; returns the errors it reported."""
    import multiprocessing as mp
    import queue

    from adev.analysis import ledger_worker as LW
    monkeypatch.setattr(LW, "_ignore_stop_signals", lambda: None)
    reader, writer = mp.Pipe(duplex=False)
    errors = queue.Queue()
    import threading

    def feed():  # a thread: the frames are more than a pipe holds
        try:
            for f in frames + ([b""] if end else []):
                writer.send_bytes(f)
        except OSError:  # the loop stopped reading (an end frame or an error)
            pass
        writer.close()
    th = threading.Thread(target=feed, daemon=True)
    th.start()
    LW._serve(reader, errors, str(tmp_path), kw)
    reader.close()
    th.join(10)
    out = []
    while not errors.empty():
        out.append(errors.get())
    return out


@pytest.mark.parametrize("end", [True, False])
def test_serve_writes_what_the_writer_writes(tmp_path, monkeypatch, end):
    """Frames up to the end frame (or the end of the pipe: the fleet is gone) are written;
    an unknown operation is skipped."""
    prompts = _prompts()[:5]
    with LedgerWriter(tmp_path / "a", algo="sha256_cbor", block_size=32) as w:
        for t, sid, cid, ids in prompts:
            w.add(t, sid, cid, ids)
        w.forget("s0")
    frames = _frames(prompts, forget="s0")
    frames.insert(2, json.dumps(["noop", 1]).encode() + b"\n")
    assert _serve_here(tmp_path / "b", monkeypatch, frames,
                       {"algo": "sha256_cbor", "block_size": 32}, end=end) == []
    fa, fb = _files(tmp_path / "a"), _files(tmp_path / "b")
    assert fa == fb and len(fa[0]) == 5 and fb[2]["block_size"] == 32


def test_serve_forgets_a_session_and_reads_multiline_json(tmp_path, monkeypatch):
    prompts = _prompts()[:3]                                  # s0's first three calls
    with LedgerWriter(tmp_path / "a") as w:
        for i, (t, sid, cid, ids) in enumerate(prompts):
            w.add(t, sid, cid, ids)
            if i == 1:
                w.forget("s0")
    # the third prompt's JSON text spread over lines (JSON allows any whitespace)
    t, sid, cid, ids = prompts[2]
    pretty = (json.dumps(["add", t, sid, cid]) + "\n" + json.dumps(ids, indent=1)).encode()
    frames = _frames(prompts[:2], forget="s0") + [pretty]
    assert _serve_here(tmp_path / "b", monkeypatch, frames, {}) == []
    fa, fb = _files(tmp_path / "a"), _files(tmp_path / "b")
    assert fa == fb
    assert [c["n_hashed"] == c["n_blocks"] for c in fb[0]] == [True, False, True]


def test_dead_process_drops_the_loops_writer(tmp_path):
    """With a writer registered on the loop (a backlog the pipe did not take) and the process
    gone, the next writable callback removes it (no busy loop on a dead pipe)."""
    import asyncio
    import os
    import signal

    async def main():
        loop = asyncio.get_running_loop()
        p = LedgerProcess(tmp_path)
        os.kill(p._p.pid, signal.SIGSTOP)                    # it reads nothing meanwhile
        try:
            big = json.dumps(list(range(200_000))).encode()
            p.add_json(0.0, "s", "c", big)
            assert p._buf and p._loop is loop
            os.kill(p._p.pid, signal.SIGKILL)
            p._p.join(10)
            p._on_writable()
            assert p._loop is None
            assert loop.remove_writer(p._fd) is False         # none left registered
        finally:
            with pytest.raises(RuntimeError, match="exit code -9"):
                p.close()
    asyncio.run(main())


def test_serve_stops_at_the_end_frame(tmp_path, monkeypatch):
    prompts = _prompts()[:3]
    frames = _frames(prompts[:2]) + [b""] + _frames(prompts[2:])
    assert _serve_here(tmp_path, monkeypatch, frames, {}, end=False) == []
    assert [c["call_id"] for c in _files(tmp_path)[0]] == ["s0/0", "s0/1"]


def test_serve_reports_errors(tmp_path, monkeypatch):
    assert _serve_here(tmp_path / "a", monkeypatch, [], {"algo": "nope"}) == [
        "ValueError: algo: 'nope' is not allowed; allowed values: fast, sha256_cbor"]
    assert not (tmp_path / "a" / "ledger").exists()
    prompts = _prompts()[:2]
    frames = _frames(prompts[:1]) + [b'["add", 1.0, "s", "c"]\n[1, 2'] + _frames(prompts[1:])
    [err] = _serve_here(tmp_path / "b", monkeypatch, frames, {})
    assert err.startswith("JSONDecodeError: ")
    # what came before the bad frame is written (the files are closed: flushed)
    calls, _, meta = _files(tmp_path / "b")
    assert [c["call_id"] for c in calls] == ["s0/0"] and meta["algo"] == "fast"


def test_away_from_client(monkeypatch):
    import os

    import adev.config
    from adev.analysis import ledger_worker as LW
    monkeypatch.setattr(adev.config, "HOST_CPUS", [0, 1, 2, 3])
    # pinned to cores 0 and 1 (this process: pid 0; any other process has every core)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1} if pid == 0 else {0, 1, 2, 3})
    assert LW._away_from_client() == {2, 3}
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert LW._away_from_client() is None                   # not pinned
    monkeypatch.setattr(adev.config, "HOST_CPUS", [0, 1])
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 5})
    assert LW._away_from_client() is None                   # no other core
    monkeypatch.delattr(os, "sched_getaffinity")
    assert LW._away_from_client() is None


def test_process_name_daemon_and_cores(tmp_path, monkeypatch):
    import os

    from adev.analysis import ledger_worker as LW
    mine = os.sched_getaffinity(0)
    cpu = min(mine)
    monkeypatch.setattr(LW, "_away_from_client", lambda: {cpu})
    p = LW.LedgerProcess(tmp_path)
    try:
        assert p._p.name == "adev-ledger" and p._p.daemon
        # spawned, not forked (the fleet process has threads)
        assert type(p._p).__name__ == "SpawnProcess"
        assert os.sched_getaffinity(p._p.pid) == {cpu}
        assert p.dir == tmp_path and not os.get_blocking(p._fd)
    finally:
        p.close()
    p.close()                                                # a second close does nothing
    with pytest.raises(ValueError, match="^ledger writer is closed$"):
        p.forget("s")


def test_gone_process_is_reported_on_the_next_add(tmp_path):
    import os
    import signal
    p = LedgerProcess(tmp_path)
    os.kill(p._p.pid, signal.SIGKILL)
    p._p.join(10)
    with pytest.raises(RuntimeError) as e:
        p.add(0.0, "s", "c", [1, 2, 3])
    assert str(e.value) == "ledger process ended (exit code -9): no error reported"
    with pytest.raises(RuntimeError) as e:
        p.close()
    assert str(e.value) == "ledger process failed (exit code -9): no error reported"


def test_close_with_a_backlog_on_the_loop(tmp_path):
    """close() while the loop still holds a writer for a backlog: the writer is removed and the
    backlog written here; every prompt reaches the files."""
    import asyncio

    prompts = _prompts()

    async def main():
        loop = asyncio.get_running_loop()
        p = LedgerProcess(tmp_path)
        for t, sid, cid, ids in prompts:
            p.add_json(t, sid, cid, json.dumps(ids * 8).encode())
        assert p._buf and p._loop is loop
        fd = p._fd
        p.close()
        assert p._loop is None and not p._buf
        assert loop.remove_writer(fd) is False
    asyncio.run(main())
    calls = _files(tmp_path)[0]
    assert [c["call_id"] for c in calls] == [cid for _, _, cid, _ in prompts]


def test_a_hung_process_is_killed_after_the_timeout(tmp_path):
    import os
    import signal
    import threading
    p = LedgerProcess(tmp_path)
    os.kill(p._p.pid, signal.SIGSTOP)                  # it never reads the end frame
    got = []

    def close():
        try:
            p.close(timeout_s=0.5)
        except RuntimeError as e:
            got.append(str(e))
    th = threading.Thread(target=close, daemon=True)
    th.start()
    th.join(20)
    if th.is_alive():                                  # close() waits for ever: end it
        os.kill(p._p.pid, signal.SIGKILL)
        th.join(20)
        pytest.fail("close() did not give up after its timeout")
    assert got == ["ledger process did not finish within 0.5 s"]
    assert not p._p.is_alive()
