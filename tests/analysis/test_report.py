"""adev report (markdown + self-contained HTML), --compare, summaries, notebooks."""
from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from adev.analysis.ledger import SAME_SESSION, classify, read_ledger
from adev.analysis.report import (
    Figure,
    build_report,
    fig_operating_points,
    load_all,
    summarise_run,
    write_compare,
    write_report,
)
from adev.cli import main as adev_main
from adev.config import ROOT

from .synth import make_run


@pytest.fixture(scope="module")
def night(tmp_path_factory):
    base = tmp_path_factory.mktemp("night")
    for w in (1, 3):
        make_run(base, width=w, windows=2, window_s=120, seed=w, max_prompt=20000,
                 protocol="batch" if w == 1 else "steady")
    return base


def test_report_one_folder(night, tmp_path):
    out = tmp_path / "rep"
    h = write_report([night], out)
    html = h.read_text()
    md = (tmp_path / "rep.md").read_text()
    assert html.count("data:image/png;base64,") >= 4          # width, shares, TTFT, reuse
    assert "src='http" not in html and "<script" not in html    # self-contained
    # no width-12 run: the operating-point figure is missing, with the reason
    assert re.search(r"Missing:.*no run at width 12", md)
    assert "Per-window figures" in md and "| Window | Endpoint |" in md
    # headline figures with intervals first, then the source beside ours, then the tables
    assert md.index("## Headline figures") < md.index("## The source study beside adev") \
        < md.index("## Width sweep")
    assert re.search(r"- Gross saving: \d+\.\d\d% \(CV", md)
    # the width-1 batch run sits beside the source's 0.28% gross saving at one session
    assert re.search(r"\| 1 session, batch, pause 0 s \| Gross saving \| 0\.28% \| -?\d+\.\d\d% \|", md)
    # HTML: headings in words, no snake_case column names, every table scrolls inside the page
    assert "gross_saving_lo" not in html and "Gross saving, 95% low" in html
    assert html.count("<table>") == html.count("<div class='tw'><table>") > 0
    for png in re.findall(r"\((rep_files/[^)]+\.png)\)", md):
        assert (tmp_path / png).exists()


def _by_width(night):
    """Each run's records read back by hand: width -> (the ALL rows over valid windows as the
    window analysis gives them, the OK calls' TTFTs from send, same-session reuse distances)."""
    from adev.analysis.run import load_run
    from adev.analysis.windows import ALL, window_table
    out = {}
    for p in sorted(night.iterdir()):
        run = load_run(p)
        t = window_table(run)
        a = t[(t.endpoint == ALL) & t.valid]
        calls = [json.loads(x) for x in (p / "calls.jsonl").read_text().splitlines()]
        ttft = sorted(c["t_first_content"] - c["t_sent"] for c in calls if c["status"] == "ok")
        led = read_ledger(p)
        c = classify(led.touches, run.lease_ttl_s)
        d = c.distance[(c.cls == SAME_SESSION) & (c.distance > 0)]
        out[run.width] = (a, np.array(ttft), np.sort(d))
    return out


def test_report_figures_plot_the_run_figures(night):
    """What each figure draws is the analysis' figures of the runs, not just some PNG."""
    loaded = load_all([night])
    figs = {b.key: b for b in build_report(loaded).blocks if isinstance(b, Figure)}
    exp = _by_width(night)
    assert sorted(exp) == [1, 3]
    f = figs["saving_vs_width"]
    assert f.png and sorted(k.rsplit(": ", 1)[1] for k in f.series) == ["disk", "gross", "net",
                                                                         "quiet"]
    [(key, (x, y))] = [(k, v) for k, v in f.series.items() if k.endswith(": gross")]
    np.testing.assert_allclose(x, [1, 3])
    np.testing.assert_allclose(y, [exp[w][0].gross_saving.mean() * 100 for w in (1, 3)])
    _, (x, y) = next((k, v) for k, v in f.series.items() if k.endswith(": net"))
    np.testing.assert_allclose(y, [exp[w][0].net_saving.mean() * 100 for w in (1, 3)])
    _, (x, y) = next((k, v) for k, v in f.series.items() if k.endswith(": disk"))
    np.testing.assert_allclose(y, [exp[w][0].gross_saving_disk.mean() * 100 for w in (1, 3)])
    assert all(0 < v < 100 for v in f.series[key][1])
    h = figs["hit_shares_vs_width"].series
    np.testing.assert_allclose(h["GPU prefix cache"][1],
                               [exp[w][0].gpu_hit_share.mean() * 100 for w in (1, 3)])
    np.testing.assert_allclose(h["store (RAM + disk)"][1],
                               [exp[w][0].store_hit_share.mean() * 100 for w in (1, 3)])
    # the synthetic model: the GPU share falls and the store share rises from width 1 to 3
    assert h["GPU prefix cache"][1][0] > h["GPU prefix cache"][1][1]
    assert h["store (RAM + disk)"][1][0] < h["store (RAM + disk)"][1][1]
    t = figs["ttft_cdfs"].series
    for ld in loaded:
        ttft = exp[ld.run.width][1]
        x, y = t[f"{ld.summary.label}: from send"]
        assert len(ttft) <= 2000                      # small sample: the exact empirical CDF
        np.testing.assert_allclose(x, ttft)
        np.testing.assert_allclose(y, np.arange(1, len(ttft) + 1) / len(ttft))
    r = figs["reuse_distance"].series
    for ld in loaded:
        [(x, y)] = [v for k, v in r.items() if k.startswith(f"{ld.summary.label}: same session (")]
        d = exp[ld.run.width][2]
        # more touches than plotted points: 2000 evenly spaced order statistics of the CDF
        assert len(d) > 2000
        idx = np.unique(np.linspace(0, len(d) - 1, 2000).astype(int))
        np.testing.assert_allclose(x, d[idx])
        np.testing.assert_allclose(y, (idx + 1) / len(d))
        assert y[-1] == 1.0


def test_operating_point_bars(tmp_path):
    runs = [make_run(tmp_path, width=12, windows=1, window_s=120, seed=s, lease_ttl_s=ttl,
                     max_prompt=20000, ledger=False, run_id=f"op{s}") for s, ttl in ((1, 5.0), (2, 120.0))]
    loaded = load_all(runs, with_reuse=False)
    f = fig_operating_points([ld.summary for ld in loaded])
    assert f.png and list(f.series) == ["gross", "net", "disk part", "refused share of writes"]
    x, y = f.series["gross"]
    np.testing.assert_allclose(x, [-0.3, 0.7])     # two operating points, four bars each
    a = {ld.run.lease_ttl_s: ld.table[(ld.table.endpoint == "ALL") & ld.table.valid] for ld in loaded}
    np.testing.assert_allclose(y, [a[5.0].gross_saving.mean() * 100,
                                   a[120.0].gross_saving.mean() * 100])
    np.testing.assert_allclose(f.series["refused share of writes"][1],
                               [a[5.0].refused_share.mean() * 100, a[120.0].refused_share.mean() * 100])
    # the long lease refuses most writes in the synthetic model (80% vs 5%)
    assert f.series["refused share of writes"][1][1] > 50 > f.series["refused share of writes"][1][0]


