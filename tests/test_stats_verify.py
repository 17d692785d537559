import dataclasses
import math

import numpy as np
import pytest
from conftest import ROOT

from sgemm_lab.config.records import Shape
from sgemm_lab.results import stats, verify


def test_summarize_known_values():
    s = stats.summarize([4.0, 1.0, 3.0, 2.0, 100.0])
    assert (s.reps, s.median_ms, s.min_ms, s.max_ms) == (5, 3.0, 1.0, 100.0)
    assert (s.q1_ms, s.q3_ms, s.iqr_ms) == (2.0, 4.0, 2.0)


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [-1.0]])
def test_summarize_rejects_bad_input(bad):
    with pytest.raises(ValueError):
        stats.summarize(bad)


def test_tflops_and_reps():
    assert stats.tflops(2 * 4096**3, 2.748779069) == pytest.approx(50.0, rel=1e-6)
    assert stats.reps_for(2.0, target_ms=400, min_reps=10, max_reps=500) == 200
    assert stats.reps_for(300.0, target_ms=400, min_reps=10, max_reps=500) == 10
    assert stats.reps_for(0.001, target_ms=400, min_reps=10, max_reps=500) == 500


def test_problem_inputs_are_fresh_and_never_zero():
    a = verify.make_problem(Shape(m=64, n=48, k=32), alpha=1.5, beta=-0.5, seed=1)
    b = verify.make_problem(Shape(m=64, n=48, k=32), alpha=1.5, beta=-0.5, seed=2)
    assert a.a.dtype == np.float32 and a.a.shape == (64, 32) and a.b.shape == (32, 48) and a.c.shape == (64, 48)
    assert np.count_nonzero(a.a) == a.a.size and (a.a < 0).any() and (a.a > 0).any()
    assert not np.array_equal(a.a, b.a)


def _problem(k=512, seed=0):
    return verify.make_problem(Shape(m=96, n=80, k=k), alpha=1.25, beta=-0.75, seed=seed)


def test_fp32_gemm_passes_and_reads_c():
    p = _problem()
    with_beta, zero = verify.references(p)
    out = (np.float32(p.alpha) * (p.a @ p.b) + np.float32(p.beta) * p.c).astype(np.float32)
    v = verify.compare(out, with_beta, verify.tolerance(p.shape.k, 10))
    assert v.passed and v.rel_err < 1e-6 and v.reason == ""
    # forgetting beta * C is caught
    assert not verify.compare((np.float32(p.alpha) * (p.a @ p.b)).astype(np.float32), with_beta, v.tolerance).passed
    # the classic bug: scaling beta * C by alpha
    bug = (np.float32(p.alpha) * (p.a @ p.b + np.float32(p.beta) * p.c)).astype(np.float32)
    assert not verify.compare(bug, with_beta, v.tolerance).passed
    assert np.allclose(zero, p.alpha * (p.a.astype(np.float64) @ p.b.astype(np.float64)))


