"""The GPU failure cases of one bench job: a kernel that hangs, faults, computes wrong or NaN results at
some shapes is measured at the others, each failure one row with a clear status; and a problem too large
for the GPU's memory is a skipped row. (See gpu_cases for how these run.)"""

import pandas as pd
import pytest
from gpu_cases import WATCHDOG_S, _gpu_query, broken  # noqa: F401  (broken: a fixture)

from sgemm_lab.config import load as cfgmod
from sgemm_lab.pipeline import points


@pytest.fixture(scope="module")
def bench_rows(broken):
    """One bench job over all shapes: each broken shape must be its own row, the others measured."""
    cfg, raw, tmp = broken
    out = tmp / "bench.csv"
    points.bench(cfg, "99_broken", binary=tmp / "b.bin", record=tmp / "b.json", out=out, gpu="exclusive")
    return pd.read_csv(out).set_index("m")


def test_good_shapes_are_measured_between_the_failures(bench_rows, record_property):
    record_property("case", "the other points of a job with failing points are measured and verified")
    assert (bench_rows.loc[[64, 128, 256], "status"] == "ok").all()
    assert bench_rows.loc[[64, 128, 256], "verified"].all()


def test_hanging_kernel_becomes_a_timeout_row(bench_rows, record_property):
    record_property("case", f"a hanging kernel: ended by the per-point watchdog ({WATCHDOG_S} s), `timeout` row")
    assert bench_rows.loc[96, "status"] == "timeout" and "watchdog" in bench_rows.loc[96, "reason"]
    assert not bench_rows.loc[96, "verified"]


def test_illegal_address_becomes_an_error_row(bench_rows, record_property):
    record_property("case", "a CUDA launch failure (illegal address): `error` row, fresh process for the next point")
    assert bench_rows.loc[160, "status"] == "error" and "illegal" in bench_rows.loc[160, "reason"].lower()
    assert not bench_rows.loc[160, "verified"]


def test_wrong_result_is_marked_failed(bench_rows, record_property):
    record_property("case", "a wrong result: check fails, timing marked not verified (`failed`)")
    assert bench_rows.loc[192, "status"] == "failed" and "relative error" in bench_rows.loc[192, "reason"]
    assert not bench_rows.loc[192, "verified"]


def test_nan_output_is_marked_failed(bench_rows, record_property):
    record_property("case", "a NaN in the output: `failed` (NaN/Inf)")
    assert bench_rows.loc[224, "status"] == "failed" and "NaN/Inf" in bench_rows.loc[224, "reason"]
    assert not bench_rows.loc[224, "verified"]


def test_problem_too_large_for_device_memory_is_skipped(broken, record_property):
    record_property("case", "a problem too large for device memory: `skipped` row with the sizes")
    cfg, raw, tmp = broken
    from sgemm_lab.config import footprint
    from sgemm_lab.config.records import Shape

    # the largest square the config accepts (no operand over 2^31 - 1 elements) needs about 100 GB for a
    # timed point: more than an 80 GB GPU holds, less than a 141 GB one. Free memory is asked in a child
    # process: CUDA started in this one would break the forked build workers of the tests after it.
    side = 46000
    free = int(_gpu_query("driver().mem_get_info()[0]"))
    if footprint.device_bench_bytes(Shape(m=side, n=side, k=side)) <= footprint.USABLE * free:
        pytest.skip(f"no shape the config accepts needs more than this GPU's {free / 2**30:.0f} GiB free")
    raw3 = dict(raw, bench=dict(raw["bench"], square=[], shapes=[[side, side, side]]))
    out = tmp / "bench3.csv"
    points.bench(cfgmod.from_dict(raw3), "99_broken", binary=tmp / "b.bin", record=tmp / "b.json", out=out,
                 gpu="exclusive")
    df = pd.read_csv(out)
    assert df.status.iloc[0] == "skipped" and "device memory" in df.reason.iloc[0]
