"""The check's shared inputs: the same arrays as drawing them afresh, kept once per run and point, read back
by the jobs after the first, and never trusted when damaged."""

import numpy as np
import pytest

from sgemm_lab.config.records import Distribution, Shape
from sgemm_lab.measure import shared_inputs
from sgemm_lab.results import verify
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


def test_baseline_errors_are_made_once_per_point_and_library(tmp_path):
    """cuBLAS's error at each mode, kept beside the point's inputs by the first check and read by the rest;
    another library version or GPU (tag) makes its own; a damaged record is made again."""
    from sgemm_lab.measure.runners import baseline_errors as from_run

    p, refs = shared_inputs.problem(tmp_path, SHAPE, **ARGS)
    a, b, c = (np.asarray(x, dtype=np.float64) for x in (p.a, p.b, p.c))

    def cublas_like(alpha, beta, poison):  # an FP32 GEMM in another order than the reference's
        c0 = np.full_like(c, np.nan) if poison else c
        return (np.float32(alpha) * (p.a @ p.b) + (np.float32(beta) * c0 if beta != 0 else 0)).astype(np.float32)

    made = []

    def make():
        made.append(1)
        return from_run(p, refs, cublas_like)

    first = shared_inputs.baseline_errors(tmp_path, SHAPE, **ARGS, tag="cublas1-GPU-a", make=make)
    assert set(first) == set(shared_inputs.MODES) and 0 < first["beta"] < 1e-5 and first["alpha0"] < 1e-6
    again = shared_inputs.baseline_errors(tmp_path, SHAPE, **ARGS, tag="cublas1-GPU-a", make=make)
    assert again == first and len(made) == 1
    shared_inputs.baseline_errors(tmp_path, SHAPE, **ARGS, tag="cublas2-GPU-a", make=make)
    assert len(made) == 2
    kept = next(tmp_path.glob("*/baseline-cublas1-GPU-a.json"))
    for damage in ("", "{", '{"beta": 1.0}', '{"beta": "x", "beta0_poisoned": 0.0, "alpha0": 0.0}', "[]",
                   '{"beta": -1.0, "beta0_poisoned": 0.0, "alpha0": 0.0}'):
        kept.write_text(damage)
        assert shared_inputs.baseline_errors(tmp_path, SHAPE, **ARGS, tag="cublas1-GPU-a", make=make) == first
    assert len(made) == 8
    # no tag (not pinned to a known GPU) or no root: made every time, nothing kept
    shared_inputs.baseline_errors(tmp_path, SHAPE, **ARGS, tag=None, make=make)
    shared_inputs.baseline_errors(None, SHAPE, **ARGS, tag="cublas1-GPU-a", make=make)
    assert len(made) == 10 and len(list(tmp_path.glob("*/baseline-*.json"))) == 2


def test_rows_from_kept_baseline_errors_are_the_rows_from_its_runs(tmp_path):
    """A check against kept errors says what a check that ran cuBLAS itself says, row for row."""
    from sgemm_lab.config.records import CheckSettings
    from sgemm_lab.measure.runners import _check_rows, baseline_errors

    p, refs = shared_inputs.problem(tmp_path, SHAPE, **ARGS)

    def fp32(alpha, beta, poison):
        c0 = np.full_like(p.c, np.nan) if poison else p.c
        return (np.float32(alpha) * (p.a @ p.b) + (np.float32(beta) * c0 if beta != 0 else 0)).astype(np.float32)

    def stage(alpha, beta, poison):  # a TF32-like stage: inputs rounded to 10 mantissa bits
        q = lambda x: (np.asarray(x).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)  # noqa: E731
        c0 = np.full_like(p.c, np.nan) if poison else p.c
        return (np.float32(alpha) * (q(p.a) @ q(p.b)) + (np.float32(beta) * c0 if beta != 0 else 0)).astype(np.float32)

    check = CheckSettings(shapes=(), alpha=1.25, beta=-0.75, tolerance_factor=10)
    ran = _check_rows(p, refs, stage, "fp32", check, fp32)
    kept = _check_rows(p, refs, stage, "fp32", check, baseline_errors(p, refs, fp32))
    assert ran == kept and not ran[0]["passed"] and ran[0]["fp32_basis"] == "cublas"


def test_a_check_keeps_cublas_errors_where_the_next_stage_reads_them(tmp_path, monkeypatch):
    """The wiring of a GPU check (``CublasBaseline.errors``, cuBLAS simulated by NumPy): the first stage's
    check runs the baseline and keeps its errors in the point's folder, named by the cuBLAS version and the
    GPU; the next stage's check on another runner reads them and runs nothing; unpinned, nothing is kept."""
    from types import SimpleNamespace

    from sgemm_lab.measure import runners

    p, refs = shared_inputs.problem(tmp_path, SHAPE, **ARGS)
    runs = []

    def for_problem(self, problem, bufs):
        def run(alpha, beta, poison):
            runs.append((alpha, beta, poison))
            c0 = np.full_like(problem.c, np.nan) if poison else problem.c
            return (np.float32(alpha) * (problem.a @ problem.b) + (np.float32(beta) * c0 if beta else 0)).astype(
                np.float32)
        return run

    def baseline():
        b = object.__new__(runners.CublasBaseline)
        b.launch, b.stream = SimpleNamespace(version=120905), None
        return b

    monkeypatch.setattr(runners.CublasBaseline, "for_problem", for_problem)
    monkeypatch.setattr(runners, "device_columns", lambda: dict(device_index=0, device_uuid="GPU-1234"))
    first = baseline().errors(p, refs, tmp_path, NORMAL, bufs="the runner's own")
    assert len(runs) == 3 and (tmp_path / shared_inputs.key(SHAPE, **ARGS) / "baseline-cublas120905-GPU-1234.json").is_file()
    assert baseline().errors(p, refs, tmp_path, NORMAL, bufs="the runner's own") == first and len(runs) == 3
    monkeypatch.setattr(runners, "device_columns", lambda: dict(device_index=None, device_uuid=None))
    assert baseline().errors(p, refs, tmp_path, NORMAL, bufs="the runner's own") == first and len(runs) == 6


def test_inputs_kept_by_other_code_are_made_again(tmp_path, monkeypatch):
    """The folder's key names the code that draws and compares (``_CODE``): after a change to it, a point
    is drawn again rather than read from what the older code kept."""
    shared_inputs.problem(tmp_path, SHAPE, **ARGS)
    monkeypatch.setattr(shared_inputs, "_code_hash", lambda: "another")
    shared_inputs.problem(tmp_path, SHAPE, **ARGS)
    assert len([d for d in tmp_path.iterdir() if not d.name.startswith(".")]) == 2
