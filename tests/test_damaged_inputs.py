"""Damaged result files are refused with one line naming the file and the problem (sgemm_lab.results.io.read_table
and read_json_checked), by the compare, aggregate, plot and report steps; seeds stay exact integers."""

import shutil
from types import SimpleNamespace

import pandas as pd
import pytest
from conftest import ROOT

from sgemm_lab.pipeline import entry

from sgemm_lab.results import io
from sgemm_lab.report import compare

REF = ROOT / "reports"
FIX = ROOT / "tests" / "fixtures" / "h100"
GOOD = "kernel,m,seed\nk1,64,9223372036854775783\nk2,96,\n"


# ----------------------------------------------------------------------------------- the reader
@pytest.mark.parametrize("data, problem", [
    (None, "no such file"),
    (b"", "empty file (0 bytes)"),
    (b"kernel,m,seed\nk1,64,\x00\x00\n", "binary data (a NUL byte at offset 20)"),
    (b"kernel,m,seed\nk1,64,\xff\xfe\n", "binary data (byte 0xff at offset 20 is not UTF-8)"),
    (b"kernel,m,seed\n", "no rows (a header alone)"),
    (b"\n", "no header and no rows"),
    (b"kernel,seed\nk1,1\n", "no column 'm' in its header"),
    (b"kernel,m,seed\nk1,64,1\nk2,9", "cut short: line 3 ends without a newline"),
    (b"kernel,m,seed\nk1,64,1\nk2,96\n", "cut short: line 3 has 2 of the header's 3 fields"),
    (b"kernel,m,seed\nk1,64,1,7\n", "line 2 has 4 fields, the header 3"),
    (b"kernel,m,seed\nk1,64,1\n\nk2,96,2\n", "line 3 is blank"),
    (b'kernel,m,seed\nk1,64,"12\n', "cut short: a quoted field is still open"),
    (b"kernel,m,seed\nk1,sixty-four,1\n", "column 'm' holds 'sixty-four', not a number"),
])
def test_read_table_refuses_a_damaged_table_naming_file_and_problem(tmp_path, data, problem):
    path = tmp_path / "bench.csv"
    if data is not None:
        path.write_bytes(data)
    with pytest.raises(io.DamagedFile) as err:
        io.read_table(path, required=("kernel", "m"), numbers=("m",), what="a bench table")
    line = str(err.value)
    assert line.startswith(f"{path} (a bench table): ") and problem in line and "\n" not in line


def test_read_table_returns_the_table_with_exact_seeds(tmp_path):
    path = tmp_path / "bench.csv"
    path.write_text(GOOD)
    df = io.read_table(path, required=("kernel", "m"), ints=("seed",))
    assert list(df.kernel) == ["k1", "k2"] and str(df.seed.dtype) == "Int64"
    assert df.seed.iloc[0] == 2**63 - 25 and pd.isna(df.seed.iloc[1])
    plain = io.read_table(path)
    assert plain.seed.dtype == float and int(plain.seed.iloc[0]) != 2**63 - 25  # what pandas alone does


def test_tables_a_step_writes_empty_are_accepted_where_allowed(tmp_path):
    header_only, no_columns = tmp_path / "a.csv", tmp_path / "b.csv"
    io.write_csv(header_only, [], columns=["kernel", "status"])
    io.write_csv(no_columns, [])
    assert list(io.read_table(header_only, required=("kernel",), rows=False).columns) == ["kernel", "status"]
    empty = io.read_table(no_columns, required=("kernel", "status"), rows=False)
    assert empty.empty and list(empty.columns) == ["kernel", "status"]


@pytest.mark.parametrize("text, problem", [
    ('{"gpu": {"name": "X"}}', "cut short: line 1 ends without a newline"),
    ('{"gpu": {"name": \n', "not JSON"),
    ("", "empty file"),
])
def test_read_json_checked_refuses_a_damaged_record(tmp_path, text, problem):
    path = tmp_path / "environment.json"
    path.write_text(text)
    with pytest.raises(io.DamagedFile, match=problem):
        io.read_json_checked(path)
    path.write_text(text + "\n" if text.startswith('{"gpu": {"name": "X"}}') else '{"a": 1}\n')
    assert isinstance(io.read_json_checked(path), dict)


