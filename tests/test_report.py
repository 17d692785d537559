"""Report rendering, aggregation and figures from a fixture of real results (the H100 reference run)."""

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from conftest import ROOT

from sgemm_lab.pipeline import entry

from sgemm_lab.results import io
from sgemm_lab.report import sections, stage_tables
from sgemm_lab.report import tables as report_tables

FIX = ROOT / "tests" / "fixtures" / "h100"
FIGS = ["tflops_vs_size", "ladder", "accuracy", "roofline", "roofline_levels", "stalls", "memory"]


@pytest.fixture
def tables():
    return dict(bench=pd.read_csv(FIX / "bench.csv"), checks=pd.read_csv(FIX / "check.csv"),
                builds=pd.read_csv(FIX / "build.csv"), env=io.read_json(FIX / "environment.json"),
                ncu=pd.read_csv(FIX / "ncu_metrics.csv"), ceilings=io.read_json(FIX / "ceilings.json"),
                sanitize=pd.read_csv(FIX / "sanitize.csv"), failures=pd.read_csv(FIX / "failure_tests.csv"),
                sweeps={p.stem: pd.read_csv(p) for p in (FIX / "sweeps").glob("*.csv")},
                epilogues={p.stem: pd.read_csv(p) for p in (FIX / "epilogue").glob("*.csv")})


def _render(lab, tables, **over):
    kw = dict(tables, figures={n: Path(f"figures/{n}.png") for n in FIGS}, wall_s=123.4)
    kw.update(over)
    return sections.render(lab, **kw)


def test_tidy_bench_columns(tables):
    b = tables["bench"]
    for col in ("kernel", "m", "n", "k", "median_ms", "tflops", "verified", "min_ms", "q1_ms", "q3_ms", "pct_cublas",
                "source_sha256", "compile_options", "gpu", "git_commit"):
        assert col in b.columns
    assert {"cublas", "numpy"} <= set(b.kernel)


def test_tidy_ncu_metrics(tables):
    n = tables["ncu"]
    assert list(n.columns[:8]) == ["kernel", "m", "n", "k", "status", "metric", "value", "unit"]
    ffma = n[(n.metric == "ffma_thread_instructions") & (n.kernel == "cublas") & (n.m == 4096)].value.iloc[0]
    assert ffma == pytest.approx(4096**3, rel=1e-3)


def test_collect_bench_computes_pct_of_cublas_at_the_same_shape(tables):
    raw = tables["bench"].drop(columns=["pct_cublas"])
    frames = [g for _, g in raw.groupby("kernel")]
    out = report_tables.collect_bench(frames, order=["04_1d_blocktiling", "01_naive", "cublas"])
    assert list(out.kernel.drop_duplicates())[:2] == ["04_1d_blocktiling", "01_naive"]
    row = out[(out.kernel == "01_naive") & (out.m == 4096) & (out.k == 4096)].iloc[0]
    ref = out[(out.kernel == "cublas") & (out.m == 4096) & (out.k == 4096)].iloc[0]
    assert row.pct_cublas == pytest.approx(100 * row.tflops / ref.tflops)
    assert out[(out.kernel == "cublas") & (out.status == "ok")].pct_cublas.round(9).eq(100).all()


def test_render_has_every_stage_and_numbers_from_the_data(lab, tables):
    text = _render(lab, tables)
    b = tables["bench"]
    for impl in lab.implementations:
        assert f"`{impl}`" in text
    for spec in lab.kernels:
        assert f"### `{spec.id}`" in text
    r = b[(b.kernel == "06_vectorized") & (b.m == 4096) & (b.k == 4096)].iloc[0]
    assert f"{r.tflops:.2f} ({r.pct_cublas:.1f}%)" in text
    assert "**123 s** (within the 5-minute budget)" in text
    assert tables["env"]["gpu"]["name"] in text
    assert "**every kernel is clean**" in text
    assert "FP32 FMA probe" in text and "measured / predicted" in text
    assert "Fused epilogue D = act" in text and "`cublaslt`" in text
    assert "Chosen by the pipeline from the tile sweeps" in text


