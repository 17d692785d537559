"""The fused-epilogue comparison: D = act(alpha*A@B + beta*C + bias) three ways.

For every stage with ``signature: fused`` and every activation in the config:

* the stage itself, compiled with ``-DACT=<code>``, one launch;
* cuBLASLt with the matching epilogue (BIAS, RELU_BIAS, GELU_BIAS), one call;
* cuBLAS SGEMM followed by a separate bias + activation kernel (two launches, C read twice).

Each is verified against a float64 reference on fresh inputs (output pre-filled with NaN, bias per
column, beta != 0) and timed like a bench point. The stage and cuBLASLt are also verified with padded
leading dimensions (lda = K+3, ldb = N+5, ldc = N+7, ldd = N+1, D separate from C), with NaN in the
padding so that a read outside the matrix is caught.
"""

from __future__ import annotations

import logging

import numpy as np

from ..config.records import KernelSpec, LabConfig, Shape
from ..results import verify
from ..results.stats import tflops
from .definition import ACT_CODES, act_reference

log = logging.getLogger("sgemm_lab")

PAD = dict(lda=3, ldb=5, ldc=7, ldd=1)


def problem(shape: Shape, *, alpha: float, beta: float, seed: int, padded: bool):
    """Padded row-major operands (NaN in the padding), bias, and the leading dimensions."""
    rng = np.random.default_rng(seed)
    ld = {k: (getattr(shape, "k" if k == "lda" else "n") + (v if padded else 0)) for k, v in PAD.items()}

    def mat(rows, cols, ldx):
        full = np.full((rows, ldx), np.nan, np.float32)
        full[:, :cols] = rng.random((rows, cols), dtype=np.float32) * 2 - 1
        return full

    a, b, c = mat(shape.m, shape.k, ld["lda"]), mat(shape.k, shape.n, ld["ldb"]), mat(shape.m, shape.n, ld["ldc"])
    bias = rng.random(shape.n, dtype=np.float32) * 2 - 1
    return dict(a=a, b=b, c=c, bias=bias, alpha=alpha, beta=beta, seed=seed, **ld)


def reference(p, shape: Shape, act: str, ab: np.ndarray | None = None) -> np.ndarray:
    """act(alpha*A@B + beta*C + bias) in float64 (``ab`` = alpha*A@B if already computed)."""
    a = p["a"][:, :shape.k].astype(np.float64)
    b = p["b"][:, :shape.n].astype(np.float64)
    out = (p["alpha"] * (a @ b)) if ab is None else ab.copy()
    out += p["beta"] * p["c"][:, :shape.n].astype(np.float64) + p["bias"].astype(np.float64)[None, :]
    return act_reference(out, act)


def variant(spec: KernelSpec, act: str) -> KernelSpec:
    """The fused stage compiled for one activation."""
    return spec.with_params(ACT=ACT_CODES[act])


def run(cfg: LabConfig, spec: KernelSpec, *, cubins: dict[str, bytes], seed_for) -> list[dict]:
    """Verify and time every activation variant (``cubins[act]``, from ``variant``) against cuBLASLt and
    cuBLAS + a separate kernel. One fresh problem per shape (``seed_for(shape, padded)``), shared by the
    activations, so that its float64 product is computed once."""
    from ..gpu.device import device_info, driver
    from ..gpu.launch import KernelLauncher
    from ..gpu.reference import Fp64Reference
    from ..gpu.timing import L2Flusher
    from ..measure.runners import TimingSettings

    cuda = driver()
    dev = device_info()
    stream = cuda.Stream()
    flusher = L2Flusher(dev.l2_bytes)
    ref64 = Fp64Reference(stream)
    b = cfg.bench
    timing = TimingSettings(warmup_ms=b.warmup_ms, target_ms=b.target_ms, min_reps=b.min_reps, max_reps=b.max_reps,
                            rewarm_ms=b.rewarm_ms)
    kernels = {}
    for act in cfg.epilogue.acts:
        kernels[act] = KernelLauncher(variant(spec, act), cubins[act])
        kernels[act].check_launchable(dev)
    rows = []
    points = [(s, False) for s in cfg.epilogue.shapes] + [(cfg.epilogue.padded_shape, True)]
    for shape, padded in points:
        p = problem(shape, alpha=cfg.check.alpha, beta=cfg.check.beta, seed=seed_for(shape, padded), padded=padded)
        ab = ref64.alpha_ab(p["a"][:, :shape.k], p["b"][:, :shape.n], p["alpha"]) if shape.flops > 2e9 else None
        tol = verify.tolerance_for(spec.precision, shape.k, cfg.check)
        dA, dB, dC = (cuda.to_device(p[x]) for x in ("a", "b", "c"))
        dBias = cuda.to_device(p["bias"])
        dD = cuda.mem_alloc(4 * shape.m * p["ldd"])
        try:
            for act in cfg.epilogue.acts:
                rows += _compare(spec, act, kernels[act], shape, padded, p, reference(p, shape, act, ab), tol,
                                 (dA, dB, dC, dBias, dD), stream, flusher, dev, timing)
        finally:
            for buf in (dA, dB, dC, dBias, dD):
                buf.free()
        del ab
    ref64.close()
    return rows


