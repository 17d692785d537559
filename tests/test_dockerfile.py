"""The Dockerfile lints clean under hadolint (env/test.txt pins it; the image's build is docker/test.sh)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT


@pytest.fixture
def hadolint() -> str:
    beside = Path(sys.executable).with_name("hadolint")  # installed into the test environment
    exe = str(beside) if beside.exists() else shutil.which("hadolint")
    if exe is None:
        pytest.skip("hadolint not installed (pip install -r env/test.txt)")
    return exe


def test_dockerfile_has_no_hadolint_finding(hadolint):
    res = subprocess.run([hadolint, "--no-color", str(ROOT / "docker" / "Dockerfile")], capture_output=True, text=True)
    assert res.returncode == 0 and not res.stdout.strip(), res.stdout + res.stderr


def test_hadolint_reports_a_bad_dockerfile(hadolint, tmp_path):
    """The check above can fail: an unpinned pip install and a missing FROM tag are findings."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu\nRUN pip install numpy\n")
    res = subprocess.run([hadolint, "--no-color", str(bad)], capture_output=True, text=True)
    assert res.returncode != 0 and "DL3006" in res.stdout
