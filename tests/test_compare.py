import math
from types import SimpleNamespace

import pandas as pd
import pytest
from conftest import ROOT

from sgemm_lab.pipeline import entry
from sgemm_lab.report import compare


def _bench(rows):
    base = dict(status="ok", verified=True, gpu="GPU X")
    return pd.DataFrame([dict(base, **r) for r in rows])


def test_pairwise_speedup_interval_and_verdicts():
    a = _bench([dict(kernel="k1", m=64, n=64, k=64, median_ms=2.0, iqr_ms=0.02, reps=100),
                dict(kernel="k2", m=64, n=64, k=64, median_ms=1.0, iqr_ms=0.20, reps=25),
                dict(kernel="cublas", m=64, n=64, k=64, median_ms=1.0, iqr_ms=0.01, reps=100),
                dict(kernel="k3", m=64, n=64, k=64, median_ms=1.0, iqr_ms=0.01, reps=100, verified=False)])
    b = _bench([dict(kernel="k1", m=64, n=64, k=64, median_ms=1.0, iqr_ms=0.01, reps=100, gpu="GPU Y"),
                dict(kernel="k2", m=64, n=64, k=64, median_ms=1.01, iqr_ms=0.20, reps=25, gpu="GPU Y"),
                dict(kernel="cublas", m=64, n=64, k=64, median_ms=0.5, iqr_ms=0.005, reps=100, gpu="GPU Y"),
                dict(kernel="k3", m=64, n=64, k=64, median_ms=0.5, iqr_ms=0.01, reps=100, gpu="GPU Y"),
                dict(kernel="k1", m=128, n=64, k=64, median_ms=1.0, iqr_ms=0.01, reps=100, gpu="GPU Y")])
    df = compare.pairwise(a, b, run_a="A", run_b="B").set_index("kernel")
    assert set(df.index) == {"k1", "k2", "cublas"}  # unverified and one-sided points are left out
    k1 = df.loc["k1"]
    rel = 1.2533 * (0.02 / 1.349) / 10 / 2.0  # = relative SE of both medians here
    se = math.sqrt(2) * rel
    assert k1.speedup == pytest.approx(2.0)
    assert (k1.ci_low, k1.ci_high) == pytest.approx((2.0 * math.exp(-1.959964 * se), 2.0 * math.exp(1.959964 * se)))
    assert k1.verdict == "faster" and k1.gpu_a == "GPU X" and k1.gpu_b == "GPU Y"
    assert df.loc["k2", "verdict"] == "within noise"  # 1% slower, but noisy
    # cuBLAS doubled too: relative to the library, k1 did not change and k2 lost half
    assert df.loc["k1", "vs_cublas"] == pytest.approx(1.0) and df.loc["k1", "verdict_vs_cublas"] == "within noise"
    assert df.loc["k2", "vs_cublas"] == pytest.approx(1 / 1.01 / 2) and df.loc["k2", "verdict_vs_cublas"] == "slower"
    assert math.isnan(df.loc["cublas", "vs_cublas"]) and df.loc["cublas", "verdict_vs_cublas"] == ""


def test_compare_step_on_two_committed_runs(tmp_path, raw_config):
    runs = ["probes/11_general-a6e82da", "probes/14_split_tree-e7e2deb"]
    out = {k: tmp_path / f"compare.{k}" for k in ("md", "csv", "png")}
    smk = SimpleNamespace(input=SimpleNamespace(bench=[str(ROOT / "reports" / r / "bench.csv") for r in runs]),
                          output=SimpleNamespace(**{k: str(v) for k, v in out.items()}), config=raw_config,
                          wildcards=SimpleNamespace(), log=[str(tmp_path / "compare.log")],
                          params=SimpleNamespace(runs=runs))
    entry.main("compare", smk)
    df = pd.read_csv(out["csv"])
    a = pd.read_csv(ROOT / "reports" / runs[0] / "bench.csv")
    b = pd.read_csv(ROOT / "reports" / runs[1] / "bench.csv")
    row = df[(df.kernel == "11_general") & (df.m == 4096) & (df.k == 4096)].iloc[0]
    ma = a[(a.kernel == "11_general") & (a.m == 4096) & (a.k == 4096)].median_ms.iloc[0]
    mb = b[(b.kernel == "11_general") & (b.m == 4096) & (b.k == 4096)].median_ms.iloc[0]
    assert row.speedup == pytest.approx(ma / mb) and row.run_b == runs[1]
    text = out["md"].read_text()
    src = [x[(x.kernel == "11_general") & (x.m == 4096)].source_sha256.iloc[0] for x in (a, b)]
    code = " ‡" if src[0] != src[1] else ""  # the same stage built from other source in the two runs
    assert f"| `11_general`{code} | {ma:.3f} | {mb:.3f} | **{ma / mb:.3f}×** |" in text
    assert bool(row.code_differs) == (src[0] != src[1])
    # the title and the first line name the runs in the same order, each with its commit
    ca, cb = a.git_commit.iloc[0][:7], b.git_commit.iloc[0][:7]
    assert text.startswith(f"# {runs[1]} (at {cb}) against {runs[0]} (at {ca})\n")
    assert (f"**The runs are of two commits** (`{ca}` and `{cb}`)" in text) == (ca != cb)
    assert f"Run **{runs[1]}** (" in text and f") against run **{runs[0]}** (" in text
    assert out["png"].read_bytes()[:4] == b"\x89PNG"


