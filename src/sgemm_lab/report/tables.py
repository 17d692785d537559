"""Tidy results -> markdown report. Every number in the report is read from the results files.

The markdown helpers and the tables of the measurements: bench rows with their % of cuBLAS, the suite
and FP32-accurate tables, the ladder, the headline shape, accuracy, SASS, CPU stages, the fused
epilogue and the sanitizers (``sections`` puts them in the report).
"""

from __future__ import annotations

import math

import pandas as pd

from ..config.records import BASELINES, FP32_ACCURATE, GPU_BASELINES, LabConfig
from .markdown import md_table, md_text
from .numbers import mark, rate, ratio_text, unsteady_note

BASELINE_TITLES = {"cublas": "cuBLAS SGEMM (strict FP32)", "cublas_tf32": "cuBLAS SGEMM (TF32 tensor-op math)",
                   "numpy": "NumPy float32 matmul (CPU BLAS)"}


def collect_bench(frames: list[pd.DataFrame], order: list[str], tf32: tuple[str, ...] = ()) -> pd.DataFrame:
    """Concatenate per-implementation bench tables and add % of cuBLAS at the same shape: of strict-FP32
    cuBLAS, or for the TF32-class implementations ``tf32`` of cuBLAS in TF32 mode (column ``baseline``
    names which)."""
    df = pd.concat([f for f in frames if len(f)], ignore_index=True) if frames else pd.DataFrame()
    if df.empty:
        return df
    df["kernel"] = df["kernel"].astype(str)
    df["baseline"] = ["cublas_tf32" if k in tf32 else "cublas" for k in df["kernel"]]
    ref = df[df["kernel"].isin(GPU_BASELINES) & (df["status"] == "ok")][["kernel", "m", "n", "k", "tflops"]]
    ref = ref.rename(columns={"kernel": "baseline", "tflops": "cublas_tflops"})
    df = df.merge(ref, on=["baseline", "m", "n", "k"], how="left")
    df["pct_cublas"] = 100.0 * df["tflops"] / df["cublas_tflops"]
    df = df.drop(columns=["cublas_tflops"])
    rank = {k: i for i, k in enumerate(order)}
    df["_r"] = df["kernel"].map(lambda k: rank.get(k, len(rank)))
    df["_f"] = df["m"] * df["n"] * df["k"]
    return df.sort_values(["_r", "_f", "m", "n", "k"]).drop(columns=["_r", "_f"]).reset_index(drop=True)


def shape_label(m: int, n: int, k: int) -> str:
    return f"{m}³" if m == n == k else f"{m}×{n}×{k}"


def fmt_value(x, spec: str, dash: str = "–") -> str:
    return dash if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def check_status(checks: pd.DataFrame, kernel: str) -> str:
    rows = checks[checks["kernel"] == kernel] if len(checks) else checks
    if rows is None or rows.empty:
        return "not checked"
    ran = rows[rows["status"] != "skipped"]
    if ran.empty:
        return "all shapes skipped"
    failed = ran[ran["status"] == "fail"]
    shapes = ran[["m", "n", "k"]].drop_duplicates()
    if len(failed):
        return f"**FAIL** ({len(failed)} of {len(ran)} runs)"
    return f"pass ({len(shapes)} shape{'s' if len(shapes) != 1 else ''}, max rel. err {ran['rel_err'].max():.1e})"


def sass_table(cfg: LabConfig, builds: pd.DataFrame) -> str | None:
    """Per CUDA stage, its SASS instruction counts by family (build record columns ``sass_*``)."""
    from ..gpu.sass import FAMILIES

    if builds is None or builds.empty or "sass_total" not in builds:
        return None
    rows = []
    for spec in cfg.kernels:
        r = builds[builds["kernel"] == spec.id]
        if r.empty or pd.isna(r.iloc[0].get("sass_total")):
            continue
        r = r.iloc[0]
        rows.append([f"`{spec.id}`", spec.precision, *(fmt_value(r.get(f"sass_{f.lower()}"), ".0f") for f in FAMILIES),
                     fmt_value(r["sass_total"], ".0f")])
    if not rows:
        return None
    return md_table(["stage", "precision", *FAMILIES, "all"], rows, align="ll" + "r" * (len(FAMILIES) + 1))


