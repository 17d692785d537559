"""The unfused baseline of the epilogue comparison: cuBLAS SGEMM, then a separate bias + activation
kernel over D (what a framework does when it cannot fuse), both on one stream."""

from __future__ import annotations

from ..errors import CompileError, LabError
from .definition import ACT_CODES, check_act

BIAS_ACT_THREADS = 256
BIAS_ACT_MAX_BLOCKS = 132 * 16  # 16 blocks of 256 threads per SM on a 132-SM H100 SXM

_BIAS_ACT_SOURCE = r"""
// D[r][c] = act(D[r][c] + bias[c]) in place, for a row-major M x N float matrix with leading
// dimension ldd; bias (length N) may be nullptr. ACT: 0 none, 1 relu, 2 gelu (tanh form).
#ifndef ACT
#define ACT 0
#endif
#if ACT != 0 && ACT != 1 && ACT != 2
#error "ACT must be 0 (none), 1 (relu) or 2 (gelu, tanh form)"
#endif

__device__ __forceinline__ float apply_act(float x)
{
#if ACT == 1
    return fmaxf(x, 0.0f);
#elif ACT == 2
    const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
#else
    return x;
#endif
}

// Grid-stride loop over the M*N elements in row-major order. The (row, col) of a thread's element
// advances by a fixed (stride / N, stride % N) per step, so there is no division in the loop.
extern "C" __global__ void bias_act(int M, int N, const float* __restrict__ bias, float* D, int ldd)
{
    if (M <= 0 || N <= 0) return;
    const unsigned int n = (unsigned int)N;
    const unsigned int rows = (unsigned int)M;
    const unsigned int first = blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned int stride = gridDim.x * blockDim.x;
    const unsigned int step_rows = stride / n;
    const unsigned int step_cols = stride - step_rows * n;
    unsigned int row = first / n;
    unsigned int col = first - row * n;
    while (row < rows) {
        float* p = D + (size_t)row * (size_t)ldd + col;
        float v = *p;
        if (bias != nullptr) v += __ldg(bias + col);
        *p = apply_act(v);
        col += step_cols;
        row += step_rows;
        if (col >= n) {
            col -= n;
            ++row;
        }
    }
}
"""


def bias_act_source() -> str:
    """CUDA source of ``bias_act`` (compile with -DACT=0|1|2, see ACT_CODES)."""
    return _BIAS_ACT_SOURCE


def bias_act_blocks(m: int, n: int, max_blocks: int = BIAS_ACT_MAX_BLOCKS) -> int:
    """Blocks of BIAS_ACT_THREADS threads for an M x N matrix: one element per thread up to a cap."""
    return min(-(-(int(m) * int(n)) // BIAS_ACT_THREADS), int(max_blocks))


class CublasPlusBiasAct:
    """Unfused baseline: cuBLAS SGEMM (``gpu.launch.CublasLauncher``, C = alpha*A@B + beta*C for packed
    row-major data) followed by the bias_act kernel on C, both on the launcher's stream.

    With act 'none' and no bias the second kernel would change nothing and is not launched.
    """

    def __init__(self, stream, *, act: str, max_blocks: int = BIAS_ACT_MAX_BLOCKS):
        from ..gpu.device import driver
        from ..gpu.launch import CublasLauncher

        cuda = driver()
        from pycuda.compiler import SourceModule

        self.act = check_act(act)
        self.act_code = ACT_CODES[act]
        self.max_blocks = int(max_blocks)
        self.stream = stream
        self.gemm = CublasLauncher(stream)
        try:
            self.options = ["-O3", f"-DACT={self.act_code}"]
            try:
                self.module = SourceModule(bias_act_source(), options=self.options, no_extern_c=True)
            except cuda.CompileError as exc:
                first = next((ln.strip() for ln in (exc.stderr or "").splitlines() if "error" in ln), "see log")
                raise CompileError(f"bias_act (ACT={self.act_code}): nvcc failed: {first}",
                                   f"{exc}\n{exc.stderr or ''}") from None
            self.func = self.module.get_function("bias_act")
            self.func.prepare("iiPPi")
        except BaseException:
            self.gemm.close()
            raise
        self.version = self.gemm.version
        self.math_mode = self.gemm.math_mode

    def __call__(self, shape, alpha: float, a, b, beta: float, c, bias, stream) -> None:
        if stream is not self.stream and getattr(stream, "handle", None) != getattr(self.stream, "handle", None):
            raise LabError("cuBLAS + bias_act: called on a different stream than the one it was built for")
        self.gemm(shape, alpha, a, b, beta, c, stream)
        if self.act_code == 0 and bias is None:
            return
        blocks = bias_act_blocks(shape.m, shape.n, self.max_blocks)
        if blocks <= 0:
            return
        self.func.prepared_async_call((blocks, 1), (BIAS_ACT_THREADS, 1, 1), stream,
                                      int(shape.m), int(shape.n), 0 if bias is None else int(bias),
                                      int(c), int(shape.n))

    def close(self) -> None:
        self.gemm.close()

    def __enter__(self) -> "CublasPlusBiasAct":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