def test_render_shows_failures_skips_and_unavailable_profiles(lab, tables):
    b = tables["bench"].copy()
    b["reason"] = b["reason"].astype(object)
    i = b.index[(b.kernel == "03_smem_caching") & (b.m == 1024)][0]
    b.loc[i, ["verified", "status", "reason"]] = [False, "failed", "beta: relative error 1 >= tolerance 1e-5"]
    c = tables["checks"].copy()
    c["reason"] = c["reason"].astype(object)
    j = c.index[c.kernel == "02_coalesced"][0]
    c.loc[j, ["status", "passed", "reason"]] = ["fail", False, "5 NaN/Inf outputs"]
    s = tables["sanitize"].copy()
    s.loc[0, "status"] = "errors"
    ncu = pd.DataFrame([dict(kernel="cublas", m=4096, n=4096, k=4096, status="unavailable: ERR_NVGPUCTRPERM",
                             metric=None, value=None, unit=None)])
    text = _render(lab, tables, bench=b, checks=c, sanitize=s, ncu=ncu, wall_s=400.0)
    assert "✗" in text and "**FAIL**" in text
    assert "5 NaN/Inf outputs" in text and "beta: relative error 1 &gt;= tolerance 1e-5" in text
    assert "| `03_smem_caching` | 1000³ | bench | skipped |" in text
    assert "**not every kernel is clean**" in text and "**errors**" in text
    assert "No Nsight Compute metrics: unavailable: ERR_NVGPUCTRPERM" in text
    assert "over the 5-minute budget" in text


def test_cpu_steps_from_snakemake_objects(lab, tables, tmp_path, raw_config):
    """aggregate -> plot -> report through the same entry point the workflow scripts use."""
    bench_dir = tmp_path / "bench"
    bench_dir.mkdir()
    raw = tables["bench"].drop(columns=["pct_cublas", "source_sha256", "compile_options", "gpu", "driver", "git_commit"])
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
        return SimpleNamespace(input=SimpleNamespace(**input),
                               output=SimpleNamespace(**output) if isinstance(output, dict) else output,
                               config=raw_config, wildcards=SimpleNamespace(), log=[str(tmp_path / "log.txt")],
                               params=SimpleNamespace(**kw))

    entry.main("aggregate", smk(dict(bench=paths, check=checks, build=builds, profiles=[FIX / "ncu_metrics.csv"],
                                     sanitize=[FIX / "sanitize.csv"], env=FIX / "environment.json"),
                                dict(bench=out / "bench.csv", check=out / "check.csv", build=out / "build.csv",
                                     env=out / "environment.json", ncu=out / "ncu_metrics.csv",
                                     sanitize=out / "sanitize.csv")))
    agg = pd.read_csv(out / "bench.csv")
    assert len(agg) == len(raw) and agg.loc[agg.status == "ok", "pct_cublas"].notna().all()
    assert agg.source_sha256.notna().all() and (agg.gpu == tables["env"]["gpu"]["name"]).all()
    figs = {n: out / "figures" / f"{n}.png" for n in FIGS}
    entry.main("plot", SimpleNamespace(
        input=SimpleNamespace(bench=out / "bench.csv", ncu=out / "ncu_metrics.csv", ceilings=FIX / "ceilings.json",
                              check=out / "check.csv"),
        output=SimpleNamespace(size=figs["tflops_vs_size"], **{k: v for k, v in figs.items() if k != "tflops_vs_size"}),
        config=raw_config, wildcards=SimpleNamespace(), log=[str(tmp_path / "plot.txt")]))
    for f in figs.values():
        assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    entry.main("report", smk(dict(bench=out / "bench.csv", check=out / "check.csv", build=out / "build.csv",
                                  env=out / "environment.json", figures=list(figs.values()), ncu=out / "ncu_metrics.csv",
                                  sanitize=out / "sanitize.csv", ceilings=FIX / "ceilings.json",
                                  sweeps=list((FIX / "sweeps").glob("*.csv"))),
                             [out / "report.md"], start=tmp_path / "none.json"))
    text = (out / "report.md").read_text()
    assert "![TFLOP/s vs size](figures/tflops_vs_size.png)" in text and "Wall time" not in text
    assert "![roofline](figures/roofline.png)" in text
    assert "![accuracy against speed](figures/accuracy.png)" in text
    assert not list(out.rglob(".*.tmp"))  # atomic writes leave no temporaries


