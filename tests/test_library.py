"""sgemm_lab.library without a GPU: what it accepts as a matrix, and which stage a committed run's tables
give a shape (the GPU half, the product itself against cuBLAS, is tests/gpu_library)."""

import pytest
from conftest import ROOT

from sgemm_lab.config.geometry import unsupported_reason
from sgemm_lab.config.load import load
from sgemm_lab.config.records import Shape
from sgemm_lab.dispatch import race as race_rule
from sgemm_lab.errors import LabError
from sgemm_lab.library import (RACES, can_run, check_apart, choose, matmul, offered, operand, race_stages, ranking,
                               resolved, run_tables)

RUN = ROOT / "reports" / "h100"


class Fake:
    """An object with a CUDA array interface and no memory behind it (nothing here dereferences it)."""

    def __init__(self, shape, typestr="<f4", strides=None, ptr=4096):
        self.__cuda_array_interface__ = dict(shape=shape, typestr=typestr, strides=strides, data=(ptr, False),
                                             version=3)


@pytest.fixture(scope="module")
def cfg():
    return load(ROOT / "config" / "config.yaml")


def test_a_row_major_float32_matrix_is_read_through_its_array_interface():
    op = operand(Fake((3, 5), strides=(20, 4), ptr=1 << 20), "a")
    assert (op.ptr, op.rows, op.cols) == (1 << 20, 3, 5)
    assert operand(Fake((3, 5)), "a").cols == 5  # no strides: C order by the interface's definition


@pytest.mark.parametrize("x, words", [
    (Fake((3, 5), typestr="<f8"), "float32"),
    (Fake((3, 5, 2)), "3 dimensions"),
    (Fake((3, 5), strides=(4, 12)), "not row-major"),
    (Fake((3, 5), strides=(40, 4)), "not row-major"),
    ([[1.0, 2.0]], "not a GPU array"),
])
def test_what_is_not_a_row_major_float32_gpu_matrix_is_refused_in_one_line(x, words):
    with pytest.raises(LabError) as err:
        operand(x, "b")
    assert words in str(err.value) and "\n" not in str(err.value)


def test_mismatched_shapes_and_a_missing_c_to_scale_are_refused_before_any_gpu_work():
    with pytest.raises(LabError, match="a's columns must be b's rows"):
        matmul(Fake((4, 6)), Fake((5, 7)))
    with pytest.raises(LabError, match="no c was given"):
        matmul(Fake((4, 6)), Fake((6, 7)), beta=0.5)
    with pytest.raises(LabError, match="c is 4x6, the product is 4x7"):
        matmul(Fake((4, 6)), Fake((6, 7)), Fake((4, 6)))


@pytest.mark.parametrize("race", sorted(RACES))
@pytest.mark.parametrize("shape", [Shape(m=4096, n=4096, k=4096), Shape(m=10, n=14316, k=1515), Shape(m=14316, n=10, k=1515),
                                   Shape(m=1000, n=2000, k=3000), Shape(m=3903, n=1251, k=110), Shape(m=64, n=96, k=49152)])
def test_the_stage_chosen_is_of_the_race_buildable_and_able_to_run_the_shape(cfg, race, shape):
    stage = choose(cfg, RUN, shape, race)
    spec = cfg.kernel(stage)
    assert spec.precision in RACES[race][1] and offered(spec)
    assert unsupported_reason(resolved(cfg, spec), shape) is None
    order = ranking(cfg, RUN, shape, race)
    able = [s for s in order if unsupported_reason(resolved(cfg, cfg.kernel(s)), shape) is None]
    rule = cfg.race_rule(race)
    picked = race_rule.pick(cfg, rule, shape, able) if rule is not None else None
    if picked is not None:  # the race's rule's pick among the ranking's stages that can run it
        assert stage == picked and stage in rule.members
        times = {m: race_rule.predicted_ns(cfg, rule, m, shape) for m in rule.members if m in able}
        assert times[stage] == min(times.values())
    else:  # the first stage of the run's ranking that can run the shape: none ranked above it could
        assert stage == able[0]


def test_the_fp32_accurate_race_s_rule_picks_per_shape_within_a_class(cfg):
    """A short K, a large square and a skinny output: the rule gives each its own stage (strict split-K,
    3xTF32, the narrow stream), where a class's ranking gives one per class; a stage the run did not verify
    (stage 22 is not in the H100's run) is never picked."""
    rule = cfg.race_rule("fp32_accurate")
    verified = set(race_stages(cfg, "fp32_accurate", run_tables(RUN)[1]))
    picks = {s: choose(cfg, RUN, s, "fp32_accurate") for s in
             (Shape(m=8028, n=4318, k=17), Shape(m=6946, n=6946, k=6946), Shape(m=5070, n=4, k=1068))}
    assert set(picks.values()) <= verified
    assert len(set(picks.values())) == 3 and set(picks.values()) <= set(rule.members)


