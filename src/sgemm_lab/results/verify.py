"""Correctness: the check's inputs (drawn per distribution), float64 reference, K-aware tolerance,
error measures. NumPy only (no GPU)."""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ..config.records import FP32_ACCURATE, UNIFORM, CheckSettings, Distribution, Shape

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
    dist: str = "uniform"


# Input distributions of the check (config: check.distributions). Each draws A, B and C as float32,
# never an exact zero but where zeros are the point ("sparse"). "uniform" is the one every check shape
# runs; the others probe what uniform values hide: "normal" (unbounded tails), "loguniform" (magnitudes
# spread over 2^lo..2^hi with random signs: a few terms dominate each dot product), "positive" (no
# cancellation, so rounding errors add up instead of averaging out), "extreme" (A near FP32's overflow
# and B near its underflow limit, 2^scale and 2^-scale, so that the exact products are of order 1 and
# the result finite); and where FP32 can be exact: "integers" (small whole numbers: every product and
# partial sum exact), "short" (significands of a few bits, bfloat16's 8 by default: exact in TF32),
# "sparse" (a share of exact zeros).
DISTRIBUTIONS = ("uniform", "normal", "loguniform", "positive", "extreme", "integers", "short", "sparse")

# Elements drawn from one child seed by the kinds drawn in blocks (normal, loguniform): the blocks are
# drawn by a pool of threads (NumPy's generators and ufuncs release the GIL), and what a seed draws does
# not depend on how many threads there are. At 256 x 65536 a serial draw of these kinds took 0.5-1.5 s
# per matrix, repeated for every stage's check.
BLOCK = 1 << 18


