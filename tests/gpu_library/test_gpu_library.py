"""sgemm_lab.library.matmul on the GPU, on CuPy arrays, PyTorch tensors and PyCUDA arrays (the lab's own
dependency, so that a GPU host with neither of the others runs it too): the result against float64,
held to the stage's class limit with cuBLAS's own error on the same inputs (``results.verify.limit_for``),
for the stage the committed run's tables choose in each race and for alpha/beta variants, with the output
poisoned (NaN) where beta = 0. By hand on a GPU host (the CPU suite does not collect this folder):

    python -m pytest tests/gpu_library
"""

import numpy as np
import pytest

from sgemm_lab.config.load import load
from sgemm_lab.config.records import ROOT, Shape
from sgemm_lab.library import DEFAULT_RUN, choose, matmul
from sgemm_lab.results.verify import limit_for

SHAPES = [(257, 131, 67), (10, 4096, 1515), (4096, 12, 1000), (1024, 1024, 1024), (333, 777, 2049)]
VARIANTS = [(1.0, 0.0), (0.75, 1.5), (0.0, 2.0)]  # (alpha, beta); beta = 0 writes into a NaN-filled c


def _libraries():
    out = []
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            out.append("cupy")
    except Exception:  # noqa: BLE001 - absent or without a GPU: its cases are skipped
        pass
    try:
        import torch

        if torch.cuda.is_available():
            out.append("torch")
    except Exception:  # noqa: BLE001
        pass
    try:
        from sgemm_lab.gpu.device import driver

        driver()  # the lab's context: PyCUDA with a GPU
        out.append("pycuda")
    except Exception:  # noqa: BLE001
        pass
    return out


LIBS = _libraries()


_PYCUDA_BASELINE: list = []


class Lib:
    """The few calls a test needs, the same for CuPy, PyTorch and PyCUDA."""

    def __init__(self, name):
        self.name = name
        if name == "cupy":
            import cupy

            self.to_gpu = lambda x: cupy.asarray(x)
            self.to_host = lambda x: cupy.asnumpy(x)
            self.matmul = lambda a, b: a @ b
            self.sync = lambda: cupy.cuda.runtime.deviceSynchronize()
        elif name == "pycuda":
            import pycuda.gpuarray as garray

            from sgemm_lab.gpu.device import driver
            from sgemm_lab.gpu.launch import CublasLauncher

            cuda = driver()
            if not _PYCUDA_BASELINE:  # one stream and cuBLAS handle for the whole module
                stream = cuda.Stream()
                _PYCUDA_BASELINE.extend([stream, CublasLauncher(stream)])  # cuBLAS strict FP32, the baseline
            stream, sgemm = _PYCUDA_BASELINE

            def product(a, b):
                c = garray.empty((a.shape[0], b.shape[1]), np.float32)
                sgemm(Shape(m=a.shape[0], n=b.shape[1], k=a.shape[1]), 1.0, a.gpudata, b.gpudata, 0.0, c.gpudata, stream)
                stream.synchronize()
                return c

            self.to_gpu = garray.to_gpu
            self.to_host = lambda x: x.get()
            self.matmul = product
            self.sync = cuda.Context.synchronize
        else:
            import torch

            torch.backends.cuda.matmul.allow_tf32 = False  # cuBLAS strict FP32, the baseline
            self.to_gpu = lambda x: torch.from_numpy(x).cuda()
            self.to_host = lambda x: x.cpu().numpy()
            self.matmul = lambda a, b: a @ b
            self.sync = torch.cuda.synchronize


def _rel(out: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(out.astype(np.float64) - ref) / max(np.linalg.norm(ref), 1e-300))


@pytest.fixture(scope="module")
def cfg():
    return load(ROOT / "config" / "config.yaml")


