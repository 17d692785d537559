"""The GPU half of the bad-input catalogue, run on a machine with a GPU (skipped without one):

    python -m pytest tests/gpu

Each case uses the real steps (supervised child processes, real CUDA launches) on a deliberately
broken kernel, and checks that the failure is one row with a clear status while the other points of
the same job are still measured.

This process never initialises CUDA itself (device queries and builds, which load the cubin, run in
child processes), so that the steps' supervised children are forked, as in the pipeline's jobs,
rather than started as fresh interpreters.
"""

import importlib.util
import json
import multiprocessing
import os
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd
import pytest

if importlib.util.find_spec("pycuda") is None:
    pytest.skip("needs PyCUDA and a GPU", allow_module_level=True)
# PyCUDA without a GPU (a container on a CPU machine): asked in a child, so this process never starts CUDA
if subprocess.run([sys.executable, "-c", "import pycuda.driver as d; d.init(); assert d.Device.count() > 0"],
                  capture_output=True).returncode != 0:
    pytest.skip("needs a CUDA device (PyCUDA is installed, but the driver finds none)", allow_module_level=True)

from sgemm_lab.config import load as cfgmod  # noqa: E402
from sgemm_lab.config import records  # noqa: E402
from sgemm_lab.pipeline import build as build_step  # noqa: E402
from sgemm_lab.pipeline import io  # noqa: E402
from sgemm_lab.pipeline import points  # noqa: E402

def _naive(name: str, *, faults: str = "", store: str = "C[t] = out;") -> str:
    """One thread per element of C, the common signature; ``faults`` go before the product, ``store``
    writes the result (``out``)."""
    return (f'extern "C" __global__ void {name}(int M, int N, int K, float alpha, const float* __restrict__ A,\n'
            f'    const float* __restrict__ B, float beta, float* __restrict__ C) {{\n'
            "    int t = blockIdx.x * blockDim.x + threadIdx.x;\n"
            "    if (t >= M * N) return;\n"
            "    int row = t / N, col = t % N;\n"
            f"{faults}"
            "    float acc = 0.f;\n"
            "    for (int k = 0; k < K; ++k) acc += A[row * K + k] * B[k * N + col];\n"
            "    float out = beta == 0.f ? alpha * acc : alpha * acc + beta * C[t];\n"
            f"    {store}\n}}\n")


BROKEN = _naive("sgemm_broken", faults=r"""
    if (M == 96) { while (clock64() >= 0) { if (K < 0) C[t] = 0.f; } }   // hangs (a loop the compiler keeps)
    if (M == 160) { C[(size_t)1 << 40] = 1.0f; }                          // illegal address
""".lstrip("\n"), store=r"""if (M == 192 && t == 5) out += 1.0f;                                  // wrong result
    if (M == 224 && t == 7) out = __int_as_float(0x7fc00000);              // NaN output
    C[t] = out;""")


WATCHDOG_S = 3


def _gpu_query(expression: str) -> str:
    """``expression`` printed by a child process that starts CUDA under the GPU lock (shared), as every
    process of the pipeline does: a context never waits for the GPU beside another step's timing."""
    code = ("import dataclasses, json\n"
            "from sgemm_lab.measure.gpulock import gpu_lock\n"
            "with gpu_lock(exclusive=False):\n"
            "    from sgemm_lab.gpu.device import device_info, driver\n"
            f"    print({expression})\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(Path(records.ROOT) / "src"),
                                                                    os.environ.get("PYTHONPATH")) if p))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return out.stdout.strip().splitlines()[-1]


def _device() -> dict:
    """The GPU's record (sgemm_lab.gpu.device.DeviceInfo as a dict), queried by a child process."""
    return json.loads(_gpu_query("json.dumps(dataclasses.asdict(device_info()))"))


