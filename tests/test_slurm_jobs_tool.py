"""tools/slurm_jobs.py turns `squeue --json` into one row per job: the rule, the GPU request and the seconds
from submission to start, for the overhead that SLURM adds to a run."""

import io
import json
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))

import slurm_jobs  # noqa: E402

# The fields that SLURM 22.05's squeue --json gives for two jobs of a run (values as on the GPU host).
DOC = {"jobs": [
    {"job_id": 7, "comment": "rule_check", "job_state": "COMPLETED", "tres_per_job": "gres:gpu:1",
     "submit_time": 1795603700, "start_time": 1795603709, "end_time": 1795603713},
    {"job_id": 2, "comment": "rule_environment", "job_state": "FAILED", "tres_per_job": "gres:gpu:1",
     "submit_time": 1795603668, "start_time": 1795603669, "end_time": 1795603677},
    {"job_id": 9, "comment": "rule_report", "job_state": "PENDING", "submit_time": 1795603720, "start_time": 0,
     "end_time": 0},
]}


def test_rows_are_per_job_in_id_order_with_rule_wait_and_run_time():
    rows = slurm_jobs.rows(DOC)
    assert [r["job_id"] for r in rows] == [2, 7, 9]
    assert rows[0]["rule"] == "environment" and rows[0]["state"] == "FAILED" and rows[0]["gres"] == "gres:gpu:1"
    assert (rows[0]["wait_s"], rows[0]["run_s"]) == (1, 8)
    assert (rows[1]["wait_s"], rows[1]["run_s"]) == (9, 4)
    assert rows[2]["wait_s"] == "" and rows[2]["run_s"] == "" and rows[2]["gres"] == ""  # not started


def test_main_writes_csv_and_a_one_line_summary(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(DOC)))
    assert slurm_jobs.main() == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].split(",") == slurm_jobs.COLUMNS and len(lines) == 4
    assert err.count("\n") == 1 and "3 jobs" in err and "median 5.0 s" in err and "max 9 s" in err


def test_input_that_is_not_json_is_one_line(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("squeue: error: Unable to contact slurm controller\n"))
    assert slurm_jobs.main() == 1
    err = capsys.readouterr().err
    assert err.startswith("slurm_jobs: stdin is not squeue --json output") and err.count("\n") == 1