def test_heatmap_from_a_real_sweep(lab, tmp_path):
    from sgemm_lab.report.plots import sweep_heatmap

    spec = lab.kernel("09_async_pipeline")
    sweep_heatmap(pd.read_csv(FIX / "sweeps" / "09_async_pipeline.csv"), tmp_path / "h.png", kernel=spec.id,
                  axes=spec.sweep_axes)
    assert (tmp_path / "h.png").read_bytes()[:4] == b"\x89PNG"


def test_gpu_step_without_gpu_is_one_line(raw_config, tmp_path, capsys, monkeypatch):
    import importlib.util

    if importlib.util.find_spec("pycuda") is not None:
        pytest.skip("PyCUDA present")
    monkeypatch.chdir(tmp_path)
    smk = SimpleNamespace(input=SimpleNamespace(), output=[str(tmp_path / "env.json")], config=raw_config,
                          wildcards=SimpleNamespace(), log=[str(tmp_path / "env.log")])
    with pytest.raises(SystemExit) as exit_:
        entry.main("environment", smk)
    assert exit_.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("sgemm-lab environment: no CUDA device")
    assert not (tmp_path / "env.json").exists()


def test_method_lists_the_gpu_failure_cases_of_the_run(lab, tables):
    text = _render(lab, tables)
    method = text[text.index("## Method"):text.index("## Sanitizers")]
    for r in tables["failures"].itertuples():
        assert f"| {r.case} |" in method
    assert "watchdog" in method and "timeout" in method


def test_every_result_table_carries_provenance(tables):
    commit = tables["env"]["git_commit"]
    for name in ("bench", "checks", "ncu", "sanitize", "failures"):
        df = tables[name]
        assert (df.git_commit == commit).all() and df.gpu.notna().all(), name
    for name in ("checks", "ncu", "sanitize"):
        assert tables[name].source_sha256.notna().all(), name
    for df in list(tables["sweeps"].values()) + list(tables["epilogues"].values()):
        assert df.source_sha256.notna().all() and (df.git_commit == commit).all()


def test_not_profiled_names_the_stages_unless_it_is_all_of_them():
    import pandas as pd

    from sgemm_lab.report.stage_tables import not_profiled

    ncu = pd.DataFrame([dict(kernel="a", status="ok"), dict(kernel="b", status="not run: build failed: x"),
                        dict(kernel="c", status="not run: build failed: x")])
    assert not_profiled(ncu) == ["`b`, `c` (not run: build failed: x)"]
    assert not_profiled(ncu.assign(status="unavailable: ncu not found on PATH")) == ["unavailable: ncu not found on PATH"]
    assert not_profiled(None) == [] and not_profiled(ncu[ncu.status == "ok"]) == []


def test_suite_table_compares_the_best_verified_stage_with_cublas(raw_config, tables):
    from sgemm_lab.config.load import from_dict

    raw_config["suite"] = {"shapes": [[4096, 4096, 4096], [3000, 3000, 3000], [777, 777, 777]]}
    cfg = from_dict(raw_config)
    bench = tables["bench"]
    ok = bench[bench.status == "ok"]
    text = "\n".join(report_tables.suite_table(cfg, ok))
    ratios = []
    for m in (4096, 3000):
        at = ok[(ok.m == m) & (ok.n == m) & (ok.k == m)]
        cub = at[at.kernel == "cublas"].iloc[0]
        stages = at[at.kernel.isin([k.id for k in cfg.kernels if k.backend == "cuda" or k.autotuned]) & at.verified]
        best = stages.loc[stages.tflops.idxmax()]
        ratios.append(cub.median_ms / best.median_ms)
        assert f"`{best.kernel}` | {best.tflops:.2f} | **{ratios[-1]:.3f}×**" in text
        assert f"{cub.q1_ms / best.q3_ms:.3f}–{cub.q3_ms / best.q1_ms:.3f}" in text
    geo = (ratios[0] * ratios[1]) ** 0.5
    assert f"Geometric mean over 2 shapes: **{geo:.3f}×**; minimum **{min(ratios):.3f}×**" in text
    assert "No verified stage or no cuBLAS timing at: 777³ (not in the mean)" in text
    assert "## Against cuBLAS on the suite" in _render(cfg, tables)
    raw_config["suite"] = {}
    assert "Against cuBLAS" not in _render(from_dict(raw_config), tables)


