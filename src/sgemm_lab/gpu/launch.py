"""Launchers (the middle layer, as in the Triton matmul tutorial): a configured kernel or a cuBLAS
baseline behind one call, C = alpha * A @ B + beta * C; shapes checked and launches derived from the
config (geometry), tensor maps written for TMA stages."""

from __future__ import annotations

import os

import numpy as np

from ..config import geometry
from ..config.geometry import Launch
from ..config.records import KernelSpec, Shape
from ..errors import CompileError, LabError
from . import padding
from .build import BuildRecord
from .compile import compile_options
from .device import DeviceInfo, driver

def build_record(spec: KernelSpec, func, arch: str, compile_s: float) -> BuildRecord:
    """The build record of ``spec``'s compiled kernel ``func`` (its main entry's)."""
    return BuildRecord(kernel=spec.id, entry=spec.entry, arch=arch, options=compile_options(spec),
                       registers=func.num_regs, shared_static_bytes=func.shared_size_bytes,
                       local_bytes=func.local_size_bytes, max_threads_per_block=func.max_threads_per_block,
                       compile_s=compile_s)


def block_problem(func, threads: int, dynamic_shared: int, dev: DeviceInfo) -> str | None:
    """Why the compiled ``func`` cannot launch blocks of ``threads`` with ``dynamic_shared`` bytes of dynamic
    shared memory on ``dev`` (None if it can)."""
    if threads > func.max_threads_per_block:
        return (f"{threads} threads per block but the build allows {func.max_threads_per_block} "
                f"({func.num_regs} registers per thread, {dev.max_registers_per_block} per block)")
    total = func.shared_size_bytes + dynamic_shared
    limit = dev.max_shared_per_block_optin if dynamic_shared else dev.max_shared_per_block
    if total > limit:
        return f"{total} B shared memory per block > {limit} B on {dev.name}"
    return None


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
        self._encoder = None  # tensor maps: the driver's encoder, {variable: device address}, what they hold now
        self._map_vars: dict[str, int] = {}
        self._maps_for = None
        self._padding = None  # rows16 stages on an N or K that is not a multiple of 4: re-pitched A and B
        # Launch plans by shape. The plan evaluates the stage's expressions (15 us for a TMA stage), and a
        # timed repetition must not wait on the host: with the L2 flush before it, about 35 us of GPU work
        # is all the host has to enqueue the next launch, and time it spends past that lands between the
        # start event and the kernel (measured: TMA stages timed at 50-100 us whatever the size).
        self._plans: dict[Shape, Launch] = {}
        if spec.tensor_maps and self.fused:
            raise CompileError(f"kernel {spec.id}: tensor maps are written for the gemm signature only")
        self._in_place = (False, False)  # operands read through residue maps whatever their rows
        if spec.tensor_maps:
            from .tensormap import MAP_BYTES, Encoder, in_place, symbols

            for symbol in symbols(spec):
                try:
                    ptr, size = self.module.get_global(symbol)
                except cuda.LogicError:
                    raise CompileError(f"kernel {spec.id}: tensor map variable '{symbol}' not in {spec.source}") from None
                if size != MAP_BYTES:
                    raise CompileError(f"kernel {spec.id}: '{symbol}' is {size} B, a tensor map is {MAP_BYTES} B")
                self._map_vars[symbol] = ptr
            self._encoder = Encoder()
            self._in_place = in_place(spec)
        if spec.dynamic_shared:
            smem = geometry.shared_bytes(spec)
            if smem > 48 * 1024:  # above 48 KiB a kernel must opt in to more dynamic shared memory
                self.func.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)

    def resources(self, arch: str, compile_s: float) -> BuildRecord:
        return build_record(self.spec, self.func, arch, compile_s)

    def launch_problem(self, dev: DeviceInfo) -> str | None:
        """Why the compiled kernel cannot launch its configured block on ``dev`` (None if it can)."""
        dyn = geometry.shared_bytes(self.spec) if self.spec.dynamic_shared else 0
        return block_problem(self.func, geometry.threads_per_block(self.spec), dyn, dev)

    def check_launchable(self, dev: DeviceInfo) -> None:
        problem = self.launch_problem(dev)
        if problem:
            raise CompileError(f"kernel {self.spec.id}: {problem}")

    def __call__(self, shape: Shape, alpha: float, a, b, beta: float, c, stream) -> None:
        """C = alpha*A@B + beta*C on packed row-major data (a fused kernel: no bias, D = C)."""
        if self.fused:
            self.fused_call(shape, alpha, a, shape.k, b, shape.n, beta, c, shape.n, 0, c, shape.n, stream)
            return
        self._plan(shape)  # ShapeError before anything runs
        if self.spec.shapes == "rows16" and padding.needs_padding(shape, self._in_place):
            if self._padding is None:
                self._padding = padding.RowPadding(self._in_place)
            self._padding(self._launch, shape, alpha, a, b, beta, c, stream)
            return
        self._launch(shape, alpha, a, b, beta, c, stream)

    def _plan(self, shape: Shape) -> Launch:
        launch = self._plans.get(shape)
        if launch is None:
            launch = self._plans[shape] = geometry.plan(self.spec, shape)
        return launch

    def _launch(self, shape: Shape, alpha: float, a, b, beta: float, c, stream,
                pitch: tuple[int, int] | None = None) -> None:
        launch = self._plan(shape)
        if self._encoder is not None:
            self._write_maps(shape, a, b, stream, pitch)
        self.func.prepared_async_call(launch.grid, launch.block, stream,
                                      shape.m, shape.n, shape.k, alpha, a, b, beta, c,
                                      shared_size=launch.shared_bytes)

    def _write_maps(self, shape: Shape, a, b, stream, pitch: tuple[int, int] | None = None) -> None:
        """Encode the stage's tensor maps for these operands (rows ``pitch`` = (lda, ldb) floats apart, or
        packed) and copy them into its variables, in stream order (skipped when the operands, shape and
        pitches are those of the last launch, as in a timing loop)."""
        from .tensormap import requests

        key = (int(a), int(b), shape, pitch)
        if key == self._maps_for:
            return
        cuda = driver()
        for req in requests(self.spec, shape, pitch):
            blob = np.frombuffer(self._encoder(req, int(a) if req.operand == "A" else int(b)), np.uint8)
            cuda.memcpy_htod_async(self._map_vars[req.symbol], blob, stream)  # pageable: staged before return
        self._maps_for = key

    def fused_call(self, shape: Shape, alpha: float, a, lda: int, b, ldb: int, beta: float, c, ldc: int,
                   bias, d, ldd: int, stream) -> None:
        """D = act(alpha*A@B + beta*C + bias) with leading dimensions (bias 0 = none)."""
        if not self.fused:
            raise LabError(f"kernel {self.spec.id} has no fused-epilogue entry (signature gemm)")
        if lda < shape.k or ldb < shape.n or ldc < shape.n or ldd < shape.n:
            raise LabError(f"kernel {self.spec.id}: leading dimensions {lda}, {ldb}, {ldc}, {ldd} too small for {shape}")
        launch = self._plan(shape)
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
    """The launcher of a GPU library baseline (config.records.GPU_BASELINES)."""
    from ..config.records import GPU_BASELINES

    if impl not in GPU_BASELINES:
        raise LabError(f"{impl} is not a GPU library baseline")
    return CublasLauncher(stream, tf32=impl == "cublas_tf32")
