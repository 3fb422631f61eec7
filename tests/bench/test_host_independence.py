"""``bench/host_independence.py``'s ``parting``: where two runs' calls part, on hand-made call
tables."""
from __future__ import annotations

import importlib.util

import pandas as pd

from adev.config import ROOT

_spec = importlib.util.spec_from_file_location("host_independence",
                                               ROOT / "bench" / "host_independence.py")
hi = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hi)


def _calls(offset: float, rows: list[tuple]) -> pd.DataFrame:
    """Calls (id, sent, end, gpu tokens, status[, blocks the store refused of its 10 saved]) on a
    clock whose first send is at ``offset``; no server fields where gpu tokens is None."""
    def row(c, s, e, g, st, refused=0):
        srv = ({"srv_tok_gpu": g, "srv_tok_store_ram": 0, "srv_tok_store_disk": 0,
                "srv_tok_computed": 100 - g, "srv_put_blocks": 10 - refused,
                "srv_put_refused_blocks": refused} if g is not None else
               dict.fromkeys(hi.TIERS + hi.SAVES, float("nan")))
        return {"call_id": c, "t_sent": offset + s, "t_end": offset + e, "status": st, **srv}
    return pd.DataFrame([row(*r) for r in rows])


BASE = [("a", 0.0, 2.0, 50, "ok"), ("b", 1.0, 3.0, 60, "ok"), ("c", 2.0, 4.0, 70, "ok"),
        ("d", 3.0, 5.0, 80, "ok")]


def test_runs_that_differ_only_in_their_clocks_start_do_not_part():
    t, cid, what, share, n = hi.parting(_calls(10.0, BASE), _calls(3.5, BASE))
    assert (t, cid, what, share, n) == (None, None, None, 1.0, 4)


def test_the_first_call_that_differs_by_send_time_in_model_time_from_the_first_send():
    b = [*BASE[:2], ("c", 2.5, 4.0, 70, "ok"), ("d", 3.0, 5.5, 80, "ok")]
    t, cid, what, share, n = hi.parting(_calls(0.0, BASE), _calls(7.0, b))
    # c is sent 0.5 s later, d ends 0.5 s later: two of the four calls are the same
    assert (t, cid, what, share, n) == (2.0, "c", "send", 0.5, 4)


def test_a_different_tier_split_parts_the_runs_and_failed_calls_are_left_out():
    b = [*BASE[:3], ("d", 3.0, 5.0, 79, "ok"), ("e", 4.0, 6.0, 90, "error")]
    a = [("b0", 0.5, 1.0, 0, "error"), *BASE]
    t, cid, what, share, n = hi.parting(_calls(0.0, a), _calls(0.0, b))
    # the failed calls are in neither table: d is the only one that differs, by 1 GPU token
    assert (t, cid, what, share, n) == (3.0, "d", "tiers", 0.75, 4)


def test_a_save_the_store_refused_in_one_run_parts_them_and_missing_server_fields_do_not():
    a = [*BASE, ("e", 4.0, 6.0, None, "ok")]
    b = [BASE[0], ("b", 1.0, 3.0, 60, "ok", 4), *BASE[2:], ("e", 4.0, 6.0, None, "ok")]
    t, cid, what, share, n = hi.parting(_calls(0.0, a), _calls(0.0, b))
    # b's save: 10 blocks taken in A, 6 taken and 4 refused in B; e has no server fields in
    # either run (NaN in both) and is the same
    assert (t, cid, what, share, n) == (1.0, "b", "saves", 0.8, 5)