@pytest.mark.skipif(not LIBS, reason="neither CuPy, PyTorch nor PyCUDA sees a GPU here")
@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("race", ["fp32", "fp32_accurate"])
@pytest.mark.parametrize("mnk", SHAPES)
def test_matmul_matches_float64_within_the_stage_class_limit(cfg, lib, race, mnk):
    m, n, k = mnk
    L = Lib(lib)
    rng = np.random.default_rng(hash((lib, race, mnk)) % 2**32)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    stage = choose(cfg, DEFAULT_RUN, Shape(m=m, n=n, k=k), race)
    precision = cfg.kernel(stage).precision
    ga, gb = L.to_gpu(a), L.to_gpu(b)
    for alpha, beta in VARIANTS:
        c0 = rng.uniform(-1, 1, (m, n)).astype(np.float32)
        ref = alpha * (a.astype(np.float64) @ b.astype(np.float64)) + beta * c0.astype(np.float64)
        # cuBLAS strict FP32 on the same inputs: its error sets the FP32 class's limit
        cublas = alpha * L.to_host(L.matmul(ga, gb)).astype(np.float64) + beta * c0
        limit = limit_for(precision, k, cfg.check, _rel(cublas, ref))
        gc = L.to_gpu(np.full((m, n), np.nan, np.float32) if beta == 0 else c0)
        out = matmul(ga, gb, gc, alpha=alpha, beta=beta, race=race)
        L.sync()
        got = L.to_host(out)
        assert out is gc
        assert np.isfinite(got).all(), f"{stage} {mnk} alpha={alpha} beta={beta}: NaN/Inf in the output"
        err = _rel(got, ref)
        assert err < limit, f"{stage} {mnk} alpha={alpha} beta={beta}: error {err:.3g} >= limit {limit:.3g}"


@pytest.mark.skipif(not LIBS, reason="neither CuPy, PyTorch nor PyCUDA sees a GPU here")
@pytest.mark.parametrize("lib", LIBS)
def test_without_c_a_new_array_of_the_inputs_kind_is_returned(cfg, lib):
    L = Lib(lib)
    rng = np.random.default_rng(7)
    a = rng.uniform(-1, 1, (300, 200)).astype(np.float32)
    b = rng.uniform(-1, 1, (200, 100)).astype(np.float32)
    ga, gb = L.to_gpu(a), L.to_gpu(b)
    out = matmul(ga, gb, stage="11_general")
    L.sync()
    assert type(out) is type(ga) and tuple(out.shape) == (300, 100)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    limit = limit_for("fp32", 200, cfg.check, _rel(L.to_host(L.matmul(ga, gb)), ref))
    assert _rel(L.to_host(out), ref) < limit


@pytest.mark.skipif(not LIBS, reason="neither CuPy, PyTorch nor PyCUDA sees a GPU here")
@pytest.mark.parametrize("lib", LIBS)
def test_the_product_runs_in_the_order_of_the_caller_s_stream(cfg, lib):
    """On a non-blocking stream of the caller's (which the legacy default stream does not wait for): the
    inputs written there just before the call, behind a long kernel, are what the product reads, and a
    copy queued there just after the call holds the product. Out of that order it would read zeros."""
    m, n, k = 512, 384, 256
    rng = np.random.default_rng(11)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    L = Lib(lib)
    src_a, src_b = L.to_gpu(a), L.to_gpu(b)
    ga, gb = L.to_gpu(np.zeros_like(a)), L.to_gpu(np.zeros_like(b))
    gc = L.to_gpu(np.full((m, n), np.nan, np.float32))
    L.sync()
    if lib == "torch":
        import torch

        side = torch.cuda.Stream()  # PyTorch's streams do not synchronise with the legacy stream
        with torch.cuda.stream(side):
            torch.cuda._sleep(int(5e8))  # a kernel that spins a few hundred milliseconds
            ga.copy_(src_a)
            gb.copy_(src_b)
            out = matmul(ga, gb, gc, stage="11_general")
            got = out.clone()
        side.synchronize()
    elif lib == "pycuda":
        from sgemm_lab.gpu.device import driver
        from sgemm_lab.gpu.launch import CublasLauncher

        cuda = driver()
        side = cuda.Stream(flags=1)  # CU_STREAM_NON_BLOCKING
        x, y = L.to_gpu(np.full((4096, 4096), 1e-4, np.float32)), L.to_gpu(np.zeros((4096, 4096), np.float32))
        got = L.to_gpu(np.zeros((m, n), np.float32))  # before the queue below: its copy would wait for the product
        L.sync()
        busy = CublasLauncher(side)
        for _ in range(30):  # tens of milliseconds of work ahead of the inputs' copies
            busy(Shape(m=4096, n=4096, k=4096), 1.0, x.gpudata, x.gpudata, 0.0, y.gpudata, side)
        cuda.memcpy_dtod_async(ga.gpudata, src_a.gpudata, a.nbytes, side)
        cuda.memcpy_dtod_async(gb.gpudata, src_b.gpudata, b.nbytes, side)
        out = matmul(ga, gb, gc, stage="11_general", stream=side)
        cuda.memcpy_dtod_async(got.gpudata, out.gpudata, 4 * m * n, side)
        side.synchronize()
        busy.close()
    else:
        import cupy

        side = cupy.cuda.Stream(non_blocking=True)
        with side:
            x = cupy.full((4096, 4096), 1e-4, cupy.float32)
            for _ in range(30):  # tens of milliseconds of work ahead of the inputs' copies
                x = x @ x
            ga[...] = src_a
            gb[...] = src_b
            out = matmul(ga, gb, gc, stage="11_general")
            got = out.copy()
        side.synchronize()
    limit = limit_for("fp32", k, cfg.check, _rel(L.to_host(L.matmul(src_a, src_b)), ref))
    assert _rel(L.to_host(got), ref) < limit


