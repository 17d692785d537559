import json

import pandas as pd
import pytest
from conftest import kernel_entry

from sgemm_lab.config import expr, geometry
from sgemm_lab.config import load as cfgmod
from sgemm_lab.dispatch import autotune
from sgemm_lab.errors import ConfigError, LabError


@pytest.mark.parametrize("text, env, value", [
    ("BM % TM == 0", {"BM": 128, "TM": 8}, True),
    ("(BM * BK) % (4 * THREADS) == 0", {"BM": 128, "BK": 8, "THREADS": 256}, True),
    ("4 * BK * (BM + BN)", {"BK": 8, "BM": 128, "BN": 64}, 6144),
    ("THREADS == 32 * (BM // WM) * (BN // WN)", {"THREADS": 128, "BM": 128, "WM": 64, "BN": 128, "WN": 64}, True),
    ("max(BM, BN) <= 256 and not BM < 16", {"BM": 128, "BN": 64}, True),
    ("1 < BM <= 64", {"BM": 128}, False),
    ("-BM + 2**3", {"BM": 3}, 5),
])
def test_expressions(text, env, value):
    assert expr.evaluate(text, env) == value


@pytest.mark.parametrize("text, needle", [
    ("__import__('os')", "not allowed"), ("BM.real", "not allowed"), ("BM / 2", "not allowed"),
    ("1.5 * BM", "not allowed"), ("BM +", "not valid"), ("open('x')", "not allowed"),
])
def test_expressions_reject_anything_but_integer_arithmetic(text, needle):
    with pytest.raises(ConfigError, match=needle):
        expr.evaluate(text, {"BM": 64})


def test_expression_errors():
    with pytest.raises(ConfigError, match="unknown parameter WN"):
        expr.evaluate("BM % WN", {"BM": 64})
    with pytest.raises(ConfigError, match="division by zero"):
        expr.evaluate("BM % TM", {"BM": 64, "TM": 0})
    assert expr.names("BM * max(BN, TM) + THREADS") == {"BM", "BN", "TM", "THREADS"}


def _spec(**over):
    return cfgmod.from_dict({"kernels": [kernel_entry(**over)]}).kernels[0]


def test_constraints_and_shared_memory_filter_sweep_points():
    s = _spec(constraints=["BM * BK == THREADS", "BK * BN == THREADS"], shared_bytes="4 * BK * (BM + BN)",
              sweep={"BM": [32, 64, 128], "TM": [4, 8]})
    points = autotune.sweep_points(s)
    assert points[0] == dict(s.params)                      # defaults first
    assert len(points) == 6                                  # defaults are one of the grid points
    verdicts = {(p["BM"], p["TM"]): geometry.violations(s.with_params(**p)) for p in points}
    assert verdicts[(64, 8)] == []
    assert verdicts[(128, 8)] == ["constraint BK * BN == THREADS fails"]  # 1024 threads, B tile 512
    assert any("threads per block" in v for v in verdicts[(128, 4)])   # 2048 threads
    big = _spec(shared_bytes="4 * BK * (BM + BN)", params={"BM": 64, "BN": 64, "BK": 8, "TM": 8}).with_params(BK=128)
    assert "65536 B shared memory per block > 49152 B" in geometry.violations(big)[0]
    assert geometry.violations(big, max_shared=232448) == []


def test_config_rejects_bad_expressions_and_sweeps():
    with pytest.raises(ConfigError, match=r"kernel 99_test: constraints\[0\] 'BM % WN == 0' uses unknown parameter\(s\) WN"):
        _spec(constraints=["BM % WN == 0"])
    with pytest.raises(ConfigError, match=r"kernel 99_test: shared_bytes 'BM \*\* 2 \*\* 9': BM \*\* 2 \*\* 9 is beyond int64"):
        _spec(shared_bytes="BM ** 2 ** 9")
    with pytest.raises(ConfigError, match="sweep parameter WM has no default"):
        _spec(sweep={"WM": [32]})
    with pytest.raises(ConfigError, match="constraint BM == 2 \\* BN fails"):
        _spec(constraints=["BM == 2 * BN"])
    with pytest.raises(ConfigError, match="sweep_axes names TN"):
        _spec(sweep={"BM": [64], "BN": [64]}, sweep_axes=["BM", "TN"])


def test_autotune_entry_validation():
    tuned = {"id": "10_autotuned", "title": "auto", "tune_from": ["99_test"]}
    with pytest.raises(ConfigError, match="not a configured stage with a tile sweep"):
        cfgmod.from_dict({"kernels": [kernel_entry(), tuned]})
    lab = cfgmod.from_dict({"kernels": [kernel_entry(sweep={"TM": [4, 8]}), tuned]})
    assert lab.kernel("10_autotuned").autotuned and lab.swept == (lab.kernel("99_test"),)
    with pytest.raises(ConfigError, match="kernels\\[1\\]"):
        cfgmod.from_dict({"kernels": [kernel_entry(sweep={"TM": [4, 8]}), dict(tuned, source="04_1d_blocktiling.cu")]})


def _sweep_rows(rows):
    out = []
    for params, status, tflops, verified, local in rows:
        out.append(dict(kernel="x", m=4096, n=4096, k=4096, params=json.dumps(params), status=status, tflops=tflops,
                        verified=verified, local_bytes=local, within_local_budget=local == 0, registers=100))
    return pd.DataFrame(out)


def test_autotune_picks_fastest_verified_point_without_spills():
    a = _sweep_rows([({"BM": 64}, "ok", 30.0, True, 0), ({"BM": 128}, "ok", 45.0, False, 0),
                     ({"BM": 256}, "ok", 50.0, True, 64), ({"BM": 32}, "filtered", float("nan"), False, 0)])
    b = _sweep_rows([({"BM": 64, "BK": 16}, "ok", 41.0, True, 0), ({"BM": 128, "BK": 16}, "failed", 60.0, False, 0)])
    stage, params, row = autotune.pick({"08_a": a, "09_b": b})
    assert (stage, params, row.tflops) == ("09_b", {"BM": 64, "BK": 16}, 41.0)
    with pytest.raises(LabError, match="no verified configuration"):
        autotune.pick({"08_a": a[a.status == "filtered"]})


def test_resolve_autotuned_spec():
    lab = cfgmod.from_dict({"kernels": [kernel_entry(sweep={"TM": [4, 8]}),
                                        {"id": "10_autotuned", "title": "auto", "tune_from": ["99_test"]}]})
    spec = autotune.resolve(lab, lab.kernel("10_autotuned"), {"tuned_from": "99_test", "params": {"TM": 4}})
    assert spec.id == "10_autotuned" and spec.source == "04_1d_blocktiling.cu" and spec.params["TM"] == 4
    assert geometry.threads_per_block(spec) == 1024