def _threads() -> int:
    return max(1, min(16, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


def _draw_block(rng: np.random.Generator, out: np.ndarray, dist: Distribution) -> None:
    """Fill the flat float32 block ``out`` with values of ``dist`` (normal or loguniform), never zero."""
    if dist.kind == "normal":
        rng.standard_normal(out=out, dtype=np.float32)
        out[out == 0] = 0.5
    else:  # loguniform: 2^u with u uniform in [lo, hi), in float64 (exact powers up to float32's rounding)
        lo, hi = dist.log2_range
        mag = np.exp2(rng.uniform(lo, hi, out.size))
        np.copyto(out, np.where(rng.random(out.size) < 0.5, -mag, mag), casting="same_kind")


def _draw_blocks(rng: np.random.Generator, rows: int, cols: int, dist: Distribution) -> np.ndarray:
    x = np.empty(rows * cols, np.float32)
    starts = range(0, x.size, BLOCK)
    seeds = np.random.SeedSequence(rng.integers(0, 2**63, size=2).tolist()).spawn(len(starts))
    work = [(np.random.default_rng(s), x[i:i + BLOCK]) for s, i in zip(seeds, starts)]
    threads = _threads()
    if len(work) <= 1 or threads == 1:
        for g, out in work:
            _draw_block(g, out, dist)
    else:
        with ThreadPoolExecutor(max_workers=min(threads, len(work))) as pool:
            list(pool.map(lambda w: _draw_block(w[0], w[1], dist), work))
    return x.reshape(rows, cols)


def draw(rng: np.random.Generator, rows: int, cols: int, dist: Distribution = UNIFORM, *, scale_log2: int = 0) -> np.ndarray:
    """One float32 matrix of ``dist`` (times 2^scale_log2), drawn in float32 where that is exact and fast.
    Uniform, positive and extreme values are one serial stream of ``rng`` (seeds recorded by earlier runs
    replay them); normal and log-uniform values are drawn in blocks from child seeds that ``rng`` draws
    (``BLOCK``)."""
    kind = dist.kind
    if kind in ("uniform", "extreme", "positive"):
        x = rng.random((rows, cols), dtype=np.float32)  # [0, 1) drawn in float32 (fast at 8192^2)
        if kind == "positive":
            np.subtract(np.float32(1), x, out=x)  # (0, 1]: never zero, never negative
        else:
            x *= 2
            x -= 1
            x[x == 0] = 0.5  # never an exact zero
    elif kind in ("normal", "loguniform"):
        x = _draw_blocks(rng, rows, cols, dist)
    elif kind == "integers":  # nonzero whole numbers in [-int_max, int_max]
        x = rng.integers(1, dist.int_max, size=(rows, cols), endpoint=True, dtype=np.int32).astype(np.float32)
        x *= np.where(rng.random((rows, cols), dtype=np.float32) < 0.5, np.float32(-1), np.float32(1))
    elif kind == "short":  # uniform [-1, 1), significands of `bits` bits (round to nearest even, in float32)
        x = rng.random((rows, cols), dtype=np.float32)
        x *= 2
        x -= 1
        x[x == 0] = 0.5
        x = _short_significands(x, dist.bits)
    elif kind == "sparse":  # uniform [-1, 1) with a share `zeros` of exact zeros
        x = rng.random((rows, cols), dtype=np.float32)
        x *= 2
        x -= 1
        x[x == 0] = 0.5
        x[rng.random((rows, cols), dtype=np.float32) < dist.zeros] = 0
    else:
        raise ValueError(f"unknown input distribution '{kind}' (known: {', '.join(DISTRIBUTIONS)})")
    if scale_log2:
        # exact: a power of two, within FP32's range; one rounding where the product is subnormal, the
        # same as rounding the exact float64 product
        x *= np.float32(2.0**scale_log2)
    return x


def _short_significands(x: np.ndarray, bits: int) -> np.ndarray:
    """``x`` (float32, finite, normal) rounded to significands of ``bits`` bits, to nearest, ties to even."""
    drop = 24 - bits
    if drop <= 0:
        return x
    u = x.view(np.uint32).astype(np.uint64)
    half, keep = np.uint64(1 << (drop - 1)), np.uint64(~((1 << drop) - 1) & 0xFFFFFFFF)
    odd = (u >> np.uint64(drop)) & np.uint64(1)
    u = (u + half - np.uint64(1) + odd) & keep  # (a carry into the exponent is the right rounding)
    return u.astype(np.uint32).view(np.float32)


def make_problem(shape: Shape, *, alpha: float, beta: float, seed: int, dist: Distribution = UNIFORM) -> Problem:
    """Fresh inputs of distribution ``dist`` (default: uniform in [-1, 1)), never zeros but for "sparse"."""
    rng = np.random.default_rng(seed)
    s = dist.scale_log2 if dist.kind == "extreme" else 0
    return Problem(shape=shape, alpha=alpha, beta=beta, seed=seed, dist=dist.name,
                   a=draw(rng, shape.m, shape.k, dist, scale_log2=s), b=draw(rng, shape.k, shape.n, dist, scale_log2=-s),
                   c=draw(rng, shape.m, shape.n, UNIFORM if dist.kind == "extreme" else dist))


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
    """The absolute bound for a stage of class ``precision`` (config.records.PRECISIONS). TF32 inputs lose
    their last 13 mantissa bits, a relative error of about 2^-11 per operand that averages over the dot
    product instead of growing with K; 3xTF32 and the Ozaki scheme recover FP32 accuracy and are held to
    FP32's bound."""
    fp32 = tolerance(k, check.tolerance_factor)
    if precision in FP32_ACCURATE:
        return fp32
    if precision == "tf32":
        return check.tf32_tolerance_factor * EPS_TF32 + fp32
    raise ValueError(f"unknown precision class '{precision}'")


# Below this, a library's error counts as this much: an exact (or nearly exact) baseline result would
# otherwise make any rounding at all fail the relative criterion.
BASELINE_ERR_FLOOR = EPS_FP32 / 2


def fp32_limit(k: int, check: CheckSettings, baseline_err: float | None) -> float:
    """The FP32 class's limit at one check point: the absolute bound ``tolerance(k)``, tightened to
    ``fp32_factor`` times the error of cuBLAS strict FP32 on the same inputs (``baseline_err``; None or
    NaN where none was measured, and then the absolute bound alone applies).

    The absolute bound grows like sqrt(K) and passes TF32 (error about 2.6e-4 whatever K) from
    K of about 2^16 on; a strict FP32 library's error on the same inputs grows too, but stays hundreds
    of times below TF32's, so the relative limit keeps the classes apart at any K."""
    bound = tolerance(k, check.tolerance_factor)
    if baseline_err is None or not math.isfinite(baseline_err):
        return bound
    return min(bound, check.fp32_factor * max(baseline_err, BASELINE_ERR_FLOOR))


def limit_for(precision: str, k: int, check: CheckSettings, baseline_err: float | None) -> float:
    """What a stage of class ``precision`` is held to at one point: the FP32 limit for the FP32-accurate
    classes (config.records.FP32_ACCURATE), the TF32 bound for tf32."""
    if precision in FP32_ACCURATE:
        return fp32_limit(k, check, baseline_err)
    return tolerance_for(precision, k, check)


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


def scale_of(ref: np.ndarray, terms: tuple[np.ndarray, ...] = ()) -> float:
    """What :func:`compare` measures an error against: the largest of ||ref||_F and the terms' norms.
    Computed once, it serves every output compared with the same reference (a stage and cuBLAS)."""
    return max([float(np.linalg.norm(ref))] + [float(np.linalg.norm(t)) for t in terms])


def compare(out: np.ndarray, ref: np.ndarray, tol: float, *, terms: tuple[np.ndarray, ...] = (),
            scale: float | None = None) -> Verdict:
    """Relative Frobenius error of ``out`` against ``ref``, measured against the larger of ||ref|| and
    the norms of ``terms`` (the parts ref is the sum of: alpha*A@B and beta*C), or against ``scale``
    where the caller has it already (:func:`scale_of`). When the two terms cancel, as they can in an
    output of one or a few elements, ||ref|| is far below the size of the rounding errors of the terms;
    for matrices of random entries the two measures agree.

    One float64 difference and reductions over it, without temporaries: this runs six times per check
    point (three modes, the stage and cuBLAS), single-threaded, at up to 4.2 M outputs. For real float
    outputs (float16/32/64) it reports what the one-array-at-a-time definition does, to the bit."""
    if out.shape != ref.shape:
        raise ValueError(f"output shape {out.shape} != reference shape {ref.shape}")
    finite = np.isfinite(out)
    nonfinite = int(out.size - np.count_nonzero(finite))
    diff = np.subtract(out, ref, dtype=np.float64)  # float32 to float64 is exact: the same as out64 - ref
    if nonfinite:
        diff[~finite] = 0.0
    ref_norm = scale_of(ref, terms) if scale is None else scale
    rel = float(np.linalg.norm(diff) / ref_norm) if ref_norm > 0 else float(np.linalg.norm(diff))
    max_abs = float(max(diff.max(), -diff.min())) + 0.0 if diff.size else 0.0  # + 0.0: |-0.0| is 0.0
    if nonfinite == out.size:
        rel = max_abs = float("nan")
    passed = nonfinite == 0 and rel < tol
    return Verdict(passed=passed, rel_err=rel, max_abs_err=max_abs, nonfinite=nonfinite, tolerance=tol)
