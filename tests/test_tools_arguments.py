"""Every tool answers a bad argument or a missing file with one line on stderr and a non-zero exit
status (1; argparse's usage errors 2), never a traceback."""

import subprocess
import sys

import pytest
from conftest import ROOT

CASES = [
    ("replay.py", ["/nonexistent.csv"]),
    ("replay.py", [str(ROOT / "README.md")]),
    ("same_rows.py", ["no-such-run", "nor-this-one"]),
    ("bench_table.py", ["/nonexistent.csv"]),
    ("step_times.py", []),
    ("step_times.py", ["/nonexistent.csv"]),
    ("sass_loops.py", ["/nonexistent.cubin"]),
    ("tf32x3_model.py", ["--bogus"]),
    ("check_config.py", ["/nonexistent.yaml"]),
    ("gpu_timeline.py", ["/nonexistent.jsonl"]),
    ("gpu_timeline.py", [str(ROOT / "README.md")]),
    ("gpu_timeline.py", ["/dev/null"]),
]


@pytest.mark.parametrize("tool, args", CASES, ids=[f"{t} {' '.join(a)}" for t, a in CASES])
def test_a_bad_argument_is_one_line(tool, args):
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / tool), *args], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode in (1, 2), proc.stderr
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines and (len(lines) == 1 or "usage:" in proc.stderr), proc.stderr


def test_replay_refuses_a_row_no_configuration_could_hold(tmp_path):
    """A crafted row of 46341^3 (each operand over 2^31 - 1 elements): refused before any draw."""
    import csv

    with open(ROOT / "reports" / "h100" / "check.csv") as fh:
        rows = list(csv.DictReader(fh))
    row = dict(next(r for r in rows if r["seed"]), m="46341", n="46341", k="46341")
    with open(tmp_path / "crafted.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerow(row)
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "replay.py"), str(tmp_path / "crafted.csv"), "--row",
                           "0", "--inputs-only"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "2^31 - 1 elements" in proc.stderr and "Traceback" not in proc.stderr