# ----------------------------------------------------------------------------------- compare
@pytest.fixture
def runs(tmp_path, monkeypatch):
    """reports/h100 and reports/h200 (bench table and environment record) in a temporary directory."""
    for run in ("h100", "h200"):
        (tmp_path / "reports" / run).mkdir(parents=True)
        for name in ("bench.csv", "environment.json"):
            shutil.copy(REF / run / name, tmp_path / "reports" / run / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _compare(tmp_path, raw_config, runs=("h100", "h200")):
    out = {k: tmp_path / "out" / f"compare.{k}" for k in ("md", "csv", "png")}
    smk = SimpleNamespace(input=SimpleNamespace(bench=[f"reports/{r}/bench.csv" for r in runs]),
                          output=SimpleNamespace(**{k: str(v) for k, v in out.items()}), config=raw_config,
                          wildcards=SimpleNamespace(), log=[str(tmp_path / "compare.log")],
                          params=SimpleNamespace(runs=list(runs)))
    entry.main("compare", smk)
    return out


def _refused(capsys, tmp_path, raw_config) -> str:
    with pytest.raises(SystemExit) as exit_:
        _compare(tmp_path, raw_config)
    assert exit_.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("sgemm-lab compare: reports/h200/bench.csv: "), err
    assert "Traceback" not in (tmp_path / "compare.log").read_text()
    assert not (tmp_path / "out").exists()  # nothing written
    return err[0]


def _cut(path, fraction=0.5):
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * fraction)])


def test_a_bench_table_cut_in_the_middle_is_refused_not_compared_in_part(runs, raw_config, capsys):
    """It used to compare silently without cuBLAS and eight stages."""
    _cut(runs / "reports" / "h200" / "bench.csv")
    assert "cut short: line" in _refused(capsys, runs, raw_config)


@pytest.mark.parametrize("damage, problem", [
    (lambda p: p.write_bytes(b""), "empty file (0 bytes)"),
    (lambda p: p.write_bytes(b"\x00" * 64 + p.read_bytes()[64:]), "binary data (a NUL byte at offset 0)"),
    (lambda p: p.write_text(p.read_text().splitlines()[0] + "\n"), "no rows (a header alone)"),
    (lambda p: p.write_text(p.read_text().replace("kernel,m,n,k", "impl,m,n,k", 1)), "no column 'kernel'"),
    (lambda p: p.write_text(p.read_text().replace(",gpu,", ",gpu_name,", 1)), "no column 'gpu'"),
    (lambda p: p.unlink(), "no such file"),
])
def test_a_damaged_bench_table_is_one_line_naming_it(runs, raw_config, capsys, damage, problem):
    damage(runs / "reports" / "h200" / "bench.csv")
    assert problem in _refused(capsys, runs, raw_config)


def test_rows_of_another_gpu_or_commit_are_refused(runs, raw_config, capsys):
    env = runs / "reports" / "h200" / "environment.json"
    shutil.copy(REF / "h100" / "environment.json", env)  # h200's rows beside h100's record
    line = _refused(capsys, runs, raw_config)
    assert "its rows name GPU NVIDIA H200, not the NVIDIA H100 80GB HBM3 of reports/h200/environment.json" in line
    shutil.copy(REF / "h200" / "environment.json", env)
    record = io.read_json(env)
    commit = record["git_commit"]
    record["git_commit"] = "0123456789abcdef"
    io.write_json(env, record)
    assert f"its rows name commit {commit}" in _refused(capsys, runs, raw_config)
    record["git_commit"] = commit[:7]  # an abbreviated commit is the same commit
    io.write_json(env, record)
    _compare(runs, raw_config)


def test_a_table_mixing_two_runs_is_refused(runs, raw_config, capsys):
    bench = runs / "reports" / "h200" / "bench.csv"
    own = pd.read_csv(bench)
    rows = pd.concat([own, pd.read_csv(REF / "h100" / "bench.csv").head(3)])
    io.write_csv(bench, rows)
    assert (f"rows of 2 GPUs ({len(own)} rows NVIDIA H200, 3 rows NVIDIA H100 80GB HBM3)"
            in _refused(capsys, runs, raw_config))
    (runs / "reports" / "h200" / "environment.json").unlink()  # still one run, one GPU, without a record
    assert "rows of 2 GPUs" in _refused(capsys, runs, raw_config)
    rows = pd.read_csv(REF / "h200" / "bench.csv")
    rows.loc[rows.index[:5], "git_commit"] = "a6e82da39d2071e2b5c95f36bca896cfe2f87ffa"
    io.write_csv(bench, rows)
    assert "rows of 2 commits" in _refused(capsys, runs, raw_config)