def _to_tf32(x: np.ndarray) -> np.ndarray:
    """Round float32 to TF32's 10-bit mantissa (round to nearest)."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x1000) & 0xFFFFE000).astype(np.uint32)
    return bits.view(np.float32)


@pytest.mark.parametrize("k", [256, 1024, 4096])
def test_tf32_precision_fails_the_fp32_tolerance(k):
    p = verify.make_problem(Shape(m=64, n=64, k=k), alpha=1.0, beta=0.0, seed=k)
    _, ref = verify.references(p)
    out = (_to_tf32(p.a).astype(np.float64) @ _to_tf32(p.b).astype(np.float64)).astype(np.float32)
    v = verify.compare(out, ref, verify.tolerance(k, 10))
    assert not v.passed and v.rel_err > 1e-4


def test_nan_and_unwritten_outputs_fail():
    p = _problem(k=64)
    ref, _ = verify.references(p)
    out = ref.astype(np.float32)
    out[3, 7] = np.nan
    v = verify.compare(out, ref, verify.tolerance(64, 10))
    assert not v.passed and v.nonfinite == 1 and "1 NaN/Inf" in v.reason
    allnan = np.full_like(out, np.nan)
    v = verify.compare(allnan, ref, 1.0)
    assert not v.passed and math.isnan(v.rel_err)
    out[3, 7] = np.inf
    assert not verify.compare(out, ref, 1.0).passed


def test_tolerance_grows_with_sqrt_k():
    assert verify.tolerance(4096, 10) == pytest.approx(10 * 2**-23 * 64)
    assert verify.tolerance(4 * 4096, 10) == pytest.approx(2 * verify.tolerance(4096, 10))


def test_compare_rejects_shape_mismatch():
    with pytest.raises(ValueError):
        verify.compare(np.zeros((2, 2), np.float32), np.zeros((2, 3)), 1.0)


def test_check_modes_catch_an_ignored_alpha_and_a_read_of_c_when_beta_is_zero():
    from sgemm_lab.measure.runners import _check_rows

    p = verify.make_problem(Shape(m=9, n=7, k=5), alpha=1.25, beta=-0.75, seed=4)
    a, b, c = (x.astype(np.float64) for x in (p.a, p.b, p.c))

    def good(alpha, beta, poison):
        c0 = np.full_like(c, np.nan) if poison else c
        return (alpha * (a @ b) + (beta * c0 if beta != 0 else 0.0)).astype(np.float32)

    def ignores_alpha(alpha, beta, poison):
        return good(p.alpha, beta, poison)

    def reads_c_always(alpha, beta, poison):
        c0 = np.full_like(c, np.nan) if poison else c
        return (alpha * (a @ b) + beta * c0).astype(np.float32)  # 0 * NaN = NaN

    from sgemm_lab.config.records import CheckSettings

    check = CheckSettings(shapes=(), alpha=1.25, beta=-0.75, tolerance_factor=10)
    ok = _check_rows(p, verify.references(p), good, "fp32", check)
    assert [r["mode"] for r in ok] == ["beta", "beta0_poisoned", "alpha0"] and all(r["passed"] for r in ok)
    assert [r["alpha"] for r in ok] == [1.25, 1.25, 0.0]
    bad_alpha = _check_rows(p, verify.references(p), ignores_alpha, "fp32", check)
    assert [r["passed"] for r in bad_alpha] == [True, True, False]
    bad_c = _check_rows(p, verify.references(p), reads_c_always, "fp32", check)
    assert [r["passed"] for r in bad_c] == [True, False, True] and "NaN" in bad_c[1]["reason"]


def test_cancelling_terms_do_not_turn_rounding_into_a_failure():
    # One output where alpha*a*b and beta*c nearly cancel: the float32 result is as exact as float32
    # allows, yet its error relative to the tiny result is above the tolerance for k = 1.
    a, b, c = np.float32(0.8), np.float32(0.7), np.float32(0.9333)
    alpha, beta = 1.25, -0.75
    ref = np.array([[alpha * float(a) * float(b) + beta * float(c)]])
    ab, bc = np.array([[alpha * float(a) * float(b)]]), np.array([[beta * float(c)]])
    out = np.array([[np.float32(alpha) * (a * b) + np.float32(beta) * c]], dtype=np.float32)
    tol = verify.tolerance(1, 10)
    assert not verify.compare(out, ref, tol).passed  # measured against |ref| alone
    v = verify.compare(out, ref, tol, terms=(ab, bc))
    assert v.passed and v.rel_err < 2 * verify.EPS_FP32
    # a real error stays a failure: beta * C forgotten
    assert not verify.compare(ab.astype(np.float32), ref, tol, terms=(ab, bc)).passed


def test_tolerance_follows_the_precision_class():
    from sgemm_lab.config.records import CheckSettings

    check = CheckSettings(shapes=(), alpha=1.25, beta=-0.75, tolerance_factor=10, tf32_tolerance_factor=2)
    k = 4096
    assert verify.tolerance_for("fp32", k, check) == verify.tolerance_for("3xtf32", k, check) == verify.tolerance(k, 10)
    tf32 = verify.tolerance_for("tf32", k, check)
    assert tf32 == pytest.approx(2 * 2**-11 + verify.tolerance(k, 10))
    with pytest.raises(ValueError, match="unknown precision"):
        verify.tolerance_for("bf16", k, check)
    # TF32 rounding passes the TF32 bound and fails the FP32 one; a bf16-class result fails both
    p = verify.make_problem(Shape(m=64, n=64, k=k), alpha=1.0, beta=0.0, seed=7)
    _, ref = verify.references(p)
    out = (_to_tf32(p.a).astype(np.float64) @ _to_tf32(p.b).astype(np.float64)).astype(np.float32)
    assert verify.compare(out, ref, tf32).passed and not verify.compare(out, ref, verify.tolerance(k, 10)).passed

    def to_bf16(x):
        bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
        return (((bits + 0x8000) & 0xFFFF0000).astype(np.uint32)).view(np.float32)

    bf = (to_bf16(p.a).astype(np.float64) @ to_bf16(p.b).astype(np.float64)).astype(np.float32)
    assert not verify.compare(bf, ref, tf32).passed


def test_stage_precision_is_configured_and_defaults_to_fp32():
    from conftest import kernel_entry

    from sgemm_lab.config import load as cfgmod
    from sgemm_lab.errors import ConfigError

    cfg = cfgmod.from_dict({"kernels": [kernel_entry(), kernel_entry(id="98_tf32", precision="tf32")]})
    assert cfg.kernel("99_test").precision == "fp32" and cfg.kernel("98_tf32").precision == "tf32"
    assert cfg.check.tf32_tolerance_factor == 2
    with pytest.raises(ConfigError, match="precision"):
        cfgmod.from_dict({"kernels": [kernel_entry(precision="fp16")]})


def _clock_reader(value):
    reads = []

    def read():
        reads.append(value)
        return value
    return read, reads


def test_warm_up_of_the_first_point_takes_the_full_time():
    from sgemm_lab.gpu.timing import warm_enough

    read, reads = _clock_reader(1980)
    assert not warm_enough(99.0, warmup_ms=100, rewarm_ms=20, hot_clock=None, clock=read)
    assert warm_enough(100.0, warmup_ms=100, rewarm_ms=20, hot_clock=None, clock=read)
    assert reads == []  # no previous point: the clock is not even read


def test_later_warm_up_ends_early_only_when_the_clock_is_back():
    from sgemm_lab.gpu.timing import warm_enough

    hot, _ = _clock_reader(1980)
    idle, _ = _clock_reader(1200)
    unknown, _ = _clock_reader(None)
    assert not warm_enough(19.0, warmup_ms=100, rewarm_ms=20, hot_clock=1980, clock=hot)  # not yet rewarm_ms
    assert warm_enough(20.0, warmup_ms=100, rewarm_ms=20, hot_clock=1980, clock=hot)
    assert warm_enough(20.0, warmup_ms=100, rewarm_ms=20, hot_clock=1995, clock=hot)  # within 3%
    assert not warm_enough(50.0, warmup_ms=100, rewarm_ms=20, hot_clock=1980, clock=idle)  # idled down
    assert warm_enough(100.0, warmup_ms=100, rewarm_ms=20, hot_clock=1980, clock=idle)  # full time: always
    assert not warm_enough(50.0, warmup_ms=100, rewarm_ms=20, hot_clock=1980, clock=unknown)
    assert not warm_enough(50.0, warmup_ms=100, rewarm_ms=None, hot_clock=1980, clock=hot)


def _sequential_fp32(p, alpha, beta, poison):
    """A strict-FP32 GEMM summing over K in one running float32 sum, as the early ladder stages do."""
    products = p.a.T[:, :, None] * p.b[:, None, :]  # (K, M, N) in float32
    acc = np.cumsum(products, axis=0, dtype=np.float32)[-1]  # cumsum adds in order, unlike sum
    c0 = np.full_like(p.c, np.nan) if poison else p.c
    out = np.float32(alpha) * acc
    return out + np.float32(beta) * c0 if beta != 0 else out


def _tf32_gemm(p, alpha, beta, poison):
    ab = _to_tf32(p.a).astype(np.float64) @ _to_tf32(p.b).astype(np.float64)
    c0 = np.full_like(p.c, np.nan) if poison else p.c.astype(np.float64)
    return (alpha * ab + (beta * c0 if beta != 0 else 0.0)).astype(np.float32)


def _numpy_sgemm(p, alpha, beta, poison):
    c0 = np.full_like(p.c, np.nan) if poison else p.c
    out = np.float32(alpha) * (p.a @ p.b)
    return out + np.float32(beta) * c0 if beta != 0 else out


@pytest.mark.parametrize("kind", ["uniform", "normal", "loguniform"])
def test_the_fp32_limit_rejects_tf32_where_the_absolute_bound_alone_does_not(kind):
    """At long K the absolute bound (10 eps sqrt(K)) is above TF32's error; measured against a strict
    FP32 GEMM on the same inputs, TF32 fails and an FP32 sum in another order passes."""
    from sgemm_lab.config.records import CheckSettings, Distribution
    from sgemm_lab.measure.runners import _check_rows

    k = 2**17
    check = CheckSettings(shapes=(), alpha=1.25, beta=-0.75, tolerance_factor=10)
    p = verify.make_problem(Shape(m=4, n=4, k=k), alpha=1.25, beta=-0.75, seed=3,
                            dist=Distribution(name=kind, kind=kind))
    refs = verify.references(p)
    baseline = lambda alpha, beta, poison: _numpy_sgemm(p, alpha, beta, poison)  # noqa: E731
    tf32 = _check_rows(p, refs, lambda *a: _tf32_gemm(p, *a), "fp32", check, baseline)
    assert tf32[0]["rel_err"] < verify.tolerance(k, 10), "the absolute bound alone would pass TF32 here"
    assert not tf32[0]["passed"] and "cuBLAS FP32" in tf32[0]["reason"]
    assert tf32[0]["fp32_limit"] == tf32[0]["tolerance"] < verify.tolerance(k, 10)
    assert tf32[0]["cublas_rel_err"] > 0 and tf32[0]["fp32_basis"] == "cublas"
    seq = _check_rows(p, refs, lambda *a: _sequential_fp32(p, *a), "fp32", check, baseline)
    assert all(r["passed"] for r in seq), [r["reason"] for r in seq]
    # held to its own class, the same TF32 result passes; its row still records the FP32 limit it fails
    as_tf32 = _check_rows(p, refs, lambda *a: _tf32_gemm(p, *a), "tf32", check, baseline)
    assert as_tf32[0]["passed"] and as_tf32[0]["rel_err"] > as_tf32[0]["fp32_limit"]
    # without a baseline (no GPU) the absolute bound alone applies, and says so
    alone = _check_rows(p, refs, lambda *a: _tf32_gemm(p, *a), "fp32", check)
    assert alone[0]["passed"] and alone[0]["fp32_basis"] == "absolute" and np.isnan(alone[0]["cublas_rel_err"])


def test_an_exact_baseline_does_not_make_every_rounding_a_failure():
    from sgemm_lab.config.records import CheckSettings

    check = CheckSettings(shapes=(), alpha=1.25, beta=-0.75, tolerance_factor=10)
    assert verify.fp32_limit(1024, check, 0.0) == pytest.approx(check.fp32_factor * verify.BASELINE_ERR_FLOOR)
    assert verify.fp32_limit(1024, check, float("nan")) == verify.tolerance(1024, 10)
    assert verify.fp32_limit(1024, check, 1.0) == verify.tolerance(1024, 10)


@pytest.mark.parametrize("kind", ["normal", "loguniform", "positive", "extreme"])
def test_input_distributions_are_what_they_say(kind):
    from sgemm_lab.config.records import Distribution

    d = Distribution(name=kind, kind=kind)
    p = verify.make_problem(Shape(m=64, n=48, k=256), alpha=1.25, beta=-0.75, seed=5, dist=d)
    assert p.dist == kind and all(x.dtype == np.float32 for x in (p.a, p.b, p.c))
    for x in (p.a, p.b, p.c):
        assert np.all(np.isfinite(x)) and np.count_nonzero(x == 0) == 0
    if kind == "positive":
        assert min(p.a.min(), p.b.min(), p.c.min()) > 0 and max(p.a.max(), p.b.max()) <= 1
    if kind == "loguniform":
        mags = np.log2(np.abs(p.a))
        assert mags.min() >= -20 - 1e-6 and mags.max() <= 20 + 1e-6 and mags.max() - mags.min() > 30
        assert (p.a < 0).any() and (p.a > 0).any()
    if kind == "extreme":
        assert np.abs(p.a).max() > 2.0**110 and np.abs(p.b).max() < 2.0**-110
        ab, _ = verify.references(p)
        assert np.all(np.isfinite(ab)) and np.abs(ab).max() < 1e4  # products of order 1
    same = verify.make_problem(Shape(m=64, n=48, k=256), alpha=1.25, beta=-0.75, seed=5, dist=d)
    assert np.array_equal(same.a, p.a)  # a seed replays its inputs


def test_uniform_inputs_are_unchanged_for_a_seed():
    """Seeds recorded by earlier runs still replay their inputs: uniform draws as it always did."""
    rng = np.random.default_rng(11)
    x = rng.random((5, 3), dtype=np.float32) * 2 - 1
    x[x == 0] = 0.5
    p = verify.make_problem(Shape(m=5, n=4, k=3), alpha=1.0, beta=1.0, seed=11)
    assert np.array_equal(p.a, x)


@pytest.mark.parametrize("kind", ["normal", "loguniform"])
def test_block_drawn_inputs_do_not_depend_on_the_thread_count(kind, monkeypatch):
    """Normal and log-uniform inputs are drawn in blocks by a thread pool: the same seed gives the same
    values with one thread or several, and the blocks are not copies of each other."""
    from sgemm_lab.config.records import Distribution

    d = Distribution(name=kind, kind=kind)
    shape = Shape(m=3, n=5, k=verify.BLOCK // 2 + 7)  # A: one block and part of a second; B: two and a part

    def drawn(threads):
        monkeypatch.setattr(verify, "_threads", lambda: threads)
        return verify.make_problem(shape, alpha=1.0, beta=1.0, seed=9, dist=d)

    one, many = drawn(1), drawn(4)
    for x, y in zip((one.a, one.b, one.c), (many.a, many.b, many.c)):
        assert x.dtype == np.float32 and np.array_equal(x, y)
    flat = one.a.reshape(-1)
    assert not np.array_equal(flat[:1000], flat[verify.BLOCK:verify.BLOCK + 1000])
    assert not np.array_equal(one.a, verify.make_problem(shape, alpha=1.0, beta=1.0, seed=10, dist=d).a)


# Values of the block draw for seed 9 at shape 3 x 5 x 131079 (A: 393,237 values, a block and a half at
# BLOCK = 2^18; B: 655,395), drawn with NumPy 2.4.6 and 2.5.2: A at PINNED_A, B at PINNED_B, then C[0, :2]. The
# indices lie at and inside blocks, so that a change of BLOCK moves some of them to other child seeds.
PINNED_A, PINNED_B = [0, 1, 200000, 262144, 262145, 393236], [0, 200000, 262144, 393236]
PINNED_BLOCK_DRAW = {
    "normal": [0.8444910049438477, 0.7629272937774658, -1.33576238155365, -0.12073320895433426,
               -0.2737850844860077, -0.1520889699459076, -0.20313933491706848, -1.120488166809082,
               0.042954422533512115, 0.6055210828781128, -1.3619325160980225, -1.3182241916656494],
    "loguniform": [0.13449938595294952, -0.05362313985824585, -0.00021649397967848927, 6.718818622175604e-05,
                   0.005581663455814123, -0.41854745149612427, -501.12103271484375, 0.05654798448085785,
                   -6.106483459472656, 0.10285525023937225, 7526.94873046875, 5.236526966094971],
}


@pytest.mark.parametrize("kind", sorted(PINNED_BLOCK_DRAW))
def test_block_drawn_inputs_are_pinned_for_a_seed(kind):
    """The seeds this draw records replay their inputs in later versions: a change of BLOCK, of how the
    child seeds are derived or of the order of A, B and C would change these values. They are pinned to
    2 ulp, not to the bit: NumPy builds may differ in the last bit of a rare float32 normal value (1 of
    the 393,237 values of A here between NumPy 2.4.6 and 2.5.2), which a checksum would call another
    draw."""
    from sgemm_lab.config.records import Distribution

    assert np.random.default_rng(9).integers(0, 2**63, size=2).tolist() == [8026632172992807824,
                                                                             2645421825986888208]
    p = verify.make_problem(Shape(m=3, n=5, k=131079), alpha=1.0, beta=1.0, seed=9,
                            dist=Distribution(name=kind, kind=kind))
    got = np.concatenate([p.a.ravel()[PINNED_A], p.b.ravel()[PINNED_B], p.c.ravel()[:2]])
    np.testing.assert_allclose(got, np.array(PINNED_BLOCK_DRAW[kind], np.float32), rtol=2.0**-22, atol=0)


def _compare_by_definition(out, ref, tol, terms=()):
    """compare() written as its docstring defines it, one array at a time."""
    out64 = out.astype(np.float64)
    finite = np.isfinite(out64)
    diff = np.where(finite, out64 - ref, 0.0)
    scale = max([np.linalg.norm(ref)] + [np.linalg.norm(t) for t in terms])
    rel = np.linalg.norm(diff) / scale if scale > 0 else np.linalg.norm(diff)
    max_abs = np.max(np.abs(diff)) if diff.size else 0.0
    nonfinite = int(out.size - np.count_nonzero(finite))
    if nonfinite == out.size:  # nothing finite to measure (an empty output included)
        rel = max_abs = float("nan")
    return float(rel), float(max_abs), nonfinite


@pytest.mark.parametrize("case", ["plain", "nan_inf", "all_nan", "empty", "float64", "cancelling_terms", "zero_ref",
                                  "nan_in_ref", "negative_zero", "float16"])
def test_compare_matches_its_definition_to_the_bit(case):
    """compare() computes its difference in one pass and takes the scale once per mode: the errors it
    reports are the same, to the last bit, as the definition's, NaN and Inf outputs included."""
    rng = np.random.default_rng(5)
    ref = rng.standard_normal((37, 53))
    out = (ref + 1e-6 * rng.standard_normal(ref.shape)).astype(np.float32)
    terms = ()
    if case == "nan_inf":
        out[3, 4], out[7, 1], out[0, 0] = np.nan, np.inf, -np.inf
    elif case == "all_nan":
        out[:] = np.nan
    elif case == "empty":
        ref, out = np.zeros((0, 4)), np.zeros((0, 4), np.float32)
    elif case == "float64":
        out = out.astype(np.float64)
    elif case == "cancelling_terms":
        terms = (1e3 * rng.standard_normal(ref.shape), 1e3 * rng.standard_normal(ref.shape))
    elif case == "zero_ref":
        ref = np.zeros_like(ref)
    elif case == "nan_in_ref":
        ref[2, 2], ref[4, 4] = np.nan, np.inf
    elif case == "negative_zero":
        ref, out = np.zeros((3, 3)), np.full((3, 3), -0.0, np.float32)
    elif case == "float16":
        out = out.astype(np.float16)
    v = verify.compare(out, ref, 1e-3, terms=terms)
    w = verify.compare(out, ref, 1e-3, scale=verify.scale_of(ref, terms))
    rel, max_abs, nonfinite = _compare_by_definition(out, ref, 1e-3, terms)
    for got in (v, w):
        assert got.nonfinite == nonfinite
        for a, b in ((got.rel_err, rel), (got.max_abs_err, max_abs)):
            assert np.float64(a).tobytes() == np.float64(b).tobytes() or (math.isnan(a) and math.isnan(b))
        assert got.passed == (nonfinite == 0 and rel < 1e-3)


