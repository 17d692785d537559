"""Stage 22 (kernels/22_ozaki2_int8.cu, the Ozaki scheme II) without a GPU: its kernels compile without
spills; the constants its compiler computes (moduli, P, the CRT weights, the operand width for each K) are
the model's; that width leaves the reconstruction its rounding room; and the reconstruction as the kernel
computes it (a wrapping 32-bit sum, the nearest integer of a double sum, the two words put together) is the
integer product exactly, worst cases included; and its residues are the model's for every value the scaling can give."""

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
ENTRIES = {"ozaki_maxima", "ozaki_residues", "ozaki_int8_gemm", "ozaki_reconstruct"}


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


@pytest.fixture(scope="module")
def reconstruction(tmp_path_factory):
    """``reconstruction(count, nvcc)``: a host build of the kernel file's reconstruction (crt_terms, then
    crt_parts for each of four columns), made once a module for each modulus count in a folder of its own: it
    reads lines of `count` 32-bit words (word j: byte i = column i's residue modulo m_j) and prints each
    column's v as its high and low words."""
    folder = tmp_path_factory.mktemp("crt")
    built: dict[int, str] = {}

    def build(count: int, nvcc: str) -> str:
        if count not in built:
            main = folder / f"crt{count}.cu"
            main.write_text(f'#include "{SOURCE}"\n#include <cstdio>\n'
                            "int main() { unsigned w[NMOD];\n"
                            "  while (true) {\n"
                            "    for (int j = 0; j < NMOD; ++j) if (scanf(\"%u\", &w[j]) != 1) return 0;\n"
                            "    unsigned s[4] = {0, 0, 0, 0}; double x[4] = {0, 0, 0, 0};\n"
                            "    crt_terms(w, s, x);\n"
                            "    for (int i = 0; i < 4; ++i) { const CrtParts v = crt_parts(s[i], x[i]);\n"
                            "      printf(\"%.0f %.0f\\n\", v.high, v.low); } } }\n")
            exe = folder / f"crt{count}"
            proc = subprocess.run([nvcc, "-gencode", "arch=compute_90a,code=sm_90a", f"-DNMOD={count}",
                                   f"-I{ROOT / 'kernels'}", str(main), "-o", str(exe)], capture_output=True, text=True)
            assert proc.returncode == 0, proc.stderr[-2000:]
            built[count] = str(exe)
        return built[count]

    return build


def _as_the_kernel_does(values: list[int], mods: list[int], exe: str) -> list[int]:
    """The kernel's reconstruction of integers from their residues: four to a line, one byte each in a word
    a modulus (so that every byte position is read); v = high 2^32 + low as the kernel's parts give it."""
    padded = list(values) + [0] * (-len(values) % 4)
    lines = []
    for q in range(0, len(padded), 4):
        words = [sum((v % m) << (8 * i) for i, v in enumerate(padded[q:q + 4])) for m in mods]
        lines.append(" ".join(str(w) for w in words))
    out = subprocess.run([exe], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True).stdout
    got = [int(float(h)) * 2**32 + int(float(lo)) for h, lo in (line.split() for line in out.splitlines())]
    return got[:len(values)]


@pytest.mark.parametrize("count", [7, 8])
def test_the_kernel_s_reconstruction_is_the_integer_product_worst_cases_included(count, nvcc, reconstruction):
    mods = model.moduli(count)
    exe = reconstruction(count, nvcc)
    rng = np.random.default_rng(3)
    for k in (5, 300, 24410):
        bits = bits_for(k, count)
        top = 2**bits
        a = rng.integers(-top, top + 1, (6, k), dtype=np.int64)
        b = rng.integers(-top, top + 1, (k, 5), dtype=np.int64)
        a[0], b[:, 0] = top, top            # the largest product: K 4^bits
        a[1], b[:, 1] = -top, top           # and the most negative
        a[2], b[:, 2] = top, 0
        exact = [sum(int(x) * int(y) for x, y in zip(a[i], b[:, j])) for i in range(6) for j in range(5)]
        got = _as_the_kernel_does(exact, mods, exe)  # from the product's residues, as the INT8 GEMMs leave them
        assert got == exact
        assert got[0] == k * top * top and got[6] == -k * top * top


@pytest.mark.parametrize("count", [7, 8])
def test_the_reconstruction_finds_the_value_at_the_width_s_edges_and_between(count, nvcc, reconstruction):
    """Every product the width allows (|v| <= P/2 - P/2^21) comes back from its residues, the values nearest
    the half of P (where the double sum's error meets the 2^-21 of room) and the largest ones (where (x - n) P
    is furthest from v) included."""
    mods = model.moduli(count)
    p = math.prod(mods)
    room = p // 2 - p // 2**21
    rng = np.random.default_rng(11)
    edges = [0, 1, -1, room, -room, room - 1, -room + 1, room // 2, -(room // 2)]
    values = edges + [int(x) for x in rng.integers(-room, room + 1, 20000, dtype=np.int64)]
    assert _as_the_kernel_does(values, mods, reconstruction(count, nvcc)) == values


def test_the_kernel_s_residue_bytes_are_the_model_s(nvcc, tmp_path):
    """residue_byte<m>(v) (an offset, a multiply-high and shift, a multiply-add) against the model's
    symmetric residue, for each modulus, over the whole range the scaling gives (|v| <= 2^30): its ends,
    values beside multiples of m and of its halves, and random ones."""
    mods = model.moduli(8)
    rng = np.random.default_rng(5)
    values = {0, 1, -1, 2**30, -(2**30), 2**30 - 1, -(2**30) + 1, 2**29, -(2**29)}
    for m in mods:
        for q in rng.integers(-(2**30) // m, 2**30 // m, 200):
            values |= {int(q) * m + d for d in (-m // 2 - 1, -m // 2, -1, 0, 1, m // 2, m // 2 + 1)}
    values = sorted(v for v in values | {int(x) for x in rng.integers(-(2**30), 2**30 + 1, 4000)} if abs(v) <= 2**30)
    calls = " ".join(f"printf(\"%u \", residue_byte<{m}>(v));" for m in mods)
    main = tmp_path / "residues.cu"
    main.write_text(f'#include "{SOURCE}"\n#include <cstdio>\n'
                    f"static const int vs[] = {{{', '.join(str(v) for v in values)}}};\n"
                    f"int main() {{ for (int v : vs) {{ {calls} printf(\"\\n\"); }} }}\n")
    exe = tmp_path / "residues"
    proc = subprocess.run([nvcc, "-gencode", "arch=compute_90a,code=sm_90a", f"-I{ROOT / 'kernels'}", str(main),
                           "-o", str(exe)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    got = np.array([[int(x) for x in line.split()] for line in lines], dtype=np.int64)
    want = np.stack([model.residue(np.array(values, dtype=np.int64), m).astype(np.int64) & 0xFF for m in mods], 1)
    assert got.shape == want.shape and np.array_equal(got, want)
