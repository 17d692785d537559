"""The cuBLASLt side of the epilogue comparison that needs no GPU: the row-major problem as cuBLASLt's
column-major one, which algorithms and environments count as strict FP32, the epilogue's name, and the
helpers that set and read cuBLASLt attributes (``cublaslt`` runs the matmul with them).

Layout mapping (row-major problem -> cuBLASLt's column-major problem)
----------------------------------------------------------------------
cuBLASLt is column-major. A row-major X (r x c, leading dimension ld) occupies the same bytes as
the column-major matrix X^T (c x r, same ld). So we hand cuBLASLt the transposed problem

    D^T = act(alpha * B^T @ A^T + beta * C^T + bias)

with no transpose flags (TRANSA = TRANSB = N) and:

    cuBLASLt            shape (rows x cols)   memory       ld
    m', n', k'          N, M, K
    its A (m' x k')     N x K                 our B        ldb   (needs ldb >= N)
    its B (k' x n')     K x M                 our A        lda   (needs lda >= K)
    its C, D (m' x n')  N x M                 our C, D     ldc, ldd (>= N)
    bias                length m' = N         our bias

``lt_problem`` computes this table and ``lt_pointers`` swaps the operand pointers; the class
in ``cublaslt`` only uses those two.

Bias orientation. cuBLASLt documents CUBLASLT_EPILOGUE_BIAS as "Apply (broadcasted) bias from the
bias vector. Bias vector length must match matrix D rows, and it must be packed (stride between
vector elements is 1). Bias vector is broadcasted to all columns and added before applying the
final postprocessing"; CUBLASLT_MATMUL_DESC_BIAS_POINTER is the device pointer of that vector
(length = rows of D). nvmath-python's own BiasHandler checks the same rule (bias shape (M, 1) in
cuBLASLt's column-major terms). cuBLASLt's D has m' = N rows, one per *column* of our row-major D,
so bias[j] is added to every element of our column j: bias of length N, one value per output
column, which is what ``cublaslt`` promises. It is added after alpha*AB + beta*C and before the
activation, so D = act(alpha*A@B + beta*C + bias).

The activation's definition (and the evidence for GELU's tanh form) is in ``definition``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ..errors import LabError, ShapeError
from .definition import check_act

ALIGN_BYTES = 256            # alignment assumed for A, B, C, D when the algorithm is chosen
HEURISTIC_CANDIDATES = 8     # algorithms asked from the heuristic; the best strict one is used

# cublasLtNumericalImplFlags_t bits (cublasLt.h; same values as
# nvmath.linalg.advanced.MatmulNumericalImplFlags)
IMPL_OP_TYPE_FMA = 0x01
IMPL_OP_TYPE_TENSOR_MASK = 0xFE           # HMMA, IMMA, DMMA, ...
IMPL_INPUT_TYPE_32F = 0x08 << 16
IMPL_INPUT_TYPE_MASK = 0xFF << 16
IMPL_ALL = (1 << 64) - 1
IMPL_NON_FP32_INPUTS = IMPL_INPUT_TYPE_MASK & ~IMPL_INPUT_TYPE_32F  # 16F, 16BF, TF32, 8I, FP8
STRICT_FP32_IMPL_MASK = IMPL_ALL & ~IMPL_OP_TYPE_TENSOR_MASK & ~IMPL_NON_FP32_INPUTS

# Environment variables that can let NVIDIA libraries replace FP32 arithmetic.
NON_STRICT_ENV = ("NVIDIA_TF32_OVERRIDE", "CUBLAS_EMULATE_SINGLE_PRECISION")

_EPILOGUES = {
    ("none", False): "DEFAULT", ("none", True): "BIAS",
    ("relu", False): "RELU", ("relu", True): "RELU_BIAS",
    ("gelu", False): "GELU", ("gelu", True): "GELU_BIAS",
}


def epilogue_name(act: str, bias: bool) -> str:
    """Name of the cublasLt ``Epilogue`` member for (act, bias), e.g. ('gelu', True) -> 'GELU_BIAS'."""
    return _EPILOGUES[(check_act(act), bool(bias))]


def is_strict_fp32_impl(flags: int) -> bool:
    """True when numerical-implementation flags describe FP32 FMA arithmetic (no tensor cores,
    no reduced-precision inputs). Flags of 0 (not reported) count as strict."""
    return (flags & IMPL_OP_TYPE_TENSOR_MASK) == 0 and (flags & IMPL_NON_FP32_INPUTS) == 0


def refuse_non_strict_env() -> None:
    for var in NON_STRICT_ENV:
        if os.environ.get(var, "") not in ("", "0"):
            raise LabError(f"cuBLASLt: {var} is set and could replace FP32 arithmetic; unset it")


# ------------------------------------------------------------------------------ layout mapping
class Layout(NamedTuple):
    """A column-major matrix as cuBLASLt sees it."""

    rows: int
    cols: int
    ld: int


@dataclass(frozen=True)
class LtProblem:
    """The column-major problem handed to cuBLASLt for a row-major D = A @ B problem."""

    m: int          # cuBLASLt's m (= our N)
    n: int          # cuBLASLt's n (= our M)
    k: int
    a: Layout       # cuBLASLt's A: our B
    b: Layout       # cuBLASLt's B: our A
    c: Layout
    d: Layout
    bias_len: int   # rows of cuBLASLt's D (= our N)


def lt_problem(m: int, n: int, k: int, lda: int, ldb: int, ldc: int, ldd: int) -> LtProblem:
    """Swap a row-major M x N x K problem into cuBLASLt's column-major one (see module docstring)."""
    m, n, k, lda, ldb, ldc, ldd = (int(v) for v in (m, n, k, lda, ldb, ldc, ldd))
    if min(m, n, k) < 1:
        raise ShapeError(f"cuBLASLt: M, N, K must be positive, got {m}x{n}x{k}")
    for name, ld, least in (("lda", lda, k), ("ldb", ldb, n), ("ldc", ldc, n), ("ldd", ldd, n)):
        if ld < least:
            raise ShapeError(f"cuBLASLt: {name}={ld} < {least} for row-major {m}x{n}x{k}")
    return LtProblem(m=n, n=m, k=k,
                     a=Layout(n, k, ldb), b=Layout(k, m, lda),
                     c=Layout(n, m, ldc), d=Layout(n, m, ldd), bias_len=n)