def accuracy_table(cfg: LabConfig, checks: pd.DataFrame) -> str | None:
    """Measured error of every implementation over the check runs (all shapes and modes): its precision
    class, the median and the worst relative error, and the error as a fraction of its tolerance at
    the worst run, so that the accuracy side of each stage's speed is read in one place."""
    if checks is None or checks.empty or "rel_err" not in checks:
        return None
    ran = checks[(checks["status"] != "skipped") & checks["rel_err"].notna()]
    precision = cfg.precisions
    rows = []
    for impl in cfg.implementations:
        mine = ran[ran["kernel"] == impl]
        if mine.empty:
            continue
        worst = mine.loc[mine["rel_err"].idxmax()]
        rows.append([f"`{impl}`", precision.get(impl, "fp32"), str(len(mine)), f"{mine['rel_err'].median():.2e}",
                     f"{worst['rel_err']:.2e}", f"{shape_label(worst['m'], worst['n'], worst['k'])} ({worst['mode']})",
                     f"{worst['rel_err'] / worst['tolerance']:.2f}"])
    if not rows:
        return None
    return md_table(["implementation", "precision", "runs", "median rel. error", "worst rel. error", "worst at",
                     "worst / tolerance"], rows, align="llrrrlr")


def stage_problem(outcomes, kernel: str) -> str | None:
    """'**build failed**' (etc.) when a step of ``kernel`` failed or did not run, for the ladder table."""
    for r in outcomes or ():
        if r.kernel == kernel and r.status in ("failed", "not run") and r.step in ("build", "check", "bench"):
            return f"**{r.step} {'failed' if r.status == 'failed' else 'not run'}**"
    return None


def ladder_rows(cfg: LabConfig, bench: pd.DataFrame) -> pd.DataFrame:
    """The rows of the size sweep: without the shapes that only the suite or the held-out draw times (they
    have their own tables, and only the stages in them have them)."""
    extra = {(s.m, s.n, s.k) for s in cfg.suite + cfg.held_out} - {(s.m, s.n, s.k) for s in cfg.bench.shapes}
    if not extra or bench.empty:
        return bench
    keys = list(zip(bench.m, bench.n, bench.k))
    return bench[[key not in extra for key in keys]]


def suite_table(cfg: LabConfig, ok: pd.DataFrame, ceilings: dict | None = None) -> list[str]:
    """Best verified stage against cuBLAS on every suite shape: the ratio of medians, its spread (the
    stage's quartiles against cuBLAS's), then the geometric mean and the minimum over the suite; with the
    measured ceilings, the memory-bound shapes' bandwidth against the copy (:func:`memory_bound_lines`)."""
    if not cfg.suite:
        return []
    stages = [k.id for k in cfg.kernels if (k.backend == "cuda" or k.autotuned) and k.precision == "fp32"]
    rows, ratios, missing, points = [], [], [], []
    for s in cfg.suite:
        label = shape_label(s.m, s.n, s.k)
        ref, best = suite_point(ok, stages, s)
        if best is None:
            missing.append(label)
            rows.append([label, f"{ref.tflops:.2f}" if ref is not None else "–",
                         "no verified stage" if ref is not None else "–", "–", "–", "–"])
            continue
        ratio = ref.median_ms / best.median_ms
        low, high = ref.q1_ms / best.q3_ms, ref.q3_ms / best.q1_ms
        ratios.append((ratio, label))
        points.append((s, ref, best))
        rows.append([label, f"{ref.tflops:.2f}", f"`{best.kernel}`", f"{best.tflops:.2f}",
                     f"**{ratio:.3f}×**{mark(ref, best)}", f"{low:.3f}–{high:.3f}"])
    out = ["## Against cuBLAS on the suite", "",
           "The best verified strict-FP32 stage on each shape of the suite (`suite:` in the config), against "
           "cuBLAS strict FP32 timed in the same run. Ratio = cuBLAS median time / stage median time (above 1: the stage is "
           "faster); the range pairs the stage's quartiles with cuBLAS's opposite quartiles.", "",
           md_table(["shape", "cuBLAS TFLOP/s", "best stage", "TFLOP/s", "ratio", "ratio range (quartiles)"], rows,
                    align="lrlrrr")] + unsteady_note(rows)
    if ratios:
        out += ["", over_suite(ratios)
                + (f" No verified stage or no cuBLAS timing at: {', '.join(missing)} (not in the mean)." if missing else "")]
    out += memory_bound_lines(points, ceilings)
    return out + [""]