def test_report_single_run_missing_inputs(tmp_path):
    run = make_run(tmp_path, width=2, windows=1, window_s=100, ledger=False)
    h = write_report(run)
    assert h == run / "report.html"
    md = (run / "report.md").read_text()
    assert "needs runs at >= 2 widths" in md
    assert re.search(r"reuse ledger missing .*ledger/meta.json missing", md)


def test_cli_report_and_compare(night, tmp_path, capsys):
    a = sorted(night.iterdir())[0]
    b = sorted(night.iterdir())[1]
    assert adev_main(["report", str(a), "--out", str(tmp_path / "r")]) == 0
    assert (tmp_path / "r.html").exists()
    assert adev_main(["report", "--compare", str(a), str(b), "--out", str(tmp_path / "c")]) == 0
    md = (tmp_path / "c.md").read_text()
    assert "| Operating point | Width (sessions) | Figure |" in md and "| Gross saving |" in md
    assert adev_main(["report", str(tmp_path / "nope")]) == 2
    assert "not found" in capsys.readouterr().err


def test_compare_two_nights(night, tmp_path):
    other = tmp_path / "night2"
    make_run(other, width=3, windows=2, window_s=120, seed=7, max_prompt=20000, ledger=False)
    h = write_compare(night, other, tmp_path / "cmp")
    assert "data:image/png" in h.read_text()


def test_summarise_run(night):
    run = sorted(night.iterdir())[1]
    s = summarise_run(run)
    assert s.startswith("run ") and "gross saving:" in s
    assert "reuse, ownership view: same-session" in s and "last-toucher view" in s
    assert "max rel. diff" in s
    # the synthetic host read 3x slower than the tier profile: said, with where to look next
    assert re.search(r"real store reads / tier profile, p50 \(x\): 3(\.0+)? ", s), s
    assert "bench/bench_store_io.py" in s


NOTEBOOKS = sorted((ROOT / "results").glob("*.ipynb"))

# appended to each notebook before it runs: prints, as JSON, the table the notebook computed
PROBES = {
    "width_curve": 'print("PROBE" + sweep.to_json(orient="records"))',
    "operating_points": 'print("PROBE" + operating_points(summaries, None).to_json(orient="records"))',
    "reuse_profile": 'print("PROBE" + pd.DataFrame(rows).to_json(orient="records"))',
}


def _expected_table(stem, night):
    """The same table from the analysis functions, in this process."""
    import pandas as pd

    from adev.analysis.aggregate import operating_points, sweep_table
    from adev.analysis.ledger import reuse_profile
    from adev.analysis.run import load_run
    if stem == "width_curve":
        return sweep_table([ld.summary for ld in load_all([night], with_reuse=False)])
    if stem == "operating_points":
        return operating_points([ld.summary for ld in load_all([night], with_reuse=False)], None)
    rows = []
    for p in sorted(night.iterdir()):
        run = load_run(p)
        r = reuse_profile(read_ledger(p), run.lease_ttl_s)
        rows.append({"run": run.label, "width": run.width, "lease_ttl_s": run.lease_ttl_s,
                     "touches": r.touches, "unique_blocks": r.unique_blocks,
                     "share_new": r.share_new, "share_same_session": r.share_same_session,
                     "share_cross_session": r.share_cross_session, "aged_share": r.aged_share,
                     "distance_p50_s": r.distance_p50_s, "distance_p99_s": r.distance_p99_s,
                     "distance_max_s": r.distance_max_s, "missing": None})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebooks_execute(nb_path, night, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    import pandas as pd
    from nbclient import NotebookClient
    monkeypatch.setenv("ADEV_RUNS", str(night))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(nb_path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PROBES[nb_path.stem]))
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT)}}).execute()
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                   for o in c.get("outputs", []))
    assert "2 run(s)" in text
    [probe] = [ln[len("PROBE"):] for ln in text.splitlines() if ln.startswith("PROBE")]
    got = pd.DataFrame(json.loads(probe))
    exp = _expected_table(nb_path.stem, night)
    exp = pd.DataFrame(json.loads(exp.to_json(orient="records")))  # the same JSON round trip
    assert len(got) == 2 and list(got.columns) == list(exp.columns)
    pd.testing.assert_frame_equal(got, exp, check_exact=False, rtol=1e-9)
    if nb_path.stem == "width_curve":
        assert got["width"].tolist() == [1, 3] and (got["gross_saving"] > 0).all()
    if nb_path.stem == "reuse_profile":
        shares = got[["share_new", "share_same_session", "share_cross_session"]].sum(axis=1)
        np.testing.assert_allclose(shares, 1.0)
        assert (got["touches"] > got["unique_blocks"]).all()


def test_notebooks_present():
    assert {p.stem for p in NOTEBOOKS} >= {"width_curve", "operating_points", "reuse_profile"}


# -- the report's text, each string worked out by hand --------------------------------------------

from types import SimpleNamespace as NS  # noqa: E402

from adev.analysis import report as R  # noqa: E402


def _summ(**kw):
    """A run summary with only what the text helpers read."""
    base = dict(label="night-w3", run_id="r-3", width=3, protocol="steady", windows=4,
                invalid_windows=1, burst_windows=2, stats={}, interval={}, missing={},
                reuse=None)
    base.update(kw)
    return NS(**base)