def test_a_stage_that_cannot_run_the_shape_is_passed_over_for_the_next(cfg, monkeypatch):
    """A ranking whose first stage cannot run the shape (the narrow stage on a square): with the race's rule,
    its pick among the rest; without one, the next stage of the ranking."""
    import sgemm_lab.library as library

    shape = Shape(m=4096, n=4096, k=4096)
    order = ["19_narrow", "11_general", "12_dispatch"]
    assert not can_run(cfg, "19_narrow", shape) and can_run(cfg, "11_general", shape)
    monkeypatch.setattr(library, "ranking", lambda *args: list(order))
    assert choose(cfg, RUN, shape, "fp32") == "12_dispatch"  # the rule's only member that runs it
    monkeypatch.setattr(type(cfg), "race_rule", lambda self, race: None)
    assert choose(cfg, RUN, shape, "fp32") == "11_general"


def test_a_run_folder_without_tables_and_an_unknown_race_are_one_line_errors(cfg, tmp_path):
    with pytest.raises(LabError, match="no run's tables"):
        choose(cfg, tmp_path, Shape(m=64, n=64, k=64), "fp32")
    with pytest.raises(LabError, match="race 'fp16' is none of"):
        choose(cfg, RUN, Shape(m=64, n=64, k=64), "fp16")


def test_an_address_off_a_16_byte_boundary_is_refused_in_one_line():
    with pytest.raises(LabError, match="not on a 16-byte boundary") as err:
        operand(Fake((3, 5), ptr=4096 + 4), "a")
    assert "\n" not in str(err.value)


def test_a_c_that_shares_memory_with_a_or_b_is_refused():
    a, b = operand(Fake((4, 6), ptr=1 << 20), "a"), operand(Fake((6, 8), ptr=2 << 20), "b")
    check_apart(a, b, operand(Fake((4, 8), ptr=3 << 20), "c"))  # apart: accepted
    check_apart(a, b, operand(Fake((4, 8), ptr=(1 << 20) + 4 * 4 * 6), "c"))  # right after a's last float
    for ptr, name in [((1 << 20) + 16, "a"), ((2 << 20) - 16, "b")]:
        with pytest.raises(LabError, match=f"c overlaps {name}"):
            check_apart(a, b, operand(Fake((4, 8), ptr=ptr), "c"))


def test_the_array_interface_s_stream_is_kept_and_a_stream_object_gives_its_handle():
    from sgemm_lab.gpu.interop import stream_handle

    fake = Fake((3, 5))
    fake.__cuda_array_interface__["stream"] = 0x7F00
    assert operand(fake, "a").stream == 0x7F00 and operand(Fake((3, 5)), "a").stream is None

    class TorchLike:
        cuda_stream = 0x5000

    class CupyLike:
        ptr = 0x6000

    assert (stream_handle(TorchLike()), stream_handle(CupyLike()), stream_handle(7), stream_handle(None)) == \
        (0x5000, 0x6000, 7, None)
    with pytest.raises(LabError, match="pass a CUDA stream handle"):
        stream_handle("default")


def test_the_fp32_accurate_race_is_the_stages_that_earned_the_label_in_the_run_s_checks(cfg):
    ok, checks = run_tables(RUN)
    earned = race_stages(cfg, "fp32_accurate", checks)
    assert any(cfg.kernel(s).precision == "3xtf32" for s in earned)
    # a stage that failed one check in the run is not in the race, whatever its precision class
    failed = checks.copy()
    failed.loc[failed.index[failed["kernel"] == earned[0]][0], "status"] = "fail"
    assert earned[0] not in race_stages(cfg, "fp32_accurate", failed)
    assert race_stages(cfg, "fp32_accurate", None) == []  # a run without checks earned no stage the label
    assert set(race_stages(cfg, "fp32", checks)) == {k.id for k in cfg.kernels if k.precision == "fp32" and offered(k)}


def test_a_stage_built_for_another_gpu_s_architecture_is_passed_over(cfg):
    """On a GPU that is not Hopper, the sm_90a stages (wgmma, TMA) are not chosen: the next that builds is."""
    shape = Shape(m=4096, n=4096, k=4096)
    hopper = choose(cfg, RUN, shape, "fp32_accurate", arch="sm_90")
    assert can_run(cfg, hopper, shape, "sm_90") and not can_run(cfg, hopper, shape, "sm_80")
    other = choose(cfg, RUN, shape, "fp32_accurate", arch="sm_80")
    assert other != hopper and can_run(cfg, other, shape, "sm_80")
    order = ranking(cfg, RUN, shape, "fp32_accurate")
    able = [s for s in order if can_run(cfg, s, shape, "sm_80")]
    assert other == (race_rule.pick(cfg, cfg.race_rule("fp32_accurate"), shape, able) or able[0])
