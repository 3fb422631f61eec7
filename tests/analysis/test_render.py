"""Rendering of reports: the exact text a reader sees (headings, formatted figures, tables, the
markdown and HTML documents and the files written), each expected string written out by hand."""
from __future__ import annotations

import base64
import math

import numpy as np
import pandas as pd

from adev.analysis.plots import Figure
from adev.analysis.render import (
    CSS,
    Doc,
    change_text,
    fmt,
    label,
    md_table,
    md_to_html,
    unit_of,
    write,
)


def test_label_words_or_the_column_name():
    assert label("gross_saving") == "Gross saving"
    assert label("busy_s") == "Busy (s)"
    assert label("store_read_over_p50") == "Store reads / profile, p50 (×)"
    assert label("no_such_column") == "no_such_column"
    # the counters cross-check's columns, in words
    assert label("srv_store_disk_tokens") == "Store disk tokens, counters"
    assert label("span_from") == "From (model s)"
    # byte volumes carry their unit in each value, not in the heading
    assert label("store_load_bytes") == "Store loads"


def test_unit_of_columns():
    assert unit_of("gross_saving") == "%" and unit_of("xcheck_gpu_rel") == "%"
    assert unit_of("store_load_bytes") == "B" and unit_of("stored_bytes_per_call") == "B"
    assert unit_of("disk_read_rate_Bps") == "B/s"
    assert unit_of("srv_gpu_tokens") == "count"
    assert unit_of("busy_s") is None and unit_of("window") is None


def test_fmt_shares_floats_missing_and_others():
    assert fmt(None) == "—" and fmt(None, True) == "—"
    assert fmt(math.nan) == "—" and fmt(math.nan, True) == "—"
    assert fmt(np.float64("nan"), True) == "—"
    # a share with pctg: x 100, two decimals, a percent sign
    assert fmt(0.1234, True) == "12.34%"
    assert fmt(0.5, True) == "50.00%"
    assert fmt(np.float64(0.0028), True) == "0.28%"
    assert fmt(-0.01, True) == "-1.00%"
    # other floats: 4 significant digits
    assert fmt(0.1234) == "0.1234"
    assert fmt(12.5) == "12.5"
    assert fmt(3.0) == "3"
    # 10,000 or more: a whole number with separators, never exponent notation
    assert fmt(123456.0) == "123,456"
    assert fmt(9999.4) == "9999"
    assert fmt(-25000.0) == "-25,000"
    assert fmt(2.718281828) == "2.718"
    # not floats: as str, pctg ignored
    assert fmt(3) == "3" and fmt(3, True) == "3"
    assert fmt("x") == "x" and fmt(True) == "True"
    assert fmt(np.int64(123456)) == "123456"


def test_fmt_units():
    # percentages: rounding noise around zero prints as 0.00%, never -0.00% or 1.3e-16
    assert fmt(1.336e-16, unit="%") == "0.00%" and fmt(-1.2e-17, unit="%") == "0.00%"
    assert fmt(-0.004, unit="%") == "-0.40%" and fmt(1, unit="%") == "100.00%"
    # bytes: 3 significant digits, decimal prefixes; under 1 kB whole bytes
    assert fmt(1.5e9, unit="B") == "1.50 GB"
    assert fmt(6144, unit="B") == "6.14 kB"
    assert fmt(150e6, unit="B") == "150 MB"
    assert fmt(40.97e12, unit="B") == "41.0 TB"
    assert fmt(999.7e9, unit="B") == "1.00 TB"     # rounds up into the next prefix
    assert fmt(512.0, unit="B") == "512 B" and fmt(0.0, unit="B") == "0 B"
    assert fmt(5.45e9, unit="B/s") == "5.45 GB/s"
    assert fmt(np.int64(2_500_000), unit="B") == "2.50 MB"
    # counts: whole numbers with separators, ints and floats alike
    assert fmt(6.004e6, unit="count") == "6,004,000"
    assert fmt(np.int64(3478), unit="count") == "3,478"
    assert fmt(12.6, unit="count") == "13"
    # missing stays missing whatever the unit
    assert fmt(math.nan, unit="%") == "—"
    assert fmt(math.nan, unit="B") == "—" and fmt(None, unit="count") == "—"


def test_change_text_points_and_units():
    assert change_text(0.0125, "%") == "+1.25 points"
    assert change_text(-0.2, "%") == "-20.00 points"
    assert change_text(-1e-17, "%") == "+0.00 points"
    assert change_text(-1.5e9, "B") == "-1.50 GB"
    assert change_text(2500.0, "count") == "+2,500"
    assert change_text(-0.1234) == "-0.1234" and change_text(3.0) == "+3"
    assert change_text(math.nan, "%") == "—" and change_text(None) == "—"