def test_figure_line_mean_interval_one_window_and_missing():
    st = {"gross_saving": {"n": 3, "mean": 0.1234, "cv": 0.123456},
          "ttft_send_p50": {"n": 2, "mean": 0.5, "cv": 0.25},
          "net_saving": {"n": 1, "mean": 0.05, "cv": 0.0},
          "store_hit_rate": {"n": 0, "mean": math.nan, "cv": math.nan},
          "refused_share": {"n": 0, "mean": math.nan, "cv": math.nan}}
    iv = {"gross_saving": {"lo": 0.1, "hi": 0.1468}, "ttft_send_p50": {"lo": 0.25, "hi": 0.75},
          "net_saving": {"lo": math.nan, "hi": math.nan},
          "store_hit_rate": {"lo": math.nan, "hi": math.nan},
          "refused_share": {"lo": math.nan, "hi": math.nan}}
    long = "x" * 170
    s = _summ(stats=st, interval=iv, missing={"net_saving": long, "store_hit_rate": "no store"})
    # 4 windows, 1 invalid: 3 valid; gross over all 3, net in 1 (missing in 2, reason cut at 160)
    assert R.figure_line(s, "Gross", "gross_saving") == (
        "Gross: 12.34% (CV 12.35%, 95% t-interval 10.00%..14.68% over 3 windows)")
    assert R.figure_line(s, "TTFT", "ttft_send_p50", pctg=False) == (
        "TTFT: 0.5 (CV 25.00%, 95% t-interval 0.25..0.75 over 2 windows); missing in 1 window(s): "
        "see report")
    assert R.figure_line(s, "Net", "net_saving") == (
        "Net: 5.00% (1 window); missing in 2 window(s): " + "x" * 160)
    assert R.figure_line(s, "Hit rate", "store_hit_rate") == "Hit rate: — (no store)"
    assert R.figure_line(s, "Refused", "refused_share") == "Refused: — (no valid window)"
    # every valid window has it: nothing missing is said
    s1 = _summ(stats=st, interval=iv, windows=3, invalid_windows=0)
    assert R.figure_line(s1, "Gross", "gross_saving").endswith("over 3 windows)")


def test_run_header_torn_and_missing_windows():
    run = NS(run_id="r-3", width=3, protocol="steady", configuration="store-ram", lease_ttl_s=5.0,
             pause_s=0.5, torn={}, missing={}, fleet=None, stack=None, server_versions={},
             events=None, time_scale=10.0)
    ld = NS(run=run, summary=_summ())
    assert R._run_header(ld) == (
        "**night-w3** (`r-3`) · width 3 · protocol steady · configuration store-ram · lease 5 s"
        " · pause 0.5 s · windows 4 (1 invalid, 2 with preemption bursts)\n")
    # a fleet run says how its roles saw the history and where the spec was; one recorded
    # before the settings: shared, in the prompt
    for fleet, ctx, spec in (({"context": "per-role", "spec": "file"}, "per-role", "file"),
                             ({"width": 3}, "shared", "prompt")):
        ld_f = NS(run=NS(**{**vars(run), "fleet": fleet}), summary=_summ())
        assert R._run_header(ld_f) == (
            "**night-w3** (`r-3`) · width 3 · protocol steady · configuration store-ram · lease 5 s"
            f" · role context {ctx} · spec {spec} · pause 0.5 s · windows 4 (1 invalid, 2 with "
            "preemption "
            "bursts)\n")
    # a run whose connector offered every save (store.pressure_skip = false) says so
    ld_n = NS(run=NS(**{**vars(run), "stack": {"store": {"pressure_skip": False}}}), summary=_summ())
    assert " · lease 5 s · every save offered (no pressure rule) · pause 0.5 s · " in R._run_header(ld_n)
    ld_y = NS(run=NS(**{**vars(run), "stack": {"store": {"pressure_skip": True}}}), summary=_summ())
    assert R._run_header(ld_y) == R._run_header(ld)
    run2 = NS(run_id="r-0", width=None, protocol=None, configuration=None, lease_ttl_s=None,
              pause_s=None, torn={"calls": 2}, missing={"windows": "no windows file"}, fleet=None,
              stack=None, server_versions={}, events=None, time_scale=None)
    ld2 = NS(run=run2, summary=_summ(label="x", windows=1, invalid_windows=1, burst_windows=0))
    assert R._run_header(ld2) == (
        "**x** (`r-0`) · width — · protocol — · configuration — · lease — s · pause — s"
        " · windows 1 (1 invalid, 0 with preemption bursts)\n"
        "\nRecords lost (lines torn by a crash mid-write, skipped): {'calls': 2}\n"
        "\nNote: no windows file.\n")
    # the servers' releases; one before vLLM 0.26 says where its GPU hit share comes from
    head = "**night-w3** (`r-3`) · width 3 · protocol steady · configuration store-ram · lease 5 s" \
           " · pause 0.5 s · windows 4 (1 invalid, 2 with preemption bursts)\n"
    ld_v = NS(run=NS(**{**vars(run), "server_versions": {"coder": "0.26.0"}}), summary=_summ())
    assert R._run_header(ld_v) == head + "\nServers (GET /version): coder 0.26.0.\n"
    ld_o = NS(run=NS(**{**vars(run), "server_versions": {"reasoner": "0.26.0",
                                                          "coder": "0.24.0"}}), summary=_summ())
    assert R._run_header(ld_o) == head + (
        "\nServers (GET /version): coder 0.24.0, reasoner 0.26.0.\n"
        "\nThe GPU hit share of coder is taken from the calls' cached tokens less the store's "
        "hits (missing where the calls carry none): releases before vLLM 0.26.0 add a waiting "
        "request's prefix cache lookup to `vllm:prefix_cache_hits` at every scheduler step it "
        "waits (vLLM#43736).\n")


REUSE = {"touches": 1000, "unique_blocks": 250, "share_new": 0.25,
         "owner_share_same_session": 0.5, "owner_share_cross_session": 0.25,
         "share_same_session": 0.4, "share_cross_session": 0.35, "lease_ttl_s": 5.0,
         "aged_share": 0.125, "distance_p50_s": 12.5, "distance_p99_s": 300.0,
         "distance_max_s": 1234.5}


def test_reuse_and_missing_text():
    ld = NS(summary=_summ(reuse=REUSE))
    assert R._reuse_md(ld) == (
        "- night-w3 (`r-3`): 1000 touches, 250 blocks; new 25.00%; ownership view: same-session "
        "50.00%, cross-session 25.00%; last-toucher view: same-session 40.00%, cross-session "
        "35.00%; aged (> lease 5 s) 12.50%; reuse distance p50 12.5 s, p99 300 s, max 1234 s")
    no_owner = {k: v for k, v in REUSE.items() if not k.startswith("owner_")}
    assert "ownership view: same-session —, cross-session —;" in R._reuse_md(
        NS(summary=_summ(reuse=no_owner)))
    assert R._reuse_md(NS(summary=_summ(missing={"reuse": "ledger/meta.json missing"}))) == (
        "- night-w3: reuse ledger missing — ledger/meta.json missing")
    assert R._reuse_md(NS(summary=_summ(reuse={}))) == (
        "- night-w3: reuse ledger missing — no ledger")
    assert R._missing_md(NS(summary=_summ())) == ""
    assert R._missing_md(NS(summary=_summ(missing={"b_fig": "why b", "a_fig": "why a"}))) == (
        "Missing figures (reason):\n\n- `a_fig`: why a\n- `b_fig`: why b\n")


