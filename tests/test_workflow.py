import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, copy_workflow

WORKFLOW_FILES = [ROOT / "Snakefile", *sorted((ROOT / "workflow").rglob("*.smk")),
                  *sorted((ROOT / "workflow" / "scripts").glob("*.py")), *sorted((ROOT / "src" / "sgemm_lab").rglob("*.py"))]


def test_no_rule_script_or_module_names_a_kernel(lab):
    """The config's kernel list is the only place a kernel is named."""
    names = set()
    for k in lab.kernels:
        names |= {k.id, k.entry, k.source, k.source.rsplit(".", 1)[0]}
    names.discard("")
    offenders = [f"{p.relative_to(ROOT)}: {n}" for p in WORKFLOW_FILES for n in names if n in p.read_text()]
    assert not offenders


def _snakemake(args, cwd):
    return subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A copy of the workflow in a temporary directory, so runs never touch the real results/."""
    return copy_workflow(tmp_path / "lab")


@pytest.mark.skipif(importlib.util.find_spec("pycuda") is not None, reason="PyCUDA present: a GPU may be too")
def test_pipeline_without_gpu_stops_with_one_clear_line(checkout):
    proc = _snakemake(["--cores", "1", "--configfile", ".test/config/config.yaml"], checkout)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    lines = [ln for ln in out.splitlines() if ln.startswith("sgemm-lab ")]
    assert len(lines) == 1, out
    assert lines[0].startswith("sgemm-lab environment: no CUDA device: ")
    assert "(log: results/test/logs/environment.log)" in lines[0]
    assert "Traceback" not in out
    assert not (checkout / "results" / "test" / "environment.json").exists()
    # the same line is in the log the message points to
    assert "no CUDA device" in (checkout / "results" / "test" / "logs" / "environment.log").read_text()


def test_dry_runs_list_every_kernel_and_baseline(checkout, lab):
    proc = _snakemake(["-n", "--quiet", "rules"], checkout)
    assert proc.returncode == 0, proc.stderr
    proc = _snakemake(["-n", f"results/{lab.run}/check/{lab.kernels[-1].id}.json"], checkout)
    assert proc.returncode == 0, proc.stderr
    assert f"results/{lab.run}/build/{lab.kernels[-1].id}.bin" in proc.stdout
    # stages share jobs by class (sgemm_lab.pipeline.batches): one check job for the GPU stages, whose
    # builds it reads; the host stages' builds belong to no job of this plan
    assert proc.stdout.count("rule check_gpu:") == 1 and "rule check_host:" not in proc.stdout
    assert f"results/{lab.run}/build/{lab.kernels[0].id}.bin" not in proc.stdout
    proc = _snakemake(["-n", "--quiet", "rules"], checkout)
    jobs = dict(line.split() for line in proc.stdout.splitlines() if line.strip() and line.split()[-1].isdigit()
                and len(line.split()) == 2)
    assert {step for rule in jobs for step in ("build", "check", "bench") if rule.startswith(step + "_")} == \
        {"build", "check", "bench"}
    assert all(int(n) == 1 for rule, n in jobs.items() if rule.split("_")[0] in ("build", "check", "bench", "sweep"))


def test_invalid_config_is_reported_without_traceback(checkout):
    (checkout / "bad.yaml").write_text("bench:\n  square: [0]\n")
    proc = _snakemake(["-n", "--configfile", "bad.yaml"], checkout)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "invalid configuration: " in out and "bad.yaml: bench.square[0]: 0 is less than the minimum of 1" in out
    assert "Traceback" not in out


def test_dispatch_stage_is_built_from_its_shape_sweep(checkout):
    """The build of a dispatch stage waits for the shape sweep of its candidates, which compiles the
    base stage's source; the run's status records and the report's inputs include both."""
    proc = _snakemake(["-n", "-p", "results/test/build/12_dispatch.bin", "--configfile", ".test/config/config.yaml"],
                      checkout)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "rule shape_sweep:" in out and "reports/test/dispatch/12_dispatch.csv" in out
    assert "kernels/04_1d_blocktiling.cu" in out
    proc = _snakemake(["-n", "--configfile", ".test/config/config.yaml"], checkout)
    assert proc.returncode == 0, proc.stderr
    assert "results/test/status/shape_sweep/12_dispatch.json" in proc.stdout
    assert "reports/test/dispatch.csv" in proc.stdout


def test_supervised_steps_run_through_snakemake_scripts(checkout):
    """Host stages through the real rules and script shims (the supervised child processes re-import
    the shim, which must not run the step again); a stub environment record stands in for the GPU rule."""
    env = checkout / "results" / "test" / "environment.json"
    env.parent.mkdir(parents=True)
    env.write_text('{"gpu": {"arch": "sm_90"}}\n')
    targets = ["results/test/bench/00_hostmult1.csv", "results/test/check/numpy.json"]
    proc = _snakemake([*targets, "--cores", "2", "--configfile", ".test/config/config.yaml"], checkout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    import pandas as pd

    bench = pd.read_csv(checkout / targets[0])
    assert list(bench.status) == ["ok", "skipped", "ok"] and bench.verified.iloc[0]
    assert '"status": "pass"' in (checkout / targets[1]).read_text()


def test_compare_target_runs_from_committed_runs_and_needs_two(checkout):
    for run in ("probes/11_general-a6e82da", "probes/14_split_tree-e7e2deb"):
        (checkout / "reports" / run).mkdir(parents=True)
        shutil.copy(ROOT / "reports" / run / "bench.csv", checkout / "reports" / run / "bench.csv")
    runs = '{"runs": ["probes/11_general-a6e82da", "probes/14_split_tree-e7e2deb"]}'
    proc = _snakemake(["--cores", "1", "compare", "--config", f"compare={runs}"], checkout)
    assert proc.returncode == 0, proc.stderr
    out = checkout / "reports" / "compare" / "probes_11_general-a6e82da-vs-probes_14_split_tree-e7e2deb"
    assert "## Comparing runs" in (out / "compare.md").read_text() and (out / "compare.csv").stat().st_size > 0
    assert not (checkout / "results" / "local" / "environment.json").exists()  # no GPU step ran
    proc = _snakemake(["--cores", "1", "compare"], checkout)
    assert proc.returncode != 0 and "compare: set at least two runs" in proc.stdout + proc.stderr
