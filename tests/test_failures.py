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


TIMED = '''
import time
from pathlib import Path

def test_{name}(record_property):
    record_property("case", "module {name}")
    Path("{name}.start").write_text(repr(time.time()))
    deadline = time.time() + 30
    while not all(Path(f"{{n}}.start").exists() for n in ("a", "b")):  # both modules must be running at once
        assert time.time() < deadline, "the other module did not start meanwhile"
        time.sleep(0.05)
'''


def test_each_module_runs_in_a_pytest_of_its_own_side_by_side(tmp_path, monkeypatch):
    """Every module of tests/gpu in its own pytest process, started together (each waits until the other
    has started: run one after the other, the first would fail), rows in file order."""
    gpu = tmp_path / "tests" / "gpu"
    gpu.mkdir(parents=True)
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    for name in ("b", "a"):
        (gpu / f"test_{name}.py").write_text(TIMED.format(name=name))
    (gpu / "helpers.py").write_text("raise SystemExit('not a test module: never run')\n")
    monkeypatch.setattr(failures, "ROOT", tmp_path)
    logged = []

    class Log:
        def info(self, fmt, *args):
            logged.append(fmt % args)

    rows = failures.run(Log())
    assert [r["case"] for r in rows] == ["module a", "module b"] and {r["outcome"] for r in rows} == {"passed"}
    assert len(logged) == 2 and "test_a.py" in logged[0] and "1 passed" in logged[0]


def test_a_module_pytest_cannot_run_ends_the_step_with_one_line(tmp_path, monkeypatch):
    gpu = tmp_path / "tests" / "gpu"
    gpu.mkdir(parents=True)
    (gpu / "test_a.py").write_text("def test_a():\n    pass\n")
    monkeypatch.setattr(failures, "ROOT", tmp_path)
    monkeypatch.setattr(failures.sys, "executable", str(tmp_path / "no-python"))
    import pytest

    from sgemm_lab.errors import LabError

    with pytest.raises(LabError, match=r"^pytest tests/gpu/test_a.py could not start: .*no-python"):
        failures.run()
