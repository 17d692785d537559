"""What the GPU failure tests share (``tests/gpu``, run on a machine with a GPU, skipped without one):
the deliberately broken kernels, the child processes that start CUDA (this process never does), and the
``broken`` fixture: a stage whose kernel hangs, faults, or computes wrong results at chosen shapes, built
by the real build step.

Each test module runs as a pytest process of its own in the pipeline's failure_tests step, side by side:
the GPU-lock requests of one module then wait on the GPU's queue one after another, not those of all.

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
from sgemm_lab.results import io  # noqa: E402

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
    from sgemm_lab.results import outcome

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