def test_memory_bound_suite_shapes_are_judged_against_the_measured_copy(raw_config):
    """A shape below the machine balance gets its best stage's and cuBLAS's bandwidth over the bytes it
    must move, as a share of the copy; a compute-bound shape none; no ceilings, no line."""
    import pandas as pd

    from sgemm_lab.config.load import from_dict

    raw_config["suite"] = {"shapes": [[8192, 12, 6144], [4096, 4096, 4096]]}
    cfg = from_dict(raw_config)
    stage = next(k.id for k in cfg.kernels if k.backend == "cuda" and k.precision == "fp32")
    nbytes = 4 * (8192 * 6144 + 6144 * 12 + 2 * 8192 * 12)
    assert report_tables.min_bytes(8192, 12, 6144) == nbytes
    rows = []
    for (m, n, k) in ((8192, 12, 6144), (4096, 4096, 4096)):
        for kernel, ms in ((stage, 0.08), ("cublas", 0.1)):
            rows.append(dict(kernel=kernel, m=m, n=n, k=k, status="ok", verified=True, median_ms=ms, q1_ms=ms,
                             q3_ms=ms, tflops=2.0 * m * n * k / (ms * 1e-3) / 1e12))
    ok = pd.DataFrame(rows)
    ceilings = dict(dram_gbps=3000.0, fp32_tflops=60.0)
    text = "\n".join(report_tables.suite_table(cfg, ok, ceilings))
    gbps = nbytes / 0.08e-3 / 1e9
    assert f"8192×12×6144: `{stage}` at **{gbps:.0f} GB/s, {100 * gbps / 3000:.1f}% of the copy**" in text
    assert f"cuBLAS {nbytes / 0.1e-3 / 1e9:.0f} GB/s" in text and "balance" not in text  # (stated as flops per byte)
    assert "4096³:" not in text.split("Memory-bound shapes")[1]  # 4096^3 is far above the balance of 20
    assert "Memory-bound" not in "\n".join(report_tables.suite_table(cfg, ok))


def test_suite_only_shapes_stay_out_of_the_ladder(raw_config, tables):
    from sgemm_lab.config.load import from_dict

    raw_config["suite"] = {"shapes": [[4096, 4096, 4096], [512, 512, 16384]]}
    cfg = from_dict(raw_config)
    bench = tables["bench"]
    extra = bench[bench.kernel == "cublas"].head(1).assign(m=512, n=512, k=16384)
    both = pd.concat([bench, extra], ignore_index=True)
    assert len(report_tables.ladder_rows(cfg, both)) == len(bench)
    assert "512×512×16384" not in report_tables.ladder_table(cfg, both, tables["checks"])


def test_accuracy_table_reads_the_errors_of_every_check_run(lab, tables):
    checks = tables["checks"]
    text = _render(lab, tables)
    assert "## Accuracy" in text
    ran = checks[(checks.kernel == "cublas") & (checks.status != "skipped")]
    worst = ran.loc[ran.rel_err.idxmax()]
    section = text[text.index("## Accuracy"):]
    line = next(ln for ln in section.splitlines() if ln.startswith("| `cublas` |"))
    assert f"| fp32 | {len(ran)} | {ran.rel_err.median():.2e} | {worst.rel_err:.2e} |" in line
    assert f"{worst.rel_err / worst.tolerance:.2f} |" in line
    # a TF32 stage is labelled with its class
    tf32 = report_tables.accuracy_table(replace(lab, kernels=tuple(replace(k, precision="tf32") if k.id == "06_vectorized"
                                                              else k for k in lab.kernels)), checks)
    assert "| `06_vectorized` | tf32 |" in tf32
    assert report_tables.accuracy_table(lab, checks.iloc[0:0]) is None


def test_3xtf32_error_against_k_marks_every_cell_above_cublas(tables):
    from sgemm_lab.report import accuracy

    checks = pd.read_csv(ROOT / "reports" / "h100" / "check.csv")  # the committed reference: distributions too
    precisions = {"16_3xtf32": "3xtf32", "18_wgmma_3xtf32": "3xtf32", "11_general": "fp32"}
    table, above = accuracy.against_k(checks, precisions)
    assert table.splitlines()[0] == "| inputs | K | cuBLAS FP32 error | `16_3xtf32` | `18_wgmma_3xtf32` |"
    for stage in ("16_3xtf32", "18_wgmma_3xtf32"):
        rows = checks[(checks.kernel == stage) & checks["mode"].isin(accuracy.MULTIPLYING) & checks.rel_err.notna()]
        rows = rows.assign(r=rows.rel_err / rows.cublas_rel_err)
        worst = rows.loc[rows.r.idxmax()]
        line = next(ln for ln in table.splitlines() if ln.startswith(f"| {worst.distribution} | {int(worst.k)} |"))
        assert f"{worst.r:.2f}x" in line
        cells_above = int(rows.groupby(["distribution", "k"])["r"].max().gt(1).sum())
        assert sum(1 for a in above if a.startswith(f"`{stage}`")) == cells_above
    assert len(above) == table.count("**") // 2
    # runs without the distribution columns (the fixture) or without 3xTF32 stages give no table
    assert accuracy.against_k(tables["checks"], precisions) is None
    assert accuracy.against_k(checks, {"11_general": "fp32"}) is None


