"""Report rendering and aggregation from a fixture of real results (an H100 run of kernels 01-04)."""

from types import SimpleNamespace

import pandas as pd
import pytest
from conftest import ROOT

from sgemm_lab import io, report, steps

FIX = ROOT / "tests" / "fixtures" / "h100_foundation"


@pytest.fixture
def tables():
    return dict(bench=pd.read_csv(FIX / "bench.csv"), checks=pd.read_csv(FIX / "check.csv"),
                builds=pd.read_csv(FIX / "build.csv"), env=io.read_json(FIX / "environment.json"))


def test_tidy_bench_columns(tables):
    b = tables["bench"]
    for col in ("kernel", "m", "n", "k", "median_ms", "tflops", "verified", "min_ms", "q1_ms", "q3_ms", "pct_cublas"):
        assert col in b.columns
    assert set(b.kernel) >= {"cublas"}


def test_collect_bench_computes_pct_of_cublas_at_the_same_shape(tables):
    raw = tables["bench"].drop(columns=["pct_cublas"])
    frames = [g for _, g in raw.groupby("kernel")]
    out = report.collect_bench(frames, order=["04_1d_blocktiling", "01_naive", "cublas"])
    assert list(out.kernel.drop_duplicates())[:2] == ["04_1d_blocktiling", "01_naive"]
    row = out[(out.kernel == "01_naive") & (out.m == 4096)].iloc[0]
    ref = out[(out.kernel == "cublas") & (out.m == 4096)].iloc[0]
    assert row.pct_cublas == pytest.approx(100 * row.tflops / ref.tflops)
    assert out[out.kernel == "cublas"].pct_cublas.round(9).eq(100).all()


def test_render_has_every_stage_and_numbers_from_the_data(lab, tables):
    text = report.render(lab, figures={"tflops_vs_size": report.Path("figures/tflops_vs_size.png")}, wall_s=123.4,
                         **tables)
    b = tables["bench"]
    for impl in lab.implementations:
        assert f"`{impl}`" in text
    r = b[(b.kernel == "04_1d_blocktiling") & (b.m == 4096)].iloc[0]
    assert f"{r.tflops:.2f} ({r.pct_cublas:.1f}%)" in text
    assert "**123 s**" in text and "![TFLOP/s vs size](figures/tflops_vs_size.png)" in text
    assert tables["env"]["gpu"]["name"] in text
    assert "None: every configured point ran and verified." in text


def test_render_shows_failures_and_skips(lab, tables):
    b = tables["bench"].copy()
    b["reason"] = b["reason"].astype(object)
    i = b.index[(b.kernel == "03_smem_caching") & (b.m == 1024)][0]
    b.loc[i, ["verified", "status", "reason"]] = [False, "failed", "beta: relative error 1 >= tolerance 1e-5"]
    c = tables["checks"].copy()
    c["reason"] = c["reason"].astype(object)
    j = c.index[c.kernel == "02_coalesced"][0]
    c.loc[j, ["status", "passed", "reason"]] = ["fail", False, "5 NaN/Inf outputs"]
    skipped = pd.DataFrame([dict(kernel="04_1d_blocktiling", m=1000, n=1000, k=1000, status="skipped",
                                 reason="needs M, N, K multiples of 64, 64, 8", verified=False)])
    text = report.render(lab, bench=pd.concat([b, skipped]), checks=c, builds=tables["builds"], env=tables["env"],
                         figures={}, wall_s=None)
    assert "✗" in text and "**FAIL**" in text
    assert "5 NaN/Inf outputs" in text and "needs M, N, K multiples of 64, 64, 8" in text
    assert "| `04_1d_blocktiling` | 1000³ | bench | skipped |" in text


def test_cpu_steps_from_snakemake_objects(lab, tables, tmp_path, raw_config):
    """aggregate -> plot -> report through the same entry point the workflow scripts use."""
    bench_dir = tmp_path / "bench"
    bench_dir.mkdir()
    raw = tables["bench"].drop(columns=["pct_cublas"])
    paths = []
    for impl, g in raw.groupby("kernel"):
        paths.append(bench_dir / f"{impl}.csv")
        g.to_csv(paths[-1], index=False)
    checks = []
    for impl, g in tables["checks"].groupby("kernel"):
        checks.append(tmp_path / f"check_{impl}.json")
        io.write_json(checks[-1], {"kernel": impl, "status": "pass", "points": g.to_dict("records")})
    builds = []
    for rec in tables["builds"].to_dict("records"):
        builds.append(tmp_path / f"build_{rec['kernel']}.json")
        io.write_json(builds[-1], rec)
    out = tmp_path / "reports"

    def smk(input, output, **kw):  # a stand-in for the object Snakemake injects into scripts
        return SimpleNamespace(input=SimpleNamespace(**input), output=SimpleNamespace(**output) if isinstance(output, dict) else output, config=raw_config,
                               wildcards=SimpleNamespace(), log=[str(tmp_path / "log.txt")],
                               params=SimpleNamespace(**kw))

    steps.main("aggregate", smk(dict(bench=paths, check=checks, build=builds, env=FIX / "environment.json"),
                                dict(bench=out / "bench.csv", check=out / "check.csv", build=out / "build.csv",
                                     env=out / "environment.json")))
    agg = pd.read_csv(out / "bench.csv")
    assert len(agg) == len(raw) and agg.pct_cublas.notna().all()
    fig = out / "figures" / "tflops_vs_size.png"
    steps.main("plot", SimpleNamespace(input=SimpleNamespace(bench=out / "bench.csv"), output=[fig], config=raw_config,
                                       wildcards=SimpleNamespace(), log=[str(tmp_path / "plot.txt")]))
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    steps.main("report", smk(dict(bench=out / "bench.csv", check=out / "check.csv", build=out / "build.csv",
                                  env=out / "environment.json", figure=fig), [out / "report.md"], start=tmp_path / "none.json"))
    text = (out / "report.md").read_text()
    assert "![TFLOP/s vs size](figures/tflops_vs_size.png)" in text and "Wall time" not in text
    assert not list(out.rglob(".*.tmp"))  # atomic writes leave no temporaries


def test_gpu_step_without_gpu_is_one_line(raw_config, tmp_path, capsys):
    import importlib.util

    if importlib.util.find_spec("pycuda") is not None:
        pytest.skip("PyCUDA present")
    smk = SimpleNamespace(input=SimpleNamespace(), output=[str(tmp_path / "env.json")], config=raw_config,
                          wildcards=SimpleNamespace(), log=[str(tmp_path / "env.log")])
    with pytest.raises(SystemExit) as exit_:
        steps.main("environment", smk)
    assert exit_.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("sgemm-lab environment: no CUDA device")
    assert not (tmp_path / "env.json").exists()
