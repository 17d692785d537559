"""The GPU side: device discovery, kernel builds and launchers, timing. Imports PyCUDA lazily.

Layers (as in the Triton matmul tutorial): the CUDA kernel; a launcher that checks the shape,
derives the launch from the kernel's config and launches; callers (check, bench) that only use
launchers, so a kernel and cuBLAS are driven by the same code.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

from . import geometry
from .compile import compile_options, source_text, target_arch
from .config import KERNEL_DIR, KernelSpec, Shape
from .errors import CompileError, LabError, NoGPUError
from .stats import TimingStats, reps_for, summarize
from .verify import NAN_BITS

_cuda = None


def _import_pycuda():
    """pycuda.driver, imported but not initialised (no context: compiling needs none), or NoGPUError."""
    try:
        import pycuda.driver as cuda
    except ImportError as exc:
        raise NoGPUError(
            f"no CUDA device: PyCUDA cannot be loaded ({exc}); GPU rules need an NVIDIA GPU, "
            "its driver and the packages in env/pipeline.txt"
        ) from None
    return cuda


_initialised = False


def driver_initialised() -> bool:
    """Whether this process has initialised the CUDA driver (a forked child could not use it)."""
    return _initialised


def init_driver():
    """pycuda.driver with the CUDA driver initialised (cuInit) but no context, or NoGPUError."""
    global _initialised
    cuda = _import_pycuda()
    _initialised = True
    try:
        cuda.init()
        count = cuda.Device.count()
    except cuda.Error as exc:
        raise NoGPUError(f"no CUDA device: the CUDA driver reports '{exc}'") from None
    if count == 0:
        raise NoGPUError("no CUDA device: the CUDA driver sees no GPU")
    return cuda


def driver():
    """pycuda.driver with the primary context of the first visible device current, or NoGPUError."""
    global _cuda
    if _cuda is not None:
        return _cuda
    cuda = init_driver()
    import pycuda.autoprimaryctx  # noqa: F401  retains the primary context (shared with cuBLAS)

    _cuda = cuda
    return cuda


@dataclass(frozen=True, kw_only=True)
class DeviceInfo:
    name: str
    arch: str
    compute_capability: str
    multiprocessors: int
    l2_bytes: int
    global_mem_bytes: int
    max_threads_per_block: int
    max_shared_per_block: int        # default (static + dynamic) limit
    max_shared_per_block_optin: int  # with cudaFuncAttributeMaxDynamicSharedMemorySize raised
    max_registers_per_block: int
    pci_bus_id: str


def device_info() -> DeviceInfo:
    cuda = driver()
    dev = cuda.Context.get_device()
    a = cuda.device_attribute
    major, minor = dev.compute_capability()
    return DeviceInfo(
        name=dev.name(),
        arch=f"sm_{major}{minor}",
        compute_capability=f"{major}.{minor}",
        multiprocessors=dev.get_attribute(a.MULTIPROCESSOR_COUNT),
        l2_bytes=dev.get_attribute(a.L2_CACHE_SIZE),
        global_mem_bytes=dev.total_memory(),
        max_threads_per_block=dev.get_attribute(a.MAX_THREADS_PER_BLOCK),
        max_shared_per_block=dev.get_attribute(a.MAX_SHARED_MEMORY_PER_BLOCK),
        max_shared_per_block_optin=dev.get_attribute(a.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
        max_registers_per_block=dev.get_attribute(a.MAX_REGISTERS_PER_BLOCK),
        pci_bus_id=dev.pci_bus_id(),
    )


class _Nvml:
    """The current SM clock through NVML (the driver's libnvidia-ml), read in microseconds.

    nvidia-smi gives the same number but takes ~0.1 s per call; timing code reads it twice per point.
    """

    _lib = None

    @classmethod
    def clock(cls, pci_bus_id: str) -> int | None:
        import ctypes

        try:
            if cls._lib is None:
                lib = ctypes.CDLL("libnvidia-ml.so.1")
                if lib.nvmlInit_v2() != 0:
                    return None
                cls._lib = lib
            handle = ctypes.c_void_p()
            if cls._lib.nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id.encode(), ctypes.byref(handle)) != 0:
                return None
            mhz = ctypes.c_uint()
            if cls._lib.nvmlDeviceGetClockInfo(handle, 1, ctypes.byref(mhz)) != 0:  # 1 = NVML_CLOCK_SM
                return None
            return int(mhz.value)
        except OSError:
            return None


def sm_clock_mhz(pci_bus_id: str) -> int | None:
    """Current SM clock in MHz (NVML, else nvidia-smi; None when neither is available)."""
    fast = _Nvml.clock(pci_bus_id)
    if fast is not None:
        return fast
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, f"--id={pci_bus_id}", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10)
        return int(out.stdout.strip().splitlines()[0])
    except (subprocess.SubprocessError, ValueError, IndexError):
        return None


# --------------------------------------------------------------------------------------- build
@dataclass(frozen=True, kw_only=True)
class BuildRecord:
    kernel: str
    entry: str
    arch: str
    options: list
    registers: int
    shared_static_bytes: int
    local_bytes: int
    max_threads_per_block: int
    compile_s: float


def _nvcc(kernel: str, text: str, options: list[str], arch: str) -> bytes:
    """Compile with PyCUDA's compiler (the same call SourceModule makes); needs nvcc, no GPU context."""
    cuda = _import_pycuda()
    from pycuda.compiler import compile as pycuda_compile

    try:
        return pycuda_compile(text, options=options, arch=arch, no_extern_c=True, include_dirs=[str(KERNEL_DIR)])
    except cuda.CompileError as exc:
        log = f"{exc}\n--- stdout ---\n{exc.stdout or ''}\n--- stderr ---\n{exc.stderr or ''}"
        first = next((ln.strip() for ln in (exc.stderr or "").splitlines() if "error" in ln), "see log")
        raise CompileError(f"kernel {kernel}: nvcc failed: {first}", log) from None


COMPILE_NICENESS = 10


def _lower_priority() -> None:
    try:
        os.nice(COMPILE_NICENESS)
    except OSError:
        pass


def _compile_job(job: tuple) -> tuple[bytes | None, tuple | None]:
    try:
        return _nvcc(*job), None
    except CompileError as exc:
        return None, exc.args


def compile_many(specs: list[KernelSpec], arch: str, jobs: int) -> list[tuple[bytes | None, CompileError | None]]:
    """Compile ``specs`` in worker processes at a lower CPU priority (nvcc inherits it), so that a
    measurement running at the same time in another process keeps its CPU. (cubin, None) or
    (None, CompileError) per spec, in order; a stage built for another target (``target_arch``) gets its
    error without a compile."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    results: list = [None] * len(specs)
    work, where = [], []
    for i, sp in enumerate(specs):
        try:
            work.append((sp.id, source_text(sp), compile_options(sp), target_arch(sp, arch)))
            where.append(i)
        except CompileError as exc:
            results[i] = (None, exc)
    if work:
        with ProcessPoolExecutor(max_workers=max(1, min(jobs, len(work))), mp_context=mp.get_context("spawn"),
                                 initializer=_lower_priority) as pool:
            for i, (cubin, err) in zip(where, pool.map(_compile_job, work)):
                results[i] = (cubin, CompileError(*err) if err else None)
    return results


class KernelLauncher:
    """Launches one configured kernel: checks the shape, derives the launch, launches."""

    def __init__(self, spec: KernelSpec, cubin: bytes):
        cuda = driver()
        self.spec = spec
        self.module = cuda.module_from_buffer(cubin)
        try:
            self.func = self.module.get_function(spec.entry)
        except cuda.LogicError:
            raise CompileError(f"kernel {spec.id}: entry '{spec.entry}' not found in {spec.source}") from None
        self.fused = spec.signature == "fused"
        self.func.prepare("iiifPiPifPiPPi" if self.fused else "iiifPPfP")
        self._maps = None  # [encoder, {symbol: device address}, key of the maps last written]
        if spec.tensor_maps and self.fused:
            raise CompileError(f"kernel {spec.id}: tensor maps are written for the gemm signature only")
        if spec.tensor_maps:
            from .tensormap import MAP_BYTES, Encoder

            symbols = {}
            for m in spec.tensor_maps:
                try:
                    ptr, size = self.module.get_global(m["symbol"])
                except cuda.LogicError:
                    raise CompileError(f"kernel {spec.id}: tensor map variable '{m['symbol']}' not in {spec.source}") from None
                if size != MAP_BYTES:
                    raise CompileError(f"kernel {spec.id}: '{m['symbol']}' is {size} B, a tensor map is {MAP_BYTES} B")
                symbols[m["symbol"]] = ptr
            self._maps = [Encoder(), symbols, None]
        if spec.dynamic_shared:
            smem = geometry.shared_bytes(spec)
            if smem > 48 * 1024:  # above 48 KiB a kernel must opt in to more dynamic shared memory
                self.func.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)

    def resources(self, arch: str, compile_s: float) -> BuildRecord:
        f = self.func
        return BuildRecord(kernel=self.spec.id, entry=self.spec.entry, arch=arch,
                           options=compile_options(self.spec), registers=f.num_regs,
                           shared_static_bytes=f.shared_size_bytes, local_bytes=f.local_size_bytes,
                           max_threads_per_block=f.max_threads_per_block, compile_s=compile_s)

    def launch_problem(self, dev: DeviceInfo) -> str | None:
        """Why the compiled kernel cannot launch its configured block on ``dev`` (None if it can)."""
        threads = geometry.threads_per_block(self.spec)
        if threads > self.func.max_threads_per_block:
            return (f"{threads} threads per block but the build allows {self.func.max_threads_per_block} "
                    f"({self.func.num_regs} registers per thread, {dev.max_registers_per_block} per block)")
        dyn = geometry.shared_bytes(self.spec) if self.spec.dynamic_shared else 0
        total = self.func.shared_size_bytes + dyn
        limit = dev.max_shared_per_block_optin if dyn else dev.max_shared_per_block
        if total > limit:
            return f"{total} B shared memory per block > {limit} B on {dev.name}"
        return None

    def check_launchable(self, dev: DeviceInfo) -> None:
        problem = self.launch_problem(dev)
        if problem:
            raise CompileError(f"kernel {self.spec.id}: {problem}")

    def __call__(self, shape: Shape, alpha: float, a, b, beta: float, c, stream) -> None:
        """C = alpha*A@B + beta*C on packed row-major data (a fused kernel: no bias, D = C)."""
        if self.fused:
            self.fused_call(shape, alpha, a, shape.k, b, shape.n, beta, c, shape.n, 0, c, shape.n, stream)
            return
        launch = geometry.plan(self.spec, shape)  # ShapeError before anything runs
        if self._maps:
            self._write_maps(shape, a, b, stream)
        self.func.prepared_async_call(launch.grid, launch.block, stream,
                                      shape.m, shape.n, shape.k, alpha, a, b, beta, c,
                                      shared_size=launch.shared_bytes)

    def _write_maps(self, shape: Shape, a, b, stream) -> None:
        """Encode the stage's tensor maps for these operands and copy them into its variables, in stream
        order (skipped when the operands and shape are those of the last launch, as in a timing loop)."""
        from .tensormap import requests

        encode, symbols, last = self._maps
        key = (int(a), int(b), shape)
        if key == last:
            return
        cuda = driver()
        for req in requests(self.spec, shape):
            blob = np.frombuffer(encode(req, int(a) if req.operand == "A" else int(b)), np.uint8)
            cuda.memcpy_htod_async(symbols[req.symbol], blob, stream)  # pageable: staged before return
        self._maps[2] = key

    def fused_call(self, shape: Shape, alpha: float, a, lda: int, b, ldb: int, beta: float, c, ldc: int,
                   bias, d, ldd: int, stream) -> None:
        """D = act(alpha*A@B + beta*C + bias) with leading dimensions (bias 0 = none)."""
        if not self.fused:
            raise LabError(f"kernel {self.spec.id} has no fused-epilogue entry (signature gemm)")
        if lda < shape.k or ldb < shape.n or ldc < shape.n or ldd < shape.n:
            raise LabError(f"kernel {self.spec.id}: leading dimensions {lda}, {ldb}, {ldc}, {ldd} too small for {shape}")
        launch = geometry.plan(self.spec, shape)
        self.func.prepared_async_call(launch.grid, launch.block, stream, shape.m, shape.n, shape.k, alpha,
                                      a, lda, b, ldb, beta, c, ldc, int(bias), d, ldd,
                                      shared_size=launch.shared_bytes)


class CublasLauncher:
    """cuBLAS SGEMM on row-major data (computes C^T = B^T A^T in column-major): strict FP32 (the
    default), or with ``tf32`` TF32 tensor-op math (inputs rounded to TF32, FP32 accumulation)."""

    def __init__(self, stream, *, tf32: bool = False):
        driver()
        from nvmath.bindings import cublas

        if not tf32 and os.environ.get("NVIDIA_TF32_OVERRIDE", "") not in ("", "0"):
            raise LabError("cuBLAS baseline: NVIDIA_TF32_OVERRIDE is set and would allow TF32; unset it")
        self._cublas = cublas
        self.handle = cublas.create()
        cublas.set_stream(self.handle, stream.handle)
        want = cublas.Math.TF32_TENSOR_OP_MATH if tf32 else cublas.Math.DEFAULT_MATH
        cublas.set_math_mode(self.handle, want)
        mode = cublas.get_math_mode(self.handle)
        fast = (cublas.Math.TENSOR_OP_MATH, cublas.Math.TF32_TENSOR_OP_MATH, cublas.Math.FP32_EMULATED_BF16X9_MATH)
        if tf32 and (mode & 0xF) != int(want):
            raise LabError(f"cuBLAS TF32 baseline: math mode {mode}, not TF32_TENSOR_OP_MATH")
        if not tf32 and (mode & 0xF) in {int(m) for m in fast}:
            raise LabError(f"cuBLAS baseline: math mode {mode} is not strict FP32")
        self.math_mode = cublas.Math(mode & 0xF).name
        self.version = cublas.get_version(self.handle)
        self._alpha = np.zeros(1, np.float32)
        self._beta = np.zeros(1, np.float32)

    def __call__(self, shape: Shape, alpha: float, a, b, beta: float, c, stream) -> None:
        cb = self._cublas
        self._alpha[0], self._beta[0] = alpha, beta  # host pointer mode: read during the call
        op_n = cb.Operation.N
        cb.sgemm(self.handle, op_n, op_n, shape.n, shape.m, shape.k, self._alpha.ctypes.data,
                 int(b), shape.n, int(a), shape.k, self._beta.ctypes.data, int(c), shape.n)

    def close(self) -> None:
        if self.handle:
            self._cublas.destroy(self.handle)
            self.handle = 0


def library_launcher(impl: str, stream) -> CublasLauncher:
    """The launcher of a GPU library baseline (config.GPU_BASELINES)."""
    from .config import GPU_BASELINES

    if impl not in GPU_BASELINES:
        raise LabError(f"{impl} is not a GPU library baseline")
    return CublasLauncher(stream, tf32=impl == "cublas_tf32")


class Fp64Reference:
    """alpha * A @ B in float64 on the GPU (cuBLAS DGEMM, default math mode): a fast reference for
    large shapes. The check rule uses NumPy on the CPU instead, independent of any GPU library."""

    def __init__(self, stream):
        driver()
        from nvmath.bindings import cublas

        self._cublas = cublas
        self.handle = cublas.create()
        cublas.set_stream(self.handle, stream.handle)
        cublas.set_math_mode(self.handle, cublas.Math.DEFAULT_MATH)
        self.stream = stream

    def alpha_ab(self, a: np.ndarray, b: np.ndarray, alpha: float) -> np.ndarray:
        cuda = driver()
        cb = self._cublas
        m, k = a.shape
        n = b.shape[1]
        d_a = cuda.to_device(np.ascontiguousarray(a, dtype=np.float64))
        d_b = cuda.to_device(np.ascontiguousarray(b, dtype=np.float64))
        d_c = cuda.mem_alloc(8 * m * n)
        try:
            al, be = np.array([alpha], np.float64), np.array([0.0], np.float64)
            op_n = cb.Operation.N
            cb.dgemm(self.handle, op_n, op_n, n, m, k, al.ctypes.data, int(d_b), n, int(d_a), k,
                     be.ctypes.data, int(d_c), n)
            self.stream.synchronize()
            out = np.empty((m, n), np.float64)
            cuda.memcpy_dtoh(out, d_c)
            return out
        finally:
            for buf in (d_a, d_b, d_c):
                buf.free()

    def close(self) -> None:
        if self.handle:
            self._cublas.destroy(self.handle)
            self.handle = 0


# ------------------------------------------------------------------------------------ buffers
class Buffers:
    """Device A, B, C for one shape, plus the L2-flush buffer shared by all shapes."""

    def __init__(self, shape: Shape):
        cuda = driver()
        self.shape = shape
        self.nbytes = 4 * (shape.m * shape.k + shape.k * shape.n + shape.m * shape.n)
        free, _total = cuda.mem_get_info()
        if self.nbytes > free * 0.9:
            raise LabError(f"{shape}: needs {self.nbytes / 2**30:.2f} GiB, only {free / 2**30:.2f} GiB free on the GPU")
        self.a = cuda.mem_alloc(4 * shape.m * shape.k)
        self.b = cuda.mem_alloc(4 * shape.k * shape.n)
        self.c = cuda.mem_alloc(4 * shape.m * shape.n)

    def upload(self, a: np.ndarray, b: np.ndarray, c: np.ndarray | None) -> None:
        cuda = driver()
        cuda.memcpy_htod(self.a, np.ascontiguousarray(a))
        cuda.memcpy_htod(self.b, np.ascontiguousarray(b))
        if c is not None:
            cuda.memcpy_htod(self.c, np.ascontiguousarray(c))

    def poison_c(self) -> None:
        """Fill C with quiet NaNs: an element the kernel does not write stays NaN and fails the check."""
        driver().memset_d32(self.c, NAN_BITS, self.shape.m * self.shape.n)

    def download_c(self) -> np.ndarray:
        out = np.empty((self.shape.m, self.shape.n), np.float32)
        driver().memcpy_dtoh(out, self.c)
        return out

    def free(self) -> None:
        for buf in (self.a, self.b, self.c):
            buf.free()


class L2Flusher:
    """Evicts L2 by overwriting a buffer twice its size (asynchronously, on the timing stream)."""

    def __init__(self, l2_bytes: int):
        cuda = driver()
        self.words = max(2 * l2_bytes, 1 << 20) // 4
        self.buf = cuda.mem_alloc(4 * self.words)

    def __call__(self, stream) -> None:
        driver().memset_d32_async(self.buf, 0, self.words, stream)


@dataclass(frozen=True, kw_only=True)
class Timing:
    stats: TimingStats
    warmup_s: float
    warmup_launches: int
    sm_clock_before_mhz: int | None
    sm_clock_after_mhz: int | None

    def as_row(self) -> dict:
        row = {k: v for k, v in asdict(self.stats).items()}
        row["iqr_ms"] = self.stats.iqr_ms
        row.update(warmup_s=self.warmup_s, warmup_launches=self.warmup_launches,
                   sm_clock_before_mhz=self.sm_clock_before_mhz, sm_clock_after_mhz=self.sm_clock_after_mhz)
        return row


# The SM clock at the end of the last timed run of this process, per GPU (PCI bus id).
_hot_clock: dict[str, int] = {}
HOT_CLOCK_FRACTION = 0.97  # "back at speed": within 3% of that clock (clock steps are 15 MHz)


def warm_enough(elapsed_ms: float, *, warmup_ms: float, rewarm_ms: float | None, hot_clock: int | None,
                clock: Callable[[], int | None]) -> bool:
    """Whether a warm-up that has run for ``elapsed_ms`` may end: always after ``warmup_ms``; after
    ``rewarm_ms`` already when the SM clock (``clock()``, read only then) is back within 3% of
    ``hot_clock``, the clock at the end of the previous timed run in this process (the GPU did not
    idle down in between). Without a previous run the full warm-up applies."""
    if elapsed_ms >= warmup_ms:
        return True
    if rewarm_ms is None or hot_clock is None or elapsed_ms < rewarm_ms:
        return False
    now = clock()
    return now is not None and now >= HOT_CLOCK_FRACTION * hot_clock


def time_launches(run: Callable[[], None], stream, *, warmup_ms: float, target_ms: float,
                  min_reps: int, max_reps: int, flush: Callable | None, pci_bus_id: str,
                  rewarm_ms: float | None = None) -> Timing:
    """Median-of-many CUDA-event timing of ``run`` (launches on ``stream``).

    Warm-up is by wall time, not by count, so that the SM clock has ramped up from idle: ``warmup_ms``
    for the first point of a process, and for later ones until the clock is back where the previous
    point left it, at least ``rewarm_ms`` (``warm_enough``). Then a few timed launches estimate the
    cost and set the number of repetitions. ``flush`` (if given) runs before every repetition, outside
    the events. The clock before and after the timed launches is part of the result.
    """
    cuda = driver()

    def once():
        if flush is not None:
            flush(stream)
        run()

    # batches of 1, 2, 4, ... launches: a slow kernel is not launched more than needed, a fast one
    # keeps the GPU busy (not waiting on the host) so that the clock ramps up
    t0 = time.perf_counter()
    launches, batch = 0, 1
    while True:
        for _ in range(batch):
            once()
        launches += batch
        stream.synchronize()
        if warm_enough((time.perf_counter() - t0) * 1e3, warmup_ms=warmup_ms, rewarm_ms=rewarm_ms,
                       hot_clock=_hot_clock.get(pci_bus_id), clock=lambda: sm_clock_mhz(pci_bus_id)):
            break
        batch = min(batch * 2, 256)
    warmup_s = time.perf_counter() - t0

    def timed(n: int) -> list[float]:
        starts = [cuda.Event() for _ in range(n)]
        ends = [cuda.Event() for _ in range(n)]
        for s, e in zip(starts, ends):
            if flush is not None:
                flush(stream)
            s.record(stream)
            run()
            e.record(stream)
        ends[-1].synchronize()
        return [e.time_since(s) for s, e in zip(starts, ends)]

    estimate = float(np.median(timed(3))) if warmup_s / launches < 50.0 else warmup_s * 1e3 / launches
    reps = reps_for(estimate, target_ms=target_ms, min_reps=min_reps, max_reps=max_reps)
    clock_before = sm_clock_mhz(pci_bus_id)
    times = timed(reps)
    clock_after = sm_clock_mhz(pci_bus_id)
    if clock_after is not None:
        _hot_clock[pci_bus_id] = clock_after
    return Timing(stats=summarize(times), warmup_s=warmup_s, warmup_launches=launches,
                  sm_clock_before_mhz=clock_before, sm_clock_after_mhz=clock_after)


# ---------------------------------------------------------------------------------- ceilings
_FMA_PROBE = r"""
// Each thread runs CHAINS independent FMA chains (enough to hide the FMA latency), ITERS deep.
extern "C" __global__ void lab_fma_probe(float* out, float a, float b, int iters) {
    float x[CHAINS];
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) x[c] = threadIdx.x + c;
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int c = 0; c < CHAINS; ++c) x[c] = fmaf(x[c], a, b);
    }
    float s = 0.f;
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) s += x[c];
    if (s == 1.2345f) out[0] = s;  // practically never; keeps the chains alive
}
"""


def measure_ceilings(*, warmup_ms: float = 300, reps: int = 20) -> dict:
    """Measured FP32 FMA throughput and device-to-device copy bandwidth of the GPU at hand."""
    cuda = driver()
    from pycuda.compiler import SourceModule

    dev = device_info()
    stream = cuda.Stream()
    chains, iters, threads = 8, 4096, 256
    blocks = dev.multiprocessors * 8
    fn = SourceModule(_FMA_PROBE, options=["-O3", f"-DCHAINS={chains}"], no_extern_c=True).get_function("lab_fma_probe")
    fn.prepare("PffI")
    scratch = cuda.mem_alloc(4)
    fma = time_launches(lambda: fn.prepared_async_call((blocks, 1), (threads, 1, 1), stream, scratch,
                                                       np.float32(0.9999), np.float32(0.0001), iters),
                        stream, warmup_ms=warmup_ms, target_ms=200, min_reps=reps, max_reps=200, flush=None,
                        pci_bus_id=dev.pci_bus_id)
    flops = 2.0 * blocks * threads * iters * chains
    nbytes = 1 << 30
    src, dst = cuda.mem_alloc(nbytes), cuda.mem_alloc(nbytes)
    cuda.memset_d32(src, 0x3F800000, nbytes // 4)
    copy = time_launches(lambda: cuda.memcpy_dtod_async(dst, src, nbytes, stream), stream, warmup_ms=warmup_ms,
                         target_ms=200, min_reps=reps, max_reps=200, flush=None, pci_bus_id=dev.pci_bus_id)
    for buf in (src, dst, scratch):
        buf.free()
    return {
        "fp32_tflops": flops / (fma.stats.median_ms * 1e-3) / 1e12,
        "fp32_probe": dict(blocks=blocks, threads=threads, chains=chains, iters=iters, **fma.as_row()),
        "dram_gbps": 2 * nbytes / (copy.stats.median_ms * 1e-3) / 1e9,
        "dram_probe": dict(bytes_copied=nbytes, counted="read + write", **copy.as_row()),
    }


# ------------------------------------------------------------------------- device-side checks
_CHECK_SRC = r"""
// Fresh inputs and error measures computed where the data is, so that verifying an 8192^3 point
// costs milliseconds instead of gigabytes of transfers.

