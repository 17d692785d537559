"""The GPU half of the bad-input catalogue, run on a machine with a GPU (skipped without one):

    python -m pytest tests/gpu

Each case uses the real steps (supervised child processes, real CUDA launches) on a deliberately
broken kernel, and checks that the failure is one row with a clear status while the other points of
the same job are still measured.
"""

import importlib.util

import pandas as pd
import pytest

if importlib.util.find_spec("pycuda") is None:
    pytest.skip("needs PyCUDA and a GPU", allow_module_level=True)

from sgemm_lab import config as cfgmod  # noqa: E402
from sgemm_lab import io, steps  # noqa: E402

BROKEN = r"""
extern "C" __global__ void sgemm_broken(int M, int N, int K, float alpha, const float* __restrict__ A,
                                        const float* __restrict__ B, float beta, float* __restrict__ C) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= M * N) return;
    int row = t / N, col = t % N;
    if (M == 96) { while (clock64() >= 0) { if (K < 0) C[t] = 0.f; } }   // hangs (a loop the compiler keeps)
    if (M == 160) { C[(size_t)1 << 40] = 1.0f; }                          // illegal address
    float acc = 0.f;
    for (int k = 0; k < K; ++k) acc += A[row * K + k] * B[k * N + col];
    float out = beta == 0.f ? alpha * acc : alpha * acc + beta * C[t];
    if (M == 192 && t == 5) out += 1.0f;                                  // wrong result
    if (M == 224 && t == 7) out = __int_as_float(0x7fc00000);              // NaN output
    C[t] = out;
}
"""


WATCHDOG_S = 3


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    tmp_path = tmp_path_factory.mktemp("broken")
    kdir = tmp_path / "kernels"
    kdir.mkdir()
    (kdir / "99_broken.cu").write_text(BROKEN)
    mp.setattr(cfgmod, "KERNEL_DIR", kdir)
    mp.setenv("SGEMM_LAB_KERNELS", str(kdir))
    from sgemm_lab import compile as comp

    mp.setattr(comp, "KERNEL_DIR", kdir)
    raw = {"watchdog_s": WATCHDOG_S, "baseline": {"numpy": False},
           "bench": {"square": [64, 96, 128, 160, 192, 224, 256], "warmup_ms": 5, "target_ms": 5, "min_reps": 3},
           "check": {"shapes": [[64, 64, 64]]},
           "kernels": [{"id": "99_broken", "title": "broken", "source": "99_broken.cu", "entry": "sgemm_broken",
                        "geometry": "elementwise", "params": {"BLOCK": 256}, "shapes": "any"}]}
    cfg = cfgmod.from_dict(raw)
    env = tmp_path / "environment.json"
    from sgemm_lab import gpu

    io.write_json(env, {"gpu": {"arch": gpu.device_info().arch}})
    steps.build(cfg, "99_broken", env_json=env, binary_out=tmp_path / "b.bin", record_out=tmp_path / "b.json")
    yield cfg, raw, tmp_path
    mp.undo()


@pytest.fixture(scope="module")
def bench_rows(broken):
    """One bench job over all shapes: each broken shape must be its own row, the others measured."""
    cfg, raw, tmp = broken
    out = tmp / "bench.csv"
    steps.bench(cfg, "99_broken", binary=tmp / "b.bin", record=tmp / "b.json", out=out, raw_config=raw)
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
        steps.build(cfgmod.from_dict(raw2), "99_heavy", env_json=tmp / "environment.json",
                    binary_out=tmp / "h.bin", record_out=tmp / "h.json")
    assert "99_heavy" in str(err.value) and "\n" not in str(err.value)
    assert not (tmp / "h.bin").exists()


def test_problem_too_large_for_device_memory_is_skipped(broken, record_property):
    record_property("case", "a problem too large for device memory: `skipped` row with the sizes")
    cfg, raw, tmp = broken
    raw3 = dict(raw, bench=dict(raw["bench"], square=[], shapes=[[200000, 200000, 64]]))
    out = tmp / "bench3.csv"
    steps.bench(cfgmod.from_dict(raw3), "99_broken", binary=tmp / "b.bin", record=tmp / "b.json", out=out,
                raw_config=raw3)
    df = pd.read_csv(out)
    assert df.status.iloc[0] == "skipped" and "device memory" in df.reason.iloc[0]
