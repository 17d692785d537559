"""A bench point judged unsteady is timed again (bench.retimes), and the row says so; the rule is the one
the report marks by."""

import math

import pytest
from conftest import ROOT

from sgemm_lab.config.load import load
from sgemm_lab.measure.runners import retimed
from sgemm_lab.pipeline.points import BENCH_COLUMNS
from sgemm_lab.report import numbers
from sgemm_lab.results.steadiness import unsteady

STEADY = dict(median_ms=1.0, iqr_ms=0.02, sm_clock_before_mhz=1980, sm_clock_after_mhz=1965)
SPREAD = dict(STEADY, iqr_ms=0.3)               # quartiles 30% of the median apart
THROTTLED = dict(STEADY, sm_clock_after_mhz=1500)  # the clock fell to 76% of its start


@pytest.mark.parametrize("row, expected", [(STEADY, False), (SPREAD, True), (THROTTLED, True),
                                           (dict(median_ms=2.0, iqr_ms=0.1), False),   # a host timing: no clocks
                                           (dict(median_ms=2.0, iqr_ms=0.5), True), (None, False)])
def test_the_rule_for_an_unsteady_point(row, expected):
    assert unsteady(row) is expected
    assert numbers.unsteady(row) is expected  # the report marks by the same rule


def _timer(results):
    seq = iter(results)
    calls = []

    def once():
        calls.append(1)
        return next(seq)
    return once, calls


def test_a_steady_point_is_timed_once():
    once, calls = _timer([STEADY, SPREAD])
    assert retimed(once, 2) == (STEADY, 0) and len(calls) == 1


def test_an_unsteady_point_is_timed_again_until_steady_and_the_steady_timing_is_kept():
    faster_but_unsteady = dict(SPREAD, median_ms=0.5)
    once, calls = _timer([faster_but_unsteady, STEADY, SPREAD])
    assert retimed(once, 2) == (STEADY, 1) and len(calls) == 2  # not the faster, unsteady first timing


def test_a_point_unsteady_every_time_keeps_its_last_timing_after_the_retimes():
    first, second, last = dict(SPREAD, median_ms=0.5), dict(THROTTLED), dict(SPREAD, median_ms=1.5)
    once, calls = _timer([first, second, last, STEADY])
    assert retimed(once, 2) == (last, 2) and len(calls) == 3
    once, calls = _timer([first, STEADY])
    assert retimed(once, 0) == (first, 0) and len(calls) == 1  # retimes 0: as before


def test_the_timing_columns_are_read_from_the_result_by_the_caller_s_function():
    once, _ = _timer([(SPREAD, "disturbance"), (STEADY, "none")])
    assert retimed(once, 1, lambda r: r[0]) == ((STEADY, "none"), 1)


def test_the_bench_retimes_by_default_and_its_table_has_the_column():
    cfg = load(ROOT / "config" / "config.yaml")
    assert cfg.bench.retimes == 2 and "retimed" in BENCH_COLUMNS
    assert math.isclose(numbers.UNSTEADY_IQR, 0.10) and math.isclose(numbers.UNSTEADY_CLOCK, 0.90)


def test_the_method_counts_the_points_timed_again_and_those_still_unsteady():
    import pandas as pd

    ok = pd.DataFrame([dict(STEADY, retimed=0), dict(STEADY, retimed=1), dict(SPREAD, retimed=2)])
    (line,) = numbers.retime_lines(ok, 2)
    assert "up to 2 times" in line and "2 of 3 timed points were, 1 stayed unsteady" in line
    assert numbers.retime_lines(ok.drop(columns="retimed"), 2) == []  # a run from before the column: no line
