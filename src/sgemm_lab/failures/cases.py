"""The GPU half of the bad-input catalogue, run by the pipeline so that the report lists what was
exercised on this GPU in this run: ``pytest tests/gpu`` with a JUnit XML report, read back as rows.

Each test names its catalogue case with ``record_property("case", ...)``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from ..config.records import ROOT
from ..errors import LabError

TEST_DIR = "tests/gpu"


def parse_junit(xml_text: str) -> list[dict]:
    """One row per test case: case (its catalogue text), test, outcome (passed/failed/error/skipped), message."""
    rows = []
    for tc in ET.fromstring(xml_text).iter("testcase"):
        props = {p.get("name"): p.get("value") for p in tc.iter("property")}
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = tc.find(tag)
            if el is not None:
                outcome = {"failure": "failed"}.get(tag, tag)
                lines = (el.get("message") or el.text or "").strip().splitlines()
                message = lines[0][:300] if lines else ""
                break
        rows.append(dict(case=props.get("case", tc.get("name")), test=tc.get("name"), outcome=outcome,
                         message=message, seconds=float(tc.get("time") or 0)))
    return rows


def run(log=None) -> list[dict]:
    """Run the GPU failure tests from the checkout (pytest's output goes to ``log``); raise LabError if
    pytest could not run them at all."""
    if not (ROOT / TEST_DIR).is_dir():
        return [dict(case=f"{TEST_DIR} (the GPU failure tests)", test="", outcome="unavailable",
                     message=f"{TEST_DIR} is not in this checkout ({ROOT})", seconds=0.0)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p)
    with tempfile.TemporaryDirectory() as tmp:
        xml_path = Path(tmp) / "junit.xml"
        cmd = [sys.executable, "-m", "pytest", TEST_DIR, "-q", "-p", "no:cacheprovider", f"--junitxml={xml_path}",
               "-o", "junit_family=xunit1"]
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        if log is not None:
            log.info("$ %s\n%s%s", " ".join(cmd), proc.stdout, proc.stderr)
        if not xml_path.exists():
            last = next((ln for ln in reversed((proc.stdout + proc.stderr).splitlines()) if ln.strip()), "no output")
            raise LabError(f"pytest {TEST_DIR} did not run (exit {proc.returncode}: {last.strip()[:200]})")
        rows = parse_junit(xml_path.read_text())
    if not rows:
        raise LabError(f"pytest {TEST_DIR} collected no tests (exit {proc.returncode})")
    return rows