@pytest.mark.skipif(not LIBS, reason="neither CuPy, PyTorch nor PyCUDA sees a GPU here")
@pytest.mark.parametrize("lib", LIBS)
def test_a_view_off_a_16_byte_boundary_and_an_overlapping_c_are_refused(lib):
    from sgemm_lab.errors import LabError

    L = Lib(lib)
    big = L.to_gpu(np.ones((65, 64), np.float32))
    with pytest.raises(LabError, match="16-byte boundary"):
        matmul(big.reshape(-1)[1:1 + 64 * 64].reshape(64, 64), big[:64], stage="11_general")
    with pytest.raises(LabError, match="c overlaps a"):
        matmul(big[:64], big[:64], big[1:], stage="11_general")


PHASED = [k.id for k in load(ROOT / "config" / "config.yaml").kernels if k.geometry == "phases"]


@pytest.mark.skipif(not LIBS, reason="neither CuPy, PyTorch nor PyCUDA sees a GPU here")
@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("stage", PHASED)
@pytest.mark.parametrize("mnk", SHAPES)
def test_a_stage_of_several_kernels_on_the_caller_s_arrays(cfg, lib, stage, mnk):
    """A stage of several kernels (its workspace the launcher's own) named by the caller: within its class
    limit on random inputs in every alpha/beta variant, and on small integers, exact where cuBLAS FP32 is."""
    m, n, k = mnk
    L = Lib(lib)
    rng = np.random.default_rng(hash((lib, stage, mnk)) % 2**32)
    precision = cfg.kernel(stage).precision
    for ints in (False, True):
        draw = (lambda *s: rng.integers(-8, 9, s).astype(np.float32)) if ints else \
            (lambda *s: rng.uniform(-1, 1, s).astype(np.float32))
        a, b = draw(m, k), draw(k, n)
        ga, gb = L.to_gpu(a), L.to_gpu(b)
        for alpha, beta in VARIANTS[:1] if ints else VARIANTS:
            c0 = draw(m, n)
            ref = alpha * (a.astype(np.float64) @ b.astype(np.float64)) + beta * c0.astype(np.float64)
            cublas = alpha * L.to_host(L.matmul(ga, gb)).astype(np.float64) + beta * c0
            gc = L.to_gpu(np.full((m, n), np.nan, np.float32) if beta == 0 else c0)
            out = matmul(ga, gb, gc, alpha=alpha, beta=beta, stage=stage)
            L.sync()
            got = L.to_host(out)
            assert np.isfinite(got).all(), f"{stage} {mnk} alpha={alpha} beta={beta}: NaN/Inf in the output"
            if ints:  # every product and partial sum exact in FP32 (|sum| <= 64 K < 2^24 here)
                assert np.array_equal(got, ref.astype(np.float32)), f"{stage} {mnk}: not exact on integers"
            else:
                limit = limit_for(precision, k, cfg.check, _rel(cublas, ref))
                err = _rel(got, ref)
                assert err < limit, f"{stage} {mnk} alpha={alpha} beta={beta}: error {err:.3g} >= limit {limit:.3g}"
