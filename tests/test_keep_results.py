"""Nothing good is ever destroyed: when a step of the real workflow refuses a damaged input, its previous
outputs are left byte for byte as they were (the update() flag of compare_runs, aggregate, plot and
report), with one line naming the file; and the refusal is repeated on the next invocation."""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import yaml
from conftest import ROOT, copy_workflow

from sgemm_lab.config.load import from_dict, validate
from sgemm_lab.results import io, outcome

FIX = ROOT / "tests" / "fixtures" / "h100"
COMPARE = ["--config", 'compare={"runs": ["h100", "h200"]}']


def _snakemake(cwd: Path, *args) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600)
    return proc.returncode, proc.stdout + proc.stderr


def _ours(out: str) -> list[str]:
    return [ln for ln in out.splitlines() if ln.startswith("sgemm-lab ")]


def _snapshot(paths) -> dict[Path, bytes]:
    return {Path(p): Path(p).read_bytes() for p in paths}


def _unchanged(before: dict[Path, bytes]) -> list[str]:
    return [str(p) for p, data in before.items() if not p.exists() or p.read_bytes() != data]


def _cut(path: Path, fraction: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * fraction)])


# ----------------------------------------------------------------------------------------- compare
def test_a_refused_comparison_keeps_the_committed_one(tmp_path):
    lab = copy_workflow(tmp_path / "lab")
    for run in ("h100", "h200"):
        (lab / "reports" / run).mkdir(parents=True)
        for name in ("bench.csv", "environment.json"):
            shutil.copy(ROOT / "reports" / run / name, lab / "reports" / run / name)
    shutil.copytree(ROOT / "reports" / "compare" / "h100-vs-h200", lab / "reports" / "compare" / "h100-vs-h200")
    out = lab / "reports" / "compare" / "h100-vs-h200"
    before = _snapshot(out / f"compare.{ext}" for ext in ("md", "csv", "png"))
    _cut(lab / "reports" / "h200" / "bench.csv")  # cut in the middle: it used to be compared in part

    rc, log = _snakemake(lab, "compare", *COMPARE)
    assert rc == 1, log[-3000:]
    lines = _ours(log)
    assert len(lines) == 1 and lines[0].startswith("sgemm-lab compare: reports/h200/bench.csv: cut short: line "), log
    assert "Traceback" not in log
    assert _unchanged(before) == []
    assert "Restored previous version of reports/compare/h100-vs-h200/compare.md (updating job failed)." in log

    # Snakemake now takes the restored files for up to date; the target names the table again
    rc, log = _snakemake(lab, "compare", *COMPARE)
    assert rc == 1 and "rule compare_runs:" not in log
    lines = _ours(log)
    assert lines and all(ln.startswith("sgemm-lab compare: reports/h200/bench.csv: cut short") for ln in lines), log
    assert _unchanged(before) == []

    shutil.copy(ROOT / "reports" / "h200" / "bench.csv", lab / "reports" / "h200" / "bench.csv")  # repaired
    rc, log = _snakemake(lab, "compare", *COMPARE)
    assert rc == 0, log[-3000:]
    only = [sorted(set(pd.read_csv(ROOT / "reports" / a / "bench.csv").kernel)
                   - set(pd.read_csv(ROOT / "reports" / b / "bench.csv").kernel)) for a, b in (("h100", "h200"), ("h200", "h100"))]
    expected = ("**In one run only**: none" if only == [[], []] else
                "**In one run only** (not compared): in **h100** only: "
                + "; in **h200** only: ".join(", ".join(f"`{k}`" for k in o) or "none" for o in only))
    assert expected in (out / "compare.md").read_text()
    # the same numbers, recomputed: the committed comparison is the one its committed runs give
    assert (out / "compare.csv").read_bytes() == before[out / "compare.csv"], (
        "reports/compare/h100-vs-h200 is not what the committed runs give: redraw it with "
        "snakemake --cores 1 compare --config 'compare={\"runs\": [\"h100\", \"h200\"]}'")


