"""The GPU half of the bad-input catalogue, run by the pipeline so that the report lists what was
exercised on this GPU in this run: ``pytest`` on each module of tests/gpu, side by side, with a JUnit XML
report each, read back as rows.

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
    """Run the GPU failure tests from the checkout, one pytest process per test module, side by side
    (pytest's output goes to ``log``); the rows of every module, in the order of their file names. Raise
    LabError if pytest could not run a module at all.

    Side by side because each module's steps ask for the GPU lock one after another, and each request
    waits behind what is queued for the GPU then (the timing steps' long holds): one process for all
    would put its last requests behind the bench and profile steps, at the run's very end."""
    if not (ROOT / TEST_DIR).is_dir():
        return [dict(case=f"{TEST_DIR} (the GPU failure tests)", test="", outcome="unavailable",
                     message=f"{TEST_DIR} is not in this checkout ({ROOT})", seconds=0.0)]
    modules = sorted((ROOT / TEST_DIR).glob("test_*.py"))
    if not modules:
        raise LabError(f"{TEST_DIR} holds no test modules (test_*.py)")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        try:
            rows = _started(modules, tmp, env, procs, log)
        finally:
            for *_, out, proc in procs:  # (a module that could not run ends the step: the others with it)
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                out.close()
    if not rows:
        raise LabError(f"pytest {TEST_DIR} collected no tests")
    return rows


def _started(modules: list[Path], tmp: str, env: dict, procs: list, log) -> list[dict]:
    """Start one pytest process per module (appended to ``procs``), then wait for each in turn: its rows."""
    rows = []
    for i, module in enumerate(modules):
        xml_path = Path(tmp) / f"junit-{i}.xml"
        cmd = [sys.executable, "-m", "pytest", str(module.relative_to(ROOT)), "-q", "-p", "no:cacheprovider",
               f"--junitxml={xml_path}", "-o", "junit_family=xunit1"]
        out = open(Path(tmp) / f"out-{i}.txt", "w+")
        try:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
        except OSError as exc:
            out.close()
            raise LabError(f"pytest {module.relative_to(ROOT)} could not start: {exc}") from None
        procs.append((module, cmd, xml_path, out, proc))
    for module, cmd, xml_path, out, proc in procs:
        code = proc.wait()
        out.seek(0)
        text = out.read()
        out.close()
        if log is not None:
            log.info("$ %s\n%s", " ".join(cmd), text)
        if not xml_path.exists():
            last = next((ln for ln in reversed(text.splitlines()) if ln.strip()), "no output")
            raise LabError(f"pytest {module.relative_to(ROOT)} did not run (exit {code}: {last.strip()[:200]})")
        rows += parse_junit(xml_path.read_text())
    return rows
