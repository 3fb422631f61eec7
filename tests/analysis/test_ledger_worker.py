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
        for t, sid, cid, ids in _prompts():
            w.add(t, sid, cid, ids)
        w.forget("s0")
    with LedgerProcess(b, algo=algo) as p:
        for i, (t, sid, cid, ids) in enumerate(_prompts()):
            if i % 2:  # both ways in: raw JSON text (the LLM client's) and a list
                p.add_json(t, sid, cid, json.dumps(ids, separators=(",", ":")).encode())
            else:
                p.add(t, sid, cid, ids)
        p.forget("s0")
    fa, fb = _files(a), _files(b)
    assert fa[0] == fb[0] and len(fa[0]) == 12
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
        while p._buf:  # the loop writes the rest as the process reads
            await asyncio.sleep(0.01)
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