# ------------------------------------------------------------------------- aggregate, plot, report
def _test_lab() -> "object":
    """The configuration the workflow sees with --configfile .test/config/config.yaml (over config/config.yaml)."""
    from snakemake.utils import update_config

    raw = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    update_config(raw, yaml.safe_load((ROOT / ".test" / "config" / "config.yaml").read_text()))
    return from_dict(validate(raw, source="test"), trusted=True)


def _rows_of(table: pd.DataFrame, impl: str, like: dict[str, str]) -> pd.DataFrame:
    """The fixture's rows of ``impl``, or of the stage that stands in for it (``like``), renamed."""
    rows = table[table.kernel == (impl if impl in set(table.kernel) else like[impl])].copy()
    rows["kernel"] = impl
    return rows


def _ok(path: Path, step: str, kernel: str | None = None) -> None:
    outcome.write(path, outcome.StepRecord(step=step, kernel=kernel, status="ok", message="", log=None, seconds=0.0))


def _stage_results(lab_dir: Path) -> None:
    """What the GPU steps of the .test configuration leave in results/test and reports/test, from the
    H100 fixture (a stage the fixture lacks stands in by another's rows), with modification times in
    the order the workflow writes them, so that Snakemake runs aggregate, plot and report only."""
    lab = _test_lab()
    old = time.time() - 7200  # the workflow's code and sources are older than any result
    for path in lab_dir.rglob("*"):
        os.utime(path, (old, old))
    # a stage or baseline the fixture lacks takes the rows of one of its kind
    like = {k.id: "00_hostmult1" if k.backend == "host" else "04_1d_blocktiling" for k in lab.kernels}
    like.update({b: "cublas" for b in lab.implementations if b.startswith("cublas")}, numpy="numpy")
    res, rep = lab_dir / "results" / "test", lab_dir / "reports" / "test"
    stamps: list[list[Path]] = [[], [], [], []]

    def put(path: Path, tier: int, write) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(path)
        stamps[tier].append(path)

    def ok(tier: int, step: str, kernel: str | None = None) -> None:
        name = f"{step}/{kernel}.json" if kernel else f"{step}.json"
        put(res / "status" / name, tier, lambda p: _ok(p, step, kernel))

    put(res / "environment.json", 0, lambda p: shutil.copy(FIX / "environment.json", p))
    for k in lab.swept:
        put(rep / "sweeps" / f"{k.id}.csv", 1, lambda p, k=k: shutil.copy(FIX / "sweeps" / f"{k.id}.csv", p))
        ok(1, "sweep", k.id)
    for k in (k for k in lab.kernels if k.dispatched):
        put(rep / "dispatch" / f"{k.id}.csv", 1,
            lambda p: shutil.copy(ROOT / "reports" / "h100" / "dispatch" / p.name, p))
        ok(1, "shape_sweep", k.id)
    put(rep / "ceilings.json", 1, lambda p: shutil.copy(FIX / "ceilings.json", p))
    ok(1, "ceilings")
    put(res / "build" / "precompiled.json", 1,
        lambda p: io.write_json(p, dict(compiled=[], failed=[], seconds=0.0, arch="sm_90")))
    ok(1, "precompile")
    put(rep / "failure_tests.csv", 1, lambda p: shutil.copy(FIX / "failure_tests.csv", p))
    ok(1, "failure_tests")
    builds = pd.read_csv(FIX / "build.csv")
    for k in lab.kernels:
        record = _rows_of(builds, k.id, like).to_dict("records")[0]
        put(res / "build" / f"{k.id}.json", 2, lambda p, r=record: io.write_json(p, r))
        put(res / "build" / f"{k.id}.bin", 2, lambda p: p.write_bytes(b"stub"))
        ok(2, "build", k.id)
    bench, checks = pd.read_csv(FIX / "bench.csv"), pd.read_csv(FIX / "check.csv")
    bench = bench.drop(columns=["pct_cublas", "source_sha256", "compile_options", "gpu", "driver", "git_commit"])
    for impl in lab.implementations:
        put(res / "bench" / f"{impl}.csv", 3, lambda p, impl=impl: io.write_csv(p, _rows_of(bench, impl, like)))
        points = _rows_of(checks, impl, like).to_dict("records")
        put(res / "check" / f"{impl}.json", 3,
            lambda p, impl=impl, pts=points: io.write_json(p, {"kernel": impl, "status": "pass", "points": pts}))
        ok(3, "bench", impl)
        ok(3, "check", impl)
    ncu, sanitize = pd.read_csv(FIX / "ncu_metrics.csv"), pd.read_csv(FIX / "sanitize.csv")
    for impl in lab.gpu_implementations:
        put(res / "profile" / f"{impl}.csv", 3, lambda p, impl=impl: io.write_csv(p, _rows_of(ncu, impl, like)))
    ok(3, "profile")
    for k in (k for k in lab.kernels if k.backend == "cuda"):
        put(res / "sanitize" / f"{k.id}.csv", 3, lambda p, k=k: io.write_csv(p, _rows_of(sanitize, k.id, like)))
    ok(3, "sanitize")
    t0 = time.time() - 3600
    for tier, paths in enumerate(stamps):
        for p in paths:
            os.utime(p, (t0 + 60 * tier, t0 + 60 * tier))


