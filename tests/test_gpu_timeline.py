"""tools/gpu_timeline.py: the GPU lock log of a run read back as who held the GPU when, and the gaps."""

import json
import subprocess
import sys

from conftest import ROOT


def _line(program, mode, asked, got, released, pid=1):
    return json.dumps(dict(pid=pid, cwd="/x", program=program, mode=mode, lock="/l", device=None, asked=asked,
                           got=got, released=released))


def test_holds_waits_and_gaps(tmp_path):
    log = tmp_path / "locks.jsonl"
    log.write_text("\n".join([
        _line("tmpabcd1234.sweep.py", "exclusive", 100.0, 100.0, 110.0),
        _line("tmpabcd1234.build.py", "shared", 101.0, 110.0, 115.0, pid=2),
        _line("tmpzzzz9999.check.py", "shared", 112.0, 112.0, 116.0, pid=3),
        # nothing held 116-120 s; bench asked at 118 and waited until 120
        _line("tmpyyyy8888.bench.py", "exclusive", 118.0, 120.0, 130.0, pid=4),
    ]) + "\n")
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_timeline.py"), str(log)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    rows = {ln.split("|")[1].strip(): [c.strip() for c in ln.split("|")[2:-1]]
            for ln in proc.stdout.splitlines() if ln.startswith("| ") and not ln.startswith("| step")}
    assert set(rows) == {"sweep", "build", "check", "bench"}
    assert rows["build"] == ["1 (0/1)", "10.0", "15.0", "5.0", "9.0"]   # waited 101-110 for the sweep
    assert rows["check"][3] == "4.0" and rows["check"][4] == "0.0"
    assert rows["bench"][4] == "2.0"
    # the span 100-130 s, held 100-116 and 120-130: 26 of 30 s; one gap of 4 s, bench waiting in it
    assert "(30.0 s); some step held the GPU 26.0 s of it (87%)" in proc.stdout
    assert "gaps over 1 s with no hold: 1, 4.0 s" in proc.stdout
    assert "16.0-20.0 s (4.0 s); next: bench" in proc.stdout


def test_times_out_of_order_refused(tmp_path):
    log = tmp_path / "locks.jsonl"
    log.write_text(_line("tmpabcd1234.sweep.py", "exclusive", 100.0, 99.0, 110.0) + "\n")
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_timeline.py"), str(log)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1 and "line 1: times out of order" in proc.stderr