def test_check_rows_measure_each_mode_against_its_terms():
    """_check_rows takes the scale once per mode for cuBLAS and the stage, from the reference and, in the
    beta mode, both terms: where alpha*A@B and beta*C nearly cancel (a tiny ||ref||), an output off by
    rounding-sized amounts must still pass, measured against the terms as compare() defines it."""
    from sgemm_lab.config import load as cfgmod
    from sgemm_lab.measure import runners

    cfg = cfgmod.load(ROOT / "config" / "config.yaml")
    p = verify.make_problem(Shape(m=4, n=3, k=64), alpha=1.25, beta=-0.75, seed=3)
    ab = p.alpha * (p.a.astype(np.float64) @ p.b.astype(np.float64))
    p = dataclasses.replace(p, c=(ab / 0.75).astype(np.float32))  # beta * C cancels alpha * A@B to rounding
    refs = verify.references(p)
    noise = 1e-7 * np.abs(ab).max()
    outs = {"beta": refs[0] + noise, "beta0_poisoned": refs[1] + noise, "alpha0": p.beta * p.c.astype(np.float64) + noise}

    def run(alpha, beta, poison):
        mode = "alpha0" if alpha == 0 else "beta0_poisoned" if beta == 0 else "beta"
        return outs[mode].astype(np.float32)

    rows = {r["mode"]: r for r in runners._check_rows(p, refs, run, "fp32", cfg.check, run)}
    terms = (refs[1], p.beta * p.c.astype(np.float64))
    want = verify.compare(run(p.alpha, p.beta, False), refs[0], math.inf, terms=terms).rel_err
    assert rows["beta"]["rel_err"] == want == rows["beta"]["cublas_rel_err"]
    assert want < 1e-5 < verify.compare(run(p.alpha, p.beta, False), refs[0], math.inf).rel_err  # ||ref|| alone
    assert rows["beta"]["passed"]


