import io

from rich.console import Console

from adev.fleet.live import FleetState, LiveDisplay
from adev.records import CallRecord, ScrapeRecord, SessionRecord


def _state():
    st = FleetState(width=2, endpoints=["coder", "reasoner"], time_scale=10.0)
    st.prefill_tokens_per_s = 1000.0
    st.session_launched("s1", 0, "t", 1, 0.0)
    st.on_record(SessionRecord(run_id="r", session_id="s1", task="t", t=0.0, status="started"))
    st.on_record(ScrapeRecord(run_id="r", target="coder", url="u", t=0.0, ok=True, samples={
        "vllm:external_prefix_cache_hits_total": 0.0, "vllm:prefix_cache_hits_total": 0.0,
        "vllm:prompt_tokens_total": 0.0}))
    st.window_opened(1, 0.0, 100.0)
    st.call_started("coder", "s1", "architect", 1)
    st.on_record(CallRecord(run_id="r", session_id="s1", call_id="c1", endpoint="coder",
                            role="contract", round=2, t_scheduled=1.0, t_sent=1.0, t_end=11.0,
                            server={"put_blocks": 10, "put_refused_blocks": 4}))
    st.on_record(ScrapeRecord(run_id="r", target="coder", url="u", t=20.0, ok=True, samples={
        "vllm:external_prefix_cache_hits_total": 500.0, "vllm:prefix_cache_hits_total": 200.0,
        "vllm:prompt_tokens_total": 1000.0}))
    return st


def test_state_views_and_running_figures():
    st = _state()
    assert st.by_round_role() == {(2, "contract"): 1}
    assert st.in_flight["coder"] == 1 and st.refused_blocks == 4
    st.update_figures(20.0)
    f = st.figures
    assert f is not None, st.figures_note
    assert abs(f["busy_share"]["coder"] - 0.5) < 1e-9
    assert abs(f["store_hit_share"] - 0.5) < 1e-9
    line = st.line()
    assert "window 1" in line and "in flight coder:1" in line
    buf = io.StringIO()
    Console(file=buf, width=120).print(st.render())
    assert "sessions by round and role" in buf.getvalue() and "contract" in buf.getvalue()
    assert st.open_sessions().keys() == {"s1"}
    st.on_record(SessionRecord(run_id="r", session_id="s1", task="t", t=30.0, status="passed"))
    assert not st.open_sessions() and st.ended["passed"] == 1


def test_plain_display_when_not_a_tty():
    import asyncio

    from adev.clock import RunClock

    async def go():
        buf = io.StringIO()
        d = LiveDisplay(_state(), RunClock(10.0), "auto", log_every_wall_s=0.0, stream=buf)
        assert d.mode == "plain"
        d.start()
        await asyncio.sleep(1.2)
        await d.stop()
        return buf.getvalue()

    out = asyncio.run(go())
    assert "active 1/2" in out
