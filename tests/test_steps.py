"""Each step described once (``pipeline.steps``): every workflow script runs a step of the table and every
step of the table has a script; what the table says of GPU use and failure holds together."""

import re

import pytest
from conftest import ROOT

from sgemm_lab.pipeline.steps import STEPS, lock_mode, uses_gpu


def _scripts() -> dict[str, str]:
    """script file -> the step its ``main`` call names."""
    out = {}
    for path in sorted((ROOT / "workflow" / "scripts").glob("*.py")):
        called = re.findall(r'\bmain\("([a-z_]+)", snakemake\)', path.read_text())
        assert len(called) == 1, f"{path.name}: expected one main(<step>, snakemake) call, found {called}"
        out[path.name] = called[0]
    return out


def test_every_script_runs_a_described_step_and_every_step_has_a_script():
    scripts = _scripts()
    assert sorted(set(scripts.values())) == sorted(STEPS)
    assert all(name == f"{step}.py" for name, step in scripts.items())


@pytest.mark.parametrize("name", sorted(STEPS))
def test_what_a_step_says_of_itself_holds_together(name):
    step = STEPS[name]
    assert step.gpu in (None, "shared", "exclusive")
    assert bool(step.leftover) == step.tolerant, "a tolerant step leaves empty outputs; a fatal one leaves its old ones"
    if step.locks_itself or step.host_stages_off:
        assert step.gpu is not None, "only a step that uses the GPU can take its lock, or leave it to host stages"


def test_lock_modes(lab):
    stage = next(k.id for k in lab.kernels if k.backend == "cuda" and not k.autotuned)
    for name in ("bench", "sweep", "shape_sweep", "epilogue", "ceilings", "profile", "failure_tests", "time"):
        assert lock_mode(name, lab, stage) == "exclusive", name
    for name in ("environment", "build", "check", "sanitize"):
        assert lock_mode(name, lab, stage) == "shared", name
    assert lock_mode("bench", lab, "cublas") == "exclusive" and lock_mode("time", lab, "cublas") == "exclusive"
    assert lock_mode("bench", lab, next(k.id for k in lab.kernels if k.autotuned)) == "exclusive"
    host = next(k.id for k in lab.kernels if k.backend == "host")
    for name in ("build", "bench", "time"):
        assert lock_mode(name, lab, host) is None and lock_mode(name, lab, "numpy") in (None, "shared")
    assert lock_mode("bench", lab, "numpy") is None
    # a host stage's check shares the GPU: cuBLAS on the same inputs sets its FP32 limit
    assert lock_mode("check", lab, host) == "shared" and lock_mode("check", lab, "numpy") == "shared"
    for name in ("precompile", "aggregate", "plot", "report", "compare", "rerender", "no such step"):
        assert lock_mode(name, lab, None) is None, name


def test_a_job_uses_the_gpu_where_any_of_its_stages_does(lab):
    host = next(k.id for k in lab.kernels if k.backend == "host")
    stage = next(k.id for k in lab.kernels if k.backend == "cuda")
    assert not uses_gpu(lab, "bench", (host, "numpy")) and uses_gpu(lab, "bench", (host, stage))
    assert uses_gpu(lab, "check", (host,)) and uses_gpu(lab, "ceilings", (None,))
    assert not uses_gpu(lab, "report", (None,))