def min_bytes(m: int, n: int, k: int) -> int:
    """The bytes a product must move at least: A and B read once, C read and written (beta != 0)."""
    return 4 * (m * k + k * n + 2 * m * n)


def memory_bound_lines(points: list, ceilings: dict | None) -> list[str]:
    """For each suite shape (``points``: (shape, cuBLAS's row, the best stage's row) as the suite table
    found them) below the machine balance (flops per byte of :func:`min_bytes` under the FMA probe's
    rate over the copy's), the best stage's and cuBLAS's bandwidth over those bytes, as a share of the
    measured copy: how close a memory-bound shape comes to DRAM's roof."""
    if not ceilings or not ceilings.get("dram_gbps") or not ceilings.get("fp32_tflops"):
        return []
    copy = ceilings["dram_gbps"]
    balance = ceilings["fp32_tflops"] * 1e12 / (copy * 1e9)
    parts = []
    for s, ref, best in points:
        nbytes = min_bytes(s.m, s.n, s.k)
        if 2.0 * s.m * s.n * s.k / nbytes >= balance:
            continue
        gbps = nbytes / (best.median_ms * 1e-3) / 1e9
        ref_gbps = nbytes / (ref.median_ms * 1e-3) / 1e9
        parts.append(f"{shape_label(s.m, s.n, s.k)}: `{best.kernel}` at **{gbps:.0f} GB/s, {100 * gbps / copy:.1f}% of "
                     f"the copy** (cuBLAS {ref_gbps:.0f} GB/s, {100 * ref_gbps / copy:.1f}%)")
    if not parts:
        return []
    return ["", f"Memory-bound shapes (fewer flops per byte than the FMA probe's rate over the copy's, "
                f"{balance:.1f} here; bytes: A and B read once, C read and written): " + "; ".join(parts)
                + f". The measured device-to-device copy: {copy:.0f} GB/s (read + write)."]


def suite_point(ok: pd.DataFrame, stages: list[str], s) -> tuple[pd.Series | None, pd.Series | None]:
    """cuBLAS's row at suite shape ``s`` and the fastest verified row of ``stages`` there (None where
    either is missing: the shape is left out of the ratios)."""
    ref = row_at(ok, "cublas", (s.m, s.n, s.k))
    here = ok[(ok.m == s.m) & (ok.n == s.n) & (ok.k == s.k) & ok.kernel.isin(stages)]
    here = here[here.verified.astype(bool)] if "verified" in here else here.iloc[0:0]
    return ref, (here.loc[here.tflops.idxmax()] if ref is not None and len(here) else None)


def geomean(values) -> float:
    """The geometric mean of positive numbers (at least one)."""
    values = list(values)
    return math.exp(sum(map(math.log, values)) / len(values))


def over_suite(ratios: list[tuple[float, str]]) -> str:
    """The geometric mean and the minimum of (ratio, shape label) pairs, as the suite tables state them."""
    geo = geomean(r for r, _ in ratios)
    low, at = min(ratios)
    return (f"Geometric mean over {len(ratios)} shape{'s' if len(ratios) > 1 else ''}: **{geo:.3f}×**; "
            f"minimum **{low:.3f}×** at {at}.")




