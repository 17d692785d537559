"""tools/acceptance.sh and tools/acceptance.py without a GPU: the script parses (and is shellcheck clean
where shellcheck is installed); a path's row is read from the files a run left, and says what did not
hold."""

import importlib.util
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "acceptance.sh"


@pytest.fixture
def tool(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("acceptance", ROOT / "tools" / "acceptance.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "ROOT", tmp_path)
    return mod


def test_the_script_parses_and_is_shellcheck_clean():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed")
    res = subprocess.run(["shellcheck", "-x", str(SCRIPT)], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout


def _record(root: Path, run: str, step: str, kernel: str | None, status="ok", reused=False, when=None):
    p = root / "results" / run / "status" / (f"{step}/{kernel}.json" if kernel else f"{step}.json")
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(dict(step=step, kernel=kernel, status=status, message="", log=None, seconds=1.0,
                                 reused=reused)))
    if when is not None:
        os.utime(p, (when, when))


def _args(tool, tmp_path, **over):
    a = dict(csv=tmp_path / "acc.csv", path="edit", command="snakemake --cores 1", rc=0, wall_ns=12_300_000_000,
             started_ns=int((time.time() - 5) * 1e9), run="r", expect_rerun="")
    a.update(over)
    from types import SimpleNamespace

    return SimpleNamespace(**a)


def test_a_row_counts_steps_reuse_and_disturbed_points(tool, tmp_path):
    old = time.time() - 100
    _record(tmp_path, "r", "sweep", "05_x", when=old)                     # from an earlier path: not run now
    _record(tmp_path, "r", "build", "19_y")                               # ran now
    _record(tmp_path, "r", "build", "08_z", reused=True)                  # kept
    _record(tmp_path, "r", "profile", None, status="failed")
    rep = tmp_path / "reports" / "r"
    rep.mkdir(parents=True)
    pd.DataFrame(dict(status=["ok", "disturbed", "ok", "ok"],
                      disturbance=["none", "all 3 tries disturbed; last: pid 9 (SM 40%)",
                                   "none busy; seen idle: pid 7 (compute; 518 MiB)", "n/a (CPU timing)"])
                 ).to_csv(rep / "bench.csv", index=False)
    (rep / "ceilings.json").write_text(json.dumps(dict(fp32_tflops=50.0, fp32_probe=dict(disturbance="none",
                                                                                        disturbed=False))))
    row = tool.row(_args(tool, tmp_path))
    assert (row["steps_ok"], row["steps_not_ok"], row["steps_run"], row["stages_reused"]) == (3, 1, 2, 1)
    assert (row["disturbed_points"], row["idle_seen_points"], row["timed_points"]) == (1, 1, 4)
    assert row["wall_s"] == 12.3
    assert row["verdict"] == "not ok: profile; 1 disturbed points"


def test_an_expected_rerun_checks_what_ran_and_the_recorded_source(tool, tmp_path, monkeypatch):
    import yaml

    (tmp_path / "config").mkdir()
    shutil.copy(ROOT / "config" / "config.yaml", tmp_path / "config" / "config.yaml")
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    stage = next(k["id"] for k in cfg["kernels"] if str(k.get("source", "")).endswith(".cu"))
    from sgemm_lab.config import load
    from sgemm_lab.gpu.compile import source_hash

    now = source_hash(load.from_dict(cfg).kernel(stage))
    rep = tmp_path / "reports" / "r"
    rep.mkdir(parents=True)
    pd.DataFrame(dict(kernel=[stage, "other"], source_sha256=[now, "x"])).to_csv(rep / "build.csv", index=False)
    for step in ("build", "check", "bench"):
        _record(tmp_path, "r", step, stage)
        _record(tmp_path, "r", step, "other", reused=True)
    row = tool.row(_args(tool, tmp_path, expect_rerun=stage))
    assert row["verdict"] == "ok" and row["rerun"] == f"bench:{stage} build:{stage} check:{stage}"
    row = tool.row(_args(tool, tmp_path, expect_rerun=f"bench:{stage}"))  # one step only: the others ran too
    assert f"expected bench:{stage}" in row["verdict"]
    _record(tmp_path, "r", "check", "other")  # a stage that should have been kept ran again
    pd.DataFrame(dict(kernel=[stage], source_sha256=["stale"])).to_csv(rep / "build.csv", index=False)
    row = tool.row(_args(tool, tmp_path, expect_rerun=stage))
    assert "expected" in row["verdict"] and "check:other" in row["verdict"] and "stale" in row["verdict"]


def test_rows_append_and_draw_as_markdown(tool, tmp_path):
    rc = tool.main(["row", "--csv", str(tmp_path / "a.csv"), "--path", "report", "--command", "snakemake --report x",
                    "--rc", "1", "--wall-ns", "2000000000", "--started-ns", "0"])
    assert rc == 0
    md = tool.markdown(tmp_path / "a.csv")
    assert "| report | `snakemake --report x` | 1 | 2.0 |" in md and "exit 1" in md