def test_tf32_stages_are_compared_with_cublas_tf32_and_kept_out_of_the_fp32_suite(raw_config, tables):
    from sgemm_lab.config.load import from_dict

    raw = tables["bench"].drop(columns=["pct_cublas"])
    tf32 = raw[raw.kernel == "cublas"].assign(kernel="cublas_tf32", median_ms=lambda d: d.median_ms / 5,
                                              tflops=lambda d: d.tflops * 5)
    fast = raw[raw.kernel == "06_vectorized"].assign(tflops=lambda d: d.tflops * 3, median_ms=lambda d: d.median_ms / 3)
    frames = [g for _, g in pd.concat([raw, tf32], ignore_index=True).groupby("kernel")]
    out = report_tables.collect_bench(frames, order=["06_vectorized", "cublas", "cublas_tf32"], tf32=("06_vectorized",))
    at = out[(out.m == 4096) & (out.n == 4096) & (out.k == 4096)].set_index("kernel")
    assert at.loc["06_vectorized", "baseline"] == "cublas_tf32"
    assert at.loc["06_vectorized", "pct_cublas"] == pytest.approx(100 * at.loc["06_vectorized", "tflops"]
                                                                  / at.loc["cublas_tf32", "tflops"])
    # cuBLAS in TF32 mode itself reads against strict FP32 cuBLAS (its speed-up from tensor cores)
    assert at.loc["cublas_tf32", "baseline"] == "cublas"
    assert at.loc["cublas_tf32", "pct_cublas"] == pytest.approx(500.0)
    # a TF32 stage never counts as the best strict-FP32 stage of the suite, however fast
    raw_config["suite"] = {"shapes": [[4096, 4096, 4096]]}
    raw_config["kernels"] = [dict(k, precision="tf32") if k["id"] == "06_vectorized" else k
                             for k in raw_config["kernels"]]
    cfg = from_dict(raw_config)
    boosted = pd.concat([tables["bench"][tables["bench"].kernel != "06_vectorized"], fast], ignore_index=True)
    text = "\n".join(report_tables.suite_table(cfg, boosted[boosted.status == "ok"]))
    assert "`06_vectorized`" not in text and "Geometric mean over 1 shape" in text


def test_cublas_tf32_is_a_timed_baseline_only_when_configured(raw_config):
    from sgemm_lab.config.load import from_dict
    from sgemm_lab.measure.runners import precision_of
    from sgemm_lab.results.verify import tolerance_for

    raw_config["baseline"] = dict(raw_config.get("baseline", {}), cublas_tf32=False)
    cfg = from_dict(raw_config)
    assert "cublas_tf32" not in cfg.implementations and "cublas_tf32" not in cfg.gpu_implementations
    raw_config["baseline"] = dict(raw_config.get("baseline", {}), cublas_tf32=True)
    cfg = from_dict(raw_config)
    assert cfg.implementations[-3:] == ("cublas", "cublas_tf32", "numpy")
    assert cfg.gpu_implementations[-2:] == ("cublas", "cublas_tf32")
    assert set(cfg.suite) <= set(cfg.bench_shapes("cublas_tf32"))
    assert precision_of(None, "cublas_tf32") == "tf32" and precision_of(None, "cublas") == "fp32"
    assert tolerance_for("tf32", 4096, cfg.check) > 10 * tolerance_for("fp32", 4096, cfg.check)