# how the report names each FP32-accurate class beyond strict FP32
CLASS_NAMES = {"3xtf32": "compensated TF32 (3xTF32)", "ozaki2": "INT8 emulation (Ozaki scheme II)"}


def fp32_accurate_stages(cfg: LabConfig, checks: pd.DataFrame | None) -> list[str]:
    """The GPU stages that earned the FP32-accurate label in this run: a class of FP32_ACCURATE, and every
    check that ran passed, each judged against cuBLAS strict FP32 on the same inputs (``fp32_limit``;
    a run without that column judged no stage so, and has none)."""
    if checks is None or checks.empty or "fp32_limit" not in checks:
        return []
    out = []
    for k in cfg.kernels:
        if k.precision not in FP32_ACCURATE or not (k.backend == "cuda" or k.autotuned):
            continue
        ran = checks[(checks["kernel"] == k.id) & checks["status"].isin(["pass", "fail"])]
        if len(ran) and (ran["status"] == "pass").all():
            out.append(k.id)
    return out


def fp32_accurate_table(cfg: LabConfig, ok: pd.DataFrame, checks: pd.DataFrame | None) -> list[str]:
    """Per suite shape, the fastest FP32-accurate implementation (stages of the FP32-accurate classes that
    passed the FP32 limit, and cuBLAS itself) and the best such stage against cuBLAS strict FP32, with
    the geometric mean and minimum; then which to use where."""
    stages = fp32_accurate_stages(cfg, checks)
    if not cfg.suite or not stages:
        return []
    rows, ratios, use = [], [], {}
    for s in cfg.suite:
        label = shape_label(s.m, s.n, s.k)
        ref, best = suite_point(ok, stages, s)
        if best is None:
            rows.append([label, "–" if ref is None else f"{ref.tflops:.2f}", "no verified FP32-accurate stage", "–",
                         "–", "`cublas`" if ref is not None else "–"])
            if ref is not None:
                use.setdefault("cublas", []).append(label)
            continue
        ratio = ref.median_ms / best.median_ms
        ratios.append((ratio, label))
        winner = best.kernel if ratio > 1 else "cublas"
        use.setdefault(winner, []).append(label)
        rows.append([label, f"{ref.tflops:.2f}", f"`{best.kernel}` ({cfg.precisions.get(best.kernel, 'fp32')})",
                     f"{best.tflops:.2f}", f"**{ratio:.3f}×**{mark(ref, best)}", f"`{winner}`"])
    by_class = {cls: [k for k in stages if cfg.precisions.get(k) == cls] for cls in FP32_ACCURATE if cls != "fp32"}
    emulated = "; ".join(f"{CLASS_NAMES[cls]} {', '.join(f'`{k}`' for k in ks)}" for cls, ks in by_class.items() if ks)
    out = ["### FP32-accurate: the best of strict FP32, 3xTF32 and INT8 emulation", "",
           "The same shapes, the race open to every stage that earned FP32 accuracy in this run's checks (class "
           f"{', '.join(f'`{c}`' for c in FP32_ACCURATE)}, every check passed, each within the FP32 limit relative "
           f"to cuBLAS on the same inputs): {len(stages)} stages, beyond strict FP32 {emulated or 'none'}. Ratio as "
           "above; the last column is the fastest FP32-accurate implementation there, cuBLAS included.", "",
           md_table(["shape", "cuBLAS TFLOP/s", "best FP32-accurate stage", "TFLOP/s", "ratio", "fastest"], rows,
                    align="lrlrrl")] + unsteady_note(rows)
    if ratios:
        out += ["", over_suite(ratios)]
    out += ["", "Which to use for FP32 accuracy on these shapes: "
            + "; ".join(f"`{k}` at {', '.join(v)}" for k, v in sorted(use.items(), key=lambda kv: -len(kv[1]))) + "."]
    return out + [""]