def test_headline_text():
    nan = {"n": 0, "mean": math.nan, "cv": math.nan}
    st = {f: dict(nan) for _, f in R.HEADLINE}
    iv = {f: {"lo": math.nan, "hi": math.nan} for _, f in R.HEADLINE}
    st["gross_saving"] = {"n": 1, "mean": 0.02, "cv": 0.0}
    st["gross_saving_disk"] = {"n": 1, "mean": 0.015, "cv": 0.0}     # 1.5 of the 2 points
    st["disk_share_of_saving"] = {"n": 1, "mean": 0.75, "cv": 0.0}   # = 1.5 / 2
    s = _summ(stats=st, interval=iv, windows=2, invalid_windows=1, reuse=REUSE)
    assert R._headline_md(NS(summary=s)) == "\n".join([
        "**night-w3**: 3 sessions, steady, 1 valid window(s) of 2", "",
        "- Gross saving: 2.00% (1 window)",
        "- Net saving: — (no valid window)",
        "- Gross saving from the disk tier: 1.50% (1 window)",
        "- Disk tier's part of the saving: 75.00% (1 window)",
        "- GPU hit share: — (no valid window)",
        "- Store hit share: — (no valid window)",
        "- Store hit rate: — (no valid window)",
        "- Refused writes: — (no valid window)",
        "- Reuse of touches: cross-session 25.00%, same-session 50.00% (ownership view: whether "
        "the session had touched the block before)"]) + "\n"
    s2 = _summ(stats=st, interval=iv, protocol=None, width=None, reuse=None)
    assert R._headline_md(NS(summary=s2)).splitlines()[0] == (
        "**night-w3**: — sessions, ?, 3 valid window(s) of 4")
    assert len(R._headline_md(NS(summary=s2)).splitlines()) == 10     # no reuse line


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """Two small runs at widths 1 and 3 and one more at width 3 elsewhere (all with ledgers)."""
    base = tmp_path_factory.mktemp("small")
    for w, s in ((1, 1), (3, 2)):
        make_run(base / "A", width=w, windows=1, window_s=60, max_prompt=2000, seed=s)
    make_run(base / "B", width=3, windows=1, window_s=60, max_prompt=2000, seed=3)
    return base


def test_build_report_blocks_in_order(small, tmp_path):
    from adev.analysis.aggregate import operating_points, sweep_table
    from adev.analysis.faults import faults_md
    from adev.analysis.shapes import judge_all, shapes_markdown
    from adev.analysis.source import beside, beside_markdown
    from adev.analysis.windows import cross_check
    loaded = load_all([small / "A"])
    summ = [ld.summary for ld in loaded]
    d = build_report(loaded)
    assert d.title == "adev report: 2 run(s)"
    assert build_report(loaded[:1], title="T").title == "T"
    b = d.blocks
    assert b[0] == "## Headline figures\n\n" + "\n".join(R._headline_md(ld) for ld in loaded)
    assert b[1] == ("## The source study beside adev\n\nThe figures the source study measured "
                    "on real GPUs at the points of these runs, beside adev's:\n\n"
                    + beside_markdown(beside(summ)))
    assert b[2] == ("## Shapes of the source\n\nWhat the source says about how its figures move "
                    "between points, held against these runs:\n\n"
                    + shapes_markdown(judge_all(summ), only_judged=True))
    # widths 1 and 3, steady: no shape's points are all present
    assert b[2].endswith("0 of 0 judged shape(s) hold; 15 could not be judged from these runs.\n")
    assert b[3] == "## Runs\n\n" + "\n".join("- " + R._run_header(ld).strip()
                                             for ld in loaded) + "\n"
    assert b[3].startswith("## Runs\n\n- **synth-w1** (`synth-w1-s1-steady`) · width 1 ·")
    assert b[4] == "## Width sweep\n\n" + R.md_table(sweep_table(summ), R.SWEEP_COLS)
    assert b[4].startswith("## Width sweep\n\n| Operating point | Width (sessions) | Runs |")
    assert [x.key for x in (b[5], b[6], b[8], b[10], b[12])] == [
        "saving_vs_width", "hit_shares_vs_width", "operating_points", "ttft_cdfs",
        "reuse_distance"]
    assert b[7] == "## 12-session operating points\n\n_(no rows)_\n"      # no width 12
    assert b[9] == "## Latency\n"
    assert b[11] == "## Reuse\n\n" + "\n".join(R._reuse_md(ld) for ld in loaded) + "\n"
    assert len(b) == 13 + 2 * 2
    for i, ld in enumerate(loaded):
        assert b[13 + 2 * i] == faults_md(ld.run, ld.summary.label)
        assert b[14 + 2 * i] == (
            f"## Per-window figures: {ld.summary.label}\n\n" + R._run_header(ld) + "\n"
            + R.md_table(ld.table, R.WINDOW_COLS) + "\n"
            + "How far this host was from the model, and scrape health:\n\n"
            + R.md_table(ld.table, R.HOST_COLS) + "\n"
            + "Cross-check over the measured span (counters vs the emulator's per-request "
            "tier split; empty without scrapes):\n\n" + R.md_table(cross_check(ld.run)) + "\n"
            + R._missing_md(ld))
        assert "| Window | Endpoint | Valid | Faults | Calls |" in b[14 + 2 * i]
        assert "| Window | Endpoint | TTFT over model, p50 |" in b[14 + 2 * i]
    # with 12-session runs: their operating points, in the table's columns
    ops = load_all([make_run(tmp_path, width=12, windows=1, window_s=60, max_prompt=2000,
                             seed=s, lease_ttl_s=ttl, ledger=False, run_id=f"op{s}")
                    for s, ttl in ((1, 5.0), (2, 60.0))], with_reuse=False)
    b12 = build_report(ops).blocks[7]
    t = operating_points([ld.summary for ld in ops], 12)
    assert len(t) == 2
    assert b12 == "## 12-session operating points\n\n" + R.md_table(t, R.OP_COLS)
    assert b12.splitlines()[2] == (
        "| Operating point | Run | Gross saving | Gross saving, quiet | Net saving | "
        "Gross saving, disk tier | Disk tier's part of saving | GPU hit share | Store hit share | "
        "Store hit rate | Refused writes | Burst windows | Windows |")