def test_accuracy_points_pair_the_worst_error_with_the_speed(tables):
    from sgemm_lab.report.plots import accuracy_points

    bench, checks = tables["bench"], tables["checks"]
    pts = accuracy_points(bench, checks, order=["06_vectorized", "cublas", "no_such"], shape=(4096, 4096, 4096),
                          precision={"06_vectorized": "tf32"}).set_index("kernel")
    assert list(pts.index) == ["06_vectorized", "cublas"]  # in ladder order; unknown ones left out
    ran = checks[(checks.kernel == "cublas") & (checks.status != "skipped") & (checks["mode"] != "alpha0")]
    at = bench[(bench.kernel == "cublas") & (bench.m == 4096) & (bench.n == 4096) & (bench.k == 4096)]
    assert pts.loc["cublas", "rel_err"] == ran.rel_err.max() and pts.loc["cublas", "tflops"] == at.tflops.iloc[0]
    assert pts.loc["06_vectorized", "precision"] == "tf32" and pts.loc["cublas", "precision"] == "fp32"


def test_the_method_counts_clean_retried_disturbed_and_unwatched_points():
    import pandas as pd

    from sgemm_lab.report.problems import disturbance_summary

    bench = pd.DataFrame({"status": ["ok", "ok", "disturbed", "ok", "ok", "failed"],
                          "disturbance": ["none", "none; clean on try 2 of 3, after: pid 9 x", "all 3 tries disturbed",
                                          "unchecked: no NVML", "n/a (CPU timing)", "none"]})
    text = disturbance_summary(bench)
    assert "2 of 4 GPU points clean (1 of them only on a retry), 1 disturbed" in text
    assert "**1 not watched**" in text
    assert disturbance_summary(bench.drop(columns="disturbance")) == "This run did not record it."


def test_a_disturbed_epilogue_timing_is_marked_and_not_the_best():
    import pandas as pd

    from sgemm_lab.report.tables import epilogue_table

    rows = [dict(m=64, n=64, k=64, act="none", implementation=impl, verified=True, reason="", tflops=t, median_ms=1.0,
                 padded=False, disturbed=d) for impl, t, d in (("07_fused_epilogue", 10.0, False), ("cublaslt", 20.0, True))]
    table = epilogue_table(pd.DataFrame(rows))
    assert "20.00 (disturbed: other work on the GPU)" in table
    assert "| `07_fused_epilogue` | 10.00 | 1.000 | 100% |" in table  # the clean one is the best


def test_the_fp32_accurate_race_takes_3xtf32_stages_that_passed_the_fp32_class(raw_config):
    """The strict table stays strict; the FP32-accurate one admits a 3xTF32 stage only when every check
    it ran passed the FP32 class (judged against cuBLAS on the same inputs), and names what to use."""
    from sgemm_lab.config.load import from_dict

    raw_config["suite"] = {"shapes": [[4096, 4096, 4096], [512, 512, 16384]]}
    cfg = from_dict(raw_config)

    def row(kernel, m, n, k, ms):
        return dict(kernel=kernel, m=m, n=n, k=k, status="ok", verified=True, median_ms=ms, q1_ms=ms, q3_ms=ms,
                    tflops=2 * m * n * k / ms / 1e9)

    ok = pd.DataFrame([row("cublas", 4096, 4096, 4096, 2.7), row("11_general", 4096, 4096, 4096, 2.75),
                       row("18_wgmma_3xtf32", 4096, 4096, 4096, 1.7), row("17_wgmma_tf32", 4096, 4096, 4096, 0.4),
                       row("cublas", 512, 512, 16384, 0.18), row("11_general", 512, 512, 16384, 0.2),
                       row("18_wgmma_3xtf32", 512, 512, 16384, 0.9)])
    checks = pd.DataFrame([dict(kernel=k, status="pass", fp32_limit=1e-5, m=64, n=64, k=64)
                           for k in ("11_general", "18_wgmma_3xtf32", "17_wgmma_tf32", "cublas")])
    strict = "\n".join(report_tables.suite_table(cfg, ok))
    assert "18_wgmma_3xtf32" not in strict and "17_wgmma_tf32" not in strict
    text = "\n".join(report_tables.fp32_accurate_table(cfg, ok, checks))
    assert "| 4096³ | " in text and "`18_wgmma_3xtf32` (3xtf32)" in text and f"**{2.7 / 1.7:.3f}×**" in text
    assert "17_wgmma_tf32" not in text  # TF32 is no FP32-accurate class, however fast
    assert f"minimum **{0.18 / 0.2:.3f}×** at 512×512×16384" in text
    assert "Which to use for FP32 accuracy on these shapes: " in text
    assert "`18_wgmma_3xtf32` at 4096³" in text and "`cublas` at 512×512×16384" in text
    # one failed check (any distribution) and the stage is out of the race
    failed = pd.concat([checks, pd.DataFrame([dict(kernel="18_wgmma_3xtf32", status="fail", fp32_limit=1e-5,
                                                   m=256, n=256, k=65536)])])
    assert "18_wgmma_3xtf32" not in "\n".join(report_tables.fp32_accurate_table(cfg, ok, failed))
    # a run whose checks were not judged against cuBLAS has no such table
    assert report_tables.fp32_accurate_table(cfg, ok, checks.drop(columns="fp32_limit")) == []


