"""A check point replays from its row: the seed is stored exactly, and the same inputs come back."""

import sys

import numpy as np
from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))

import replay  # noqa: E402

from sgemm_lab.config import load as cfgmod  # noqa: E402
from sgemm_lab.config.records import Shape  # noqa: E402
from sgemm_lab.results import verify  # noqa: E402


def test_a_row_replays_its_inputs(tmp_path, capsys):
    seed = 2**63 - 25  # not representable as a float64: a seed written as a float would not replay
    table = tmp_path / "check.csv"
    table.write_text("kernel,m,n,k,distribution,mode,seed,rel_err\n"
                     f"18_wgmma_3xtf32,96,64,40,positive,beta,{seed},1e-7\n"
                     f"18_wgmma_3xtf32,96,64,40,uniform,beta,{seed - 1},1e-7\n")
    assert replay.main([str(table), "--kernel", "18_wgmma_3xtf32", "--distribution", "positive", "--inputs-only"]) == 0
    out = capsys.readouterr().out
    cfg = cfgmod.load(ROOT / "config" / "config.yaml")
    dist = next(d for d in cfg.check.distributions if d.name == "positive")
    p = verify.make_problem(Shape(m=96, n=64, k=40), alpha=cfg.check.alpha, beta=cfg.check.beta, seed=seed, dist=dist)
    assert f"seed {seed}" in out and f"A {replay.checksum(p.a)}" in out and f"C {replay.checksum(p.c)}" in out
    float_seed = int(float(seed))
    q = verify.make_problem(Shape(m=96, n=64, k=40), alpha=1.0, beta=1.0, seed=float_seed, dist=dist)
    assert float_seed != seed and not np.array_equal(q.a, p.a)  # why the seed must stay an integer


def test_an_ambiguous_or_missing_row_is_one_line(tmp_path, capsys):
    table = tmp_path / "check.csv"
    table.write_text("kernel,m,n,k,mode,seed,rel_err\ncublas,8,8,8,beta,1,0\ncublas,8,8,8,alpha0,1,0\n")
    assert replay.main([str(table), "--kernel", "cublas", "--inputs-only"]) == 1
    assert "2 rows match" in capsys.readouterr().err
    assert replay.main([str(table), "--row", "7", "--inputs-only"]) == 1
    assert "no row 7" in capsys.readouterr().err


def test_a_normal_row_of_another_numpy_warns(tmp_path, capsys):
    """Normal values may differ in the last bit of a rare value between NumPy builds: replaying a run's
    normal row with another NumPy says so; the same NumPy, or another distribution, does not."""
    table = tmp_path / "check.csv"
    table.write_text("kernel,m,n,k,distribution,mode,seed,rel_err\n"
                     "cublas,16,8,8,normal,beta,5,1e-7\ncublas,16,8,8,positive,beta,5,1e-7\n")
    env = tmp_path / "environment.json"
    for version, warns in (("0.0.1", True), (np.__version__, False)):
        env.write_text('{"packages": {"numpy": "%s"}}' % version)
        assert replay.main([str(table), "--distribution", "normal", "--inputs-only"]) == 0
        assert ("NumPy 0.0.1" in capsys.readouterr().err) is warns
    env.write_text('{"packages": {"numpy": "0.0.1"}}')
    assert replay.main([str(table), "--distribution", "positive", "--inputs-only"]) == 0
    assert "NumPy" not in capsys.readouterr().err
