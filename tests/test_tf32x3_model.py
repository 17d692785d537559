"""tools/tf32x3_model.py, the CPU model of stage 18's arithmetic: on small integers (every product and sum
exact in FP32) the bias for the tensor core's truncation makes an exact result inexact; carried only where
TF32 does not hold an element, it leaves integers exact and random inputs as the full bias has them."""

import sys

import numpy as np
from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))

import tf32x3_model as model  # noqa: E402


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