def test_traffic_model_leaves_out_stages_that_do_not_run_the_shape(lab):
    # stage 19 runs only narrow outputs (runs_when N <= BN): no predicted traffic at 4096^3, a row at 8192x12x6144
    square = stage_tables.model_table(lab, pd.DataFrame(), (4096, 4096, 4096))
    narrow = stage_tables.model_table(lab, pd.DataFrame(), (8192, 12, 6144))
    assert "`11_general`" in square and "`19_narrow`" not in square
    assert "`19_narrow`" in narrow


def test_data_written_into_the_report_cannot_bring_html_or_break_out_of_its_cell():
    from sgemm_lab.report.markdown import md_text

    hostile = "<img src=x onerror=alert(1)> | ` [link](javascript:x)\n## a heading"
    text = md_text(hostile)
    assert "<" not in text and ">" not in text and "\n" not in text and "\\|" in text and "\\`" in text
    assert text.startswith("&lt;img src=x onerror=alert(1)&gt; \\| \\` \\[link\\]")


def test_a_stage_inexact_where_cublas_is_exact_is_flagged():
    """At points where cuBLAS FP32's error is 0 (small integers), an FP32-accurate stage with any error there
    is named, with how many such points and the largest error; exact stages say so; TF32 and modes that do
    not multiply are left out; no such point at all: no table."""
    import pandas as pd

    from sgemm_lab.report import accuracy

    def row(kernel, dist, k, mode, err, lib):
        return dict(kernel=kernel, distribution=dist, m=256, n=256, k=k, mode=mode, status="pass", rel_err=err,
                    cublas_rel_err=lib)

    checks = pd.DataFrame([
        row("18_wgmma_3xtf32", "integers", 4096, "beta", 1.2e-8, 0.0),
        row("18_wgmma_3xtf32", "integers", 65536, "beta0_poisoned", 0.0, 0.0),
        row("18_wgmma_3xtf32", "integers", 65536, "alpha0", 3e-8, 0.0),     # scales C only: not counted
        row("18_wgmma_3xtf32", "uniform", 4096, "beta", 9e-8, 6e-8),          # cuBLAS not exact: not counted
        row("11_general", "integers", 4096, "beta", 0.0, 0.0),
        row("11_general", "integers", 65536, "beta", 0.0, 0.0),
        row("17_wgmma_tf32", "integers", 4096, "beta", 2e-6, 0.0),            # TF32: another class
        row("cublas", "integers", 4096, "beta", 0.0, 0.0),                    # the reference itself: no row
        # NaN in the output: the error over the finite entries may be 0, or nothing finite is left (NaN)
        dict(row("12_dispatch", "integers", 4096, "beta", 0.0, 0.0), status="fail", nonfinite=5),
        dict(row("13_fused_general", "integers", 4096, "beta", float("nan"), 0.0), status="fail", nonfinite=65536),
    ])
    precision = {"18_wgmma_3xtf32": "3xtf32", "11_general": "fp32", "17_wgmma_tf32": "tf32", "cublas": "fp32",
                 "12_dispatch": "fp32", "13_fused_general": "fp32"}
    order = ["cublas", "11_general", "12_dispatch", "13_fused_general", "17_wgmma_tf32", "18_wgmma_3xtf32"]
    table, inexact = accuracy.exactness(checks, order, precision)
    lines = table.splitlines()
    assert lines[2] == "| `11_general` | fp32 | 2 | 2 | 0 | exact |"
    assert lines[3] == "| `12_dispatch` | fp32 | 1 | 0 | NaN/Inf | **inexact** at 1: integers 256x256x4096 |"
    assert lines[4] == "| `13_fused_general` | fp32 | 1 | 0 | NaN/Inf | **inexact** at 1: integers 256x256x4096 |"
    assert lines[5].startswith("| `18_wgmma_3xtf32` | 3xtf32 | 2 | 1 | 1.20e-08 | **inexact** at 1: integers 256x256x4096")
    assert len(lines) == 6 and inexact[-1] == ("`18_wgmma_3xtf32`: not exact at 1 of 2 points where cuBLAS FP32 is "
                                               "(largest error 1.20e-08: integers 256x256x4096)")
    assert accuracy.exactness(checks[checks["cublas_rel_err"] > 0], ["18_wgmma_3xtf32"], precision) is None