def test_build_compare_side_by_side(small):
    from adev.analysis.aggregate import sweep_table
    from adev.analysis.render import change_text, fmt, label
    a, b = load_all([small / "A"]), load_all([small / "B"])
    d = R.build_compare(a, b, "A", "B")
    assert d.title == "adev compare: A vs B"
    ta, tb = sweep_table([ld.summary for ld in a]), sweep_table([ld.summary for ld in b])
    [op] = set(ta.operating_point) | set(tb.operating_point)
    lines = d.blocks[0].splitlines()
    assert lines[:4] == ["## Side by side (means per width)", "",
                         "| Operating point | Width (sessions) | Figure | A | B | B − A |",
                         "|---|---|---|---|---|---|"]
    figs = ["gross_saving", "net_saving", "gross_saving_disk", "gpu_hit_share",
            "store_hit_share", "store_hit_rate", "refused_share", "ttft_send_p50"]
    assert len(lines) == 4 + 2 * len(figs)
    # width 1: only A has it (B's column and the delta are missing); width 3: both
    exp = []
    for w in (1, 3):
        for f in figs:
            va = float(ta[ta.width == w][f].iloc[0])
            vb = float(tb[tb.width == w][f].iloc[0]) if w == 3 else math.nan
            p = f != "ttft_send_p50"
            exp.append(f"| {op} | {w} | {label(f)} | {fmt(va, p)} | {fmt(vb, p)} | "
                       f"{change_text(vb - va, '%' if p else None)} |")
    assert lines[4:] == exp
    assert lines[4].endswith(" | — | — |") and lines[11].endswith(" | — | — |")
    assert re.fullmatch(r"\| .* \| 3 \| Gross saving \| \d+\.\d\d% \| \d+\.\d\d% \| [+-]\d+\.\d\d points \|",
                        lines[12])
    assert re.fullmatch(r"\| .* \| 3 \| TTFT p50 \(s\) \| [\d.]+ \| [\d.]+ \| [+-][\d.]+ \|", lines[-1])
    assert [getattr(x, "key", None) for x in d.blocks] == [None, "saving_vs_width", "ttft_cdfs",
                                                           None, None]
    assert sorted(k for k in d.blocks[1].series if k.endswith(": gross")) == ["A: gross",
                                                                              "B: gross"]
    assert sorted(d.blocks[2].series) == sorted(
        f"{side}: {lab}: {t}" for side, lab in (("A", "synth-w1"), ("A", "synth-w3"),
                                                ("B", "synth-w3"))
        for t in ("from send", "from schedule"))
    assert d.blocks[3] == "## A\n\n" + R.md_table(ta, R.SWEEP_COLS)
    assert d.blocks[4] == "## B\n\n" + R.md_table(tb, R.SWEEP_COLS)


def test_build_compare_without_widths(tmp_path):
    for w, s in ((1, 1), (3, 2)):
        r = make_run(tmp_path, width=w, windows=1, window_s=60, max_prompt=2000, ledger=False,
                     seed=s)
        m = json.loads((r / "manifest.json").read_text())
        del m["config"]["fleet"]["width"]
        (r / "manifest.json").write_text(json.dumps(m))
    ld = load_all([tmp_path], with_reuse=False)
    d = R.build_compare(ld, ld, "A", "B")
    assert d.blocks[0] == ("## Side by side (means per width)\n\n**Missing:** neither side has "
                           "runs with a width in its manifest\n")


def test_write_report_and_compare_default_places(small, tmp_path, monkeypatch):
    import adev.config
    monkeypatch.setattr(adev.config, "ROOT", tmp_path)
    h = R.write_report([small / "A"])
    assert h.parent == tmp_path / "results" / "reports"
    assert re.fullmatch(r"report-\d{8}-\d{6}\.html", h.name)
    assert h.with_suffix(".md").read_text().startswith("# adev report: 2 run(s)\n")
    # with_reuse=False reaches the summaries: no reuse figures although the runs have ledgers
    h2 = R.write_report([small / "A"], tmp_path / "noreuse", with_reuse=False)
    assert h2 == tmp_path / "noreuse.html"
    md = (tmp_path / "noreuse.md").read_text()
    assert "- synth-w1: reuse ledger missing — no ledger" in md
    assert "(`synth-w1-s1-steady`): " in h.with_suffix(".md").read_text()
    c = R.write_compare(small / "A", small / "B")
    assert c.parent == tmp_path / "results" / "reports"
    assert re.fullmatch(r"compare-\d{8}-\d{6}\.html", c.name)
    assert c.with_suffix(".md").read_text().startswith("# adev compare: A vs B\n")
    # the compared runs' summaries carry the reuse profile (the sweep tables' reuse columns)
    from adev.analysis.aggregate import sweep_table
    md = c.with_suffix(".md").read_text()
    for side in ("A", "B"):
        t = sweep_table([ld.summary for ld in load_all([small / side])])
        assert t["reuse_owner_share_cross_session"].notna().all()
        assert f"## {side}\n\n" + R.md_table(t, R.SWEEP_COLS) in md
    # without it: no reuse figures on either side
    c3 = R.write_compare(small / "A", small / "B", tmp_path / "cmp3", with_reuse=False)
    md = c3.with_suffix(".md").read_text()
    for side in ("A", "B"):
        t = sweep_table([ld.summary for ld in load_all([small / side], with_reuse=False)])
        assert t["reuse_owner_share_cross_session"].isna().all()
        assert f"## {side}\n\n" + R.md_table(t, R.SWEEP_COLS) in md
    # two folders of the same name are told apart
    (tmp_path / "x").mkdir()
    (small / "B").rename(tmp_path / "x" / "A")
    try:
        c2 = R.write_compare(tmp_path / "x" / "A", small / "A", tmp_path / "cmp2",
                             with_reuse=False)
    finally:
        (tmp_path / "x" / "A").rename(small / "B")
    assert c2 == tmp_path / "cmp2.html"
    md = (tmp_path / "cmp2.md").read_text()
    assert md.startswith("# adev compare: A:A vs B:A\n")
    assert "| Operating point | Width (sessions) | Figure | A:A | B:A | B:A − A:A |" in md


def test_default_report_names_are_utc(small, tmp_path, monkeypatch):
    import datetime
    import time

    import adev.config
    monkeypatch.setattr(adev.config, "ROOT", tmp_path)
    monkeypatch.setenv("TZ", "NPT-05:45")                # POSIX form: UTC+05:45, no tzdata
    time.tzset()
    try:
        h = R.write_report([small / "A"], with_reuse=False)
        c = R.write_compare(small / "A", small / "B", with_reuse=False)
    finally:
        monkeypatch.undo()
        time.tzset()
    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    for p, pre in ((h, "report-"), (c, "compare-")):
        t = datetime.datetime.strptime(p.stem[len(pre):], "%Y%m%d-%H%M%S")
        assert abs((now - t).total_seconds()) < 600, (p.name, now)


def _with_faults(names_by_window):
    """A window_table that lists the given fault names in the ALL rows of those windows."""
    from adev.analysis.windows import window_table

    def wt(run):
        t = window_table(run)
        for w, names in names_by_window.items():
            t.loc[(t["endpoint"] == "ALL") & (t["window"] == w), "faults"] = names
        return t
    return wt


