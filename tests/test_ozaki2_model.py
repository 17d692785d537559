"""tools/ozaki2_model.py: the moduli and the operand width it chooses keep every output below P/2, the
Chinese remainder reconstruction returns the integer product exactly, integer inputs come back exact,
more moduli give less error, and the time model's bytes and ratios follow from its inputs."""

import json
import math
import sys

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))

import ozaki2_model as model  # noqa: E402


def test_moduli_are_pairwise_coprime_and_fit_int8_residues():
    mods = model.moduli(12)
    assert mods[0] == 256 and mods == sorted(mods, reverse=True) and len(set(mods)) == 12
    assert all(math.gcd(a, b) == 1 for i, a in enumerate(mods) for b in mods[i + 1:])
    x = np.arange(-5000, 5000, dtype=np.int64)
    for m in mods:
        r = model.residue(x, m)
        assert r.dtype == np.int8 and r.min() >= -(m // 2) and r.max() < (m + 1) // 2
        assert np.all(np.mod(r.astype(np.int64) - x, m) == 0)


@pytest.mark.parametrize("count,k", [(3, 1), (6, 320), (8, 4096), (9, 65536)])
def test_the_operand_width_keeps_every_output_below_half_p_and_is_the_widest_that_does(count, k):
    mods = model.moduli(count)
    p, beta = math.prod(mods), model.beta_bits(mods, k)
    assert 2 * k * 4 ** beta < p  # K * 2^(2 beta) < P/2
    assert 2 * k * 4 ** (beta + 1) >= p  # and one more bit would not be


def test_the_reconstruction_is_the_integer_product_exactly():
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((9, 70)).astype(np.float32), rng.standard_normal((70, 11)).astype(np.float32)
    mods = model.moduli(6)
    ai, bi, e, f = model.scale(a, b, model.beta_bits(mods, 70))
    assert np.abs(ai).max() <= 2 ** model.beta_bits(mods, 70) and np.abs(ai).max() > 2 ** (model.beta_bits(mods, 70) - 1)
    exact = [[sum(int(x) * int(y) for x, y in zip(ai[i], bi[:, j])) for j in range(11)] for i in range(9)]
    assert model.reconstruct(ai, bi, mods).tolist() == exact


def test_integer_inputs_come_back_exact_and_more_moduli_give_less_error():
    rng = np.random.default_rng(3)
    ints_a = rng.integers(-8, 9, (33, 100)).astype(np.float32)
    ints_b = rng.integers(-8, 9, (100, 17)).astype(np.float32)
    assert np.array_equal(model.product(ints_a, ints_b, 7), ints_a.astype(np.float64) @ ints_b.astype(np.float64))
    a = rng.uniform(-1, 1, (40, 120)).astype(np.float32)
    b = rng.uniform(-1, 1, (120, 24)).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    errs = [float(np.linalg.norm(model.product(a, b, c) - ref) / np.linalg.norm(ref)) for c in (4, 6, 8)]
    fp32 = float(np.linalg.norm((a @ b).astype(np.float64) - ref) / np.linalg.norm(ref))
    assert errs[0] > errs[1] > errs[2] > 0
    assert errs[2] < fp32  # 8 moduli: beyond FP32 at this K
    with pytest.raises(ValueError, match="K = 131072"):
        model.product(np.ones((1, 131072), np.float32), np.ones((131072, 1), np.float32), 8)


def test_the_time_model_counts_bytes_and_divides_the_runs_own_times(tmp_path):
    m, n, k, s = 1024, 512, 256, 8
    parts = {name: (ops, nbytes) for name, ops, nbytes in model.parts(m, n, k, s, products="int32")}
    assert parts["INT8 GEMMs"][0] == 2.0 * m * n * k * s
    assert parts["INT8 GEMMs"][1] == s * (m * k + k * n) + 4 * s * m * n  # residues read, INT32 products written
    assert parts["reconstruction"][1] == 8 * m * n + 4 * s * m * n
    byte = dict((name, nbytes) for name, _, nbytes in model.parts(m, n, k, s, products="byte"))
    assert byte["reconstruction"] == 8 * m * n + s * m * n  # a residue of the product is one byte
    fused = dict((name, nbytes) for name, _, nbytes in model.parts(m, n, k, s, products="fused"))
    assert fused["reconstruction"] == 8 * m * n and fused["INT8 GEMMs"] == s * (m * k + k * n)
    total, times = model.predicted_ms(m, n, k, s, int8_tops=1000.0, dram_gbps=2000.0, products="fused")
    assert total == pytest.approx(sum(t for _, t in times))
    gemm = dict(times)["INT8 GEMMs"]
    assert gemm == pytest.approx(max(2.0 * m * n * k * s / 1e15, s * (m * k + k * n) / 2e12) * 1e3)
    rows = [dict(kernel=kern, m=m, n=n, k=k, status="ok", median_ms=ms, tflops=tf)
            for kern, ms, tf in (("cublas", 0.5, 1.0), ("20_dispatch_3xtf32", 0.25, 2.0), ("17_wgmma_tf32", 0.1, 100.0))]
    pd.DataFrame(rows).to_csv(tmp_path / "bench.csv", index=False)
    (tmp_path / "ceilings.json").write_text(json.dumps({"dram_gbps": 2000.0, "tf32_tflops": 400.0}))
    table = model.time_table(tmp_path, [s], 1000.0, [(m, n, k)], "17_wgmma_tf32")
    assert [r["gemms"] for r in table] == ["roof (100%)", "as 17_wgmma_tf32 (25%)"] * 3
    assert [r["products"] for r in table] == ["int32", "int32", "byte", "byte", "fused", "fused"]
    for r in table:
        assert r["x cublas"] == pytest.approx(0.5 / r["total_ms"])
        assert r["x 20_dispatch_3xtf32"] == pytest.approx(0.25 / r["total_ms"])


def test_the_count_rule_keeps_fp32_width_and_takes_the_fewest():
    for k in (1, 320, 4096, 16384, 65536, 131071):
        c = model.count_for(k)
        assert model.beta_bits(model.moduli(c), k) >= 24 > model.beta_bits(model.moduli(c - 1), k)
    assert [model.count_for(k) for k in (320, 4096, 24410, 24411, 65536)] == [8, 8, 8, 9, 9]
