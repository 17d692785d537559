"""The config's `container`: under Snakemake's --software-deployment-method apptainer every job runs in
that image (`apptainer exec ... IMAGE ...`), and without one on the host. No apptainer here:
tests/fixtures/bin/apptainer stands in for it (it logs each call and runs the command on the host, with
the folders it would bind on PYTHONPATH), and `python` on PATH is this interpreter, as the image's venv
is on the image's PATH. The job is the CPU-only rerender of the committed reference."""

import os
import shutil
import subprocess
import sys

from conftest import ROOT, copy_workflow


def _rerender(tmp_path, *config):
    lab = copy_workflow(tmp_path / "lab")
    shutil.copytree(ROOT / "reports" / "h100", lab / "reports" / "h100", ignore=shutil.ignore_patterns("report.html"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shutil.copy2(ROOT / "tests" / "fixtures" / "bin" / "apptainer", bin_dir / "apptainer")
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (bin_dir / "python").chmod(0o755)
    calls = tmp_path / "apptainer.log"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_APPTAINER_LOG": str(calls)}
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "rerender", "--config", "rerender=h100",
                           *config, "--software-deployment-method", "apptainer"],
                          cwd=lab, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return calls.read_text().splitlines() if calls.exists() else []


def test_a_job_runs_in_the_image_the_config_names(tmp_path):
    image = tmp_path / "sgemm-lab.sif"
    image.write_bytes(b"")
    calls = _rerender(tmp_path, f"container={image}")
    assert len(calls) == 1
    words = calls[0].split()
    assert words[0] == "exec" and str(image) in words
    assert "rerender.py" in calls[0]  # the job's script, inside the image


def test_without_an_image_the_jobs_run_on_the_host(tmp_path):
    assert _rerender(tmp_path) == []