def test_summarise_run_emulated_store_run_line_by_line(tmp_path, monkeypatch):
    from adev.analysis.aggregate import summarise
    from adev.analysis.render import fmt
    r = make_run(tmp_path, width=2, windows=2, window_s=120, max_prompt=20000, seed=3)
    with open(r / "calls.jsonl", "a") as f:
        f.write('{"torn": ')
    wt = _with_faults({1: "ram_kill, disk_slow", 2: "disk_slow"})
    monkeypatch.setattr(R, "window_table", wt)
    from adev.analysis.run import load_run
    run = load_run(r)
    s = summarise(run, wt(run), with_reuse=True)
    assert s.mean("store_read_over_p50") == pytest.approx(3.0)   # the synthetic host: 3x
    tag = " [across faults: disk_slow, ram_kill]"

    def line(name, fig, p=True):
        return "  " + R.figure_line(s, name, fig, p) + tag

    ru = s.reuse
    exp = [
        "run synth-w2-s3-steady: width 2, steady, 2 window(s) (0 invalid, 0 with preemption "
        "bursts)",
        line("gross saving", "gross_saving"), line("net saving", "net_saving"),
        line("disk tier's part", "gross_saving_disk"), line("GPU hit share", "gpu_hit_share"),
        line("store hit share", "store_hit_share"), line("store hit rate", "store_hit_rate"),
        line("refused writes", "refused_share"), line("TTFT p50 (s)", "ttft_send_p50", False),
        line("TTFT over the emulator's model, p50", "ttft_model_err_p50"),
        line("TTFT over the emulator's model, p99", "ttft_model_err_p99"),
        line("real store reads / tier profile, p50 (x)", "store_read_over_p50", False),
        line("real store reads / tier profile, p99 (x)", "store_read_over_p99", False),
        line("store reads behind the profile (share of calls)", "store_late_share"),
        line("model time past reads' modelled ends (model s per window)", "read_overrun_s", False),
        "  note: this host's real store reads took 3x the tier profile's time (median call; "
        "time scale 10; 2 window(s) behind); model time waited for them (held model clock), so "
        "their time reaches no figure and the run took longer on the wall; TTFT over the "
        "emulator's model says how much other host time still reached the client. "
        "bench/bench_store_io.py prints the largest time scale at which each read path keeps "
        "pace on this host.",
        f"  reuse, ownership view: same-session {fmt(ru['owner_share_same_session'], True)}, "
        f"cross-session {fmt(ru['owner_share_cross_session'], True)}; last-toucher view: "
        f"same-session {fmt(ru['share_same_session'], True)}, cross-session "
        f"{fmt(ru['share_cross_session'], True)}; aged {fmt(ru['aged_share'], True)}",
        "  counters vs emulator per-request tier split (measured span): max rel. diff 0",
        "  records lost (lines torn by a crash mid-write, skipped): {'calls': 1}"]
    got = R.summarise_run(r).splitlines()
    assert got == exp
    assert got[1].startswith("  gross saving: ") and got[1].endswith(" over 2 windows)" + tag)
    # a held clock that let model time pass reads' modelled ends says how much host time leaked
    from adev.analysis import aggregate

    def leaky(run, t, with_reuse=True):
        s = aggregate.summarise(run, t, with_reuse=with_reuse)
        s.stats = dict(s.stats, read_overrun_s={"n": 2, "mean": 0.25, "cv": 0.0})
        return s
    monkeypatch.setattr(R, "summarise", leaky)
    note = next(x for x in R.summarise_run(r).splitlines() if x.startswith("  note:"))
    assert ("model time waited for them (held model clock), so their time reaches no figure "
            "(but model time passed their modelled ends by 0.25 model s per window before they "
            "ended: that much of the host's time is in the figures) and the run") in note


def test_summarise_run_free_clock_bursts_cross_check_and_faults(tmp_path, monkeypatch):
    import dataclasses

    from adev.analysis import aggregate
    r = make_run(tmp_path, width=2, windows=2, window_s=120, max_prompt=20000, seed=3,
                 ledger=False)
    m = json.loads((r / "manifest.json").read_text())
    m["config"]["stack"]["model_clock"] = "free"
    (r / "manifest.json").write_text(json.dumps(m))

    def summ(run, t, with_reuse=True):
        s = aggregate.summarise(run, t, with_reuse=with_reuse)
        stats = dict(s.stats, store_hit_rate={"n": 0, "mean": math.nan, "cv": math.nan})
        quiet = dict(s.quiet, gross_saving={"n": 1, "mean": 0.0123, "cv": 0.0})
        return dataclasses.replace(s, burst_windows=1, stats=stats, quiet=quiet, xcheck={
            "xcheck_gpu_rel": 0.02, "xcheck_store_rel": math.nan, "xcheck_disk_rel": None,
            "store_load_failed_tokens": 1234.4})
    rows = [
        {"window": "before", "valid": "outside", "faults": "none", "failed_calls": 2,
         "store_error_calls": 1, "sessions_ended_llm_error": 0},
        {"window": 1, "valid": True, "faults": "none", "failed_calls": 0, "store_error_calls": 0,
         "sessions_ended_llm_error": 0},
        {"window": 2, "valid": False, "faults": "ram_kill", "failed_calls": 3,
         "store_error_calls": 0, "sessions_ended_llm_error": 1},
        {"window": 3, "valid": True, "faults": "none", "failed_calls": 0, "store_error_calls": 0,
         "sessions_ended_llm_error": 2},
        {"window": 4, "valid": True, "faults": "none", "failed_calls": 0, "store_error_calls": 5,
         "sessions_ended_llm_error": 0},
        {"window": 5, "valid": True, "faults": "none", "failed_calls": 1, "store_error_calls": 0,
         "sessions_ended_llm_error": 0},
        {"window": 6, "valid": True, "faults": "disk_slow", "failed_calls": 0,
         "store_error_calls": 0, "sessions_ended_llm_error": 0},
        {"window": "after", "valid": "outside", "faults": "none", "failed_calls": 0,
         "store_error_calls": 0, "sessions_ended_llm_error": 4}]
    monkeypatch.setattr(R, "summarise", summ)
    monkeypatch.setattr(R, "fault_rows", lambda run: rows)
    wt = _with_faults({1: "ram_kill"})

    def wt2(run):   # a name in an endpoint's row only: not in the tag (the ALL rows are read)
        t = wt(run)
        t.loc[(t["endpoint"] == "coder") & (t["window"] == 2), "faults"] = "coder_only"
        return t
    monkeypatch.setattr(R, "window_table", wt2)
    got = R.summarise_run(r).splitlines()
    assert got[0] == ("run synth-w2-s3-steady: width 2, steady, 2 window(s) (0 invalid, "
                      "1 with preemption bursts)")
    assert got[1].endswith(" [across faults: ram_kill]")
    # a figure without a valid window: no fault tag
    assert got[6] == "  store hit rate: — (no valid window)"
    i = next(i for i, x in enumerate(got) if x.startswith("  note: "))
    assert got[i:] == [
        "  note: this host's real store reads took 3x the tier profile's time (median call; "
        "time scale 10; 2 window(s) behind); first tokens waited for them (free model clock), so "
        "TTFT and busy time include host time. bench/bench_store_io.py prints the largest time "
        "scale at which each read path keeps pace on this host.",
        "  gross saving, quiet windows: 1.23%",
        "  counters vs emulator per-request tier split (measured span): max rel. diff 0.02 "
        "(> 1%); 1234 store-hit tokens failed to load (recomputed, not counted as "
        "store-served)",
        "  before the windows: 2 failed calls, 1 calls with store errors, 0 sessions ended with "
        "llm_error",
        "  window 2: INVALID, faults: ram_kill; 3 failed calls, 0 calls with store errors, "
        "1 sessions ended with llm_error",
        "  window 3: valid, faults: none; 0 failed calls, 0 calls with store errors, 2 sessions "
        "ended with llm_error",
        "  window 4: valid, faults: none; 0 failed calls, 5 calls with store errors, 0 sessions "
        "ended with llm_error",
        "  window 5: valid, faults: none; 1 failed calls, 0 calls with store errors, 0 sessions "
        "ended with llm_error",
        "  window 6: valid, faults: disk_slow; 0 failed calls, 0 calls with store errors, "
        "0 sessions ended with llm_error",
        "  after the windows: 0 failed calls, 0 calls with store errors, 4 sessions ended with "
        "llm_error"]


