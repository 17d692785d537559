"""The failure-tests rule: pytest's JUnit XML read back as one row per catalogue case."""

import subprocess
import sys

import pandas as pd

from sgemm_lab.failures import cases as failures
from sgemm_lab.report.problems import failure_section

SAMPLE = '''
import pytest

def test_ok(record_property):
    record_property("case", "a case that holds")
    assert 1 + 1 == 2

def test_broken(record_property):
    record_property("case", "a case that does not hold")
    assert 1 + 1 == 3, "arithmetic | broke"

def test_unnamed():
    pytest.skip("not on this machine")
'''


def _junit(tmp_path) -> str:
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    xml = tmp_path / "out.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_sample.py"),
                    f"--junitxml={xml}", "-o", "junit_family=xunit1", "-o", "filterwarnings=", "--rootdir", str(tmp_path)],
                   capture_output=True, cwd=tmp_path)
    return xml.read_text()


def test_every_case_is_a_row_with_its_outcome(tmp_path):
    rows = {r["test"]: r for r in failures.parse_junit(_junit(tmp_path))}
    assert rows["test_ok"]["case"] == "a case that holds" and rows["test_ok"]["outcome"] == "passed"
    assert rows["test_broken"]["outcome"] == "failed" and "arithmetic | broke" in rows["test_broken"]["message"]
    assert rows["test_unnamed"]["case"] == "test_unnamed" and rows["test_unnamed"]["outcome"] == "skipped"


def test_report_lists_cases_and_shouts_failures(lab, tmp_path):
    df = pd.DataFrame(failures.parse_junit(_junit(tmp_path)))
    text = "\n".join(failure_section(lab, df))
    assert "| a case that holds | pass |" in text and "**FAILED**" in text
    assert "arithmetic \\| broke" in text  # a pipe in a message does not break the table


def test_disabled_or_missing_results_are_said(lab):
    from dataclasses import replace

    assert "failure_tests: false" in "\n".join(failure_section(replace(lab, failure_tests=False), None))
    assert "No results." in "\n".join(failure_section(lab, None))


def test_a_checkout_without_the_gpu_tests_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(failures, "ROOT", tmp_path)
    [row] = failures.run()
    assert row["outcome"] == "unavailable" and "not in this checkout" in row["message"]