def test_md_table_headings_rows_and_column_choice():
    df = pd.DataFrame({"window": [0, 1], "gross_saving": [0.1234, math.nan],
                       "busy_s": [12.5, 3.0], "x": ["a", "b"]})
    # chosen columns in the given order; a column the frame lacks is left out
    assert md_table(df, ["busy_s", "window", "gross_saving", "nope"]) == (
        "| Busy (s) | Window | Gross saving |\n"
        "|---|---|---|\n"
        "| 12.5 | 0 | 12.34% |\n"
        "| 3 | 1 | — |\n")
    # no columns named: all of them, unlabelled ones under their own name
    assert md_table(df) == (
        "| Window | Gross saving | Busy (s) | x |\n"
        "|---|---|---|---|\n"
        "| 0 | 12.34% | 12.5 | a |\n"
        "| 1 | — | 3 | b |\n")
    assert md_table(df, []) == md_table(df)
    # only the share columns are printed as percentages
    one = pd.DataFrame({"busy_share": [0.25], "busy_s": [0.25]})
    assert md_table(one) == "| Busy share | Busy (s) |\n|---|---|\n| 25.00% | 0.25 |\n"
    # every value in its column's unit: token counts, bytes, relative differences
    xc = pd.DataFrame({"endpoint": ["coder"], "srv_gpu_tokens": [6.004e6],
                       "store_load_bytes": [1.5e9], "xcheck_disk_rel": [1.336e-16]})
    assert md_table(xc) == ("| Endpoint | GPU tokens, counters | Store loads | Cross-check disk (rel.) |\n"
                            "|---|---|---|---|\n"
                            "| coder | 6,004,000 | 1.50 GB | 0.00% |\n")
    assert md_table(pd.DataFrame()) == "_(no rows)_\n"
    assert md_table(pd.DataFrame({"window": []})) == "_(no rows)_\n"
    assert md_table(None) == "_(no rows)_\n"


def _doc():
    return Doc("A <b> & c", ["intro text\n",
                             Figure("k1", "Fig <one>", reason="no <runs>"),
                             Figure("k2", "Two", png=b"\x89PNG", caption="cap <i>"),
                             Figure("k3", "Three", png=b"PNG3")])


def test_doc_markdown_with_and_without_a_figure_folder(tmp_path):
    d = _doc()
    # without a folder the PNGs are not linked (nowhere to put them); missing ones say why
    assert d.md() == ("# A <b> & c\n\nintro text\n\n### Fig <one>\n\n**Missing:** no <runs>\n\n"
                      "### Two\n\n_cap <i>_\n\n### Three\n")
    figs = tmp_path / "deep" / "figs"
    assert d.md(figs, "rel/") == (
        "# A <b> & c\n\nintro text\n\n### Fig <one>\n\n**Missing:** no <runs>\n\n"
        "### Two\n\n![Two](rel/k2.png)\n\n_cap <i>_\n\n### Three\n\n![Three](rel/k3.png)\n")
    assert (figs / "k2.png").read_bytes() == b"\x89PNG"
    assert (figs / "k3.png").read_bytes() == b"PNG3"
    assert sorted(p.name for p in figs.iterdir()) == ["k2.png", "k3.png"]
    assert d.md(figs).count("](k2.png)") == 1         # rel defaults to ""


def test_doc_html_escapes_and_inlines():
    d = _doc()
    d.blocks.append(Figure("k4", "Four"))              # no PNG and no reason
    assert d.html() == "\n".join([
        "<!doctype html><html><head><meta charset='utf-8'><title>A &lt;b&gt; &amp; c</title>"
        f"<style>{CSS}</style></head><body>",
        "<h1>A &lt;b&gt; &amp; c</h1>",
        "<p>intro text</p>",
        "<h3>Fig &lt;one&gt;</h3>",
        "<p class='missing'><b>Missing:</b> no &lt;runs&gt;</p>",
        "<h3>Two</h3>",
        "<img alt='Two' src='data:image/png;base64,iVBORw=='>",
        "<p><i>cap &lt;i&gt;</i></p>",
        "<h3>Three</h3>",
        f"<img alt='Three' src='data:image/png;base64,{base64.b64encode(b'PNG3').decode()}'>",
        "<h3>Four</h3>",
        "<p class='missing'><b>Missing:</b> </p>",
        "</body></html>"])
    assert base64.b64encode(b"\x89PNG").decode() == "iVBORw=="


def test_md_to_html_tables_scroll_and_raw_html_is_text():
    assert md_to_html("| a | b |\n|---|---|\n| <x> | \"q\" |\n") == (
        "<div class='tw'><table>\n<thead>\n<tr>\n<th>a</th>\n<th>b</th>\n</tr>\n</thead>\n"
        "<tbody>\n<tr>\n<td>&lt;x&gt;</td>\n<td>\"q\"</td>\n</tr>\n</tbody>\n</table></div>")
    assert md_to_html("## Head\n\n<script>x</script> & 'y'") == (
        "<h2>Head</h2>\n<p>&lt;script&gt;x&lt;/script&gt; &amp; 'y'</p>")


def test_write_markdown_figures_and_html(tmp_path):
    d = _doc()
    h = write(d, tmp_path / "out" / "rep")
    assert h == tmp_path / "out" / "rep.html"
    assert h.read_text() == d.html()
    md = (tmp_path / "out" / "rep.md").read_text()
    assert md == d.md(tmp_path / "elsewhere", "rep_files/")
    assert "![Two](rep_files/k2.png)" in md
    assert (tmp_path / "out" / "rep_files" / "k2.png").read_bytes() == b"\x89PNG"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["rep.html", "rep.md",
                                                                     "rep_files"]


def test_md_to_html_is_html_not_xhtml():
    # the page is HTML5 (<!doctype html>): void elements without the XHTML slash
    assert md_to_html("a  \nb\n\n***\n") == "<p>a<br>\nb</p>\n<hr>"


def test_write_makes_missing_folders_and_writes_again(tmp_path):
    d = _doc()
    h = write(d, tmp_path / "a" / "b" / "rep")          # two missing levels
    assert h == tmp_path / "a" / "b" / "rep.html" and h.read_text() == d.html()
    d.title = "again"
    h2 = write(d, tmp_path / "a" / "b" / "rep")         # the folder exists: overwritten
    assert h2 == h and h.read_text().count("<h1>again</h1>") == 1
    assert (tmp_path / "a" / "b" / "rep.md").read_text().startswith("# again\n")
