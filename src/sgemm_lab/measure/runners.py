"""Callers: verify and time one implementation (a CUDA kernel, cuBLAS, a host stage or NumPy).

Every runner offers the same two operations, so the check, bench and sweep steps never care what
they are driving:

``check(shape, seed)``  three runs on fresh inputs against a float64 CPU (NumPy) reference: C read
                        (beta != 0), beta = 0 on an output pre-filled with NaN, and alpha = 0
                        (C scaled by beta, whatever A @ B is).
``bench(shape, seed, timing)``  the same two verification runs (GPU runners use a float64 cuBLAS
                        DGEMM reference, which is fast at 8192^3), then the timed repetitions.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config.geometry import unsupported_reason
from ..config.phases import workspace_bytes
from ..config.records import BASELINE_PRECISION, UNIFORM, CheckSettings, Distribution, KernelSpec, LabConfig, Shape
from ..dispatch.launch import launcher_for
from ..results import verify
from .gpulock import device_columns
from ..results.stats import reps_for, summarize, tflops
from ..results.steadiness import unsteady


@dataclass(frozen=True, kw_only=True)
class TimingSettings:
    warmup_ms: float
    target_ms: float
    min_reps: int
    max_reps: int
    l2_policy: str = "flush"
    rewarm_ms: float | None = None  # see gpu.timing.warm_enough
    retimes: int = 0  # an unsteady timing (results.steadiness) is done again up to this many times


def retimed(time_once, retimes: int, columns=lambda result: result):
    """``time_once()`` and, while its result is unsteady (``results.steadiness``; ``columns`` gives the
    result's timing columns), again, at most ``retimes`` more times: (the first steady result, else the
    last, never the fastest; how many times it was done again)."""
    result, again = time_once(), 0
    while again < retimes and unsteady(columns(result)):
        result, again = time_once(), again + 1
    return result, again


def _modes(problem: verify.Problem, refs) -> tuple:
    """The three check modes: (name, alpha, beta, reference, terms of the reference, C poisoned)."""
    scaled_c = problem.beta * problem.c.astype(np.float64)
    return (("beta", problem.alpha, problem.beta, refs[0], (refs[1], scaled_c), False),
            ("beta0_poisoned", problem.alpha, 0.0, refs[1], (), True),
            ("alpha0", 0.0, problem.beta, scaled_c, (), False))


def baseline_errors(problem: verify.Problem, refs, baseline) -> dict[str, float]:
    """cuBLAS strict FP32's relative error at each check mode: ``baseline`` is its ``run(alpha, beta,
    poison) -> output`` on the point's inputs. The same for every stage checked on these inputs, so a check
    job keeps it with them (``shared_inputs.baseline_errors``)."""
    return {mode: verify.compare(baseline(alpha, beta, poison), ref, math.inf, scale=verify.scale_of(ref, terms)).rel_err
            for mode, alpha, beta, ref, terms, poison in _modes(problem, refs)}


def _check_rows(problem: verify.Problem, refs, run, precision: str, check: CheckSettings, baseline=None) -> list[dict]:
    """Run ``run(alpha, beta, poison) -> output`` for the three verification modes and compare with
    ``refs`` (alpha*A@B + beta*C and alpha*A@B) or, for alpha = 0, with beta*C.

    ``baseline`` (cuBLAS strict FP32 on the same inputs: its errors by mode, ``baseline_errors``, or its
    run function; None where there is no GPU) sets the FP32 class's relative limit at each mode
    (``verify.fp32_limit``); a stage of class ``precision`` is held to ``verify.limit_for``. Every row
    records cuBLAS's error and the FP32 limit, whatever the stage's class, so that a TF32 result can be
    shown to fail the FP32 class."""
    if callable(baseline):
        baseline = baseline_errors(problem, refs, baseline)
    k = problem.shape.k
    rows = []
    for mode, alpha, beta, ref, terms, poison in _modes(problem, refs):
        out = run(alpha, beta, poison)
        scale = verify.scale_of(ref, terms)
        lib_err = float(baseline[mode]) if baseline is not None else math.nan
        limit32 = verify.fp32_limit(k, check, lib_err)
        tol = verify.limit_for(precision, k, check, lib_err)
        v = verify.compare(out, ref, tol, scale=scale)
        reason = v.reason
        if not v.passed and not v.nonfinite and tol < verify.tolerance_for(precision, k, check):
            reason += f" ({check.fp32_factor:g}x cuBLAS FP32's {lib_err:.3g} on the same inputs)"
        rows.append(dict(mode=mode, distribution=problem.dist, alpha=alpha, beta=beta, seed=problem.seed,
                         passed=v.passed, rel_err=v.rel_err, max_abs_err=v.max_abs_err, nonfinite=v.nonfinite,
                         tolerance=v.tolerance, cublas_rel_err=lib_err, fp32_limit=limit32,
                         fp32_basis="cublas" if baseline is not None else "absolute", reason=reason))
    return rows


def summarize_checks(rows: list[dict]) -> dict:
    fails = "; ".join(f"{r['mode']}: {r['reason']}" for r in rows if not r["passed"])
    return dict(verified=all(r["passed"] for r in rows), reason=fails,
                rel_err=max(r["rel_err"] for r in rows), max_abs_err=max(r["max_abs_err"] for r in rows),
                tolerance=rows[0]["tolerance"])


def precision_of(spec: KernelSpec | None, impl: str = "cublas") -> str:
    """The precision class of an implementation: its stage's, or (``spec`` None) the library baseline's."""
    return spec.precision if spec is not None else BASELINE_PRECISION[impl]


class _Tolerance:
    cfg: LabConfig
    impl: str
    spec: KernelSpec | None

    @property
    def precision(self) -> str:
        return precision_of(self.spec, self.impl)

    def tolerance(self, shape: Shape) -> float:
        return verify.tolerance_for(self.precision, shape.k, self.cfg.check)


def device_run(launch, stream, bufs, problem: verify.Problem):
    """``run(alpha, beta, poison) -> C`` of a check mode on the device: A, B, C uploaded (or C filled with
    NaN), ``launch`` on ``bufs``, the result downloaded."""

    def run(alpha, beta, poison):
        if poison:
            bufs.poison_c()
        else:
            bufs.upload(problem.a, problem.b, problem.c)
        launch(problem.shape, alpha, bufs.a, bufs.b, beta, bufs.c, stream)
        stream.synchronize()
        return bufs.download_c()

    return run


class CublasBaseline:
    """cuBLAS strict FP32 on a check problem's inputs: the error the FP32 class is measured against.
    ``for_problem`` returns the same ``run(alpha, beta, poison)`` as a runner's, on the device buffers
    given (a GPU stage's own, reloaded by every run) or on its own."""

    def __init__(self, stream=None):
        from ..gpu.device import driver
        from ..gpu.launch import library_launcher

        cuda = driver()
        self.stream = stream if stream is not None else cuda.Stream()
        self.launch = library_launcher("cublas", self.stream)

    def for_problem(self, problem: verify.Problem, bufs):
        return device_run(self.launch, self.stream, bufs, problem)

    def errors(self, problem: verify.Problem, refs, inputs: Path | None, dist: Distribution,
               bufs=None) -> dict[str, float]:
        """cuBLAS's error at each check mode on ``problem``: kept with the point's shared inputs under
        ``inputs`` for the GPU this process is pinned to and this cuBLAS (``shared_inputs``), else run here,
        on ``bufs`` (a runner's own device buffers for the point) or on buffers of its own."""
        from .shared_inputs import baseline_errors as kept

        gpu = device_columns().get("device_uuid")
        tag = f"cublas{self.launch.version}-{gpu}" if gpu else None
        p = problem

        def make() -> dict[str, float]:
            if bufs is not None:
                return baseline_errors(p, refs, self.for_problem(p, bufs))
            from ..gpu.buffers import Buffers

            own = Buffers(p.shape)
            try:
                return baseline_errors(p, refs, self.for_problem(p, own))
            finally:
                own.free()

        return kept(inputs if tag else None, p.shape, alpha=p.alpha, beta=p.beta, seed=p.seed, dist=dist, tag=tag,
                    make=make)

    def close(self) -> None:
        self.launch.close()


class GpuRunner(_Tolerance):
    """A CUDA kernel (``spec`` + compiled cubin) or cuBLAS (``spec`` None) on the current GPU."""

    def __init__(self, cfg: LabConfig, impl: str, spec: KernelSpec | None, cubin: bytes | None):
        from ..gpu.device import device_info, driver
        from ..gpu.launch import library_launcher

        cuda = driver()
        self.cfg, self.impl, self.spec = cfg, impl, spec
        self.dev = device_info()
        self.stream = cuda.Stream()
        self.launch = library_launcher(impl, self.stream) if spec is None else launcher_for(spec, cubin)
        self._flusher = None
        self._ref = None
        self._baseline: CublasBaseline | None = None

    def skip_reason(self, shape: Shape, kind: str = "bench") -> str | None:
        """Why ``shape`` is not run: the stage cannot run it, or the point would not fit in memory
        (host memory for a check's inputs and references, device memory for the buffers)."""
        if self.spec is not None:
            reason = unsupported_reason(self.spec, shape)
            if reason:
                return reason
        from ..config import footprint as fp
        from ..gpu.device import driver

        free, _total = driver().mem_get_info()
        own = workspace_bytes(self.spec, shape) if self.spec is not None else 0  # a stage of several kernels' buffers
        if kind == "check":
            return (fp.too_big(fp.host_check_bytes(shape), fp.host_available_bytes(), "host")
                    or fp.too_big(fp.device_check_bytes(shape) + own, free, "device"))
        return fp.too_big(fp.device_bench_bytes(shape) + own, free, "device")

    def device_columns(self) -> dict:
        """The GPU that measured a row: index and UUID (which of the host's GPUs) and its model, as CUDA
        names it (the same name as the environment record's: a run holds one model's results)."""
        return dict(device_columns(), device_name=self.dev.name)

    def _run_fn(self, bufs, problem):
        return device_run(self.launch, self.stream, bufs, problem)

    def check(self, shape: Shape, seed: int, dist: Distribution = UNIFORM, *, inputs: Path | None = None) -> list[dict]:
        """The check modes at ``shape`` on the inputs of ``seed`` (kept under ``inputs`` for the other
        implementations' checks: ``shared_inputs``), against cuBLAS on the same inputs."""
        from ..gpu.buffers import Buffers
        from .shared_inputs import problem

        p, refs = problem(inputs, shape, alpha=self.cfg.check.alpha, beta=self.cfg.check.beta, seed=seed, dist=dist)
        if self._baseline is None:
            self._baseline = CublasBaseline(self.stream)
        bufs = Buffers(shape)
        try:
            rows = _check_rows(p, refs, self._run_fn(bufs, p), self.precision, self.cfg.check,
                               self._baseline.errors(p, refs, inputs, dist, bufs))
        finally:
            bufs.free()
        return [dict(r, **self.device_columns()) for r in rows]

    def bench(self, shape: Shape, seed: int, timing: TimingSettings) -> dict:
        """Verify on fresh inputs generated on the GPU against a float64 DGEMM reference (errors measured
        on the GPU), then time. The inputs are drawn from ``seed`` by a counter-based hash. The timing is
        watched for other work on the GPU and tried again while there is some (``foreign``): the row
        says what was seen (``disturbance``) and whether every try was disturbed (``disturbed``)."""
        from ..gpu.buffers import Buffers
        from ..gpu.device import driver
        from ..gpu.reference import DeviceCheck
        from ..gpu.timing import L2Flusher, time_launches
        from . import foreign

        cuda = driver()
        if self._ref is None:
            self._ref = DeviceCheck(self.stream)
        if timing.l2_policy == "flush" and self._flusher is None:
            self._flusher = L2Flusher(self.dev.l2_bytes)
        dc, alpha, beta = self._ref, self.cfg.check.alpha, self.cfg.check.beta
        m, n, k = shape.m, shape.n, shape.k
        tol = self.tolerance(shape)
        bufs = Buffers(shape)
        c0 = cuda.mem_alloc(4 * m * n)
        refs = ()
        try:
            sa, sb, sc = (int(x) for x in np.random.SeedSequence(seed).generate_state(3, dtype=np.uint64))
            dc.fill(bufs.a, m * k, sa)
            dc.fill(bufs.b, k * n, sb)
            dc.fill(bufs.c, m * n, sc)
            cuda.memcpy_dtod_async(c0, bufs.c, 4 * m * n, self.stream)
            refs = dc.references(bufs, alpha, beta)
            checks = []
            for mode, b, ref in (("beta", beta, refs[0]), ("beta0_poisoned", 0.0, refs[1])):
                if mode == "beta0_poisoned":
                    bufs.poison_c()
                self.launch(shape, alpha, bufs.a, bufs.b, b, bufs.c, self.stream)
                self.stream.synchronize()
                v = dc.compare(bufs.c, ref, m * n, tol)
                checks.append(dict(mode=mode, passed=v.passed, rel_err=v.rel_err, max_abs_err=v.max_abs_err,
                                   tolerance=tol, reason=v.reason))
            for r in refs:
                r.free()
            refs = ()
            cuda.memcpy_dtod(bufs.c, c0, 4 * m * n)  # time on the real C, not on NaN
            watch = foreign.Watch.on(self.dev.pci_bus_id)
            (t, disturbance, disturbed), again = retimed(lambda: foreign.undisturbed(lambda: time_launches(
                lambda: self.launch(shape, alpha, bufs.a, bufs.b, beta, bufs.c, self.stream), self.stream,
                warmup_ms=timing.warmup_ms, target_ms=timing.target_ms, min_reps=timing.min_reps,
                max_reps=timing.max_reps, flush=self._flusher if timing.l2_policy == "flush" else None,
                pci_bus_id=self.dev.pci_bus_id, rewarm_ms=timing.rewarm_ms), watch), timing.retimes,
                lambda result: result[0].as_row())
        finally:
            for r in refs:
                r.free()
            c0.free()
            bufs.free()
        row = dict(summarize_checks(checks), reference="fp64 cuBLAS DGEMM on GPU-generated inputs", seed=seed,
                   alpha=alpha, beta=beta, l2_policy=timing.l2_policy, **t.as_row(), **self.device_columns(),
                   disturbance=disturbance, disturbed=disturbed, retimed=again)
        row["tflops"] = tflops(shape.flops, t.stats.median_ms)
        return row

    def close(self) -> None:
        for obj in (self.launch, self._ref, self._baseline):
            if hasattr(obj, "close"):
                obj.close()


class HostRunner(_Tolerance):
    """A host C stage (``spec`` + shared library) or NumPy's BLAS (``spec`` None) on the CPU."""

    def __init__(self, cfg: LabConfig, impl: str, spec: KernelSpec | None, library: Path | None):
        from ..gpu.host import HostLauncher, numpy_gemm

        self.cfg, self.impl, self.spec = cfg, impl, spec
        self.launch = numpy_gemm if spec is None else HostLauncher(spec, library)
        self._baseline: CublasBaseline | None = None

    def skip_reason(self, shape: Shape, kind: str = "bench") -> str | None:
        from ..config import footprint as fp

        if self.spec is not None:
            reason = unsupported_reason(self.spec, shape)
        elif max(shape.m, shape.n, shape.k) > self.cfg.cpu.max_dim:
            reason = f"CPU library limited to dimensions <= {self.cfg.cpu.max_dim} (config cpu.max_dim)"
        else:
            reason = None
        return reason or fp.too_big(fp.host_check_bytes(shape), fp.host_available_bytes(), "host")

    def _run_fn(self, problem):
        def run(alpha, beta, poison):
            c = np.full_like(problem.c, np.nan) if poison else problem.c.copy()
            self.launch(problem.shape, alpha, problem.a, problem.b, beta, c)
            return c

        return run

    def _checked(self, p: verify.Problem, refs, *, inputs: Path | None = None, dist: Distribution = UNIFORM) -> list[dict]:
        """The check modes, against cuBLAS on the same inputs where this process holds a GPU (its step took
        the GPU lock and pinned it); else the FP32 class has its absolute bound alone (fp32_basis)."""
        from .gpulock import pinned

        baseline = None
        if pinned() is not None:
            self._baseline = self._baseline or CublasBaseline()
            baseline = self._baseline.errors(p, refs, inputs, dist)  # (device buffers only where it runs)
        return _check_rows(p, refs, self._run_fn(p), self.precision, self.cfg.check, baseline)

    def check(self, shape: Shape, seed: int, dist: Distribution = UNIFORM, *, inputs: Path | None = None) -> list[dict]:
        from .shared_inputs import problem

        return self._checked(*problem(inputs, shape, alpha=self.cfg.check.alpha, beta=self.cfg.check.beta, seed=seed,
                                      dist=dist), inputs=inputs, dist=dist)

    def bench(self, shape: Shape, seed: int, timing: TimingSettings) -> dict:
        p = verify.make_problem(shape, alpha=self.cfg.check.alpha, beta=self.cfg.check.beta, seed=seed)
        checks = _check_rows(p, verify.references(p), self._run_fn(p), self.precision, self.cfg.check)  # no GPU here
        c = p.c.copy()

        def once() -> float:
            t0 = time.perf_counter()
            self.launch(shape, p.alpha, p.a, p.b, p.beta, c)
            return (time.perf_counter() - t0) * 1e3

        t0 = time.perf_counter()
        first = once()  # warm-up: caches, page faults, lazy BLAS initialisation
        while (time.perf_counter() - t0) * 1e3 < min(timing.warmup_ms, 3 * first):
            first = once()
        warm = time.perf_counter() - t0
        reps = reps_for(first, target_ms=self.cfg.cpu.target_ms, min_reps=self.cfg.cpu.min_reps,
                        max_reps=timing.max_reps)
        stats, again = retimed(lambda: summarize([once() for _ in range(reps)]), timing.retimes,
                               lambda s: dict(median_ms=s.median_ms, iqr_ms=s.iqr_ms))
        row = dict(summarize_checks(checks), reference="fp64 NumPy (CPU)", seed=seed, alpha=p.alpha, beta=p.beta,
                   l2_policy="n/a (CPU, perf_counter)", median_ms=stats.median_ms, min_ms=stats.min_ms,
                   q1_ms=stats.q1_ms, q3_ms=stats.q3_ms, iqr_ms=stats.iqr_ms, max_ms=stats.max_ms, reps=stats.reps,
                   warmup_s=warm, warmup_launches=None, sm_clock_before_mhz=None, sm_clock_after_mhz=None,
                   retimed=again)
        row["tflops"] = tflops(shape.flops, stats.median_ms)
        return row

    def close(self) -> None:
        if self._baseline is not None:
            self._baseline.close()


def make_runner(cfg: LabConfig, impl: str, spec: KernelSpec | None, binary: Path | None):
    """The runner for ``impl``: ``spec`` is its resolved kernel spec (None for a library baseline)."""
    if impl == "numpy" or (spec is not None and spec.backend == "host"):
        return HostRunner(cfg, impl, spec, binary)
    return GpuRunner(cfg, impl, spec, Path(binary).read_bytes() if binary else None)


def runner_for(cfg: LabConfig, impl: str, binary: Path | None, record: Path | None):
    """The runner of ``impl`` as a step runs it: its concrete spec from its build record, its binary."""
    from ..dispatch.resolve import load_spec

    return make_runner(cfg, impl, load_spec(cfg, impl, record), binary)
