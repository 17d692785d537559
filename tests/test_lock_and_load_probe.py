"""The parts of tools/probes/lock_and_load.sh that run without a GPU: the script itself (syntax, and
shellcheck where it is installed) and the tables it draws from what the pipelines recorded."""

import importlib.util
import json
import shutil
import subprocess
from datetime import datetime
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "probes" / "lock_and_load.sh"


@pytest.fixture(scope="module")
def probe():
    spec = importlib.util.spec_from_file_location("lock_and_load", ROOT / "tools" / "probes" / "lock_and_load.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_script_parses():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_the_script_is_shellcheck_clean():
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed")
    res = subprocess.run(["shellcheck", "-x", str(SCRIPT)], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout


def _hold(cwd, mode, asked, got, released, pid, lock="/tmp/sgemm-lab-locks/gpu.GPU-1.lock", program="bench.py"):
    return dict(pid=pid, cwd=cwd, program=program, mode=mode, lock=lock, device="0:GPU-1", asked=asked, got=got,
                released=released)


def _write(path, holds):
    path.write_text("".join(json.dumps(h) + "\n" for h in holds))
    return path


def test_turns_taken_one_after_the_other_pass_and_count_the_waits(probe, tmp_path):
    holds = [_hold("/a", "exclusive", 0.0, 0.0, 2.0, 1),
             _hold("/b", "exclusive", 1.0, 2.0, 3.0, 2),      # waited 1 s for /a
             _hold("/a", "shared", 3.0, 3.1, 4.0, 3),
             _hold("/b", "shared", 3.2, 3.2, 4.5, 4)]         # checks may share
    rc = probe.main(["turns", str(_write(tmp_path / "l.jsonl", holds)), "/a", "/b"])
    assert rc == 0
    lines, bad = probe.turns(probe.read_holds(tmp_path / "l.jsonl"), "/a", "/b")
    text = "\n".join(lines)
    assert not bad and "overlapping holds (one of them exclusive) on one lock: 0" in text
    assert "second pipeline's holds that waited for a hold of the first: 1 (1.0 s of wall time)" in text


def test_waits_of_steps_queued_together_count_once(probe):
    """Three steps of the second pipeline queued behind one hold of the first: 2 s of wall time, not 6."""
    holds = [_hold("/a", "exclusive", 0.0, 0.0, 2.0, 1, program="tmpabcdefgh.bench.py")] + \
        [_hold("/b", "shared", 0.0, 2.0 + i, 2.5 + i, 10 + i, program="tmp12345678.check.py") for i in range(3)]
    lines, bad = probe.turns(holds, "/a", "/b")
    assert not bad and "waited for a hold of the first: 3 (2.0 s of wall time)" in "\n".join(lines)
    assert "| first | 1 (1/0) | bench.py |" in lines[2]


def test_an_exclusive_hold_beside_another_is_caught(probe, tmp_path):
    holds = [_hold("/a", "exclusive", 0.0, 0.0, 2.0, 1), _hold("/b", "shared", 1.0, 1.5, 3.0, 2)]
    lines, bad = probe.turns(holds, "/a", "/b")
    assert bad and any(line.startswith("  OVERLAP /a pid 1 exclusive") for line in lines)
    other_gpu = [holds[0], _hold("/b", "exclusive", 1.0, 1.5, 3.0, 2, lock="/tmp/sgemm-lab-locks/gpu.GPU-2.lock")]
    assert not probe.turns(other_gpu, "/a", "/b")[1]  # two GPUs: side by side is fine


def _run_dir(tmp_path, rows, start):
    """results/<run>/ with one bench table and its step log: rows (kernel, m, status, seconds after start)."""
    (tmp_path / "bench").mkdir(parents=True)
    (tmp_path / "logs" / "bench").mkdir(parents=True)
    kernel = rows[0][0]
    table = ["kernel,m,n,k,status,median_ms,disturbance"]
    log = []
    for i, (k, m, status, after) in enumerate(rows):
        table.append(f"{k},{m},{m},{m},{status},0.1,{'none' if status == 'ok' else 'all 3 tries disturbed'}")
        when = datetime.fromtimestamp(start + after).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
        log.append(f"{when} INFO [bench {k}] {i + 1}/{len(rows)} {m}x{m}x{m}: 1.000 TFLOP/s (median 0.1 ms)")
    (tmp_path / "bench" / f"{kernel}.csv").write_text("\n".join(table) + "\n")
    (tmp_path / "logs" / "bench" / f"{kernel}.log").write_text("\n".join(log) + "\n")
    return tmp_path


def test_rows_that_ended_under_the_load_must_be_disturbed(probe, tmp_path):
    start = 1_800_000_000.0
    load = dict(pid=77, start=start, end=start + 10, launches=500)
    (tmp_path / "load.json").write_text(json.dumps(load))
    run = _run_dir(tmp_path / "good", [("cublas", 128, "ok", -3.0), ("cublas", 256, "disturbed", 4.0),
                                       ("cublas", 512, "ok", 12.0)], start)
    assert probe.main(["load", str(run), str(tmp_path / "load.json")]) == 0
    lines, bad = probe.load_report(probe.load_rows(run, load), load)
    assert not bad and "ended while the load ran: 1, of them disturbed: 1" in "\n".join(lines)
    assert "| cublas | 256x256x256 | disturbed | 4.0 | 0.1 | all 3 tries disturbed |" in lines
    run = _run_dir(tmp_path / "bad", [("cublas", 128, "ok", 5.0)], start)  # timed under the load, called ok
    assert probe.main(["load", str(run), str(tmp_path / "load.json")]) == 1
    host = _run_dir(tmp_path / "host", [("numpy", 64, "ok", 5.0), ("numpy", 96, "disturbed", 6.0)], start)
    table = host / "bench" / "numpy.csv"
    table.write_text(table.read_text().replace(",none", ",n/a (CPU timing)"))
    assert probe.main(["load", str(host), str(tmp_path / "load.json")]) == 0  # timed on the CPU: no GPU to share


def test_step_messages_become_summary_rows(probe, tmp_path):
    (tmp_path / "cublas.json").write_text(json.dumps(dict(step="bench", kernel="cublas", status="ok",
                                                          message="2 of 3 shapes disturbed by other work")))
    (tmp_path / "02.json").write_text(json.dumps(dict(step="bench", kernel="02", status="ok", message="")))
    assert probe.step_rows(tmp_path) == ["| b | bench cublas: step ok | 2 of 3 shapes disturbed by other work |"]