def _compare(spec, act, kern, shape, padded, p, ref, tol, bufs, stream, flusher, dev, timing) -> list[dict]:
    """The stage, cuBLASLt and (packed shapes) cuBLAS + a separate kernel for one activation: verify, time."""
    import pycuda.driver as cuda

    from ..gpu.timing import time_launches
    from ..measure.foreign import Watch, undisturbed
    from .cublaslt import CublasLtEpilogue
    from .unfused import CublasPlusBiasAct

    dA, dB, dC, dBias, dD = bufs
    rows = []
    lt = CublasLtEpilogue(stream, m=shape.m, n=shape.n, k=shape.k, act=act, bias=True,
                          lda=p["lda"], ldb=p["ldb"], ldc=p["ldc"], ldd=p["ldd"])
    unfused = None if padded else CublasPlusBiasAct(stream, act=act)
    impls = {
        spec.id: lambda: kern.fused_call(shape, p["alpha"], dA, p["lda"], dB, p["ldb"], p["beta"], dC,
                                         p["ldc"], dBias, dD, p["ldd"], stream),
        "cublaslt": lambda: lt(p["alpha"], dA, p["lda"], dB, p["ldb"], p["beta"], dC, p["ldc"], dBias,
                               dD, p["ldd"]),
    }
    if unfused is not None:  # writes C in place: D is C here, restored before each verification
        impls["cublas+bias_act"] = lambda: unfused(shape, p["alpha"], dA, dB, p["beta"], dD, dBias, stream)
    try:
        for impl, launch in impls.items():
            row = dict(stage=spec.id, implementation=impl, act=act, m=shape.m, n=shape.n, k=shape.k,
                       lda=p["lda"], ldb=p["ldb"], ldc=p["ldc"], ldd=p["ldd"], padded=padded,
                       launches=2 if impl == "cublas+bias_act" and (act != "none") else 1)
            if impl == "cublas+bias_act":
                cuda.memcpy_htod(dD, np.ascontiguousarray(p["c"]))  # its C is its output
            else:
                cuda.memset_d32(dD, verify.NAN_BITS, shape.m * p["ldd"])
            launch()
            stream.synchronize()
            out = np.empty((shape.m, p["ldd"]), np.float32)
            cuda.memcpy_dtoh(out, dD)
            v = verify.compare(out[:, :shape.n], ref, tol)
            row.update(verified=v.passed, rel_err=v.rel_err, max_abs_err=v.max_abs_err, tolerance=tol,
                       reason=v.reason, algo=str(lt.algo_info) if impl == "cublaslt" else "")
            if not padded:  # timed while watched for other work on the GPU, as bench points are
                t, seen, disturbed = undisturbed(
                    lambda: time_launches(launch, stream, warmup_ms=timing.warmup_ms, target_ms=timing.target_ms,
                                          min_reps=timing.min_reps, max_reps=timing.max_reps, flush=flusher,
                                          pci_bus_id=dev.pci_bus_id, rewarm_ms=timing.rewarm_ms),
                    Watch.on(dev.pci_bus_id))
                row.update(t.as_row(), tflops=tflops(shape.flops, t.stats.median_ms), disturbance=seen,
                           disturbed=disturbed)
            rows.append(row)
            log.info("[epilogue %s] %s %s %s%s: %s%s", spec.id, impl, act, shape, " padded" if padded else "",
                     "verified" if v.passed else "FAIL " + v.reason,
                     f", {row['tflops']:.2f} TFLOP/s" if "tflops" in row else "")
            if row.get("disturbed"):
                log.warning("[epilogue %s] %s %s %s: DISTURBED by other work on the GPU: %s", spec.id, impl, act,
                            shape, row["disturbance"])
    finally:
        lt.close()
        if unfused is not None:
            unfused.close()
    return rows
