"""adev report (markdown + self-contained HTML), --compare, summaries, notebooks."""
from __future__ import annotations

import json
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
    assert "| operating point | width | figure |" in md and "gross_saving" in md
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
