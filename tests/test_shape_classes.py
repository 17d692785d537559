"""The classes of shapes users bring, and seeded draws from them for fitting a rule on one set of shapes
and scoring it on another."""

import pytest
from conftest import ROOT

from sgemm_lab.config import load as cfgmod
from sgemm_lab.config.records import Shape
from sgemm_lab.config.shape_classes import CLASSES, classes_of, draw, fit_and_score


@pytest.mark.parametrize("mnk, want", [
    ((128, 96, 49152), ("long_k",)),
    ((8192, 12, 6144), ("skinny",)),
    ((12, 6144, 10240), ("skinny",)),            # the narrow side on M: y^T = x^T B
    ((6144, 4096, 192), ("short_k",)),
    ((997, 3331, 1501), ("odd",)),
    ((16384, 192, 2048), ("tall_skinny",)),
    ((4096, 4096, 4096), ("square",)),
    ((37, 3, 70001), ("long_k", "skinny", "odd")),
    ((1000, 1000, 1000), ()),
])
def test_each_suite_class_is_a_rule_on_the_shape(mnk, want):
    assert classes_of(Shape(m=mnk[0], n=mnk[1], k=mnk[2])) == want


def test_a_seed_draws_the_same_shapes_of_each_class_and_only_of_it():
    shapes = draw(7, 5)
    assert shapes == draw(7, 5) and shapes != draw(8, 5)
    assert [c for c, _ in shapes] == [c for c in CLASSES for _ in range(5)]
    for cls, s in shapes:
        assert cls in classes_of(s), (cls, s)
        assert max(s.m * s.k, s.k * s.n, s.m * s.n) <= 2**31 - 1
    assert len({s for _, s in shapes}) == len(shapes)
    # a class's shapes do not depend on the other classes drawn
    assert draw(7, 5, ("odd",)) == [(c, s) for c, s in shapes if c == "odd"]


def test_skinny_shapes_come_narrow_on_either_side():
    skinny = [s for _, s in draw(3, 40, ("skinny",))]
    assert any(s.m <= 16 for s in skinny) and any(s.n <= 16 for s in skinny)


def test_the_scored_shapes_are_none_of_the_fitted_nor_the_suite():
    suite = cfgmod.load(ROOT / "config" / "config.yaml").suite
    assert suite
    fit, score = fit_and_score(11, 4, exclude=suite)
    assert len(fit) == len(score) == 4 * len(CLASSES)
    assert not {s for _, s in fit} & {s for _, s in score}
    assert not ({s for _, s in fit} | {s for _, s in score}) & set(suite)
    assert fit_and_score(11, 4, exclude=suite) == (fit, score)


def test_bad_requests_are_one_line_errors():
    with pytest.raises(ValueError, match="unknown shape class wide"):
        draw(1, 1, ("wide",))
    with pytest.raises(ValueError, match="per_class must be >= 0"):
        draw(1, -1)
    with pytest.raises(ValueError, match="seed must be >= 0"):
        draw(-1, 1)
    squares = [Shape(m=x, n=x, k=x) for x in range(1024, 8193)]
    with pytest.raises(ValueError, match="could not draw 1 distinct square shapes"):
        draw(1, 1, ("square",), exclude=squares)


def test_an_excluded_shape_is_drawn_again_as_another():
    (cls, first), *_ = draw(5, 3, ("short_k",))
    again = draw(5, 3, ("short_k",), exclude=[first])
    assert first not in {s for _, s in again} and again[0][1] == draw(5, 3, ("short_k",))[1][1]