def test_across_shapes_geometric_mean_range_and_verdict_counts():
    a = _bench([dict(kernel=k, m=m, n=64, k=64, median_ms=t, iqr_ms=0.001, reps=100)
                for k, m, t in (("k1", 64, 1.0), ("k1", 128, 2.0), ("cublas", 64, 1.0), ("cublas", 128, 2.0))])
    b = _bench([dict(kernel=k, m=m, n=64, k=64, median_ms=t, iqr_ms=0.001, reps=100, gpu="GPU Y")
                for k, m, t in (("k1", 64, 0.5), ("k1", 128, 4.0), ("cublas", 64, 1.0), ("cublas", 128, 1.0))])
    df = compare.pairwise(a, b, run_a="A", run_b="B")
    s = compare.across_shapes(df, order=["k1", "cublas"]).set_index("kernel")
    assert list(s.index) == ["k1", "cublas"]
    assert s.loc["k1", "geomean"] == pytest.approx(1.0)  # twice as fast at one shape, half at the other
    assert (s.loc["k1", "low"], s.loc["k1", "high"]) == pytest.approx((0.5, 2.0))
    assert (s.loc["k1", "faster"], s.loc["k1", "slower"], s.loc["k1", "noise"]) == (1, 1, 0)
    assert s.loc["k1", "vs_cublas"] == pytest.approx(math.sqrt(2.0 * 0.25))  # cuBLAS got 2x faster at m = 128
    assert s.loc["cublas", "geomean"] == pytest.approx(math.sqrt(2.0)) and math.isnan(s.loc["cublas", "vs_cublas"])
    text = compare.markdown(df, order=["k1", "cublas"])
    assert "| `k1` | 2 | **1.000×** | 0.500–2.000 | 1 / 1 / 0 |  | 0.707 |" in text


def test_a_point_whose_spread_jumps_in_one_run_is_marked_unsteady():
    """A disturbed run (a bimodal point: wide quartiles in one run only) is named, whatever its verdict."""
    a = _bench([dict(kernel="k1", m=64, n=64, k=64, median_ms=0.065, iqr_ms=0.073, reps=500),
                dict(kernel="k2", m=64, n=64, k=64, median_ms=1.0, iqr_ms=0.10, reps=100),
                dict(kernel="cublas", m=64, n=64, k=64, median_ms=1.0, iqr_ms=0.01, reps=100)])
    b = _bench([dict(kernel="k1", m=64, n=64, k=64, median_ms=0.027, iqr_ms=0.0007, reps=500),
                dict(kernel="k2", m=64, n=64, k=64, median_ms=1.0, iqr_ms=0.08, reps=100),  # noisy in both
                dict(kernel="cublas", m=64, n=64, k=64, median_ms=1.0, iqr_ms=0.01, reps=100)])
    df = compare.pairwise(a, b, run_a="A", run_b="B").set_index("kernel")
    assert df.loc["k1", "verdict"] == "faster" and df.loc["k1", "unsteady"] == "A"
    assert df.loc["k2", "unsteady"] == "" and df.loc["cublas", "unsteady"] == ""
    flipped = compare.pairwise(b, a, run_a="B", run_b="A").set_index("kernel")
    assert flipped.loc["k1", "unsteady"] == "B"  # named by its side, whichever run it is
    text = compare.markdown(df.reset_index(), order=["k1", "k2", "cublas"])
    assert "faster (unsteady in A)" in text and "**Unsteady points**" in text and "| `k1` | 64³ | A | 112.3% | 2.6% |" in text
    assert compare.across_shapes(df.reset_index(), order=["k1"]).set_index("kernel").loc["k1", "unsteady"] == 1


def test_a_comparison_of_long_names_gets_a_folder_a_file_system_can_make():
    from sgemm_lab.report.compare import output_dir

    runs = ["probes/" + "a" * 120, "probes/" + "b" * 120, "probes/" + "c" * 120]
    name = output_dir(runs).removeprefix("reports/compare/")
    assert len(name) <= 200 and name != output_dir(runs[:2]).removeprefix("reports/compare/")
    assert output_dir(["h100", "h200"]) == "reports/compare/h100-vs-h200"
