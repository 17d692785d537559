"""The GPU failure cases of the steps around the bench: a stage that cannot launch, one that does not
compile, an autotuned stage with no verified candidate, a write out of bounds that only a sanitizer
sees. The test with an exclusive GPU hold (the tile sweep) comes first: the shared ones after it can
join another step's shared hold. (See gpu_cases for how these run.)"""

import pandas as pd
import pytest
from gpu_cases import (_build, _build_step, _check_not_run, _in_child, _job, _naive, _Outputs,  # noqa: F401
                       _status, broken, failing_stages)

from sgemm_lab.config import load as cfgmod
from sgemm_lab.results import io


def test_autotuned_stage_whose_only_candidate_is_wrong(failing_stages, record_property):
    record_property("case", "an autotuned stage whose only tuning candidate computes wrong results: the sweep "
                            "fails (NOT VERIFIED), the tuned build says it found no verified configuration")
    from sgemm_lab.pipeline import entry

    raw, tmp, env = failing_stages
    sweep = _Outputs([tmp / "sweeps" / "99_wrong.csv"], status=tmp / "status_sweep.json")
    entry.main("sweep", _job(raw, "99_wrong", tmp / "sweep.log", dict(env=str(env)), sweep))
    rows = pd.read_csv(sweep[0])
    assert list(rows.status) == ["failed", "failed"] and not rows.verified.any()
    rec = _status(sweep.status)
    assert rec.status == "failed" and rec.message.startswith("NOT VERIFIED at "), rec
    build = _build(raw, tmp, env, "99_tuned", sweeps=[sweep[0]])
    rec = _status(build.status)
    assert rec.status == "failed" and "no verified configuration in the sweeps of 99_wrong" in rec.message, rec
    _check_not_run(raw, tmp, env, "99_tuned", build)


def test_compile_error_is_a_failed_build_and_the_run_goes_on(failing_stages, record_property, capfd):
    record_property("case", "a stage that does not compile: its build fails with nvcc's first error line, its "
                            "check is `not run`, the job itself ends normally (the report lists it)")
    raw, tmp, env = failing_stages
    build = _build(raw, tmp, env, "99_syntax", source=str(cfgmod.KERNEL_DIR / "99_syntax.cu"))
    rec = _status(build.status)
    assert rec.status == "failed" and "nvcc failed" in rec.message and "99_syntax.cu" in rec.message, rec
    assert io.read_json(build.record)["status"] == "failed"
    lines = [ln for ln in capfd.readouterr().err.splitlines() if ln.startswith("sgemm-lab ")]
    assert lines == [f"sgemm-lab build 99_syntax: {rec.message} (log: {tmp / 'build_99_syntax.log'})"]
    _check_not_run(raw, tmp, env, "99_syntax", build)


HEAVY = r"""
extern "C" __global__ void sgemm_heavy(int M, int N, int K, float alpha, const float* __restrict__ A,
                                       const float* __restrict__ B, float beta, float* __restrict__ C) {
    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.f;
    for (int k = 0; k < K; ++k) {
        float a = A[k];
#pragma unroll
        for (int i = 0; i < 128; ++i) acc[i] += a * B[k * 128 + i];
    }
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 128; ++i) s += acc[i] * (i + 1);
    C[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
"""


def test_too_many_resources_is_rejected_before_launch(broken, record_property):
    """1024 threads of a kernel that needs more than 64 registers per thread cannot launch."""
    from sgemm_lab.errors import CompileError

    record_property("case", "too many resources requested (registers x threads): rejected at build, one line")
    cfg, raw, tmp = broken
    (cfgmod.KERNEL_DIR / "99_heavy.cu").write_text(HEAVY)
    raw2 = dict(raw, kernels=[{"id": "99_heavy", "title": "heavy", "source": "99_heavy.cu", "entry": "sgemm_heavy",
                               "geometry": "elementwise", "params": {"BLOCK": 1024}, "shapes": "any",
                               "max_local_bytes": 4096}])
    with pytest.raises(CompileError) as err:
        _in_child(_build_step, raw2, "99_heavy", env_json=tmp / "environment.json",
                  binary_out=tmp / "h.bin", record_out=tmp / "h.json")
    assert "99_heavy" in str(err.value) and "\n" not in str(err.value)
    assert not (tmp / "h.bin").exists()


OOB = _naive("sgemm_oob", store="C[t] = out;\n    if (t == 0) C[M * N] = out;  // one float past the end of C")


def test_out_of_bounds_write_is_caught_by_the_sanitizers(broken, record_property):
    record_property("case", "a write past the end of C that leaves the result right: memcheck reports it, the "
                            "sanitize step fails naming the stage and the tool, another stage's tools stay clean")
    import shutil
    from types import SimpleNamespace

    from sgemm_lab.pipeline import entry

    if shutil.which("compute-sanitizer") is None:
        pytest.skip("compute-sanitizer is not on PATH")
    cfg, raw, tmp = broken
    (cfgmod.KERNEL_DIR / "99_oob.cu").write_text(OOB)
    raw = dict(raw, kernels=raw["kernels"] + [{"id": "99_oob", "title": "oob", "source": "99_oob.cu",
                                               "entry": "sgemm_oob", "geometry": "elementwise",
                                               "params": {"BLOCK": 256}, "shapes": "any"}])
    env = tmp / "environment.json"
    build = _build(raw, tmp, env, "99_oob", source=str(cfgmod.KERNEL_DIR / "99_oob.cu"))
    assert _status(build.status).status == "ok"
    tables = [tmp / "sanitize" / "99_broken.csv", tmp / "sanitize" / "99_oob.csv"]
    out = _Outputs(tables, status=tmp / "status_sanitize.json")
    out.tables = [str(t) for t in tables]
    job = _job(raw, None, tmp / "sanitize.log", dict(env=str(env)), out)
    job.params = SimpleNamespace(builds={"99_broken": [str(tmp / "b.bin"), str(tmp / "b.json")],
                                         "99_oob": [build.binary, build.record]},
                                 log_dir=str(tmp / "sanitize" / "logs"))
    _in_child(entry.main, "sanitize", job)
    rec = _status(out.status)
    assert rec.status == "failed" and rec.message.startswith("99_oob: memcheck at 257x131x67: errors"), rec
    oob = pd.read_csv(tables[1]).set_index("tool").status
    assert oob["memcheck"] == "errors"
    # the faults of 99_broken are at other shapes: at the sanitizer's shape it is a correct kernel
    assert (pd.read_csv(tables[0]).status == "clean").all() and len(pd.read_csv(tables[0])) == 4
