"""A model of stage 18's arithmetic on the CPU, for its error against float64 (kernels/NOTES.md, "Stage 18:
the truncation's bias given back").

Each operand is split as the kernel splits it (big = TF32 rounded to nearest, small = TF32 of the rest;
A's small part optionally carrying ``bias * 2^-24`` of its big part, everywhere or only where TF32 does
not hold the element). Each wgmma is modelled as the exact
sum of its 8 products and the accumulator, truncated toward zero to FP32 (the tensor core's internal
alignment is not modelled); the three products of ``rn`` k-steps of 8 (small x big, big x small, big x
big) sum from zero into a part, parts are added into the slice's running sum with rounding to nearest,
slices of ``slice_k`` meet in a binary tree. Variants switch single pieces off to show where the error
comes from. NumPy only; a 256 x 192 x 320 case takes a few seconds.

    python tools/tf32x3_model.py --shape 256 192 320 --dist loguniform
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from sgemm_lab.config.records import Distribution  # noqa: E402
from sgemm_lab.results import verify  # noqa: E402
from _cli import run  # noqa: E402 - tools/ is the script's folder


def tf32(x: np.ndarray) -> np.ndarray:
    """Round float32 values to TF32 (10 stored significand bits), to nearest, ties away (cvt.rna)."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x1000) & 0xFFFFE000).astype(np.uint32).view(np.float32)


def rz32(x: np.ndarray) -> np.ndarray:
    """float64 -> float32 toward zero, back as float64."""
    f = x.astype(np.float32)
    over = np.abs(f.astype(np.float64)) > np.abs(x)
    f[over] = np.nextafter(f[over], np.float32(0))
    return f.astype(np.float64)


def rn32(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32).astype(np.float64)


def draw(rng: np.random.Generator, shape: tuple[int, int], dist: str) -> np.ndarray:
    """A float32 matrix of the check's distribution ``dist`` (``verify.draw``, its default parameters)."""
    return verify.draw(rng, *shape, Distribution(name=dist, kind=dist))


def stage18(a: np.ndarray, b: np.ndarray, *, rn: int = 2, slice_k: int = 64, bias: float = 0.0,
            bias_where: str = "all", wgmma=rz32, add=rn32, products: int = 3) -> np.ndarray:
    """C = A B as stage 18 sums it (see the module's docstring); ``wgmma``/``add`` round each step.
    ``bias_where``: "all" elements of A carry the bias in their small parts, or only those that TF32 does
    not hold ("inexact": an element equal to its big part keeps a small part of 0). ``products`` = 4 adds
    small x small, first (the smallest terms summed first)."""
    if products not in (3, 4):
        raise ValueError(f"products must be 3 or 4, not {products!r}")
    if bias_where not in ("all", "inexact"):
        raise ValueError(f"bias_where must be 'all' or 'inexact', not {bias_where!r}")
    a_big = tf32(a)
    a64, big64 = a.astype(np.float64), a_big.astype(np.float64)
    keep = 1 - bias * 2.0**-24
    if bias_where == "inexact":
        keep = np.where(a64 != big64, keep, 1.0)
    a_small = tf32((a64 - big64 * keep).astype(np.float32))
    b_big = tf32(b)
    b_small = tf32(b - b_big)
    ab, as_, bb, bs = (x.astype(np.float64) for x in (a_big, a_small, b_big, b_small))
    k_total = a.shape[1]
    sums = []
    for k0 in range(0, k_total, slice_k):
        d = np.zeros((a.shape[0], b.shape[1]))
        for g0 in range(k0, min(k_total, k0 + slice_k), 8 * rn):
            steps = range(g0, min(k_total, g0 + 8 * rn), 8)
            part = np.zeros_like(d)
            terms = ((as_, bs),) * (products == 4) + ((ab, bs), (as_, bb), (ab, bb))
            for x, y in terms:  # the kernel's C^T = B^T A^T in this order
                for s in steps:
                    part = wgmma(part + x[:, s:s + 8] @ y[s:s + 8])
            d = add(d + part)
        sums.append(d)
    while len(sums) > 1:  # fixed binary tree over slice indices
        sums = [add(sums[i] + sums[i + 1]) if i + 1 < len(sums) else sums[i] for i in range(0, len(sums), 2)]
    return rn32(sums[0])