def test_refused_aggregate_plot_and_report_keep_the_previous_report(tmp_path):
    """The real rules on CPU, from stand-in results of the GPU steps: a damaged input of each of report,
    plot and aggregate in turn; every report file stays as it was, and each refusal is one line."""
    lab_dir = copy_workflow(tmp_path / "lab")
    _stage_results(lab_dir)
    cfg = ["--configfile", ".test/config/config.yaml"]
    rc, log = _snakemake(lab_dir, *cfg)
    assert rc == 0, log[-4000:]
    ran = {r for r in ("aggregate", "plot", "report") if f"rule {r}:" in log}
    assert ran == {"aggregate", "plot", "report"} and "rule bench:" not in log and "rule build:" not in log
    rep = lab_dir / "reports" / "test"
    files = sorted(p for p in rep.rglob("*") if p.is_file() and p.parent.name not in ("sweeps", "dispatch"))
    assert {"report.md", "steps.csv", "bench.csv", "check.csv", "ladder.png"} <= {p.name for p in files}
    before = _snapshot(files)

    def refused(step: str, damaged: str, problem: str) -> str:
        rc, log = _snakemake(lab_dir, *cfg)
        assert rc == 1, log[-4000:]
        lines = _ours(log)
        assert len(lines) == 1 and lines[0].startswith(f"sgemm-lab {step}: {damaged}") and problem in lines[0], log
        assert "Traceback" not in log
        assert _unchanged({p: b for p, b in before.items() if not str(p).endswith(damaged.split(" ")[0])}) == []
        return log

    # report alone reads build.csv
    (rep / "build.csv").write_text((rep / "build.csv").read_text().replace("kernel,", "stage,", 1))
    log = refused("report", "reports/test/build.csv (the run's build table): ", "no column 'kernel'")
    assert "Restored previous version of reports/test/report.md (updating job failed)." in log
    assert "Restored previous version of reports/test/steps.csv (updating job failed)." in log
    (rep / "build.csv").write_bytes(before[rep / "build.csv"])
    # plot reads check.csv: a damaged table is not one figure's problem, the figures stay
    (rep / "check.csv").write_bytes(b"\x00" * 16 + (rep / "check.csv").read_bytes()[16:])
    log = refused("plot", "reports/test/check.csv (the run's check table): ", "binary data")
    assert "Restored previous version of reports/test/figures/ladder.png (updating job failed)." in log
    (rep / "check.csv").write_bytes(before[rep / "check.csv"])
    # aggregate reads the stages' tables
    _cut(lab_dir / "results" / "test" / "bench" / "02_coalesced.csv")
    log = refused("aggregate", "results/test/bench/02_coalesced.csv (a stage's bench table): ", "cut short")
    assert "Restored previous version of reports/test/bench.csv (updating job failed)." in log
    assert not (lab_dir / "results" / "test" / "status" / "aggregate.json").exists()
    # its status record is gone with the failed job: the next invocation refuses again
    refused("aggregate", "results/test/bench/02_coalesced.csv (a stage's bench table): ", "cut short")