def test_distributions_run_at_their_own_shapes_or_the_common_ones(raw_config):
    from sgemm_lab.config import load as cfgmod

    raw_config["check"]["distributions"].append({"name": "ints", "kind": "integers", "int_max": 4,
                                                 "shapes": [[256, 256, 4096], [256, 256, 4096], [64, 32, 1000]]})
    lab = cfgmod.from_dict(raw_config)
    ints = [(s, d) for s, d in lab.check.points() if d.name == "ints"]
    assert [str(s) for s, _ in ints] == ["256x256x4096", "64x32x1000"] and ints[0][1].int_max == 4
    normal = [s for s, d in lab.check.points() if d.name == "normal"]
    assert normal == list(lab.check.distribution_shapes)


def test_the_distributions_named_are_those_the_run_ran():
    """The report names the distributions in the run's check rows, grouped by the shapes they ran at, with
    the configured kind where the name is configured: never the current config's list for an older run."""
    import pandas as pd

    from sgemm_lab.config.records import Distribution
    from sgemm_lab.report import accuracy

    rows = pd.DataFrame([dict(distribution=d, m=m, n=n, k=k) for d, (m, n, k) in [
        ("uniform", (1, 2, 3)), ("normal", (256, 192, 320)), ("normal", (256, 256, 4096)), ("old", (256, 192, 320)),
        ("old", (256, 256, 4096)), ("sparse", (256, 256, 4096)), ("normal", (256, 192, 320))]])
    groups = accuracy.distribution_groups(rows, [Distribution(name="normal", kind="normal"),
                                                 Distribution(name="sparse", kind="sparse"),
                                                 Distribution(name="integers", kind="integers")])
    assert groups == {("256x192x320", "256x256x4096"): ["normal (normal)", "old"], ("256x256x4096",): ["sparse (sparse)"]}
    assert accuracy.distribution_groups(None) == {}


def test_3xtf32_section_states_each_compensated_stages_speed_at_the_headline_shape(lab, tables):
    """Beside the errors against K, what they cost: cuBLAS FP32's time over each 3xTF32 stage's."""
    ref = ROOT / "reports" / "h100"
    bench, checks = pd.read_csv(ref / "bench.csv"), pd.read_csv(ref / "check.csv")
    text = _render(lab, tables, bench=bench, checks=checks)
    section = text.split("### 3xTF32 against K")[1].split("\n#")[0]
    ok = bench[bench.status == "ok"]
    hs = report_tables.headline_shape(lab, ok)
    cub = report_tables.row_at(ok, "cublas", hs)
    line = next(ln for ln in section.splitlines() if ln.startswith("Their speed at"))
    stated = [k for k, p in lab.precisions.items() if p == "3xtf32" and report_tables.row_at(ok, k, hs) is not None]
    assert stated
    for k in stated:
        assert f"`{k}` {cub.median_ms / report_tables.row_at(ok, k, hs).median_ms:.2f}×" in line


def test_rows_of_other_phases_reach_no_table_but_their_stage_s(lab, tables):
    """A run's profile table with rows marked by a phase (the other kernels of a stage of several): every table
    and paragraph of the report reads the main kernels' rows only, so rows of a phase, however far off, change
    nothing for a stage of one kernel; the main rows read back with a NaN phase are the main rows."""
    ncu = tables["ncu"]
    marked = ncu.assign(phase=float("nan"))  # as read back from a CSV whose main rows have an empty phase
    other = ncu[ncu.kernel == ncu.kernel.iloc[0]].assign(phase="some_other_kernel", value=1e12)
    assert _render(lab, tables, ncu=pd.concat([other, marked], ignore_index=True)) == _render(lab, tables)