def lt_pointers(a, b, c, d) -> tuple:
    """Our (A, B, C, D) -> the (A, B, C, D) arguments of cublasLtMatmul: A and B swap."""
    return b, a, c, d


# ----------------------------------------------------------------------- nvmath binding helpers
def set_attr(setter, dtype_of, obj: int, attr, value: int) -> None:
    dtype = np.dtype(dtype_of(attr))
    value = int(value)
    if dtype.kind == "i" and value >= 1 << (8 * dtype.itemsize - 1):
        value -= 1 << (8 * dtype.itemsize)  # same bits in a signed field (64-bit masks)
    buf = np.array([value], dtype=dtype)
    setter(obj, int(attr), buf.ctypes.data, buf.nbytes)


def get_attr(getter, dtype_of, obj: int, attr) -> int:
    buf = np.zeros(1, dtype=dtype_of(attr))
    written = np.zeros(1, dtype=np.uint64)
    getter(obj, int(attr), buf.ctypes.data, buf.nbytes, written.ctypes.data)
    return int(buf[0])


def enum_name(enum_cls, value: int) -> str | int:
    try:
        return enum_cls(value).name
    except ValueError:
        return value


@dataclass
class Plan:
    """Matrix layouts and chosen algorithm for one set of leading dimensions."""

    problem: LtProblem
    a: int = 0
    b: int = 0
    c: int = 0
    d: int = 0
    results: np.ndarray | None = None  # heuristic results; algo_ptr points into it
    algo_ptr: int = 0
    info: dict = field(default_factory=dict)
