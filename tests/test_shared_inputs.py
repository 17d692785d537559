"""The check's shared inputs: the same arrays as drawing them afresh, kept once per run and point, read back
by the jobs after the first, and never trusted when damaged."""

import numpy as np
import pytest

from sgemm_lab.config.records import Distribution, Shape
from sgemm_lab.measure import shared_inputs, verify
from sgemm_lab.pipeline.points import check_seed

SHAPE = Shape(m=37, n=19, k=301)
NORMAL = Distribution(name="normal", kind="normal")
ARGS = dict(alpha=1.25, beta=-0.75, seed=12345, dist=NORMAL)


def _same(p, refs, q, rq):
    for x, y in zip((p.a, p.b, p.c, *refs), (q.a, q.b, q.c, *rq)):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert np.array_equal(np.asarray(x), np.asarray(y))
    assert (p.shape, p.alpha, p.beta, p.seed, p.dist) == (q.shape, q.alpha, q.beta, q.seed, q.dist)


def test_kept_inputs_are_the_fresh_draw_and_are_read_back(tmp_path, monkeypatch):
    fresh = verify.make_problem(SHAPE, **ARGS)
    p, refs = shared_inputs.problem(tmp_path, SHAPE, **ARGS)
    _same(p, refs, fresh, verify.references(fresh))
    assert len(list(tmp_path.iterdir())) == 1 and not any(x.name.startswith(".") for x in tmp_path.iterdir())

    def no_draw(*a, **k):
        raise AssertionError("drawn again")

    monkeypatch.setattr(verify, "make_problem", no_draw)
    monkeypatch.setattr(verify, "references", no_draw)
    q, rq = shared_inputs.problem(tmp_path, SHAPE, **ARGS)
    _same(q, rq, fresh, refs)  # refs: the first call's, checked against a fresh draw above
    assert not q.a.flags.writeable  # mapped read-only: no check can change what the next one reads


@pytest.mark.parametrize("change", [dict(seed=12346), dict(alpha=1.0), dict(beta=0.5),
                                    dict(dist=Distribution(name="normal", kind="positive")),
                                    dict(dist=Distribution(name="loguniform", kind="loguniform", log2_range=(-20, 19)))])
def test_every_input_of_the_draw_is_in_the_key(change):
    assert shared_inputs.key(SHAPE, **ARGS) != shared_inputs.key(SHAPE, **{**ARGS, **change})
    assert shared_inputs.key(SHAPE, **ARGS) != shared_inputs.key(Shape(m=37, n=19, k=302), **ARGS)


def test_the_numpy_version_is_in_the_key(monkeypatch):
    before = shared_inputs.key(SHAPE, **ARGS)
    monkeypatch.setattr(np, "__version__", "0.0.0")
    assert shared_inputs.key(SHAPE, **ARGS) != before


def test_a_damaged_entry_is_drawn_again_not_trusted(tmp_path):
    shared_inputs.problem(tmp_path, SHAPE, **ARGS)
    (folder,) = tmp_path.iterdir()
    np.save(folder / "b.npy", np.zeros((3, 3), np.float32))  # wrong shape
    fresh = verify.make_problem(SHAPE, **ARGS)
    p, refs = shared_inputs.problem(tmp_path, SHAPE, **ARGS)
    _same(p, refs, fresh, verify.references(fresh))
    (folder / "ref.npy").write_bytes(b"not an array")
    p, refs = shared_inputs.problem(tmp_path, SHAPE, **ARGS)
    _same(p, refs, fresh, verify.references(fresh))


def test_without_a_folder_nothing_is_kept(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    p, refs = shared_inputs.problem(None, SHAPE, **ARGS)
    fresh = verify.make_problem(SHAPE, **ARGS)
    _same(p, refs, fresh, verify.references(fresh))
    assert list(tmp_path.iterdir()) == []


def test_every_implementation_gets_the_same_check_seed_per_point():
    a = check_seed(7, SHAPE, "normal")
    assert a == check_seed(7, SHAPE, "normal")
    assert len({a, check_seed(7, SHAPE, "uniform"), check_seed(8, SHAPE, "normal"),
                check_seed(7, Shape(m=37, n=19, k=302), "normal")}) == 4
