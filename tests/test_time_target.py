"""The target time: named stages at named shapes beside their cuBLAS, without sweeps or the rest of the
pipeline (sgemm_lab.pipeline.timeshape and workflow/rules/time.smk)."""

import subprocess
import sys

import pandas as pd
import pytest
from conftest import copy_workflow

from sgemm_lab.config import load as cfgmod
from sgemm_lab.config.records import Shape
from sgemm_lab.errors import ConfigError, LabError
from sgemm_lab.pipeline import points, timeshape
from sgemm_lab.pipeline.steps import lock_mode


def _with_time(raw_config, stages, shapes):
    return cfgmod.from_dict(dict(raw_config, time={"stages": stages, "shapes": shapes}))


def _ids(lab, pred):
    return [k.id for k in lab.kernels if pred(k)]


def test_the_config_s_stages_and_shapes_and_an_unknown_stage_refused_in_one_line(raw_config):
    lab = cfgmod.from_dict(raw_config)
    stage = _ids(lab, lambda k: k.backend == "cuda" and not k.autotuned and not k.dispatched)[0]
    cfg = _with_time(raw_config, [stage], [[1000, 2000, 3000], [7, 9, 11], [7, 9, 11]])
    assert cfg.time_stages == (stage,) and cfg.time_shapes == (Shape(m=1000, n=2000, k=3000), Shape(m=7, n=9, k=11))
    with pytest.raises(ConfigError, match="time.stages: no_such_stage is no configured stage") as err:
        _with_time(raw_config, ["no_such_stage"], [[8, 8, 8]])
    assert "\n" not in str(err.value)


def test_the_plan_adds_each_stage_s_cublas_and_nothing_else(raw_config, lab):
    fp32 = _ids(lab, lambda k: k.precision == "fp32" and k.backend == "cuda")[0]
    tf32 = _ids(lab, lambda k: k.precision == "tf32")[0]
    assert timeshape.plan(_with_time(raw_config, [fp32], [[64, 64, 64]])) == [fp32, "cublas"]
    assert timeshape.plan(_with_time(raw_config, [tf32, fp32], [[64, 64, 64]])) == [tf32, fp32, "cublas_tf32", "cublas"]
    assert timeshape.plan(_with_time(raw_config, ["cublas", fp32], [[64, 64, 64]])) == ["cublas", fp32]
    with pytest.raises(LabError, match="name the stages and the shapes"):
        timeshape.plan(lab)


def test_stages_built_from_sweeps_are_the_ones_passed_over(lab):
    for k in lab.kernels:
        reason = timeshape.needs_sweeps(lab, k.id)
        assert (reason is not None) == (k.autotuned or (k.dispatched and k.rule is None)), k.id


def test_the_step_writes_the_rows_the_ratio_to_cublas_and_a_page(raw_config, lab, tmp_path, monkeypatch):
    stage = _ids(lab, lambda k: k.precision == "fp32" and k.backend == "cuda" and not k.autotuned
                 and not k.dispatched)[0]
    swept = _ids(lab, lambda k: k.autotuned)[0]
    cfg = _with_time(raw_config, [stage, swept], [[300, 200, 100]])
    medians = {stage: 0.5, "cublas": 0.6}
    seen = []

    def fake_bench_at(cfg, impl, shapes, *, binary, record, gpu):
        seen.append((impl, binary))
        return [dict(kernel=impl, m=s.m, n=s.n, k=s.k, status="ok", verified=True, median_ms=medians[impl],
                     iqr_ms=0.01, tflops=s.flops / medians[impl] / 1e9, sm_clock_before_mhz=1980,
                     sm_clock_after_mhz=1980) for s in shapes]

    monkeypatch.setattr(points, "bench_at", fake_bench_at)
    builds = {stage: (tmp_path / "s.bin", tmp_path / "s.json")}
    status = timeshape.time_shapes(cfg, builds=builds, out_csv=tmp_path / "time.csv", out_md=tmp_path / "time.md",
                                   gpu=lambda impl: lock_mode("time", cfg, impl))
    assert status is None  # every row ok or skipped
    assert seen == [(stage, tmp_path / "s.bin"), ("cublas", None)]  # the swept stage is never timed
    df = pd.read_csv(tmp_path / "time.csv").set_index("kernel")
    assert df.loc[stage, "baseline"] == "cublas" and df.loc[stage, "vs_baseline"] == pytest.approx(1.2)
    assert df.loc[swept, "status"] == "skipped" and "tile sweeps" in df.loc[swept, "reason"]
    page = (tmp_path / "time.md").read_text()
    assert f"| `{stage}` | 300x200x100 | ok | " in page and "| 1.20× |" in page


def test_a_stage_whose_build_failed_is_a_not_run_row(raw_config, lab, tmp_path, monkeypatch):
    stage = _ids(lab, lambda k: k.precision == "fp32" and k.backend == "cuda" and not k.autotuned
                 and not k.dispatched)[0]
    cfg = _with_time(raw_config, [stage, "cublas"], [[64, 64, 64]])
    record = tmp_path / "s.json"
    record.write_text('{"kernel": "%s", "status": "failed", "message": "nvcc failed: error"}' % stage)
    real = points.bench_at

    def fake_bench_at(cfg, impl, shapes, *, binary, record, gpu):
        if impl != "cublas":  # the real one: it reads the build's record first
            return real(cfg, impl, shapes, binary=binary, record=record, gpu=gpu)
        return [dict(kernel=impl, m=s.m, n=s.n, k=s.k, status="ok", verified=True, median_ms=0.1, iqr_ms=0.001,
                     tflops=1.0) for s in shapes]

    monkeypatch.setattr(points, "bench_at", fake_bench_at)
    status = timeshape.time_shapes(cfg, builds={stage: (tmp_path / "s.bin", record)}, out_csv=tmp_path / "t.csv",
                                   out_md=tmp_path / "t.md", gpu=lambda impl: lock_mode("time", cfg, impl))
    df = pd.read_csv(tmp_path / "t.csv")
    assert df.loc[df.kernel == stage, "status"].tolist() == ["not run"]
    assert "build failed: nvcc failed" in df.loc[df.kernel == stage, "reason"].iloc[0]
    assert status is not None and status.status == "failed"


def test_the_target_runs_no_sweep_and_no_other_step(tmp_path):
    checkout = copy_workflow(tmp_path / "lab")
    proc = subprocess.run([sys.executable, "-m", "snakemake", "time", "-n", "--config",
                           'time={"stages": ["04_1d_blocktiling", "10_autotuned"], "shapes": ["100x60x30"]}',
                           "--configfile", ".test/config/config.yaml"],
                          cwd=checkout, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    jobs = {}  # the job stats table, from its header to its total (the command line's text shape read too)
    for line in proc.stdout.split("Job stats:")[1].splitlines():
        words = line.split()
        if len(words) == 2 and words[1].isdigit():
            jobs[words[0]] = words[1]
            if words[0] == "total":
                break
    assert jobs == {"environment": "1", "time_build": "1", "time": "1", "total": "3"}, proc.stdout