def test_the_l2_flush_reads_by_default_and_refuses_unknown_modes():
    """The lab's cold L2 is one with nothing dirty in it: the flush reads its buffer through L2 unless the
    old overwrite is asked for by name (no GPU needed: the mode is checked before the driver is)."""
    import inspect

    from sgemm_lab.gpu.timing import L2Flusher

    assert inspect.signature(L2Flusher).parameters["mode"].default == "read"
    with pytest.raises(ValueError, match="read or write"):
        L2Flusher(50 << 20, mode="memset")


@pytest.mark.parametrize("kind", ["integers", "short", "sparse"])
def test_inputs_where_fp32_can_be_exact_are_what_they_say(kind):
    """Small integers (every product and sum exact in FP32 here), short significands (bfloat16's 8 bits:
    exact in TF32) and mostly zeros; a seed replays them."""
    from sgemm_lab.config.records import Distribution

    d = Distribution(name=kind, kind=kind)
    shape = Shape(m=64, n=48, k=4096)
    p = verify.make_problem(shape, alpha=1.25, beta=-0.75, seed=5, dist=d)
    assert p.dist == kind and all(x.dtype == np.float32 and np.all(np.isfinite(x)) for x in (p.a, p.b, p.c))
    if kind == "integers":
        for x in (p.a, p.b, p.c):
            assert np.array_equal(x, np.round(x)) and np.abs(x).max() == 8 and np.count_nonzero(x == 0) == 0
            assert (x < 0).any() and (x > 0).any()
        ref, ab = verify.references(p)
        exact = np.float32(p.alpha) * (p.a @ p.b)  # in FP32, any order: every product and partial sum exact
        assert np.array_equal(exact.astype(np.float64), ab)
        assert np.array_equal((exact + np.float32(p.beta) * p.c).astype(np.float64), ref)
    if kind == "short":
        for x in (p.a, p.b, p.c):
            m, _ = np.frexp(x.astype(np.float64))
            assert np.array_equal(m * 256, np.round(m * 256)) and np.count_nonzero(x == 0) == 0
        assert len(np.unique(p.a)) > 200  # not a handful of values
    if kind == "sparse":
        share = np.count_nonzero(p.a == 0) / p.a.size
        assert 0.88 < share < 0.92 and np.abs(p.a).max() < 1
    same = verify.make_problem(shape, alpha=1.25, beta=-0.75, seed=5, dist=d)
    assert np.array_equal(same.a, p.a) and np.array_equal(same.c, p.c)


def test_short_significands_round_to_nearest_even():
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-9, -(1 + 2**-7 + 2**-9), 1.0 - 2**-10], dtype=np.float32)
    # 8-bit significands keep 7 bits after the point: ties go to the even neighbour, a carry to the exponent
    want = np.array([1.0, 1 + 2**-6, 1.0, -(1 + 2**-7), 1.0], dtype=np.float32)
    assert np.array_equal(verify._short_significands(x, 8), want)
    assert np.array_equal(verify._short_significands(x, 24), x)
