"""tools/tf32x3_model.py: its TF32 rounding is cvt.rna's (the kernels' `to_tf32`, and `tf32_rest` for the
rest of a split, which is the same integer arithmetic without the infinity test), and the arithmetic it
models shows what kernels/NOTES.md reads from it."""

import sys

import numpy as np

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))

import tf32x3_model as model  # noqa: E402


def _rna_reference(x: np.ndarray) -> np.ndarray:
    """Round to 11 significant bits, ties away from zero, by exact float64 arithmetic."""
    x64 = x.astype(np.float64)
    out = np.zeros_like(x64)
    nz = x64 != 0
    e = np.floor(np.log2(np.abs(x64[nz])))
    e = np.maximum(e, -126)  # subnormals: the last place stays at 2^-149 (2^-126 * 2^-23)
    q = np.exp2(e - 10)
    m = np.abs(x64[nz]) / q
    out[nz] = np.sign(x64[nz]) * np.floor(m + 0.5) * q
    return out.astype(np.float32)


def test_tf32_rounds_to_nearest_ties_away_from_zero():
    rng = np.random.default_rng(7)
    x = np.concatenate([
        (rng.uniform(1, 2, 20000) * rng.choice([-1, 1], 20000) * np.exp2(rng.integers(-149, 128, 20000))).astype(np.float32),
        np.array([1 + 2.0**-11, -(1 + 2.0**-11), 1 + 3 * 2.0**-11, 2.0**-130, -2.0**-140, 0.0, -0.0,
                  np.finfo(np.float32).max / 2], dtype=np.float32),
    ])
    got = model.tf32(x)
    assert np.array_equal(got.view(np.uint32) & 0x1FFF, np.zeros(x.size, np.uint32)), "low 13 bits must be zero"
    assert np.array_equal(got, _rna_reference(x))
    assert model.tf32(np.float32([1 + 2.0**-11]))[0] == np.float32(1 + 2.0**-10)  # a tie goes away from zero
    assert model.tf32(np.float32([-(1 + 2.0**-11)]))[0] == np.float32(-(1 + 2.0**-10))


def _rest(r: np.ndarray) -> np.ndarray:
    """kernels/common.cuh's tf32_rest: (bits + 0x1000) & 0xFFFFE000, no infinity test."""
    return ((r.view(np.uint32).astype(np.uint64) + 0x1000) & 0xFFFFE000).astype(np.uint32).view(np.float32)


def test_the_rest_of_a_split_needs_no_infinity_test():
    # For finite x whose TF32 rounding is finite, r = x - tf32(x) is at most 2^-11 |x| (2^-137 for a
    # subnormal x): adding half a TF32 place never reaches the exponent's top, so the two-instruction
    # rounding equals cvt.rna's on every such r.
    rng = np.random.default_rng(8)
    x = (rng.uniform(1, 2, 50000) * rng.choice([-1, 1], 50000) * np.exp2(rng.integers(-149, 128, 50000))).astype(np.float32)
    x = np.concatenate([x, np.float32([2.0**128 * (1 - 2.0**-12) * (1 - 2.0**-12)])])  # the largest x of finite big
    assert np.isfinite(model.tf32(x[-1:]))[0]
    x = x[np.isfinite(model.tf32(x))]
    r = x - model.tf32(x)
    rest = _rest(r)
    assert np.array_equal(rest, _rna_reference(r))
    r64, x64 = np.abs(r.astype(np.float64)), np.abs(x.astype(np.float64))
    normal = x64 >= 2.0**-126
    assert np.all(r64[normal] <= 2.0**-11 * x64[normal])
    assert np.all(r64[~normal] <= 2.0**-137)  # a subnormal x: half of TF32's last place there


def test_the_bias_given_back_lowers_the_error_where_signs_do_not_cancel():
    rng = np.random.default_rng(9)
    a, b = model.draw(rng, (64, 320), "positive"), model.draw(rng, (320, 48), "positive")
    ref = a.astype(np.float64) @ b.astype(np.float64)

    def err(c):
        return np.linalg.norm(c - ref) / np.linalg.norm(ref)

    truncating = err(model.stage18(a, b))
    given_back = err(model.stage18(a, b, bias=1))
    exact = err(model.stage18(a, b, wgmma=lambda x: x, add=lambda x: x))
    assert exact < given_back < truncating
    assert given_back < 0.8 * truncating


def test_where_big_rounds_to_infinity_the_rest_stays_infinite():
    # Within 2^-12 of FP32's largest value, big = tf32(x) is infinite (as cvt.rna rounds it), so r is
    # infinite: tf32_rest keeps it so, and the products carry the infinity through big as before.
    x = np.float32([np.finfo(np.float32).max, -np.finfo(np.float32).max])
    big = model.tf32(x)
    assert np.array_equal(big, np.float32([np.inf, -np.inf]))
    with np.errstate(invalid="ignore", over="ignore"):
        r = x - big
    assert np.array_equal(_rest(r), r)
    assert np.array_equal(_rest(np.float32([np.inf, -np.inf])), np.float32([np.inf, -np.inf]))


# The bias carried only where TF32 does not hold an element; stage 17's accumulation.
def _case(dist):
    rng = np.random.default_rng(3)
    a, b = model.draw(rng, (24, 320), dist), model.draw(rng, (320, 16), dist)
    return a, b, a.astype(np.float64) @ b.astype(np.float64)


def test_the_bias_only_where_tf32_does_not_hold_a_keeps_integers_exact():
    a, b, ref = _case("integers")
    assert np.array_equal(model.stage18(a, b), ref)                     # no bias: exact
    assert not np.array_equal(model.stage18(a, b, bias=1), ref)         # the bias everywhere: not
    assert np.array_equal(model.stage18(a, b, bias=1, bias_where="inexact"), ref)


def test_on_random_inputs_the_bias_where_needed_is_the_bias_everywhere():
    """A few random FP32 values are TF32 values (the low 13 bits zero): the two differ only in their rows."""
    a, b, _ = _case("uniform")
    held = (model.tf32(a) == a).any(axis=1)  # rows of A with an element TF32 holds
    full, where = model.stage18(a, b, bias=1), model.stage18(a, b, bias=1, bias_where="inexact")
    assert np.array_equal(full[~held], where[~held]) and (~held).sum() >= 8


def test_stage17_accumulation_model_rounds_parts_into_the_sum():
    """Stage 17's one truncating accumulator loses a fraction of a place at every wgmma, always toward zero;
    parts of a few k-steps added with rounding keep that from growing with K (bfloat16 values: exact in
    TF32, so the accumulation is all the error)."""
    rng = np.random.default_rng(5)
    a, b = model.draw(rng, (16, 2048), "short"), model.draw(rng, (2048, 8), "short")
    ref = a.astype(np.float64) @ b.astype(np.float64)

    def err(c):
        return np.linalg.norm(c - ref) / np.linalg.norm(ref)

    exact = model.stage17(a, b, wgmma=lambda x: x)
    today, parts = model.stage17(a, b), model.stage17(a, b, rn=4)
    assert err(exact) < err(parts) < err(today) / 5
    ints = model.draw(rng, (16, 2048), "integers"), model.draw(rng, (2048, 8), "integers")
    assert np.array_equal(model.stage17(*ints), ints[0].astype(np.float64) @ ints[1].astype(np.float64))
