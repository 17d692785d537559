"""Stage 22 (kernels/22_ozaki2_int8.cu, the Ozaki scheme II) without a GPU: its kernels compile without
spills; the constants its compiler computes (moduli, P, the CRT weights, the operand width for each K) are
the model's; that width leaves the reconstruction its rounding room; and the reconstruction as the kernel
computes it (a wrapping 64-bit sum and the nearest integer of a double) is the integer product exactly,
worst cases included."""

import math
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT
from sgemm_lab.gpu import compile as comp

sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tools" / "probes"))

import ozaki2_model as model  # noqa: E402
from ozaki2 import bits_for  # noqa: E402

SOURCE = ROOT / "kernels" / "22_ozaki2_int8.cu"
ENTRIES = {"ozaki_row_max", "ozaki_col_max", "ozaki_residues_a", "ozaki_residues_b", "ozaki_int8_gemm",
           "ozaki_reconstruct"}


@pytest.mark.parametrize("count", [8, 7])
def test_the_kernels_compile_without_spills(count, nvcc, tmp_path):
    proc = subprocess.run([nvcc, "-cubin", "-arch=sm_90a", "-O3", f"-DNMOD={count}", "-Xptxas", "-v",
                           f"-I{ROOT / 'kernels'}", str(SOURCE), "-o", str(tmp_path / "k.cubin")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    info = comp.parse_ptxas_info(proc.stdout + proc.stderr)
    assert set(info) == ENTRIES
    assert all(i.spill_store_bytes == 0 and i.spill_load_bytes == 0 for i in info.values())


WIDTH_KS = (1, 2, 3, 16, 1000, 24410, 65536, 131071, 2**31 - 1)


@pytest.mark.parametrize("count", [8, 7])
def test_the_compiled_constants_and_widths_are_the_model_s(count, nvcc, tmp_path):
    """A host program over the kernel file prints what its constexpr functions compute: the moduli, P, the
    CRT weights, and the operand width the scaling kernels and the reconstruction take for each K."""
    main = tmp_path / "constants.cu"
    p = math.prod(model.moduli(count))
    q = p // 2 - p // 2**21
    edges = {e for b in range(15, 31) for e in (q // 4**b, q // 4**b + 1) if 1 <= e < 2**31}  # where the width steps
    widths_at = sorted(set(WIDTH_KS) | edges)
    ks = ", ".join(str(k) for k in widths_at)
    main.write_text(f'#include "{SOURCE}"\n#include <cstdio>\n'
                    "int main() { printf(\"%llu\\n\", (unsigned long long)P);\n"
                    "  for (int j = 0; j < NMOD; ++j) printf(\"%d %d %llu\\n\", modulus(j), crt_inverse(j),"
                    " (unsigned long long)crt_weight(j));\n"
                    f"  const int ks[] = {{{ks}}};\n"
                    "  for (int k : ks) printf(\"%d %d\\n\", k, operand_bits(k)); }\n")
    exe = tmp_path / "constants"
    proc = subprocess.run([nvcc, "-gencode", "arch=compute_90a,code=sm_90a", f"-DNMOD={count}",
                           f"-I{ROOT / 'kernels'}", str(main), "-o", str(exe)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split("\n")
    mods = model.moduli(count)
    assert int(lines[0]) == p < 2**64
    for j, m in enumerate(mods):
        mj, u, w = (int(x) for x in lines[1 + j].split())
        assert mj == m and (p // m) * u % m == 1 and w == (p // m) * u
        assert all(w % other == 0 for other in mods if other != m) and w % m == 1
    widths = dict(tuple(int(x) for x in line.split()) for line in lines[1 + count:] if line)
    assert widths == {k: bits_for(k, count) for k in widths_at}


@pytest.mark.parametrize("count", [6, 7, 8])
@pytest.mark.parametrize("k", [1, 16, 1000, 24410, 131071])
def test_the_width_keeps_outputs_below_half_p_with_room_and_is_the_widest_that_does(count, k):
    p, bits = math.prod(model.moduli(count)), bits_for(k, count)
    room = p // 2 - p // 2**21
    assert k * 4**bits <= room
    assert bits == 30 or k * 4 ** (bits + 1) > room
    assert bits <= model.beta_bits(model.moduli(count), k)  # never wider than the model's


def _as_the_kernel_does(products: list[np.ndarray], mods: list[int]) -> np.ndarray:
    """ozaki_reconstruct's arithmetic: r_j = product mod m_j as a byte; S mod 2^64 from the weights, x in
    double, n = rint(x), v = S - n P in wrapping 64-bit integers."""
    p = math.prod(mods)
    s = np.zeros(products[0].shape, np.uint64)
    x = np.zeros(products[0].shape, np.float64)
    for c, m in zip(products, mods):
        r = np.mod(c, m).astype(np.uint64)
        big = p // m
        u = pow(big, -1, m)
        s += r * np.uint64(big * u)  # wraps modulo 2^64, as uint64_t does
        x = r.astype(np.float64) * (float(u) / float(m)) + x  # (the kernel's fma rounds once less)
    return (s - np.rint(x).astype(np.uint64) * np.uint64(p)).view(np.int64)


@pytest.mark.parametrize("count", [7, 8])
def test_the_kernel_s_reconstruction_is_the_integer_product_worst_cases_included(count):
    mods = model.moduli(count)
    rng = np.random.default_rng(3)
    for k in (5, 300, 24410):
        bits = bits_for(k, count)
        top = 2**bits
        a = rng.integers(-top, top + 1, (6, k), dtype=np.int64)
        b = rng.integers(-top, top + 1, (k, 5), dtype=np.int64)
        a[0], b[:, 0] = top, top            # the largest product: K 4^bits
        a[1], b[:, 1] = -top, top           # and the most negative
        a[2], b[:, 2] = top, 0
        exact = np.array([[sum(int(x) * int(y) for x, y in zip(a[i], b[:, j])) for j in range(5)] for i in range(6)],
                         dtype=object)
        products = [model.residue(a, m).astype(np.int64) @ model.residue(b, m).astype(np.int64) for m in mods]
        got = _as_the_kernel_does(products, mods)
        assert np.array_equal(got.astype(object), exact)
        assert got[0, 0] == k * top * top and got[1, 1] == -k * top * top
