"""``bench/replay_gpu_pool.py``: a replay's calls through GPU prefix pools of other sizes (hit
shares worked out by hand in the comments)."""
from __future__ import annotations

import importlib.util
import json
import sys

from adev.config import ROOT
from adev.replay.format import Call, Trace, write_trace

_spec = importlib.util.spec_from_file_location("replay_gpu_pool", ROOT / "bench" / "replay_gpu_pool.py")
rgp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rgp)


def _rec(session, turn, prompt, t0, t1, cached):
    return {"session": session, "turn": turn, "prompt_tokens": prompt, "prefill": "p0",
            "status": "ok", "t_ready": t0, "t_first_token": t1, "t_end": t1 + 0.5,
            "cached_tokens": cached}


def test_a_session_hits_what_the_pool_kept_between_its_calls(tmp_path, monkeypatch, capsys):
    # session a: 3 blocks, then 4 (65 tokens: 4 whole blocks, the cap (65 - 1) // 16 = 4);
    # session b: 3 blocks of its own, between a's two calls, on the same replica
    trace = Trace(16, [Call("a", 0, 48, 1, [1, 2, 3]), Call("a", 1, 65, 1, [1, 2, 3, 4]),
                       Call("b", 0, 48, 1, [5, 6, 7])])
    tp = write_trace(trace, tmp_path / "t.jsonl")
    run = tmp_path / "gpu-only-s0"
    run.mkdir()
    recs = [_rec("a", 0, 48, 0.0, 1.0, 0), _rec("b", 0, 48, 2.0, 3.0, 0),
            _rec("a", 1, 65, 4.0, 5.0, 48)]
    (run / "replay.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    monkeypatch.setattr(sys, "argv", ["x", str(tp), str(run), "--pool", "64,128"])
    assert rgp.main() == 0
    out = capsys.readouterr().out
    # measured: 48 of 161 prompt tokens = 29.8%. Pool of 4 blocks: a's 3 blocks freed (LRU
    # order 3, 2, 1); b needs 3 with 1 empty, evicts 3 and 2; a's second call hits block 1
    # only: 16 / 161 = 9.9%. Pool of 8: nothing evicted, hits 1-3: 48 / 161 = 29.8%.
    assert "cached by the run's prefill replicas 29.8%" in out
    assert "pool 64 tokens per replica (64 in all): GPU prefix cache serves 9.9%" in out
    assert "pool 128 tokens per replica (128 in all): GPU prefix cache serves 29.8%" in out
    # active sessions' latest prompts at each t_ready: a (48); a + b (96); a (65) and b ended
    # at 3.5: (48 + 96 + 65) / 3 = 69.7
    assert "active sessions' latest prompts 70 tokens" in out


def test_a_trace_block_of_512_tokens_is_32_pool_blocks():
    trace = Trace(512, [Call("a", 0, 1000, 1, [7, 9])])
    blocks, n = rgp.pool_blocks(trace, {("a", 0)})
    # 1,000 tokens: 62 whole 16-token blocks of the 64 the two trace blocks hold
    assert n == 64 and blocks[("a", 0)].tolist() == list(range(62))