def test_implementations_in_one_run_only_are_listed_on_the_page_and_in_the_log(runs, raw_config, capsys):
    bench = runs / "reports" / "h200" / "bench.csv"
    rows = pd.read_csv(bench)
    rows = rows[~rows.kernel.isin(["cublas_tf32", "01_naive"])]
    rows.loc[rows.kernel == "02_coalesced", "verified"] = False
    io.write_csv(bench, rows)
    out = _compare(runs, raw_config)
    text = out["md"].read_text()
    # 01_naive, cublas_tf32, and the stages added after the h200 run, in ladder order (baselines last)
    h100_only = sorted(set(pd.read_csv(REF / "h100" / "bench.csv").kernel) - set(rows.kernel),
                       key=lambda k: (k.startswith("cublas"), k))
    # and the stages the h100 run predates
    h200_only = sorted(set(rows.kernel) - set(pd.read_csv(REF / "h100" / "bench.csv").kernel))
    assert {"01_naive", "cublas_tf32"} <= set(h100_only)
    assert (f"**In one run only** (not compared): in **h100** only: {', '.join(f'`{k}`' for k in h100_only)}; "
            f"in **h200** only: {', '.join(f'`{k}`' for k in h200_only) or 'none'}. Timed in both, but at no shape "
            "verified in both: `02_coalesced`.") in text
    log = (runs / "compare.log").read_text()
    assert f"not compared, timed in h100 only: {', '.join(h100_only)}" in log
    assert not h200_only or f"not compared, timed in h200 only: {', '.join(h200_only)}" in log
    assert "timed in both, at no shape verified in both: 02_coalesced" in log
    assert "01_naive" not in set(pd.read_csv(out["csv"]).kernel)
    shutil.copy(REF / "h200" / "bench.csv", bench)
    h100 = runs / "reports" / "h100" / "bench.csv"  # the stages one run has and the other lacks, dropped
    rows, other = pd.read_csv(h100), pd.read_csv(bench)
    both = set(rows.kernel) & set(other.kernel)
    io.write_csv(h100, rows[rows.kernel.isin(both)])
    io.write_csv(bench, other[other.kernel.isin(both)])
    text = _compare(runs, raw_config)["md"].read_text()
    assert "**In one run only**: none; both runs timed the same implementations" in text
    capsys.readouterr()


def test_compare_target_names_a_damaged_table_again(runs):
    _cut(runs / "reports" / "h200" / "bench.csv")
    line = compare.target(["h100", "h200"], ["reports/h100/bench.csv", "reports/h200/bench.csv"], md="x.md",
                          log=runs / "target.log")
    assert line.startswith("sgemm-lab compare: reports/h200/bench.csv: cut short")
    assert not (runs / "target.log").exists()
    shutil.copy(REF / "h200" / "bench.csv", runs / "reports" / "h200" / "bench.csv")
    assert compare.target(["h100", "h200"], ["reports/h100/bench.csv", "reports/h200/bench.csv"], md="x.md",
                          log=runs / "target.log") is None
    assert "compare: set at least two runs" in compare.target(["h100"], [], md="x.md", log=runs / "target.log")


# ------------------------------------------------------------------------- aggregate, plot, report
def _smk(raw_config, tmp_path, input, output, name, **params):
    return SimpleNamespace(input=SimpleNamespace(**input),
                           output=SimpleNamespace(**output) if isinstance(output, dict) else output,
                           config=raw_config, wildcards=SimpleNamespace(), log=[str(tmp_path / f"{name}.log")],
                           params=SimpleNamespace(**params))


def _stage_inputs(tmp_path, seed=2**63 - 25):
    """Per-stage bench tables and check records as the bench and check steps write them (exact integer
    seeds, none for a skipped point), from the H100 fixture; one stage's points get ``seed``."""
    raw = pd.read_csv(FIX / "bench.csv").drop(columns=["pct_cublas", "source_sha256", "compile_options", "gpu",
                                                       "driver", "git_commit"])
    checks = pd.read_csv(FIX / "check.csv")
    (tmp_path / "bench").mkdir()
    benches, records = [], []
    for impl, g in raw.groupby("kernel"):
        rows = [{k: v for k, v in r.items() if not (isinstance(v, float) and v != v)} for r in g.to_dict("records")]
        for i, r in enumerate(rows):
            r["seed"] = None if r["status"] == "skipped" else (seed if impl == "01_naive" else 1000 + i)
        benches.append(tmp_path / "bench" / f"{impl}.csv")
        io.write_csv(benches[-1], rows, columns=list(raw.columns))
    for impl, g in checks.groupby("kernel"):
        points = [{k: v for k, v in r.items() if not (isinstance(v, float) and v != v)} for r in g.to_dict("records")]
        for i, p in enumerate(points):
            p["seed"] = None if p["status"] == "skipped" else (seed if impl == "01_naive" else 2000 + i)
            if p["seed"] is None:
                p.pop("seed")
        records.append(tmp_path / f"check_{impl}.json")
        io.write_json(records[-1], {"kernel": impl, "status": "pass", "points": points})
    builds = []
    for rec in pd.read_csv(FIX / "build.csv").to_dict("records"):
        builds.append(tmp_path / f"build_{rec['kernel']}.json")
        io.write_json(builds[-1], rec)
    return dict(bench=benches, check=records, build=builds, profiles=[FIX / "ncu_metrics.csv"],
                sanitize=[FIX / "sanitize.csv"], env=FIX / "environment.json")