def ladder_table(cfg: LabConfig, bench: pd.DataFrame, checks: pd.DataFrame, outcomes=()) -> str:
    bench = ladder_rows(cfg, bench)
    shapes = bench[["m", "n", "k"]].drop_duplicates().assign(f=lambda d: d.m * d.n * d.k).sort_values("f")
    header = ["stage", "check"] + [shape_label(*s) for s in shapes[["m", "n", "k"]].itertuples(index=False)]
    titles = {k.id: k.title for k in cfg.kernels} | BASELINE_TITLES
    rows = []
    for impl in cfg.implementations:
        sub = bench[bench["kernel"] == impl]
        cells = []
        for m, n, k in shapes[["m", "n", "k"]].itertuples(index=False):
            r = sub[(sub.m == m) & (sub.n == n) & (sub.k == k)]
            if r.empty:
                cells.append("–")
                continue
            r = r.iloc[0]
            if r["status"] == "skipped":
                cells.append("skipped")
            elif r["status"] not in ("ok", "failed"):  # error, timeout, crashed: listed under failures
                cells.append(f"**{r['status']}**")
            elif r["tflops"] < 0.1:  # CPU stages: GFLOP/s reads better
                cells.append(rate(r["tflops"]))
            elif impl == "cublas":
                cells.append(f"{r['tflops']:.2f}{mark(r)}")
            else:
                wrong = "" if r["verified"] else " ✗"
                of = " of TF32" if r.get("baseline") == "cublas_tf32" else ""
                cells.append(f"{r['tflops']:.2f}{mark(r)} ({fmt_value(r['pct_cublas'], '.1f')}%{of}){wrong}")
        problem = stage_problem(outcomes, impl)
        status = check_status(checks, impl)
        status = f"{problem} (see Failures)" if problem and status in ("not checked", "all shapes skipped") else status
        rows.append([f"`{impl}` {titles.get(impl, '')}", status, *cells])
    return md_table(header, rows, align="ll" + "r" * (len(header) - 2))


def headline_shape(cfg: LabConfig, ok: pd.DataFrame) -> tuple[int, int, int] | None:
    """The sweep shape if it was benchmarked (4096^3 by default), else the largest square size timed."""
    sh = cfg.sweep.shape
    if len(ok[(ok.m == sh.m) & (ok.n == sh.n) & (ok.k == sh.k)]):
        return (sh.m, sh.n, sh.k)
    sq = ok[(ok.m == ok.n) & (ok.n == ok.k)]
    if sq.empty:
        return None
    r = sq.loc[sq.m.idxmax()]
    return (int(r.m), int(r.n), int(r.k))


def row_at(df: pd.DataFrame, impl: str, shape) -> pd.Series | None:
    m, n, k = shape
    r = df[(df.kernel == impl) & (df.m == m) & (df.n == n) & (df.k == k)]
    return r.iloc[0] if len(r) else None


def headline_table(cfg: LabConfig, ok: pd.DataFrame, shape) -> str:
    rows, prev = [], None
    for impl in cfg.implementations:
        r = row_at(ok, impl, shape)
        if r is None:
            continue
        step = f"{r.tflops / prev:.2f}×" if prev and impl not in BASELINES else ""
        of = " of TF32" if r.get("baseline") == "cublas_tf32" else ""
        rows.append([f"`{impl}`", f"{r.tflops:.2f}{mark(r)}", fmt_value(r.pct_cublas, ".1f") + "%" + of, step,
                     f"{r.median_ms:.3f}", f"{r.iqr_ms:.3f}"])
        if impl not in BASELINES:
            prev = r.tflops
    return md_table(["stage", "TFLOP/s", "% of cuBLAS", "vs. previous stage", "median ms", "IQR ms"], rows)