// Uniform in [-1, 1) from a counter-based hash (splitmix64 of seed + index); never exactly 0.
extern "C" __global__ void lab_fill_uniform(float* x, long long n, unsigned long long seed) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        unsigned long long z = seed + (unsigned long long)(i + 1) * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        float v = 2.0f * ((float)(z >> 40) * (1.0f / 16777216.0f)) - 1.0f;
        x[i] = v == 0.0f ? 0.5f : v;
    }
}

extern "C" __global__ void lab_to_double(const float* x, double* y, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        y[i] = (double)x[i];
}

// y = a * y + b * x (float64): alpha*A@B + beta*C from alpha*A@B
extern "C" __global__ void lab_axpby(double a, double* y, double b, const double* x, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        y[i] = a * y[i] + b * x[i];
}

// Per block: sum (out-ref)^2 over finite outputs, sum ref^2, max |out-ref|, count of NaN/Inf outputs.
extern "C" __global__ void __launch_bounds__(256) lab_compare(const float* out, const double* ref, long long n,
                                                              double* partial) {
    __shared__ double s[4][256];
    double d2 = 0.0, r2 = 0.0, mx = 0.0, bad = 0.0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        double o = (double)out[i], r = ref[i];
        r2 += r * r;
        if (isfinite(o)) {
            double d = o - r;
            d2 += d * d;
            mx = fmax(mx, fabs(d));
        } else {
            bad += 1.0;
        }
    }
    s[0][threadIdx.x] = d2; s[1][threadIdx.x] = r2; s[2][threadIdx.x] = mx; s[3][threadIdx.x] = bad;
    __syncthreads();
    for (int w = 128; w > 0; w >>= 1) {
        if (threadIdx.x < w) {
            s[0][threadIdx.x] += s[0][threadIdx.x + w];
            s[1][threadIdx.x] += s[1][threadIdx.x + w];
            s[2][threadIdx.x] = fmax(s[2][threadIdx.x], s[2][threadIdx.x + w]);
            s[3][threadIdx.x] += s[3][threadIdx.x + w];
        }
        __syncthreads();
    }
    if (threadIdx.x < 4) partial[4 * blockIdx.x + threadIdx.x] = s[threadIdx.x][0];
}
"""


class DeviceCheck:
    """Generates fresh inputs on the GPU, computes the float64 reference with cuBLAS DGEMM, and measures
    the error of an output on the GPU. Used for timed points (bench, sweeps); the check rule keeps the
    independent CPU path (NumPy inputs and reference)."""

    BLOCKS, THREADS = 1024, 256

    def __init__(self, stream):
        cuda = driver()
        from pycuda.compiler import SourceModule

        self.stream = stream
        mod = SourceModule(_CHECK_SRC, options=["-O3"], no_extern_c=True)
        self._fill = mod.get_function("lab_fill_uniform")
        self._fill.prepare("PqQ")
        self._to64 = mod.get_function("lab_to_double")
        self._to64.prepare("PPq")
        self._axpby = mod.get_function("lab_axpby")
        self._axpby.prepare("dPdPq")
        self._cmp = mod.get_function("lab_compare")
        self._cmp.prepare("PPqP")
        self._partial = cuda.mem_alloc(8 * 4 * self.BLOCKS)
        self._ref = Fp64Reference(stream)

    def _grid(self, n: int) -> tuple[int, int]:
        return (min(self.BLOCKS, max(1, -(-n // self.THREADS))), 1)

    def fill(self, buf, n: int, seed: int) -> None:
        self._fill.prepared_async_call(self._grid(n), (self.THREADS, 1, 1), self.stream, buf, n,
                                       seed & 0xFFFFFFFFFFFFFFFF)

    def references(self, bufs: "Buffers", alpha: float, beta: float):
        """(alpha*A@B + beta*C, alpha*A@B) in float64 on the device, from the float32 A, B, C in ``bufs``."""
        cuda = driver()
        s = bufs.shape
        cb = self._ref._cublas
        a64, b64 = cuda.mem_alloc(8 * s.m * s.k), cuda.mem_alloc(8 * s.k * s.n)
        c64, ab64 = cuda.mem_alloc(8 * s.m * s.n), cuda.mem_alloc(8 * s.m * s.n)
        try:
            for src, dst, n in ((bufs.a, a64, s.m * s.k), (bufs.b, b64, s.k * s.n), (bufs.c, c64, s.m * s.n)):
                self._to64.prepared_async_call(self._grid(n), (self.THREADS, 1, 1), self.stream, src, dst, n)
            al, be = np.array([alpha], np.float64), np.array([0.0], np.float64)
            op_n = cb.Operation.N
            cb.dgemm(self._ref.handle, op_n, op_n, s.n, s.m, s.k, al.ctypes.data, int(b64), s.n, int(a64), s.k,
                     be.ctypes.data, int(ab64), s.n)
            self.stream.synchronize()  # host scalars and the DGEMM done before c64 is reused
            n = s.m * s.n
            # c64 <- 1 * ab64 + beta * c64 would overwrite C; compute into c64 as beta*C + AB instead
            self._axpby.prepared_async_call(self._grid(n), (self.THREADS, 1, 1), self.stream, beta, c64, 1.0,
                                            ab64, n)
            self.stream.synchronize()
        finally:
            a64.free()
            b64.free()
        return c64, ab64

    def compare(self, out, ref, n: int, tol: float):
        from .verify import Verdict

        grid = self._grid(n)
        self._cmp.prepared_async_call(grid, (self.THREADS, 1, 1), self.stream, out, ref, n, self._partial)
        part = np.empty((grid[0], 4), np.float64)
        self.stream.synchronize()
        driver().memcpy_dtoh(part, self._partial)
        d2, r2 = part[:, 0].sum(), part[:, 1].sum()
        mx, bad = part[:, 2].max(), int(part[:, 3].sum())
        rel = float(np.sqrt(d2 / r2)) if r2 > 0 else float(np.sqrt(d2))
        if bad == n:
            rel = mx = float("nan")
        return Verdict(passed=bad == 0 and rel < tol, rel_err=rel, max_abs_err=float(mx), nonfinite=bad, tolerance=tol)

    def close(self) -> None:
        self._ref.close()
        self._partial.free()
