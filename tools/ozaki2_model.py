"""A model of FP32 GEMM by integer emulation (the Ozaki scheme II) on the CPU, before any kernel: its error
against float64 on the check's input distributions for a given number of moduli, and its time on a GPU
from the bytes and operations of each part against roofs.

The arithmetic, as the kernels would do it:
1. Scaling. Row i of A is multiplied by 2^e_i and column j of B by 2^f_j, then rounded to integers, so
   that the largest magnitude of each row (column) is at most 2^beta. Powers of two: the scaling itself is
   exact, and integer inputs whose row maxima are at most 2^beta stay what they are.
2. Residues. For pairwise coprime moduli m_1..m_s <= 256 (product P), each integer matrix is reduced to
   symmetric residues in [-m/2, m/2): INT8 operands.
3. Products. One INT8 x INT8 -> INT32 GEMM per modulus; exact while K * 128^2 < 2^31.
4. Reconstruction. The Chinese remainder theorem gives the integer product A'B' modulo P; it is the
   product itself when every |(A'B')_ij| < P/2, which the choice of beta guarantees:
   K * 2^(2 beta) < P/2. Then C = 2^-e_i (A'B')_ij 2^-f_j, alpha and beta applied, rounded to FP32.

The only error is step 1's rounding of each element to beta bits below its row's (column's) largest:
beta grows by half a bit per bit of P, so the number of moduli is chosen from the accuracy asked for.

    python tools/ozaki2_model.py error --shape 256 192 320 --moduli 6 7 8 9
    python tools/ozaki2_model.py time --run reports/h200 --moduli 7 8   # INT8 roof: the run's ceilings.json
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from sgemm_lab.config.records import Distribution  # noqa: E402
from sgemm_lab.results import verify  # noqa: E402
from _cli import run  # noqa: E402 - tools/ is the script's folder


def moduli(count: int) -> list[int]:
    """The ``count`` largest pairwise coprime integers up to 256 (256 = 2^8 first: its residues are the
    low byte), largest first."""
    out: list[int] = []
    m = 256
    while len(out) < count:
        if m < 2:
            raise ValueError(f"no {count} pairwise coprime moduli up to 256")
        if all(math.gcd(m, x) == 1 for x in out):
            out.append(m)
        m -= 1
    return out


def beta_bits(mods: list[int], k: int) -> int:
    """The most bits an operand row (column) may keep so that every output is below P/2 in magnitude:
    K * 2^(2 beta) < P/2."""
    # K * 4^beta < P/2  <=>  4^beta <= floor((P - 1) / (2K)): beta = floor(log2(that) / 2), in integers
    q = (math.prod(mods) - 1) // (2 * k)
    return max(0, (q.bit_length() - 1) // 2)


def count_for(k: int, bits: int = 24) -> int:
    """The fewest moduli that let every operand row (column) keep ``bits`` bits below its largest element
    at this K (24: FP32's significand, the width at which the model's error falls below FP32's)."""
    count = 1
    while beta_bits(moduli(count), k) < bits:
        count += 1
    return count


def _exponents(x: np.ndarray, beta: int, axis: int) -> np.ndarray:
    """Per row (axis=1) or column (axis=0): the power of two that brings the largest magnitude to at
    most 2^beta (0 for an all-zero row)."""
    top = np.abs(x).max(axis=axis)
    e = np.zeros(top.shape, dtype=np.int64)
    nz = top > 0
    # frexp: top = f * 2^q with f in [0.5, 1): top * 2^(beta - q) = f * 2^beta <= 2^beta
    e[nz] = beta - np.frexp(top[nz])[1]
    return e


def scale(a: np.ndarray, b: np.ndarray, beta: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A' = round(2^e_i a_ij), B' = round(b_ij 2^f_j) as int64, with e and f."""
    e, f = _exponents(a, beta, 1), _exponents(b, beta, 0)
    ai = np.rint(np.ldexp(a.astype(np.float64), e[:, None])).astype(np.int64)
    bi = np.rint(np.ldexp(b.astype(np.float64), f[None, :])).astype(np.int64)
    return ai, bi, e, f


def residue(x: np.ndarray, m: int) -> np.ndarray:
    """Symmetric residues in [-m/2, m/2), as INT8 holds them for m <= 256."""
    r = np.mod(x, m)
    return np.where(r >= (m + 1) // 2, r - m, r).astype(np.int8)


def product(a: np.ndarray, b: np.ndarray, count: int) -> np.ndarray:
    """A @ B (float32 inputs) by ``count`` moduli, as float64 (before FP32 rounding). Python integers
    for the reconstruction: P is over 2^64 beyond 8 moduli."""
    k = a.shape[1]
    if k * 128 * 128 >= 2 ** 31:
        raise ValueError(f"K = {k}: INT32 accumulation of INT8 products is exact only for K < 131072 (split K)")
    mods = moduli(count)
    ai, bi, e, f = scale(a, b, beta_bits(mods, k))
    exact = reconstruct(ai, bi, mods)
    # float(v) rounds each integer once (to 53 bits); the powers of two are exact
    out = np.array([[float(v) for v in row] for row in exact], dtype=np.float64)
    return np.ldexp(out, (-e[:, None] - f[None, :]).astype(np.int64))


def reconstruct(ai: np.ndarray, bi: np.ndarray, mods: list[int]) -> np.ndarray:
    """The integer product A'B' (Python integers) from one INT8 product per modulus and the Chinese
    remainder theorem: exact when every |(A'B')_ij| < P/2."""
    p = math.prod(mods)
    acc = np.zeros((ai.shape[0], bi.shape[1]), dtype=object)
    for m in mods:
        c = residue(ai, m).astype(np.int64) @ residue(bi, m).astype(np.int64)  # INT8 x INT8 -> INT32, exact
        big = p // m
        weight = big * pow(big, -1, m)  # 1 modulo m, 0 modulo every other modulus
        acc += np.mod(c, m).astype(object) * weight
    exact = np.mod(acc, p)
    return np.where(exact > p // 2, exact - p, exact)  # the symmetric representative: the product itself


def error_table(shape: tuple[int, int, int], counts: list[int], dists: list[str], seed: int) -> list[dict]:
    """Relative Frobenius error (the check's measure) of the emulation and of an FP32 GEMM (NumPy's,
    float32) against float64, per distribution and number of moduli."""
    m, n, k = shape
    rows = []
    for name in dists:
        rng = np.random.default_rng(seed)
        dist = Distribution(name=name, kind=name)
        a, b = verify.draw(rng, m, k, dist), verify.draw(rng, k, n, dist)
        ref = a.astype(np.float64) @ b.astype(np.float64)

        def err(c: np.ndarray) -> float:  # the check's own measure
            return verify.compare(c, ref, math.inf).rel_err

        row = dict(distribution=name, fp32=err(a @ b))
        for count in counts:
            row[f"{count} moduli"] = err(product(a, b, count).astype(np.float32))
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------------- time
# How the products reach the reconstruction: bytes an output and modulus through DRAM. "int32": the GEMM
# writes its INT32 products; "byte": its epilogue reduces each modulo m first, which fits a byte (m <= 256);
# "fused": the reconstruction is the GEMM's epilogue (all moduli of a tile in one block: no products in DRAM)
PRODUCT_BYTES = {"int32": 4, "byte": 1, "fused": 0}


def parts(m: int, n: int, k: int, count: int, *, products: str) -> list[tuple[str, float, float]]:
    """(part, operations on the tensor cores, DRAM bytes) of each part: scaling and residues (A and B read
    twice, for the maxima and the conversion; ``count`` INT8 copies written), the INT8 GEMMs (each
    reads its residues once from DRAM, L2 serving the re-reads, and writes its products as ``products``
    says), the reconstruction (the products read back, C read and written)."""
    ab = m * k + k * n
    through = PRODUCT_BYTES[products] * count * m * n
    return [("scale + residues", 0.0, 2 * 4 * ab + count * ab),
            ("INT8 GEMMs", 2.0 * m * n * k * count, count * ab + through),
            ("reconstruction", 0.0, float(4 * 2 * m * n + through))]


def predicted_ms(m: int, n: int, k: int, count: int, *, int8_tops: float, dram_gbps: float, products: str,
                 efficiency: float = 1.0) -> tuple[float, list[tuple[str, float]]]:
    """Each part at the slower of its roofs (no overlap between parts), the tensor roof times
    ``efficiency``, and the sum."""
    times = [(name, max(ops / (efficiency * int8_tops * 1e12), nbytes / (dram_gbps * 1e9)) * 1e3)
             for name, ops, nbytes in parts(m, n, k, count, products=products)]
    return sum(t for _, t in times), times


def time_table(run_dir: Path, counts: list[int], int8_tops: float, shapes: list[tuple[int, int, int]],
               like: str) -> list[dict]:
    """Predicted time against the run's measured cuBLAS SGEMM and stage 20 (bench.csv), at the run's
    measured DRAM bandwidth (ceilings.json): with the INT8 GEMMs at their roof, and at the share of the
    TF32 roof that the tensor-core stage ``like`` reaches at the shape (what this lab's wgmma kernels do
    today)."""
    import json

    import pandas as pd

    bench = pd.read_csv(run_dir / "bench.csv")
    ceilings = json.loads((run_dir / "ceilings.json").read_text())
    dram = ceilings["dram_gbps"]
    ok = bench[bench.status == "ok"]
    rows = []
    for m, n, k in shapes:
        here = ok[(ok.m == m) & (ok.n == n) & (ok.k == k)]
        at = here.groupby("kernel").median_ms.min()
        shares = {"roof": 1.0}
        if like in at and ceilings.get("tf32_tflops"):
            shares[f"as {like}"] = float(here[here.kernel == like].tflops.max()) / ceilings["tf32_tflops"]
        for count, way, (gemms, eff) in ((c, w, g) for c in counts for w in PRODUCT_BYTES for g in shares.items()):
            total, times = predicted_ms(m, n, k, count, int8_tops=int8_tops, dram_gbps=dram, products=way,
                                        efficiency=eff)
            row = dict(shape=f"{m}x{n}x{k}", moduli=count, products=way,
                       gemms=f"{gemms} ({100 * eff:.0f}%)",
                       **{f"{name} ms": t for name, t in times}, total_ms=total)
            for ref in ("cublas", "20_dispatch_3xtf32"):
                if ref in at:
                    row[f"x {ref}"] = float(at[ref]) / total
            rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    e = sub.add_parser("error", help="error against float64 per input distribution and number of moduli")
    e.add_argument("--shape", type=int, nargs=3, default=[256, 192, 320], metavar=("M", "N", "K"))
    e.add_argument("--moduli", type=int, nargs="+", default=[6, 7, 8, 9])
    e.add_argument("--dist", nargs="+", default=["uniform", "normal", "loguniform", "positive", "extreme", "integers",
                                                 "short", "sparse"], help="the check's distributions (kinds, default parameters)")
    e.add_argument("--seed", type=int, default=1)
    t = sub.add_parser("time", help="predicted time per part against a run's measured cuBLAS and stage 20")
    t.add_argument("--run", type=Path, default=Path("reports/h100"))
    t.add_argument("--moduli", type=int, nargs="+", default=[7, 8])
    t.add_argument("--int8-tops", type=float, default=None,
                   help="the INT8 tensor roof in TOPS; default the run's own (ceilings.json int8_tops, measured by "
                        "the ceilings step on Hopper since 1e2fc1d)")
    t.add_argument("--shapes", nargs="+", default=["2048x2048x2048", "4096x4096x4096", "8192x8192x8192"])
    t.add_argument("--like", default="17_wgmma_tf32", help="the stage whose share of the TF32 roof the INT8 GEMMs "
                   "are also given")
    args = ap.parse_args()
    import pandas as pd

    if args.what == "error":
        table = error_table(tuple(args.shape), args.moduli, args.dist, args.seed)
        print(f"relative Frobenius error against float64 at {'x'.join(map(str, args.shape))} "
              f"(fp32: NumPy's float32 GEMM; beta bits: "
              + ", ".join(f"{c} moduli {beta_bits(moduli(c), args.shape[2])}" for c in args.moduli) + ")")
        print(pd.DataFrame(table).to_string(index=False, float_format=lambda v: f"{v:.2e}"))
    else:
        shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes]
        import json

        measured = json.loads((args.run / "ceilings.json").read_text()).get("int8_tops")
        if args.int8_tops is None and measured is None:
            raise SystemExit(f"ozaki2_model.py: {args.run}/ceilings.json has no INT8 roof (int8_tops): give --int8-tops")
        source = "as given" if args.int8_tops is not None else "measured, the run's ceilings.json"
        args.int8_tops = args.int8_tops if args.int8_tops is not None else measured
        print(f"predicted ms per part (DRAM {args.run}/ceilings.json; INT8 roof {args.int8_tops:g} TOPS, {source}) "
              f"against {args.run}/bench.csv")
        table = pd.DataFrame(time_table(args.run, args.moduli, args.int8_tops, shapes, args.like))
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))


if __name__ == "__main__":
    sys.exit(run(main))