def test_summarise_run_at_the_thresholds(tmp_path, monkeypatch):
    """Reads exactly as fast as the profile (no note), a cross-check exactly 1% off (not flagged),
    no failed loads, bursts without a quiet window."""
    import dataclasses

    from adev.analysis import aggregate
    r = make_run(tmp_path, width=2, windows=2, window_s=120, max_prompt=20000, seed=3,
                 ledger=False)
    m = json.loads((r / "manifest.json").read_text())
    del m["config"]["stack"]["model_clock"]
    (r / "manifest.json").write_text(json.dumps(m))

    def summ(run, t, with_reuse=True):
        s = aggregate.summarise(run, t, with_reuse=with_reuse)
        stats = dict(s.stats, store_read_over_p50=dict(s.stats["store_read_over_p50"], mean=1.0))
        quiet = dict(s.quiet, gross_saving={"n": 0, "mean": math.nan, "cv": math.nan})
        return dataclasses.replace(s, burst_windows=2, stats=stats, quiet=quiet, xcheck={
            "xcheck_gpu_rel": 0.005, "xcheck_store_rel": 0.01, "xcheck_disk_rel": 0.0,
            "store_load_failed_tokens": 0.0})
    monkeypatch.setattr(R, "summarise", summ)
    got = R.summarise_run(r).splitlines()
    assert not any(x.startswith("  note:") or "quiet windows" in x for x in got)
    assert got[-1] == "  counters vs emulator per-request tier split (measured span): max rel. diff 0.01"
    assert got[-3].startswith("  store reads behind the profile (share of calls): ")
    assert got[-2].startswith("  model time past reads' modelled ends (model s per window): 0 ")
    # no faults: no tag
    assert re.fullmatch(r"  gross saving: \d+\.\d\d% \(CV \d+\.\d\d%, 95% t-interval "
                        r"-?\d+\.\d\d%\.\.\d+\.\d\d% over 2 windows\)", got[1]), got[1]

    def summ2(run, t, with_reuse=True):   # reads 1.5x the profile; the disk tier is worst
        s = aggregate.summarise(run, t, with_reuse=with_reuse)
        stats = dict(s.stats, store_read_over_p50=dict(s.stats["store_read_over_p50"], mean=1.5))
        return dataclasses.replace(s, stats=stats, xcheck={
            "xcheck_gpu_rel": 0.001, "xcheck_store_rel": 0.002, "xcheck_disk_rel": 0.05,
            "store_load_failed_tokens": math.nan})
    monkeypatch.setattr(R, "summarise", summ2)
    got = R.summarise_run(r).splitlines()
    assert [x[:57] for x in got if x.startswith("  note:")] == [
        "  note: this host's real store reads took 1.5x the tier p"]
    assert got[-1] == ("  counters vs emulator per-request tier split (measured span): max rel. "
                       "diff 0.05 (> 1%)")
    # the model clock defaults to free when the stack does not say
    m["config"]["stack"]["model_clock"] = None
    monkeypatch.setattr(R, "summarise", aggregate.summarise)
    (r / "manifest.json").write_text(json.dumps(m))
    assert "first tokens waited for them (free model clock)" in R.summarise_run(r)


def test_summarise_run_without_emulator_fields_or_windows(tmp_path):
    r = make_run(tmp_path, width=2, windows=1, window_s=60, max_prompt=2000, seed=4,
                 emulator_fields=False, ledger=False, protocol="batch")
    (r / "windows.jsonl").unlink()
    m = json.loads((r / "manifest.json").read_text())
    del m["protocol"], m["config"]["fleet"]["protocol"]
    (r / "manifest.json").write_text(json.dumps(m))
    nv = "— (no valid window)"
    assert R.summarise_run(r).splitlines() == [
        "run synth-w2-s4-batch: width 2, ?, 1 window(s) (1 invalid, 0 with preemption bursts)",
        f"  gross saving: {nv}", f"  net saving: {nv}", f"  disk tier's part: {nv}",
        f"  GPU hit share: {nv}", f"  store hit share: {nv}", f"  store hit rate: {nv}",
        f"  refused writes: {nv}", f"  TTFT p50 (s): {nv}",
        f"  note: {r / 'windows.jsonl'} missing or empty: the whole run is treated as one window, "
        "invalid (a fleet run without windows: stopped before its first window, or the file is "
        "lost)"]


def _parse(argv):
    import argparse
    ap = argparse.ArgumentParser(prog="adev")
    R.register(ap.add_subparsers(dest="cmd"))
    return ap.parse_args(["report", *argv])


