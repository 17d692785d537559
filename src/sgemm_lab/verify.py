"""Correctness: float64 reference, K-aware tolerance, error measures. NumPy only (no GPU)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .config import CheckSettings, Shape

EPS_FP32 = float(np.finfo(np.float32).eps)  # 2**-23
EPS_TF32 = 2.0**-11  # unit roundoff of TF32's 10-bit mantissa
NAN_BITS = 0x7FC00000  # a quiet float32 NaN: what outputs are pre-filled with before a run


@dataclass(frozen=True, kw_only=True)
class Problem:
    """Inputs of one GEMM, row-major float32: A (M x K), B (K x N), C (M x N) read when beta != 0."""

    shape: Shape
    alpha: float
    beta: float
    a: np.ndarray
    b: np.ndarray
    c: np.ndarray
    seed: int


def make_problem(shape: Shape, *, alpha: float, beta: float, seed: int) -> Problem:
    """Fresh inputs drawn uniformly from [-1, 1): never zeros, signs mixed so errors do not hide."""
    rng = np.random.default_rng(seed)

    def draw(rows: int, cols: int) -> np.ndarray:
        x = rng.random((rows, cols), dtype=np.float32)  # [0, 1) drawn in float32 (fast at 8192^2)
        x *= 2
        x -= 1
        x[x == 0] = 0.5  # never an exact zero
        return x

    return Problem(shape=shape, alpha=alpha, beta=beta, seed=seed,
                   a=draw(shape.m, shape.k), b=draw(shape.k, shape.n), c=draw(shape.m, shape.n))


def references(p: Problem) -> tuple[np.ndarray, np.ndarray]:
    """(alpha*A@B + beta*C, alpha*A@B) in float64: the checks with C read and with beta = 0."""
    ab = p.alpha * (p.a.astype(np.float64) @ p.b.astype(np.float64))
    return ab + p.beta * p.c.astype(np.float64), ab


def tolerance(k: int, factor: float) -> float:
    """Bound on the relative Frobenius error of an FP32 GEMM with inner dimension k.

    Rounding errors of a length-k float32 dot product grow like sqrt(k) * eps for random data; the
    factor leaves room for summation order. TF32 (about 3e-4 relative) fails this for k < ~16k.
    """
    return factor * EPS_FP32 * math.sqrt(max(k, 1))


def tolerance_for(precision: str, k: int, check: CheckSettings) -> float:
    """The bound for a stage of class ``precision`` (fp32, tf32 or 3xtf32). TF32 inputs lose their
    last 13 mantissa bits, a relative error of about 2^-11 per operand that averages over the dot
    product instead of growing with K; 3xTF32 recovers FP32 accuracy and is held to FP32's bound."""
    fp32 = tolerance(k, check.tolerance_factor)
    if precision in ("fp32", "3xtf32"):
        return fp32
    if precision == "tf32":
        return check.tf32_tolerance_factor * EPS_TF32 + fp32
    raise ValueError(f"unknown precision class '{precision}'")


@dataclass(frozen=True, kw_only=True)
class Verdict:
    passed: bool
    rel_err: float       # ||out - ref||_F / scale over finite entries (nan if none); see compare()
    max_abs_err: float
    nonfinite: int       # NaN/Inf entries in the output (unwritten outputs stay NaN)
    tolerance: float

    @property
    def reason(self) -> str:
        if self.passed:
            return ""
        if self.nonfinite:
            return f"{self.nonfinite} NaN/Inf outputs"
        return f"relative error {self.rel_err:.3g} >= tolerance {self.tolerance:.3g}"


def compare(out: np.ndarray, ref: np.ndarray, tol: float, *, terms: tuple[np.ndarray, ...] = ()) -> Verdict:
    """Relative Frobenius error of ``out`` against ``ref``, measured against the larger of ||ref|| and
    the norms of ``terms`` (the parts ref is the sum of: alpha*A@B and beta*C). When the two terms
    cancel, as they can in an output of one or a few elements, ||ref|| is far below the size of the
    rounding errors of the terms; for matrices of random entries the two measures agree."""
    if out.shape != ref.shape:
        raise ValueError(f"output shape {out.shape} != reference shape {ref.shape}")
    out64 = out.astype(np.float64)
    finite = np.isfinite(out64)
    nonfinite = int(out64.size - np.count_nonzero(finite))
    diff = np.where(finite, out64 - ref, 0.0)
    ref_norm = max([float(np.linalg.norm(ref))] + [float(np.linalg.norm(t)) for t in terms])
    rel = float(np.linalg.norm(diff) / ref_norm) if ref_norm > 0 else float(np.linalg.norm(diff))
    max_abs = float(np.max(np.abs(diff))) if diff.size else 0.0
    if nonfinite == out64.size:
        rel = max_abs = float("nan")
    passed = nonfinite == 0 and rel < tol
    return Verdict(passed=passed, rel_err=rel, max_abs_err=max_abs, nonfinite=nonfinite, tolerance=tol)
