"""The report's first screen (sgemm_lab.report.summary): which stage to use per class of shapes, chosen by
coverage and then speed, with its caveats, and the table of contents; on made-up rows and on the committed
reference's report."""

import re

import pandas as pd
from conftest import ROOT

from sgemm_lab.config.records import Shape
from sgemm_lab.report.markdown import anchor
from sgemm_lab.report.summary import _cell, contents, pick

A, B, C = Shape(m=100, n=200, k=300), Shape(m=400, n=500, k=600), Shape(m=700, n=800, k=900)


def _row(kernel, s, median, iqr=0.0, verified=True):
    return {"kernel": kernel, "m": s.m, "n": s.n, "k": s.k, "median_ms": median, "iqr_ms": iqr, "verified": verified,
            "status": "ok", "tflops": 2 * s.m * s.n * s.k / median / 1e9}


def test_the_stage_on_more_shapes_wins_then_the_faster_one():
    ok = pd.DataFrame([_row("cublas", s, 1.0) for s in (A, B, C)]
                      + [_row("fast", A, 0.5), _row("fast", B, 0.5)]  # 2x, but not timed at C
                      + [_row("wide", s, 0.9) for s in (A, B, C)]
                      + [_row("wider", s, t) for s, t in ((A, 0.8), (B, 1.25), (C, 1.0))])
    stage, points, timed = pick(ok, [A, B, C], "cublas", ["fast", "wide", "wider"])
    assert (stage, timed) == ("wide", 3) and [round(r, 3) for r, _, _ in points] == [1.111] * 3
    assert pick(ok, [A, B, C], "cublas", ["nowhere"]) is None
    assert pick(ok, [Shape(m=1, n=1, k=1)], "cublas", ["wide"]) is None  # no cuBLAS timing there


def test_a_result_that_did_not_verify_is_never_the_stage_to_use():
    ok = pd.DataFrame([_row("cublas", A, 1.0), _row("wrong", A, 0.1, verified=False), _row("right", A, 2.0)])
    assert pick(ok, [A], "cublas", ["wrong", "right"])[0] == "right"


def test_the_caveats_name_the_slow_the_unsteady_and_the_uncovered_shapes(lab):
    ok = pd.DataFrame([_row("cublas", s, 1.0) for s in (A, B, C)]
                      + [_row("st", A, 2.0), _row("st", B, 0.5, iqr=0.2)])
    text, stage, notes = _cell(lab, ok, None, [A, B, C], "cublas", ["st"])
    assert stage == "st" and text.startswith("`st` 1.00× (min 0.50× at 100×200×300)")
    assert notes == ["timed on 2 of the 3 shapes", "below cuBLAS on 1 of 2", "unsteady at 400×500×600"]
    assert _cell(lab, ok, None, [A], "cublas_tf32", ["st"]) == ("not timed", None, [])


def test_the_contents_link_every_second_level_heading():
    lines = ["# Title", "## Summary: which stage", "text", "## At 4096³", "### not listed", "## Where the time goes (Nsight)"]
    (toc, _) = contents(lines)
    assert re.findall(r"\]\(#([^)]+)\)", toc) == ["summary-which-stage", "at-4096³", "where-the-time-goes-nsight"]
    assert anchor("Appendix: every stage") == "appendix-every-stage"


def test_the_committed_reference_answers_on_its_first_screen():
    lines = (ROOT / "reports" / "h100" / "report.md").read_text().splitlines()
    first = lines[:40]
    assert "## Summary: which stage for which shapes" in first
    toc = next(line for line in first if line.startswith("**Contents:**"))
    heads = [line[3:] for line in lines if line.startswith("## ")]
    assert len(re.findall(r"\]\(#", toc)) == len(heads)
    table = [line for line in first if line.startswith("| ") and "×" in line]
    assert {row.split(" | ")[0][2:] for row in table} >= {"small output, long K", "skinny (GEMV-like)", "short K",
                                                           "odd sizes", "tall-skinny", "large squares"}
    assert heads[-1] == "Appendix: every stage"  # the walls of rows last


def test_a_point_is_unsteady_by_its_spread_or_by_its_clock_drop():
    from sgemm_lab.report.numbers import UNSTEADY_MARK, mark, unsteady, unsteady_note

    steady = {"median_ms": 1.0, "iqr_ms": 0.05, "sm_clock_before_mhz": 1980, "sm_clock_after_mhz": 1900}
    assert not unsteady(steady) and mark(steady, None) == ""
    assert unsteady({**steady, "iqr_ms": 0.11}) and unsteady(steady, {**steady, "sm_clock_after_mhz": 1530})
    assert not unsteady({"median_ms": 1.0, "iqr_ms": float("nan")})  # CPU rows: no quartiles, no clocks
    assert mark({**steady, "iqr_ms": 0.5}) == UNSTEADY_MARK
    assert unsteady_note("| 1.0 |") == [] and unsteady_note(f"| 1.0{UNSTEADY_MARK} |")[1].startswith(UNSTEADY_MARK)


def test_the_reference_marks_its_unsteady_points_where_it_shows_them():
    bench = pd.read_csv(ROOT / "reports" / "h100" / "bench.csv")
    from sgemm_lab.report.numbers import UNSTEADY_MARK, unsteady

    ok = bench[bench.status == "ok"]
    shaky = ok[pd.Series([unsteady(r) for _, r in ok.iterrows()], index=ok.index, dtype=bool)]
    assert len(shaky)  # (the reference has some: cuBLAS TF32's clock drop at 4096^3 among them)
    report = (ROOT / "reports" / "h100" / "report.md").read_text()
    head = report.split("## Ladder")[0]
    at = report.split("## At ")[1].split("\n## ")[0]
    for r in shaky[(shaky.m == 4096) & (shaky.n == 4096) & (shaky.k == 4096)].itertuples():
        assert f"| `{r.kernel}` | {r.tflops:.2f}{UNSTEADY_MARK} |" in at
    assert UNSTEADY_MARK not in head or "unsteady:" in head