def cpu_table(cfg: LabConfig, ok: pd.DataFrame) -> str | None:
    """GPU speed-up over the CPU stages and NumPy at the largest size all of them ran."""
    cpu_ids = [k.id for k in cfg.kernels if k.backend == "host"] + (["numpy"] if cfg.numpy else [])
    cpu = ok[ok.kernel.isin(cpu_ids)]
    if cpu.empty:
        return None
    sizes = cpu.groupby(["m", "n", "k"]).kernel.nunique()
    full = sizes[sizes == sizes.max()]
    m, n, k = max(full.index, key=lambda t: t[0] * t[1] * t[2])
    refs = {c: row_at(ok, c, (m, n, k)) for c in cpu_ids}
    refs = {c: r for c, r in refs.items() if r is not None}
    rows = []
    for impl in cfg.implementations:
        r = row_at(ok, impl, (m, n, k))
        if r is None:
            continue
        rows.append([f"`{impl}`", rate(r.tflops)] + [ratio_text(r.tflops / ref.tflops) for ref in refs.values()])
    return (f"At {shape_label(m, n, k)} (CPU stages are capped at {cfg.cpu.max_dim}); throughput (as in the ladder: "
            "TFLOP/s, GFLOP/s below 0.1 TFLOP/s) and speed-up over each CPU implementation:\n\n"
            + md_table(["stage", "throughput"] + [f"vs `{c}`" for c in refs], rows))



def epilogue_table(df: pd.DataFrame) -> str:
    """D = act(alpha*A@B + beta*C + bias): the stage vs cuBLASLt's epilogue vs cuBLAS + a separate kernel."""
    timed = df[~df["padded"]] if len(df) else df
    rows = []
    for (m, n, k, act), g in timed.groupby(["m", "n", "k", "act"], sort=False):
        clean = ~g["disturbed"].fillna(False).astype(bool) if "disturbed" in g else True
        best = g[(g.verified == True) & clean]["tflops"].max()  # noqa: E712
        for r in g.itertuples():
            mark = "" if r.verified else f" ✗ ({md_text(r.reason)})"
            if str(getattr(r, "disturbed", False)) == "True":
                mark += " (disturbed: other work on the GPU)"
            rows.append([shape_label(m, n, k), act, f"`{r.implementation}`", f"{r.tflops:.2f}{mark}",
                         f"{r.median_ms:.3f}", f"{100 * r.tflops / best:.0f}%" if best == best else "–"])
    padded = df[df["padded"]] if len(df) else df
    pad_line = ""
    if len(padded):
        p = padded.iloc[0]
        ok = padded.groupby("implementation").verified.all()
        pad_line = (f"\n\nPadded leading dimensions (lda={int(p.lda)}, ldb={int(p.ldb)}, ldc={int(p.ldc)}, "
                    f"ldd={int(p.ldd)}, NaN in the padding) at {shape_label(p.m, p.n, p.k)}, every activation: "
                    + ", ".join(f"`{i}` {'verified' if v else '**FAIL**'}" for i, v in ok.items()) + ".")
    return ("Fused epilogue D = act(alpha·A@B + beta·C + bias), bias per column, against cuBLASLt's epilogue "
            "and cuBLAS followed by a separate bias + activation kernel (all verified against float64):\n\n"
            + md_table(["shape", "act", "implementation", "TFLOP/s", "median ms", "of best"], rows) + pad_line)


def sanitize_table(df: pd.DataFrame) -> str:
    tools = list(dict.fromkeys(df.tool))
    rows = []
    for kernel, g in df.groupby("kernel", sort=False):
        st = dict(zip(g.tool, g.status))
        shape = shape_label(int(g.m.iloc[0]), int(g.n.iloc[0]), int(g.k.iloc[0])) if "m" in g else "?"
        rows.append([f"`{kernel}`", shape] + [st.get(t, "–") if st.get(t) == "clean" else f"**{st.get(t, '–')}**"
                                              for t in tools])
    clean = (df.status == "clean").all()
    head = ("compute-sanitizer on every CUDA stage at a small shape it supports (the result is also verified); "
            + ("**every kernel is clean**." if clean else "**not every kernel is clean** (logs in `results/<run>/sanitize/logs/`)."))
    return head + "\n\n" + md_table(["stage", "shape", *tools], rows)
