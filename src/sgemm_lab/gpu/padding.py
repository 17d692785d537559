"""Rows on 16-byte boundaries for the stages fed by the tensor memory accelerator (``shapes: rows16``).

A tensor map needs every row pitch to be a multiple of 16 bytes, which an N or K that is not a multiple
of 4 floats breaks. Such a call copies A (M x K) into rows of K4 floats where K is not a multiple of 4,
and B (K x N) into rows of N4 where N is not (K4, N4: K and N rounded up to multiples of 4; an operand
whose rows already fit is used as it is), and runs the kernel on the shape itself: its tensor maps
keep the extents K and N with the copies' pitches (the accelerator reads zeros past an extent, so the
copies' row tails are never used), and it stores C in place, in 4-byte pieces where N is not a
multiple of 4. The copies are stream-ordered kernels inside the launcher's call, so what the padding
costs is in every timing of such a shape. An operand the stage reads in place through residue maps
(``gpu.tensormap``; ``in_place``) is never copied.
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


def pitches(shape: Shape, in_place: tuple[bool, bool] = (False, False)) -> tuple[int, int]:
    """Row pitches (floats) of A and B for ``shape`` as the kernel reads them: K and N rounded up to
    multiples of 4 (the copies), or K / N for an operand read ``in_place``."""
    return (shape.k if in_place[0] else -(-shape.k // 4) * 4), (shape.n if in_place[1] else -(-shape.n // 4) * 4)


def repitch_grid(rows: int, cols: int) -> tuple[int, int]:
    """(x, y) blocks of a copy: x covers a row's columns once, y as many rows as keep the total near
    BLOCKS (the kernel strides over the rest)."""
    gx = max(1, -(-cols // THREADS))
    return gx, max(1, min(rows, MAX_GRID_Y, BLOCKS // gx))


def copies(shape: Shape, in_place: tuple[bool, bool] = (False, False)) -> tuple[bool, bool]:
    """Whether A and whether B must be copied for ``shape``: A where K is off a multiple of 4, B where N is,
    unless the stage reads that operand ``in_place``."""
    return shape.k % 4 != 0 and not in_place[0], shape.n % 4 != 0 and not in_place[1]


def needs_padding(shape: Shape, in_place: tuple[bool, bool] = (False, False)) -> bool:
    return any(copies(shape, in_place))


class RowPadding:
    """Re-pitched copies of A and/or B for one shape at a time (a timing loop repeats one shape)."""

    def __init__(self, in_place: tuple[bool, bool] = (False, False)):
        from pycuda.compiler import SourceModule

        self._in_place = in_place
        self._copy = SourceModule(_SRC, options=["-O3"], no_extern_c=True).get_function("lab_repitch")
        self._copy.prepare("PiPiiii")
        self._shape: Shape | None = None
        self._bufs: tuple = ()

    def _buffers(self, shape: Shape):
        if shape != self._shape:
            self.close()
            cuda = driver()
            lda, ldb = pitches(shape, self._in_place)
            copy_a, copy_b = copies(shape, self._in_place)
            try:
                a = cuda.mem_alloc(4 * shape.m * lda) if copy_a else None
                b = cuda.mem_alloc(4 * shape.k * ldb) if copy_b else None
            except cuda.MemoryError:
                what = " and ".join(f"{op} with rows of {ld} floats" for op, ld, copied in
                                    (("A", lda, copy_a), ("B", ldb, copy_b)) if copied)
                raise LabError(f"{shape}: no device memory for a re-pitched copy of {what}") from None
            self._shape, self._bufs = shape, (a, b)
        return self._bufs

    def _repitch(self, src, sp: int, dst, dp: int, rows: int, src_cols: int, dst_cols: int, stream) -> None:
        gx, gy = repitch_grid(rows, dst_cols)
        self._copy.prepared_async_call((gx, gy), (THREADS, 1, 1), stream, src, sp, dst, dp, rows, src_cols, dst_cols)

    def __call__(self, launch, shape: Shape, alpha: float, a, b, beta: float, c, stream) -> None:
        """C = alpha*A@B + beta*C through re-pitched copies of A and B; ``launch(shape, alpha, a, b, beta,
        c, stream, pitch)`` runs the kernel on rows ``pitch`` = (lda, ldb) floats apart."""
        m, n, k = shape.m, shape.n, shape.k
        lda, ldb = pitches(shape, self._in_place)
        pa, pb = self._buffers(shape)
        if pa is not None:
            self._repitch(a, k, pa, lda, m, k, lda, stream)
        if pb is not None:
            self._repitch(b, n, pb, ldb, k, n, ldb, stream)
        launch(shape, alpha, a if pa is None else pa, b if pb is None else pb, beta, c, stream, (lda, ldb))

    def close(self) -> None:
        for buf in self._bufs:
            if buf is not None:
                buf.free()
        self._shape, self._bufs = None, ()
