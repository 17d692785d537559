"""References and device-side checks: float64 cuBLAS DGEMM, fresh inputs generated on the GPU, and
the error of an output measured where the data is (for timed points; the check rule uses NumPy)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .device import driver

if TYPE_CHECKING:
    from .buffers import Buffers

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
        from ..results.verify import Verdict

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
