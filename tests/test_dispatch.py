"""The per-shape dispatch table: built from shape-sweep rows, looked up for measured and unseen shapes."""

import json

import pandas as pd
import pytest
from conftest import kernel_entry

from sgemm_lab import config as cfgmod
from sgemm_lab import dispatch
from sgemm_lab.config import Shape
from sgemm_lab.errors import LabError


def base_spec():
    return cfgmod.from_dict({"kernels": [kernel_entry()]}).kernels[0]  # params BM=BN=64, BK=8, TM=8


def rows(points):
    """Shape-sweep rows from (candidate, m, n, k, median_ms[, verified, local_ok])."""
    out = []
    for p in points:
        cand, m, n, k, ms, *rest = p
        verified, local_ok = (rest + [True, True])[:2]
        out.append(dict(candidate=cand, m=m, n=n, k=k, params=json.dumps({"BM": 32 * (cand + 1)}), status="ok",
                        verified=verified, within_local_budget=local_ok, median_ms=ms,
                        tflops=2 * m * n * k / ms / 1e9))
    return pd.DataFrame(out)


def test_candidates_are_full_parameter_sets_without_repeats():
    got = dispatch.candidate_params(base_spec(), [{}, {"BM": 32}, {"BM": 64}, {"BK": 16, "BM": 32}])
    assert got == [{"BM": 64, "BN": 64, "BK": 8, "TM": 8}, {"BM": 32, "BN": 64, "BK": 8, "TM": 8},
                   {"BM": 32, "BN": 64, "BK": 16, "TM": 8}]


def test_table_takes_the_fastest_eligible_candidate_per_shape():
    table = dispatch.pick_table(rows([
        (0, 1024, 1024, 1024, 0.10), (1, 1024, 1024, 1024, 0.08), (2, 1024, 1024, 1024, 0.05, False),
        (0, 4096, 4096, 4096, 2.70), (1, 4096, 4096, 4096, 2.90), (2, 4096, 4096, 4096, 2.00, True, False),
        (2, 512, 512, 16384, 0.30, False),  # nothing eligible: the shape is left out
    ]))
    assert [(e["m"], e["candidate"], e["runner_up"]) for e in table] == [(1024, 1, 0), (4096, 0, 1)]
    assert table[0]["margin"] == pytest.approx(0.10 / 0.08)
    assert table[0]["params"] == {"BM": 64}
    assert dispatch.used_candidates(table) == [0, 1]


def test_unseen_shapes_take_the_nearest_measured_shape_in_log_space():
    table = dispatch.pick_table(rows([(1, 1024, 1024, 1024, 0.08), (0, 4096, 4096, 4096, 2.7),
                                      (2, 512, 512, 16384, 0.2)]))
    assert dispatch.choose(table, Shape(m=4096, n=4096, k=4096))["candidate"] == 0
    assert dispatch.choose(table, Shape(m=1000, n=1000, k=1000))["candidate"] == 1
    assert dispatch.choose(table, Shape(m=384, n=640, k=20000))["m"] == 512  # small M, N and long K
    assert dispatch.choose(table, Shape(m=8192, n=8192, k=8192))["m"] == 4096
    with pytest.raises(LabError, match="empty"):
        dispatch.choose([], Shape(m=1, n=1, k=1))


def test_bundle_round_trip():
    cubins = {3: b"\x7fELF three", 0: b"\x7fELF zero"}
    assert dispatch.unpack(dispatch.pack(cubins)) == cubins


def _config(dispatch_entry, base_over=None):
    base = kernel_entry(id="98_base", constraints=["BM * BK == THREADS", "BK * BN == THREADS"],
                        **(base_over or {}))
    return cfgmod.from_dict({"kernels": [base, dict(id="99_dispatch", title="d", **dispatch_entry)]})


def test_dispatch_stage_config():
    cfg = _config({"dispatch_from": "98_base", "candidates": [{}, {"BM": 32, "BN": 32, "TM": 4}]})
    spec = cfg.kernel("99_dispatch")
    assert spec.dispatched and not spec.autotuned
    assert spec.dispatch_from == "98_base" and [dict(c) for c in spec.candidates] == [{}, {"BM": 32, "BN": 32, "TM": 4}]
    assert not cfg.kernel("98_base").dispatched


@pytest.mark.parametrize("entry, needle", [
    ({"dispatch_from": "97_missing", "candidates": [{}]}, "not an earlier CUDA stage"),
    ({"dispatch_from": "98_base", "candidates": [{"WM": 32}]}, "candidates\\[0\\] sets WM"),
    ({"dispatch_from": "98_base", "candidates": [{}, {"BM": 32}]}, "candidates\\[1\\].*constraint"),
    ({"dispatch_from": "98_base"}, "kernels\\[1\\]"),  # candidates are required
    ({"dispatch_from": "98_base", "candidates": [{}], "source": "04_1d_blocktiling.cu"}, "kernels\\[1\\]"),
])
def test_dispatch_stage_config_errors(entry, needle):
    from sgemm_lab.errors import ConfigError

    with pytest.raises(ConfigError, match=needle):
        _config(entry)