def test_report_command_line(small, tmp_path, capsys, monkeypatch):
    a = _parse([str(small / "A"), "--out", str(tmp_path / "o"), "--no-reuse"])
    assert (a.runs, a.compare, a.out, a.no_reuse) == ([str(small / "A")], None,
                                                      str(tmp_path / "o"), True)
    assert a.func is R._main
    b = _parse(["--compare", "x", "y"])
    assert (b.runs, b.compare, b.out, b.no_reuse) == ([], ["x", "y"], None, False)
    calls = []
    monkeypatch.setattr(R, "write_report", lambda *x: calls.append(("report", *x))
                        or tmp_path / "rep.html")
    monkeypatch.setattr(R, "write_compare", lambda *x: calls.append(("compare", *x))
                        or tmp_path / "cmp.html")
    R.notes.append("stale note")                        # cleared at the start
    assert R._main(a) == 0
    assert calls == [("report", [str(small / "A")], str(tmp_path / "o"), False)]
    out = capsys.readouterr()
    assert out.out == f"{tmp_path / 'rep.md'}\n{tmp_path / 'rep.html'}\n" and out.err == ""
    assert R._main(_parse(["--compare", "x", "y"])) == 0
    assert calls[-1] == ("compare", "x", "y", None, True)
    assert capsys.readouterr().out == f"{tmp_path / 'cmp.md'}\n{tmp_path / 'cmp.html'}\n"
    assert R._main(_parse([])) == 2
    assert capsys.readouterr().err == "adev report: give RUN [RUN ...] or --compare A B\n"


def test_report_command_line_errors_and_notes(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(R, "notes", R.notes)            # restored after the test
    assert R._main(_parse([str(tmp_path / "gone")])) == 2
    assert capsys.readouterr().err == f"adev report: run directory not found: {tmp_path / 'gone'}\n"
    r = make_run(tmp_path, width=1, windows=1, window_s=60, max_prompt=2000, ledger=False)
    with open(r / "calls.jsonl", "a") as f:
        f.write("not json\n")                           # a whole bad line: refused
    assert R._main(_parse([str(r)])) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"adev report: {r / 'calls.jsonl'}: line ") and err.count("\n") == 1

    def torn(paths, out, with_reuse):
        R.notes.append("a note")
        return tmp_path / "x.html"
    monkeypatch.setattr(R, "write_report", torn)
    assert R._main(_parse([str(r)])) == 0
    assert capsys.readouterr().err == "adev report: a note\n"


def test_build_compare_widthless_runs_and_point_order(tmp_path):
    """A side with a run without a width (its table's widths become floats) still lists its
    widths, as integers; rows go by operating point, then width."""
    a = [make_run(tmp_path / "A", width=3, windows=1, window_s=60, max_prompt=2000, seed=1,
                  ledger=False),
         make_run(tmp_path / "A", width=2, windows=1, window_s=60, max_prompt=2000, seed=2,
                  ledger=False, run_id="nowidth")]
    m = json.loads((a[1] / "manifest.json").read_text())
    del m["config"]["fleet"]["width"]
    (a[1] / "manifest.json").write_text(json.dumps(m))
    make_run(tmp_path / "B", width=1, windows=1, window_s=60, max_prompt=2000, seed=3,
             ledger=False, lease_ttl_s=60.0)
    la, lb = load_all([tmp_path / "A"], False), load_all([tmp_path / "B"], False)
    d = R.build_compare(la, lb, "A", "B")
    rows = [ln.split(" | ")[:3] for ln in d.blocks[0].splitlines()[4:]]
    assert len(rows) == 16
    assert [r[0] for r in rows[::8]] == ["| store-ram+disk (local-raid0), lease 5 s, pause 0 s",
                                         "| store-ram+disk (local-raid0), lease 60 s, pause 0 s"]
    assert [(r[1], r[2]) for r in rows[::8]] == [("3", "Gross saving"), ("1", "Gross saving")]


def test_report_help_text(monkeypatch):
    """What ``adev report --help`` prints (and ``adev --help`` says of the command)."""
    import argparse
    monkeypatch.setenv("COLUMNS", "100")
    ap = argparse.ArgumentParser(prog="adev")
    sub = ap.add_subparsers(dest="cmd")
    R.register(sub)
    assert sub.choices["report"].format_help() == (
        "usage: adev report [-h] [--compare A B] [--out OUT] [--no-reuse] [RUN ...]\n\n"
        "``adev report RUN [RUN ...]`` and ``adev report --compare A B``: markdown + one "
        "self-contained\nHTML page.\n\n"
        "positional arguments:\n"
        "  RUN            run directory, or a folder of run directories (a night)\n\n"
        "options:\n"
        "  -h, --help     show this help message and exit\n"
        "  --compare A B  compare two runs or two folders of runs (nights)\n"
        "  --out OUT      output path without suffix (writes OUT.md, OUT.html, OUT_files/)\n"
        "  --no-reuse     skip the reuse ledger\n")
    assert "    report    tables and plots of runs (markdown + HTML)\n" in ap.format_help()


def test_clock_md_held_share_and_the_heartbeat_in_model_time():
    import pandas as pd
    ev = pd.DataFrame([{"t": 10.0, "event": "model_clock_held",
                        "detail": {"held_wall_s": 100.0, "wall_s": 300.0, "held_share": 0.3333}},
                       {"t": 20.0, "event": "model_clock_held",
                        "detail": {"held_wall_s": 25.0, "wall_s": 200.0, "held_share": 0.125}},
                       {"t": 20.0, "event": "stack_cpu", "detail": {"wall_s": 1.0}}])
    r = NS(events=ev, time_scale=10.0, configuration="store-ram+disk",
           stack={"store": {"offload_heartbeat_s": 10.0}})
    # two stacks: 125 of 500 wall s held = 25%; model time 10 x 0.75 = 7.5 model s per wall s;
    # the heartbeat every round(10 / 10) = 1 wall s = 7.5 model s
    assert R.clock_md(r) == (
        "\nModel clock held 25.00% of the wall time (125 of 500 s): model time ran 7.5 model s "
        "per wall second against the time scale's 10. The disk tier's offload heartbeat (every 1 "
        "wall s) came every 7.5 model s (10 with the clock never held; configured 10): objects "
        "chosen for eviction wait for it, so the figures that turn on RAM turnover (refused "
        "writes, the store's hits under a long lease) move with it.\n")
    # at time scale 2 the heartbeat is round(10 / 2) = 5 wall s: 5 x 2 x 0.75 = 7.5 model s
    r2 = NS(events=ev, time_scale=2.0, configuration="store-ram+disk",
            stack={"store": {"offload_heartbeat_s": 10.0}})
    assert "(every 5 wall s) came every 7.5 model s (10 with" in R.clock_md(r2)
    # no disk tier: the clock only
    r3 = NS(events=ev, time_scale=10.0, configuration="store-ram", stack={"store": {}})
    assert R.clock_md(r3).endswith("against the time scale's 10.\n")
    # no held-clock event (a free clock, or a run recorded before it): nothing
    assert R.clock_md(NS(events=ev[ev.event == "stack_cpu"], time_scale=10.0,
                          configuration="store-ram+disk", stack={})) == ""
    assert R.clock_md(NS(events=pd.DataFrame(), time_scale=10.0, configuration=None,
                          stack=None)) == ""