def _aggregate_outputs(out):
    return {k: out / f"{k}.csv" for k in ("bench", "check", "build", "sanitize")} | dict(
        env=out / "environment.json", ncu=out / "ncu_metrics.csv")


def test_aggregate_keeps_seeds_exact(raw_config, tmp_path):
    inputs, out = _stage_inputs(tmp_path), tmp_path / "reports"
    entry.main("aggregate", _smk(raw_config, tmp_path, inputs, _aggregate_outputs(out), "aggregate"))
    for table in ("bench", "check"):
        text = (out / f"{table}.csv").read_text()
        assert "9223372036854775783" in text and "e+18" not in text
        df = io.read_table(out / f"{table}.csv", ints=("seed",))
        naive = df[(df.kernel == "01_naive") & df.seed.notna()]
        assert len(naive) and (naive.seed == 2**63 - 25).all()
        assert df.loc[df.status == "skipped", "seed"].isna().all() and df.seed.isna().any()
        others = set(df.loc[df.kernel == "02_coalesced", "seed"].dropna())
        assert others and others <= set(range(1000, 1100)) | set(range(2000, 2100))


def test_aggregate_refuses_a_damaged_stage_table_and_writes_nothing(raw_config, tmp_path, capsys):
    inputs, out = _stage_inputs(tmp_path), tmp_path / "reports"
    _cut(inputs["bench"][3], 0.6)
    with pytest.raises(SystemExit) as exit_:
        entry.main("aggregate", _smk(raw_config, tmp_path, inputs, _aggregate_outputs(out), "aggregate"))
    assert exit_.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"sgemm-lab aggregate: {inputs['bench'][3]} (a stage's bench table): "
                                               "cut short"), err
    assert not out.exists()
    io.write_json(inputs["check"][0], {"kernel": "x", "status": "pass"})
    inputs["bench"][3].write_text(inputs["bench"][2].read_text())
    with pytest.raises(SystemExit):
        entry.main("aggregate", _smk(raw_config, tmp_path, inputs, _aggregate_outputs(out), "aggregate"))
    assert "not the record expected (a JSON object with 'points')" in capsys.readouterr().err


def test_plot_and_report_refuse_a_damaged_table_and_keep_what_they_wrote(raw_config, tmp_path, capsys):
    """A damaged input is not one figure's problem: the plot step fails (its figures untouched) rather
    than drawing every figure as a placeholder."""
    out = tmp_path / "reports"
    out.mkdir()
    for name in ("bench.csv", "check.csv", "build.csv", "ncu_metrics.csv", "sanitize.csv", "environment.json"):
        shutil.copy(FIX / name, out / name)
    figs = {n: out / "figures" / f"{n}.png" for n in ("size", "ladder", "accuracy", "roofline", "levels", "stalls", "memory")}
    (out / "figures").mkdir()
    for f in figs.values():
        f.write_bytes(b"\x89PNG earlier figure")
    _cut(out / "bench.csv", 0.7)
    plot = _smk(raw_config, tmp_path, dict(bench=out / "bench.csv", ncu=out / "ncu_metrics.csv",
                                           ceilings=FIX / "ceilings.json", check=out / "check.csv"), figs, "plot")
    with pytest.raises(SystemExit) as exit_:
        entry.main("plot", plot)
    assert exit_.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"sgemm-lab plot: {out / 'bench.csv'} (the run's bench table): cut short")
    assert all(f.read_bytes() == b"\x89PNG earlier figure" for f in figs.values())
    shutil.copy(FIX / "bench.csv", out / "bench.csv")
    (out / "check.csv").write_bytes(b"\x00" * 10)
    report_md = out / "report.md"
    report_md.write_text("the earlier report\n")
    with pytest.raises(SystemExit):
        entry.main("report", _smk(raw_config, tmp_path, dict(
            bench=out / "bench.csv", check=out / "check.csv", build=out / "build.csv", env=out / "environment.json",
            figures=list(figs.values()), ncu=out / "ncu_metrics.csv", sanitize=out / "sanitize.csv",
            ceilings=FIX / "ceilings.json", sweeps=[]), [report_md], "report", start=tmp_path / "none.json"))
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{out / 'check.csv'} (the run's check table): binary data" in err[0]
    assert report_md.read_text() == "the earlier report\n"