def _in_child(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` in a forked child (it may use CUDA; this process must not); its result
    or exception comes back. Arguments travel pickled: configs as plain dicts."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("fork")) as pool:
        return pool.submit(fn, *args, **kwargs).result()


def _build_step(raw: dict, kernel: str, **paths) -> None:
    """The build step for ``kernel`` of config ``raw`` (run in a child: it loads the cubin)."""
    build_step.build(cfgmod.from_dict(raw), kernel, **paths)


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    tmp_path = tmp_path_factory.mktemp("broken")
    kdir = tmp_path / "kernels"
    kdir.mkdir()
    (kdir / "99_broken.cu").write_text(BROKEN)
    mp.setattr(cfgmod, "KERNEL_DIR", kdir)
    mp.setattr(records, "KERNEL_DIR", kdir)
    mp.setenv("SGEMM_LAB_KERNELS", str(kdir))
    from sgemm_lab.gpu import compile as comp

    mp.setattr(comp, "KERNEL_DIR", kdir)
    raw = {"watchdog_s": WATCHDOG_S, "baseline": {"numpy": False},
           "bench": {"square": [64, 96, 128, 160, 192, 224, 256], "warmup_ms": 5, "target_ms": 5, "min_reps": 3},
           "check": {"shapes": [[64, 64, 64]]},
           "kernels": [{"id": "99_broken", "title": "broken", "source": "99_broken.cu", "entry": "sgemm_broken",
                        "geometry": "elementwise", "params": {"BLOCK": 256}, "shapes": "any"}]}
    cfg = cfgmod.from_dict(raw)
    env = tmp_path / "environment.json"
    io.write_json(env, {"gpu": _device()})
    _in_child(_build_step, raw, "99_broken", env_json=env, binary_out=tmp_path / "b.bin", record_out=tmp_path / "b.json")
    yield cfg, raw, tmp_path
    mp.undo()


@pytest.fixture(scope="module")
def bench_rows(broken):
    """One bench job over all shapes: each broken shape must be its own row, the others measured."""
    cfg, raw, tmp = broken
    out = tmp / "bench.csv"
    points.bench(cfg, "99_broken", binary=tmp / "b.bin", record=tmp / "b.json", out=out, raw_config=raw)
    return pd.read_csv(out).set_index("m")


def test_good_shapes_are_measured_between_the_failures(bench_rows, record_property):
    record_property("case", "the other points of a job with failing points are measured and verified")
    assert (bench_rows.loc[[64, 128, 256], "status"] == "ok").all()
    assert bench_rows.loc[[64, 128, 256], "verified"].all()


def test_hanging_kernel_becomes_a_timeout_row(bench_rows, record_property):
    record_property("case", f"a hanging kernel: ended by the per-point watchdog ({WATCHDOG_S} s), `timeout` row")
    assert bench_rows.loc[96, "status"] == "timeout" and "watchdog" in bench_rows.loc[96, "reason"]
    assert not bench_rows.loc[96, "verified"]


def test_illegal_address_becomes_an_error_row(bench_rows, record_property):
    record_property("case", "a CUDA launch failure (illegal address): `error` row, fresh process for the next point")
    assert bench_rows.loc[160, "status"] == "error" and "illegal" in bench_rows.loc[160, "reason"].lower()
    assert not bench_rows.loc[160, "verified"]


def test_wrong_result_is_marked_failed(bench_rows, record_property):
    record_property("case", "a wrong result: check fails, timing marked not verified (`failed`)")
    assert bench_rows.loc[192, "status"] == "failed" and "relative error" in bench_rows.loc[192, "reason"]
    assert not bench_rows.loc[192, "verified"]


def test_nan_output_is_marked_failed(bench_rows, record_property):
    record_property("case", "a NaN in the output: `failed` (NaN/Inf)")
    assert bench_rows.loc[224, "status"] == "failed" and "NaN/Inf" in bench_rows.loc[224, "reason"]
    assert not bench_rows.loc[224, "verified"]


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


def test_problem_too_large_for_device_memory_is_skipped(broken, record_property):
    record_property("case", "a problem too large for device memory: `skipped` row with the sizes")
    cfg, raw, tmp = broken
    from sgemm_lab.config import footprint
    from sgemm_lab.config.records import Shape

    # the largest square the config accepts (no operand over 2^31 - 1 elements) needs about 100 GB for a
    # timed point: more than an 80 GB GPU holds, less than a 141 GB one. Free memory is asked in a child
    # process: CUDA started in this one would break the forked build workers of the tests after it.
    side = 46000
    free = int(_gpu_query("driver().mem_get_info()[0]"))
    if footprint.device_bench_bytes(Shape(m=side, n=side, k=side)) <= footprint.USABLE * free:
        pytest.skip(f"no shape the config accepts needs more than this GPU's {free / 2**30:.0f} GiB free")
    raw3 = dict(raw, bench=dict(raw["bench"], square=[], shapes=[[side, side, side]]))
    out = tmp / "bench3.csv"
    points.bench(cfgmod.from_dict(raw3), "99_broken", binary=tmp / "b.bin", record=tmp / "b.json", out=out,
                raw_config=raw3)
    df = pd.read_csv(out)
    assert df.status.iloc[0] == "skipped" and "device memory" in df.reason.iloc[0]


# ---------------------------------------------------- failed stages through the workflow's entry point
WRONG = _naive("sgemm_wrong", store="C[t] = t == 3 ? out + 1.0f : out;  // always one wrong element")


class _Outputs(list):
    """Snakemake's output object: a list of files, some also named."""

    def __init__(self, files, **named):
        super().__init__([str(f) for f in files] + [str(v) for v in named.values()])
        self.__dict__.update({k: str(v) for k, v in named.items()})


def _job(raw, kernel, log, inputs, outputs):
    """The object Snakemake hands to a workflow script, for ``sgemm_lab.pipeline.entry.main``."""
    from types import SimpleNamespace

    return SimpleNamespace(input=SimpleNamespace(**inputs), output=outputs, config=raw, log=[str(log)],
                           wildcards=SimpleNamespace(kernel=kernel), params=SimpleNamespace())


@pytest.fixture(scope="module")
def failing_stages(broken):
    """A stage that does not compile, and an autotuned stage whose only candidate computes wrong results."""
    cfg, raw, tmp = broken
    (cfgmod.KERNEL_DIR / "99_syntax.cu").write_text('extern "C" __global__ void sgemm_syntax() { this is not CUDA }\n')
    (cfgmod.KERNEL_DIR / "99_wrong.cu").write_text(WRONG)
    raw = dict(raw, sweep={"shape": [128, 128, 128], "warmup_ms": 5, "target_ms": 5, "min_reps": 3, "jobs": 2},
               kernels=[{"id": "99_syntax", "title": "syntax error", "source": "99_syntax.cu", "entry": "sgemm_syntax",
                         "geometry": "elementwise", "params": {"BLOCK": 256}, "shapes": "any"},
                        {"id": "99_wrong", "title": "wrong", "source": "99_wrong.cu", "entry": "sgemm_wrong",
                         "geometry": "elementwise", "params": {"BLOCK": 256}, "shapes": "any",
                         "sweep": {"BLOCK": [128, 256]}},
                        {"id": "99_tuned", "title": "tuned", "tune_from": ["99_wrong"]}])
    env = tmp / "env_full.json"
    io.write_json(env, {"gpu": _device()})
    return raw, tmp, env


def _status(path):
    from sgemm_lab.pipeline import outcome

    return outcome.read(path)


def _build(raw, tmp, env, kernel, **inputs):
    from sgemm_lab.pipeline import entry

    out = _Outputs([], binary=tmp / f"{kernel}.bin", record=tmp / f"{kernel}.rec.json",
                   status=tmp / f"status_build_{kernel}.json")
    _in_child(entry.main, "build", _job(raw, kernel, tmp / f"build_{kernel}.log", dict(env=str(env), **inputs), out))
    return out


def _check_not_run(raw, tmp, env, kernel, build):
    from sgemm_lab.pipeline import entry

    out = _Outputs([tmp / f"check_{kernel}.json"], status=tmp / f"status_check_{kernel}.json")
    _in_child(entry.main, "check", _job(raw, kernel, tmp / f"check_{kernel}.log",
                                        dict(env=str(env), binary=build.binary, record=build.record), out))
    rec = _status(out.status)
    assert rec.status == "not run" and rec.message.startswith("build failed: "), rec
    assert io.read_json(out[0])["points"] == []


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
