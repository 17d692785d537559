"""Rows on 16-byte boundaries for the stages fed by the tensor memory accelerator (``shapes: rows16``).

A tensor map needs every row pitch to be a multiple of 16 bytes, which an N or K that is not a multiple
of 4 floats breaks. Such a call runs on padded copies instead: A (M x K) into M x K4, B (K x N) into
K4 x N4 and, when beta != 0, C into M x N4, each row's tail zero (rows K..K4 of B stay zero from the
allocation); the kernel runs on (M, N4, K4), whose extra products are zeros and whose extra columns
of C are never copied back, and the first N columns of each row of the padded C go back to C. The
copies are stream-ordered kernels inside the launcher's call, so what the padding costs is in every
timing of such a shape.
"""

from __future__ import annotations

from ..config.records import Shape
from ..errors import LabError
from .device import driver

_SRC = r"""
// dst (rows x dst_cols, pitch dp) <- src (rows x src_cols, pitch sp): the first min(src_cols, dst_cols)
// columns copied, the rest of each dst row zero. Blocks stride over rows (y) and a row's columns (x),
// so that no thread divides: a row's threads read and write consecutive floats (coalesced, 4 bytes
// each, as the source rows are off 16-byte boundaries). Every count fits in 32 bits (the lab's
// operands hold at most 2^31 - 1 elements); only the row offsets are 64-bit.
extern "C" __global__ void lab_repitch(const float* __restrict__ src, int sp, float* __restrict__ dst, int dp,
                                       int rows, int src_cols, int dst_cols) {
    const int w = src_cols < dst_cols ? src_cols : dst_cols;
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        const float* s = src + (long long)r * sp;
        float* d = dst + (long long)r * dp;
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < dst_cols; c += gridDim.x * blockDim.x)
            d[c] = c < w ? s[c] : 0.0f;
    }
}
"""

THREADS = 256
BLOCKS = 8192  # about 60 blocks of 256 threads per SM of an H100: enough loads in flight for DRAM's rate
MAX_GRID_Y = 65535


def padded(shape: Shape) -> Shape:
    """The shape a rows16 stage runs for ``shape``: N and K rounded up to multiples of 4."""
    return Shape(m=shape.m, n=-(-shape.n // 4) * 4, k=-(-shape.k // 4) * 4)


def repitch_grid(rows: int, cols: int) -> tuple[int, int]:
    """(x, y) blocks of a copy: x covers a row's columns once, y as many rows as keep the total near
    BLOCKS (the kernel strides over the rest)."""
    gx = max(1, -(-cols // THREADS))
    return gx, max(1, min(rows, MAX_GRID_Y, BLOCKS // gx))


def needs_padding(shape: Shape) -> bool:
    return shape.n % 4 != 0 or shape.k % 4 != 0


class RowPadding:
    """Padded buffers for one shape at a time (a timing loop repeats one shape), and the copies."""

    def __init__(self):
        from pycuda.compiler import SourceModule

        self._copy = SourceModule(_SRC, options=["-O3"], no_extern_c=True).get_function("lab_repitch")
        self._copy.prepare("PiPiiii")
        self._shape: Shape | None = None
        self._bufs: tuple = ()

    def _buffers(self, shape: Shape):
        if shape != self._shape:
            self.close()
            cuda = driver()
            p = padded(shape)
            try:
                a = cuda.mem_alloc(4 * p.m * p.k)
                b = cuda.mem_alloc(4 * p.k * p.n)
                c = cuda.mem_alloc(4 * p.m * p.n)
            except cuda.MemoryError:
                raise LabError(f"{shape}: no device memory for the copies with rows padded to {p}") from None
            cuda.memset_d32(b, 0, p.k * p.n)  # rows K..K4 of B stay zero: no copy writes them
            self._shape, self._bufs = shape, (a, b, c)
        return self._bufs

    def _repitch(self, src, sp: int, dst, dp: int, rows: int, src_cols: int, dst_cols: int, stream) -> None:
        gx, gy = repitch_grid(rows, dst_cols)
        self._copy.prepared_async_call((gx, gy), (THREADS, 1, 1), stream, src, sp, dst, dp, rows, src_cols, dst_cols)

    def __call__(self, launch, shape: Shape, alpha: float, a, b, beta: float, c, stream) -> None:
        """C = alpha*A@B + beta*C through padded copies; ``launch(shape, alpha, a, b, beta, c, stream)``
        runs the kernel on 16-byte rows."""
        m, n, k = shape.m, shape.n, shape.k
        p = padded(shape)
        pa, pb, pc = self._buffers(shape)
        self._repitch(a, k, pa, p.k, m, k, p.k, stream)
        self._repitch(b, n, pb, p.n, k, n, p.n, stream)
        if beta != 0.0:
            self._repitch(c, n, pc, p.n, m, n, p.n, stream)
        launch(p, alpha, pa, pb, beta, pc, stream)
        self._repitch(pc, p.n, c, n, m, p.n, n, stream)

    def close(self) -> None:
        for buf in self._bufs:
            buf.free()
        self._shape, self._bufs = None, ()
