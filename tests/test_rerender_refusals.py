"""A re-render never destroys the run it was asked to draw again, and a comparison never takes a value no
measurement gives: a damaged or impossible committed table, a figure that cannot be drawn or a full disk
end in one line, and every file under ``reports/<run>/`` is as it was, byte for byte."""

import errno
import hashlib
import shutil
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT

from sgemm_lab.errors import LabError
from sgemm_lab.results import io
from sgemm_lab.report import compare
from sgemm_lab.report import step as report_step

REF = ROOT / "reports" / "h100"


def _snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """A copy of the committed H100 reference (its tables, figures and report)."""
    dst = tmp_path / "reports" / "h100"
    shutil.copytree(REF, dst, ignore=shutil.ignore_patterns("report.html"))
    return dst


def _rerender(lab, run_dir):
    return report_step.rerender(replace(lab, run=run_dir.name), run_dir=run_dir, html=False)


def _edit_bench(run_dir: Path, change) -> None:
    df = pd.read_csv(run_dir / "bench.csv", dtype=str, keep_default_na=False)
    df = change(df)
    df.to_csv(run_dir / "bench.csv", index=False)


def _first_ok(df):
    return df.index[df.status == "ok"][0]


CASES = {
    "a word in tflops": lambda df: df.assign(tflops=df.tflops.where(df.index != _first_ok(df), "fast")),
    "a header alone": lambda df: df.iloc[0:0],
    "another GPU's rows": lambda df: df.assign(gpu=df.gpu.where(df.index != 3, "NVIDIA A100")),
    "every row of another commit": lambda df: df.assign(git_commit="0123456789abcdef"),
    "a duplicated row": lambda df: pd.concat([df, df.iloc[[_first_ok(df)]]]),
    "a NaN median": lambda df: df.assign(median_ms=df.median_ms.where(df.index != _first_ok(df), "nan")),
    "an infinite median": lambda df: df.assign(median_ms=df.median_ms.where(df.index != _first_ok(df), "inf")),
    "a negative median": lambda df: df.assign(median_ms=df.median_ms.where(df.index != _first_ok(df), "-1")),
    "a zero median": lambda df: df.assign(median_ms=df.median_ms.where(df.index != _first_ok(df), "0")),
    "no repetitions": lambda df: df.assign(reps=df.reps.where(df.index != _first_ok(df), "0")),
    "a negative spread": lambda df: df.assign(iqr_ms=df.iqr_ms.where(df.index != _first_ok(df), "-0.5")),
    "half a row": lambda df: df.assign(m=df.m.where(df.index != 0, "128.5")),
    "a dimension past any float": lambda df: df.assign(m=df.m.where(df.index != 0, "1e400")),
    "markup for a stage's name": lambda df: df.assign(kernel=df.kernel.where(df.index != 0, "<img src=x onerror=y>")),
    "a stage's name that breaks its line": lambda df: df.assign(kernel=df.kernel.where(df.index != 0, "x\n## injected")),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_refused_bench_table_leaves_the_run_as_it_was(lab, run_dir, case):
    _edit_bench(run_dir, CASES[case])
    before = _snapshot(run_dir)
    with pytest.raises(LabError) as err:
        _rerender(lab, run_dir)
    assert "\n" not in str(err.value) and "bench.csv" in str(err.value)
    assert _snapshot(run_dir) == before


def test_a_word_where_a_check_s_error_goes_is_refused(lab, run_dir):
    df = pd.read_csv(run_dir / "check.csv", dtype=str, keep_default_na=False)
    df.loc[0, "rel_err"] = "small"
    df.to_csv(run_dir / "check.csv", index=False)
    before = _snapshot(run_dir)
    with pytest.raises(io.DamagedFile, match=r"check\.csv.*rel_err"):
        _rerender(lab, run_dir)
    assert _snapshot(run_dir) == before


def test_a_full_disk_leaves_every_figure_and_the_report_as_they_were(lab, run_dir, monkeypatch):
    import matplotlib.figure

    def full(self, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", full)
    before = _snapshot(run_dir)
    with pytest.raises(LabError) as err:
        _rerender(lab, run_dir)
    assert "nothing was changed" in str(err.value) and "\n" not in str(err.value)
    assert _snapshot(run_dir) == before
    assert not list(run_dir.parent.glob(".rerender-*"))  # its drawing folder is gone too


def test_one_figure_that_cannot_be_drawn_changes_nothing(lab, run_dir, monkeypatch):
    from sgemm_lab.report import plots

    def broken(*a, **k):
        raise ValueError("cannot draw this")

    monkeypatch.setattr(plots, "ladder_bars", broken)
    before = _snapshot(run_dir)
    with pytest.raises(LabError, match="1 of .* figures not drawn .*nothing was changed"):
        _rerender(lab, run_dir)
    assert _snapshot(run_dir) == before


def test_a_good_run_is_drawn_over_in_place(lab, run_dir):
    (run_dir / "report.md").write_text("stale\n")
    _rerender(lab, run_dir)
    assert (run_dir / "report.md").read_text() == (REF / "report.md").read_text()
    assert not list(run_dir.parent.glob(".rerender-*"))


# ---------------------------------------------------------------------------------- compare
@pytest.mark.parametrize("case", ["no repetitions", "a negative spread", "a dimension past any float",
                                  "a duplicated row", "a zero median"])
def test_compare_refuses_what_no_measurement_gives(run_dir, case):
    _edit_bench(run_dir, CASES[case])
    with pytest.raises(io.DamagedFile) as err:
        compare.read_runs([run_dir / "bench.csv"])
    assert "\n" not in str(err.value) and "bench.csv" in str(err.value)


def test_compare_refuses_an_environment_record_that_is_no_object(run_dir):
    (run_dir / "environment.json").write_text("[]\n")
    with pytest.raises(io.DamagedFile, match="environment.json: not the environment record"):
        compare.read_runs([run_dir / "bench.csv"])


# ------------------------------------------------------------------------- what is read at all
@pytest.mark.parametrize("kind", ["fifo", "device", "huge"])
def test_a_table_that_is_no_file_or_too_big_is_refused_at_once(run_dir, kind):
    import os
    import time

    bench = run_dir / "bench.csv"
    bench.unlink()
    if kind == "fifo":
        os.mkfifo(bench)
    elif kind == "device":
        bench.symlink_to("/dev/zero")
    else:
        with open(bench, "wb") as fh:
            fh.truncate(io.MAX_FILE_BYTES + 1)
    t0 = time.monotonic()
    with pytest.raises(io.DamagedFile) as err:
        compare.read_runs([bench])
    assert time.monotonic() - t0 < 60  # (no wait for a writer that never comes)
    assert str(err.value).startswith(str(bench)) and "\n" not in str(err.value)
    assert {"fifo": "a FIFO", "device": "a device", "huge": "MiB"}[kind] in str(err.value)