def tz(x: np.ndarray) -> np.ndarray:
    """float32 values as the tensor core reads an FP32 operand for TF32: the low 13 significand bits dropped."""
    return (x.astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


def stage17(a: np.ndarray, b: np.ndarray, *, rn: int = 0, wgmma=rz32, add=rn32) -> np.ndarray:
    """C = A B as stage 17 (one TF32 product) sums it: A read by the tensor core as it lies in shared memory
    (truncated to TF32), B^T rounded to TF32 in registers; each wgmma adds its 8 products into the
    accumulator and truncates. ``rn`` = 0: one accumulator over all of K, as the stage is today; ``rn`` > 0:
    ``rn`` k-steps of 8 sum from zero into a part, added into the running sum with rounding to nearest
    (stage 18's way, proposed for stage 17)."""
    at, bt = tz(a).astype(np.float64), tf32(b).astype(np.float64)
    k_total = a.shape[1]
    d = np.zeros((a.shape[0], b.shape[1]))
    if rn == 0:
        for s in range(0, k_total, 8):
            d = wgmma(d + at[:, s:s + 8] @ bt[s:s + 8])
        return rn32(d)
    for g0 in range(0, k_total, 8 * rn):
        part = np.zeros_like(d)
        for s in range(g0, min(k_total, g0 + 8 * rn), 8):
            part = wgmma(part + at[:, s:s + 8] @ bt[s:s + 8])
        d = add(d + part)
    return rn32(d)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", type=int, nargs=3, default=[256, 192, 320], metavar=("M", "N", "K"))
    ap.add_argument("--dist", default="loguniform",
                    choices=["uniform", "normal", "loguniform", "positive", "integers", "short", "sparse"])
    ap.add_argument("--slice-k", type=int, default=64, help="K of a split-K slice (stage 18 at 256x192x320: 64)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tf32", action="store_true", help="stage 17 (one TF32 product) instead of stage 18")
    args = ap.parse_args()
    m, n, k = args.shape
    rng = np.random.default_rng(args.seed)
    a, b = draw(rng, (m, k), args.dist), draw(rng, (k, n), args.dist)
    ref = a.astype(np.float64) @ b.astype(np.float64)

    def err(c: np.ndarray) -> str:
        e = float(np.linalg.norm(c - ref) / np.linalg.norm(ref))
        return f"{e:.2e}" + ("  (exact)" if e == 0 else "")

    exact = lambda x: x  # noqa: E731
    if args.tf32:
        rows = [("one TF32 product, exact sums", stage17(a, b, wgmma=exact)),
                ("stage 17 today: one truncating accumulator over K", stage17(a, b)),
                ("parts of 4 k-steps, rounded adds", stage17(a, b, rn=4)),
                ("parts of 2 k-steps, rounded adds", stage17(a, b, rn=2))]
        print(f"{m}x{n}x{k}, {args.dist} inputs, stage 17: relative Frobenius error")
        for name, c in rows:
            print(f"  {err(c)}  {name}")
        return
    rows = [
        ("three products, exact sums, one rounding", stage18(a, b, slice_k=args.slice_k, wgmma=exact, add=exact)),
        ("truncating wgmma, exact adds", stage18(a, b, slice_k=args.slice_k, add=exact)),
        ("rounding wgmma, rounded adds", stage18(a, b, slice_k=args.slice_k, wgmma=rn32)),
        ("RN 2 (truncating wgmma, rounded adds)", stage18(a, b, slice_k=args.slice_k)),
        ("RN 2, RN_BIAS 1", stage18(a, b, slice_k=args.slice_k, bias=1)),
        ("RN 2, RN_BIAS 1 where TF32 does not hold A", stage18(a, b, slice_k=args.slice_k, bias=1,
                                                              bias_where="inexact")),
        ("four products, exact sums, one rounding", stage18(a, b, slice_k=args.slice_k, wgmma=exact, add=exact,
                                                            products=4)),
        ("four products, RN 2, RN_BIAS 1 where inexact", stage18(a, b, slice_k=args.slice_k, bias=1,
                                                                 bias_where="inexact", products=4)),
        ("RN 4", stage18(a, b, rn=4, slice_k=args.slice_k)),
        ("RN 4, RN_BIAS 1.5", stage18(a, b, rn=4, slice_k=args.slice_k, bias=1.5)),
        ("RN 4, RN_BIAS 2", stage18(a, b, rn=4, slice_k=args.slice_k, bias=2)),
    ]
    print(f"{m}x{n}x{k}, {args.dist} inputs, slices of K = {args.slice_k}: relative Frobenius error")
    for name, c in rows:
        print(f"  {err(c)}  {name}")


if __name__ == "__main__":
    sys.exit(run(main))
