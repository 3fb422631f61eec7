"""adev report (markdown + self-contained HTML), --compare, summaries, notebooks."""
from __future__ import annotations

import re

import pytest

from adev.analysis.report import summarise_run, write_compare, write_report
from adev.cli import main as adev_main
from adev.config import ROOT

from .synth import make_run


@pytest.fixture(scope="module")
def night(tmp_path_factory):
    base = tmp_path_factory.mktemp("night")
    for w in (1, 3):
        make_run(base, width=w, windows=2, window_s=120, seed=w, max_prompt=20000)
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
    # the width-1 run sits beside the source's 45.0% GPU / 38.0% store hit share at one session
    assert re.search(r"\| 1 session \| GPU hit share \| 45\.00% \| \d+\.\d\d% \|", md)
    assert re.search(r"\| 1 session \| Store hit share \| 38\.00% \|", md)
    # HTML: headings in words, no snake_case column names, every table scrolls inside the page
    assert "gross_saving_lo" not in html and "Gross saving, 95% low" in html
    assert html.count("<table>") == html.count("<div class='tw'><table>") > 0
    for png in re.findall(r"\((rep_files/[^)]+\.png)\)", md):
        assert (tmp_path / png).exists()


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
    assert s.startswith("run ") and "gross saving:" in s and "reuse, ownership view: same-session" in s and "last-toucher view" in s
    assert "max rel. diff" in s
    # the synthetic host read 3x slower than the tier profile: said, with where to look next
    assert re.search(r"real store reads / tier profile, p50 \(x\): 3(\.0+)? ", s), s
    assert "bench/bench_store_io.py" in s


NOTEBOOKS = sorted((ROOT / "results").glob("*.ipynb"))


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebooks_execute(nb_path, night, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient
    monkeypatch.setenv("ADEV_RUNS", str(night))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(nb_path, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT)}}).execute()
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                   for o in c.get("outputs", []))
    assert "2 run(s)" in text


def test_notebooks_present():
    assert {p.stem for p in NOTEBOOKS} >= {"width_curve", "operating_points", "reuse_profile"}
