"""Tidy results -> markdown report. Every number in the report is read from the results files."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .config import BASELINES, GPU_BASELINES, LabConfig
from .errors import LabError

BASELINE_TITLES = {"cublas": "cuBLAS SGEMM (strict FP32)", "cublas_tf32": "cuBLAS SGEMM (TF32 tensor-op math)",
                   "numpy": "NumPy float32 matmul (CPU BLAS)"}
from .profile import OCCUPANCY_LIMITS


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


def md_table(header: list[str], rows: list[list[str]], align: str | None = None) -> str:
    align = align or ("l" + "r" * (len(header) - 1))
    sep = ["---:" if a == "r" else ":---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _fmt(x, spec: str, dash: str = "–") -> str:
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
    from .sass import FAMILIES

    if builds is None or builds.empty or "sass_total" not in builds:
        return None
    rows = []
    for spec in cfg.kernels:
        r = builds[builds["kernel"] == spec.id]
        if r.empty or pd.isna(r.iloc[0].get("sass_total")):
            continue
        r = r.iloc[0]
        rows.append([f"`{spec.id}`", spec.precision, *(_fmt(r.get(f"sass_{f.lower()}"), ".0f") for f in FAMILIES),
                     _fmt(r["sass_total"], ".0f")])
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
    """The rows of the size sweep: without the shapes that only the suite times (they have their own
    table, and only the stages in the suite have them)."""
    extra = {(s.m, s.n, s.k) for s in cfg.suite} - {(s.m, s.n, s.k) for s in cfg.bench.shapes}
    if not extra or bench.empty:
        return bench
    keys = list(zip(bench.m, bench.n, bench.k))
    return bench[[key not in extra for key in keys]]


def suite_table(cfg: LabConfig, ok: pd.DataFrame) -> list[str]:
    """Best verified stage against cuBLAS on every suite shape: the ratio of medians, its spread (the
    stage's quartiles against cuBLAS's), then the geometric mean and the minimum over the suite."""
    if not cfg.suite:
        return []
    stages = [k.id for k in cfg.kernels if (k.backend == "cuda" or k.autotuned) and k.precision == "fp32"]
    rows, ratios, missing = [], [], []
    for s in cfg.suite:
        label = shape_label(s.m, s.n, s.k)
        ref, best = _suite_point(ok, stages, s)
        if best is None:
            missing.append(label)
            rows.append([label, f"{ref.tflops:.2f}" if ref is not None else "–",
                         "no verified stage" if ref is not None else "–", "–", "–", "–"])
            continue
        ratio = ref.median_ms / best.median_ms
        low, high = ref.q1_ms / best.q3_ms, ref.q3_ms / best.q1_ms
        ratios.append((ratio, label))
        rows.append([label, f"{ref.tflops:.2f}", f"`{best.kernel}`", f"{best.tflops:.2f}", f"**{ratio:.3f}×**",
                     f"{low:.3f}–{high:.3f}"])
    out = ["## Against cuBLAS on the suite", "",
           "The best verified strict-FP32 stage on each shape of the suite (`suite:` in the config), against "
           "cuBLAS strict FP32 timed in the same run. Ratio = cuBLAS median time / stage median time (above 1: the stage is "
           "faster); the range pairs the stage's quartiles with cuBLAS's opposite quartiles.", "",
           md_table(["shape", "cuBLAS TFLOP/s", "best stage", "TFLOP/s", "ratio", "ratio range (quartiles)"], rows,
                    align="lrlrrr")]
    if ratios:
        out += ["", _over_suite(ratios)
                + (f" No verified stage or no cuBLAS timing at: {', '.join(missing)} (not in the mean)." if missing else "")]
    return out + [""]


def _suite_point(ok: pd.DataFrame, stages: list[str], s) -> tuple[pd.Series | None, pd.Series | None]:
    """cuBLAS's row at suite shape ``s`` and the fastest verified row of ``stages`` there (None where
    either is missing: the shape is left out of the ratios)."""
    ref = _at(ok, "cublas", (s.m, s.n, s.k))
    here = ok[(ok.m == s.m) & (ok.n == s.n) & (ok.k == s.k) & ok.kernel.isin(stages)]
    here = here[here.verified.astype(bool)] if "verified" in here else here.iloc[0:0]
    return ref, (here.loc[here.tflops.idxmax()] if ref is not None and len(here) else None)


def _over_suite(ratios: list[tuple[float, str]]) -> str:
    """The geometric mean and the minimum of (ratio, shape label) pairs, as the suite tables state them."""
    geo = math.exp(sum(math.log(r) for r, _ in ratios) / len(ratios))
    low, at = min(ratios)
    return (f"Geometric mean over {len(ratios)} shape{'s' if len(ratios) > 1 else ''}: **{geo:.3f}×**; "
            f"minimum **{low:.3f}×** at {at}.")


FP32_ACCURATE = ("fp32", "3xtf32")


def fp32_accurate_stages(cfg: LabConfig, checks: pd.DataFrame | None) -> list[str]:
    """The GPU stages that earned the FP32-accurate label in this run: class fp32 or 3xtf32, and every
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
    """Per suite shape, the fastest FP32-accurate implementation (strict FP32 or 3xTF32 stages that
    passed the FP32 class, and cuBLAS itself) and the best such stage against cuBLAS strict FP32, with
    the geometric mean and minimum; then which to use where."""
    stages = fp32_accurate_stages(cfg, checks)
    if not cfg.suite or not stages:
        return []
    rows, ratios, use = [], [], {}
    for s in cfg.suite:
        label = shape_label(s.m, s.n, s.k)
        ref, best = _suite_point(ok, stages, s)
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
                     f"{best.tflops:.2f}", f"**{ratio:.3f}×**", f"`{winner}`"])
    out = ["### FP32-accurate: the best of strict FP32 and 3xTF32", "",
           "The same shapes, the race open to every stage that earned FP32 accuracy in this run's checks (class "
           "`fp32` or `3xtf32`, every check passed, each within the FP32 limit relative to cuBLAS on the same "
           f"inputs): {len(stages)} stages, the compensated ones among them "
           f"{', '.join(f'`{k}`' for k in stages if cfg.precisions.get(k) == '3xtf32') or 'none'}. Ratio as "
           "above; the last column is the fastest FP32-accurate implementation there, cuBLAS included.", "",
           md_table(["shape", "cuBLAS TFLOP/s", "best FP32-accurate stage", "TFLOP/s", "ratio", "fastest"], rows,
                    align="lrlrrl")]
    if ratios:
        out += ["", _over_suite(ratios)]
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
                cells.append(f"{r['tflops'] * 1e3:.2f} GFLOP/s")
            elif impl == "cublas":
                cells.append(f"{r['tflops']:.2f}")
            else:
                mark = "" if r["verified"] else " ✗"
                of = " of TF32" if r.get("baseline") == "cublas_tf32" else ""
                cells.append(f"{r['tflops']:.2f} ({_fmt(r['pct_cublas'], '.1f')}%{of}){mark}")
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


def _at(df: pd.DataFrame, impl: str, shape) -> pd.Series | None:
    m, n, k = shape
    r = df[(df.kernel == impl) & (df.m == m) & (df.n == n) & (df.k == k)]
    return r.iloc[0] if len(r) else None


def headline_table(cfg: LabConfig, ok: pd.DataFrame, shape) -> str:
    rows, prev = [], None
    for impl in cfg.implementations:
        r = _at(ok, impl, shape)
        if r is None:
            continue
        step = f"{r.tflops / prev:.2f}×" if prev and impl not in BASELINES else ""
        of = " of TF32" if r.get("baseline") == "cublas_tf32" else ""
        rows.append([f"`{impl}`", f"{r.tflops:.2f}", _fmt(r.pct_cublas, ".1f") + "%" + of, step,
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
    refs = {c: _at(ok, c, (m, n, k)) for c in cpu_ids}
    refs = {c: r for c, r in refs.items() if r is not None}
    rows = []
    for impl in cfg.implementations:
        r = _at(ok, impl, (m, n, k))
        if r is None:
            continue
        rows.append([f"`{impl}`", f"{r.tflops * 1e3:.1f}"] + [f"{r.tflops / ref.tflops:.1f}×" for ref in refs.values()])
    return (f"At {shape_label(m, n, k)} (CPU stages are capped at {cfg.cpu.max_dim}); GFLOP/s and speed-up over each "
            "CPU implementation:\n\n" + md_table(["stage", "GFLOP/s"] + [f"vs `{c}`" for c in refs], rows))


def epilogue_table(df: pd.DataFrame) -> str:
    """D = act(alpha*A@B + beta*C + bias): the stage vs cuBLASLt's epilogue vs cuBLAS + a separate kernel."""
    timed = df[~df["padded"]] if len(df) else df
    rows = []
    for (m, n, k, act), g in timed.groupby(["m", "n", "k", "act"], sort=False):
        clean = ~g["disturbed"].fillna(False).astype(bool) if "disturbed" in g else True
        best = g[(g.verified == True) & clean]["tflops"].max()  # noqa: E712
        for r in g.itertuples():
            mark = "" if r.verified else f" ✗ ({r.reason})"
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


def sweep_summary(spec, df: pd.DataFrame) -> list[str]:
    from .autotune import eligible

    counts = df["status"].value_counts()
    grid = " ∪ ".join("(" + "; ".join(f"{k} ∈ {{{', '.join(map(str, v))}}}" for k, v in g.items()) + ")"
                      for g in spec.sweep)
    lines = [f"Tile sweep ({len(df)} points over {grid}): " + ", ".join(f"{n} {s}" for s, n in counts.items()) + "."]
    ok = eligible(df)
    if len(ok):
        best = ok.loc[ok.tflops.idxmax()]
        lines.append(f"Fastest verified point: `{best.params}` at {best.tflops:.2f} TFLOP/s "
                     f"({int(best.registers)} registers, {int(best.local_bytes)} B local).")
    spills = df[(df.get("local_bytes", pd.Series(dtype=float)).fillna(0) > 0)] if "local_bytes" in df else df.iloc[0:0]
    if len(spills):
        lines.append(f"{len(spills)} compiled points use local memory (spills); they are timed but never chosen.")
    return lines


NCU_KEYS = [("duration", "duration"), ("sm_throughput_pct", "SM throughput %"),
            ("memory_throughput_pct", "memory throughput %"), ("dram_bytes_read", "DRAM read"),
            ("l2_hit_rate_pct", "L2 hit %"), ("l1_hit_rate_pct", "L1 hit %"),
            ("smem_bank_conflicts_ld", "bank conflicts (ld)"), ("smem_bank_conflicts_st", "bank conflicts (st)"),
            ("achieved_occupancy_pct", "achieved occupancy %"), ("theoretical_occupancy_pct", "theoretical occupancy %"),
            ("registers_per_thread", "registers/thread"), ("issue_slot_utilisation_pct", "issue slots busy %"),
            ("tensor_pipe_pct", "tensor pipe busy %")]


RULE_CLOSE = 1.03  # a rule's choice this close to the fastest candidate's time counts as found


def dispatch_table(cfg: LabConfig, spec, rows: pd.DataFrame) -> list[str]:
    """A dispatch stage's table as its build recorded it: per measured shape the fastest candidate (its
    parameters where they differ from the base stage's), its speed in the shape sweep and the margin
    over the next best candidate; for a stage with a rule, also the rule's choice and how far its time
    is from the fastest's."""
    import json

    base = dict(cfg.kernel(spec.dispatch_from).params)
    mine = rows[rows.kernel == spec.id] if len(rows) else rows
    if mine.empty:
        return ["No dispatch table (the build did not make one)."]
    ruled = spec.rule is not None and "rule_candidate" in mine and mine["rule_candidate"].notna().any()
    body = []
    for r in mine.itertuples():
        params = json.loads(r.params)
        diff = ", ".join(f"{k}={v}" for k, v in params.items() if base.get(k) != v) or "as the base"
        margin = f"{r.margin:.3f}×" if r.margin == r.margin and r.margin is not None else "–"
        runner = f"{int(r.runner_up)}" if r.runner_up == r.runner_up and r.runner_up is not None else "–"
        row = [shape_label(r.m, r.n, r.k), str(int(r.candidate)), diff, f"{r.tflops:.2f}", runner, margin]
        if ruled:
            gap = r.rule_gap
            row += [str(int(r.rule_candidate)), f"**{gap:.3f}×**" if gap == gap and gap > RULE_CLOSE
                    else (f"{gap:.3f}×" if gap == gap else "not verified")]
        body.append(row + [_fmt(r.registers, ".0f")])
    head = ["shape", "fastest", "parameters (vs base)", "TFLOP/s", "next best", "margin"]
    if not ruled:
        return [f"Dispatch table ({len(mine)} shapes measured by the shape sweep, `dispatch/{spec.id}.csv`; a shape "
                "not in it runs the choice of the nearest measured shape, by the sum of |log2| ratios of M, N and K). "
                f"Candidates are parameter overrides of `{spec.dispatch_from}`; margin = time of the next best "
                "candidate / time of the chosen one, in the shape sweep.", "",
                md_table(head + ["registers"], body, align="lrlrrrr"), ""]
    gaps = mine["rule_gap"].astype(float)
    close = int((gaps <= RULE_CLOSE).sum())
    worst = mine.loc[gaps.fillna(float("inf")).idxmax()]
    steps = ", ".join(f"{i}: {s}" for i, s in enumerate(spec.rule.step))
    return [f"The rule runs every shape, measured or not, on the candidate of the lowest cost "
            f"`{spec.rule.cost}` (STEP per candidate: {steps}; the names are the candidate's plan for the "
            "shape, `sgemm_lab.geometry.plan_names`). Against the fastest candidate of the shape sweep "
            f"(`dispatch/{spec.id}.csv`): within {RULE_CLOSE - 1:.0%} of its time on {close} of {len(mine)} measured "
            f"shapes; the worst is {shape_label(worst.m, worst.n, worst.k)} at "
            + (f"{worst.rule_gap:.3f}× the fastest's time." if worst.rule_gap == worst.rule_gap
               else "a candidate that did not verify there.")
            + f" Candidates are parameter overrides of `{spec.dispatch_from}`; margin = time of the next best "
            "candidate / the fastest's; rule / fastest = time of the rule's choice / the fastest's (bold beyond "
            f"{RULE_CLOSE:.2f}×).", "",
            md_table(head + ["rule's choice", "rule / fastest", "registers"], body, align="lrlrrrrrr"), ""]


def ncu_table(ncu: pd.DataFrame, shape) -> pd.DataFrame:
    if ncu is None or ncu.empty or "metric" not in ncu:
        return pd.DataFrame()
    m, n, k = shape
    ok = ncu[(ncu.status == "ok") & (ncu.m == m) & (ncu.n == n) & (ncu.k == k)]
    return ok.pivot_table(index="kernel", columns="metric", values="value", aggfunc="first")


def _num(x) -> str:
    if x != x:
        return "–"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.2f} {unit}"
    return f"{x:.3g}"


def occupancy_limiter(row: pd.Series) -> str:
    """The launch__occupancy_limit_* with the fewest blocks per SM (ncu's limiting factor)."""
    lim = {name: row.get(f"occupancy_limit_{name}") for name in OCCUPANCY_LIMITS}
    lim = {k: v for k, v in lim.items() if v == v and v is not None}
    if not lim:
        return "?"
    low = min(lim.values())
    return "/".join(k for k, v in lim.items() if v == low) + f" ({int(low)} blocks/SM)"


def top_stalls(row: pd.Series, n: int = 3) -> str:
    stalls = {c.removeprefix("stall_"): row[c] for c in row.index if c.startswith("stall_") and row[c] == row[c]}
    top = sorted(stalls.items(), key=lambda kv: -kv[1])[:n]
    return ", ".join(f"{k} {v:.2f}" for k, v in top)


def not_profiled(ncu: pd.DataFrame | None) -> list[str]:
    """One entry per reason an implementation has no metrics: the reason, and which implementations
    (all of them when ncu itself could not run)."""
    if ncu is None or not len(ncu) or "status" not in ncu:
        return []
    bad = ncu[ncu.status != "ok"]
    everyone = set(ncu.kernel)
    out = []
    for status, kernels in sorted(bad.groupby("status").kernel):
        ks = sorted(set(kernels))
        out.append(status if set(ks) == everyone else f"{', '.join(f'`{k}`' for k in ks)} ({status})")
    return out


def dispatched_at(cfg: LabConfig, spec, rows: pd.DataFrame | None, shape):
    """The candidate of dispatch stage ``spec`` that it runs at ``shape`` (by its rule, else by its
    table), as a plain stage (None for a stage without a rule and without a table)."""
    import json

    from .dispatch import candidate_spec, choose, listed_candidate, resolve, rule_choice

    resolved = resolve(cfg, spec)
    if spec.rule is not None:
        try:
            pick = rule_choice(resolved, shape)
        except LabError:  # no candidate runs the shape
            return None
        return listed_candidate(resolved, pick)
    mine = rows[rows.kernel == spec.id] if rows is not None and len(rows) else None
    if mine is None or mine.empty:
        return None
    entry = choose([dict(r, params=json.loads(r["params"])) for r in mine.to_dict("records")], shape)
    return candidate_spec(resolved, entry["params"])


def model_table(cfg: LabConfig, ncu: pd.DataFrame, shape, dispatch: pd.DataFrame | None = None) -> str | None:
    """The notes' traffic model next to what Nsight Compute measured, at ``shape`` (a dispatch stage:
    the model of the candidate it runs there)."""
    from .config import Shape
    from .geometry import unsupported_reason
    from .model import traffic

    t = ncu_table(ncu, shape)
    sh = Shape(m=shape[0], n=shape[1], k=shape[2])
    rows = []
    for spec in cfg.kernels:
        if spec.autotuned or spec.backend == "host":
            continue
        if not spec.dispatched and unsupported_reason(spec, sh):
            continue  # a stage that does not run this shape has no traffic there to predict
        target = dispatched_at(cfg, spec, dispatch, sh) if spec.dispatched else spec
        tr = traffic(target, sh) if target is not None else None
        if tr is None:
            continue
        meas = t.loc[spec.id] if spec.id in t.index else None
        l2 = meas["l2_sectors_read_by_sm"] * 32 if meas is not None and "l2_sectors_read_by_sm" in meas else float("nan")
        dram = (meas["dram_bytes_read"] + meas.get("dram_bytes_write", 0.0)) if meas is not None and "dram_bytes_read" in meas else float("nan")
        ffma = meas["ffma_thread_instructions"] / (sh.m * sh.n * sh.k) if meas is not None and "ffma_thread_instructions" in meas else float("nan")
        rows.append([f"`{spec.id}`", tr.global_coeff, tr.smem_coeff, f"{tr.intensity:g}", _num(tr.predicted_bytes) + "B",
                     _num(l2) + "B", _fmt(l2 / tr.predicted_bytes, ".2f"), _num(dram) + "B", _fmt(ffma, ".3f")])
    if not rows:
        return None
    return md_table(["stage", "global loads / result", "shared loads / result", "intensity (flop/B)",
                     "predicted L2→SM", "measured L2→SM (ncu)", "measured / predicted", "DRAM read+write (ncu)",
                     "FFMA / (M·N·K)"], rows)


def failed_steps_section(outcomes) -> list[str]:
    """Every step that failed, did not run or had no tool, with its first error line and its log."""
    bad = [r for r in outcomes or () if r.status != "ok"]
    if not bad:
        return []
    n_failed = sum(r.status == "failed" for r in bad)
    rows = [[f"`{r.kernel}`" if r.kernel else "–", r.step, f"**{r.status}**" if r.status != "unavailable" else r.status,
             str(r.message).replace("|", "\\|"), f"`{r.log}`" if r.log else "–"] for r in bad]
    head = (f"{n_failed} step{'s' if n_failed != 1 else ''} failed in this run; every other stage was still "
            "checked, timed and reported below. `not run`: an earlier step of the same stage failed; `unavailable`: "
            "a tool this machine lacks." if n_failed else
            "No step failed; some did not run or lacked a tool:")
    return ["## Failures", "", head, "", md_table(["stage", "step", "status", "first error", "log"], rows,
                                                   align="lllll"), ""]


@dataclass(frozen=True, kw_only=True)
class _Run:
    """Everything a report section reads: the config and the run's result tables."""
    cfg: LabConfig
    bench: pd.DataFrame
    checks: pd.DataFrame
    builds: pd.DataFrame
    env: dict
    fig: dict
    sweeps: dict
    epilogues: dict
    ncu: pd.DataFrame | None
    ceilings: dict | None
    sanitize: pd.DataFrame | None
    failures: pd.DataFrame | None
    outcomes: tuple
    dispatch: pd.DataFrame

    @property
    def ok(self) -> pd.DataFrame:
        return self.bench[self.bench["status"] == "ok"]

    @property
    def hs(self):
        return headline_shape(self.cfg, self.ok)

    @property
    def gpu(self) -> dict:
        return self.env.get("gpu", {})


def render(cfg: LabConfig, *, bench: pd.DataFrame, checks: pd.DataFrame, builds: pd.DataFrame, env: dict,
           figures: dict[str, Path], wall_s: float | None, sweeps: dict[str, pd.DataFrame] | None = None,
           epilogues: dict[str, pd.DataFrame] | None = None, ncu: pd.DataFrame | None = None,
           ceilings: dict | None = None, sanitize: pd.DataFrame | None = None, command: str | None = None,
           failures: pd.DataFrame | None = None, outcomes=(), dispatch: pd.DataFrame | None = None) -> str:
    """The report, section by section in the order it reads."""
    run = _Run(cfg=cfg, bench=bench, checks=checks, builds=builds, env=env,
               fig={k: v.as_posix() for k, v in figures.items()}, sweeps=sweeps or {}, epilogues=epilogues or {},
               ncu=ncu, ceilings=ceilings, sanitize=sanitize, failures=failures, outcomes=tuple(outcomes),
               dispatch=dispatch if dispatch is not None else pd.DataFrame(columns=["kernel"]))
    out = _title(run, wall_s, command)
    for section in (_headline, _suite, _ladder, _accuracy, _sass, _profile, _cpu, _stages, _method, _sanitizers,
                    _environment, _failures_and_skips):
        out += section(run)
    return "\n".join(out)


def _title(run: _Run, wall_s: float | None, command: str | None) -> list[str]:
    cfg, env = run.cfg, run.env
    out = [f"# SGEMM ladder on {run.gpu.get('name', 'unknown GPU')} — run `{cfg.run}`", ""]
    out.append(f"Generated by the pipeline{f' (`{command}`)' if command else ''} on {env.get('captured_at', '?')} from commit "
               f"`{(env.get('git_commit') or '?')[:12]}`{' (uncommitted changes)' if env.get('git_dirty') else ''}. "
               "Every number below is read from the result files next to this report "
               "(`bench.csv`, `check.csv`, `build.csv`, `sweeps/*.csv`, `environment.json`).")
    if wall_s is not None:
        budget = 300
        out.append(f"\nWall time of the pipeline run that produced this report (start to report, compile cache cold): "
                   f"**{wall_s:.0f} s** ({'within' if wall_s <= budget else 'over'} the {budget // 60}-minute budget).")
    return out + [""] + failed_steps_section(run.outcomes)


def _headline(run: _Run) -> list[str]:
    hs = run.hs
    if not hs:
        return []
    out = ["", f"## At {shape_label(*hs)}", "", headline_table(run.cfg, run.ok, hs)]
    if "ladder" in run.fig:
        out += ["", f"![the ladder]({run.fig['ladder']})"]
    return out


def _suite(run: _Run) -> list[str]:
    if not run.cfg.suite:
        return []
    return [""] + suite_table(run.cfg, run.ok) + fp32_accurate_table(run.cfg, run.ok, run.checks)


def _ladder(run: _Run) -> list[str]:
    return ["", "## Ladder", "",
            "TFLOP/s (median) per problem size, with the percentage of cuBLAS at the same size in the same run. "
            "✗ marks a timing whose result did not verify; `skipped` a shape the stage cannot run (reasons below).", "",
            ladder_table(run.cfg, run.bench, run.checks, run.outcomes), "",
            f"![TFLOP/s vs size]({run.fig.get('tflops_vs_size', '')})", ""]


def _accuracy(run: _Run) -> list[str]:
    from . import accuracy

    acc = accuracy_table(run.cfg, accuracy.uniform_rows(run.checks))
    if not acc:
        return []
    c = run.cfg.check
    out = ["## Accuracy", "",
           "Relative Frobenius error against the float64 reference over every check run on uniform inputs (each "
           "shape with C read, with beta = 0 on a NaN-filled C, and with alpha = 0). The precision class sets the "
           "limit (see Method); the last column is the worst run's error as a fraction of its limit.", "", acc, ""]
    power = accuracy.class_power(run.checks)
    if power:
        table, fails, shapes = power
        out += ["### Can the FP32 class tell TF32 from FP32?", "",
                f"At every check point the FP32 class's limit is the smaller of {c.tolerance_factor:g} · eps_fp32 · "
                f"sqrt(K) and {c.fp32_factor:g} times the error of cuBLAS strict FP32 on the same inputs "
                "(`fp32_limit` and `cublas_rel_err` in `check.csv`). Held to it, cuBLAS in TF32 mode "
                f"fails at {fails} of {shapes} check shapes"
                + (" (every one): the criterion has the power to reject a TF32-rounded kernel declared FP32, "
                   "measured here rather than assumed." if fails == shapes else
                   ": **at the others the criterion could not reject a TF32 kernel declared FP32.**"),
                "", table, ""]
    dist = accuracy.by_distribution(run.checks, list(run.cfg.implementations), run.cfg.precisions)
    if dist:
        names = ", ".join(f"{d.name} ({d.kind})" for d in c.distributions)
        shapes = ", ".join(str(s) for s in c.distribution_shapes)
        out += ["### Input distributions", "",
                f"Beyond uniform [-1, 1) at every check shape, every stage also ran on {names} inputs at {shapes}. "
                "Each cell is the worst error over those shapes and the modes that multiply, as a multiple of "
                "cuBLAS strict FP32's error on the same inputs; ✗ marks a failed check (the row in "
                "`check.csv` says which limit).", "", dist, ""]
        failed = accuracy.failed_points(run.checks, run.cfg.precisions)
        if failed:
            out += ["FP32-accurate stages outside their class on these inputs:", ""] + [f"- {f}" for f in failed] + [""]
    by_k = accuracy.against_k(run.checks, run.cfg.precisions)
    if by_k:
        table, above = by_k
        out += ["### 3xTF32 against K", "",
                "Each 3xTF32 stage's error as a multiple of cuBLAS strict FP32's on the same inputs, per input "
                "distribution and K (worst over the check shapes of that K and the modes that multiply): "
                + (f"**above cuBLAS's in {len(above)} cells**: " + "; ".join(above) + "." if above else
                   "at or below cuBLAS's in every cell."), "", table, ""]
    if run.fig.get("accuracy"):
        out += [f"![accuracy against speed]({run.fig['accuracy']})", ""]
    return out


def _sass(run: _Run) -> list[str]:
    sass = sass_table(run.cfg, run.builds)
    if not sass:
        return []
    return ["## What the kernels compiled to (SASS)", "",
            "Instructions in each stage's code (`cuobjdump -sass` of the build, static counts, grouped by "
            "mnemonic): FFMA for the CUDA-core stages, HMMA (mma.sync, WMMA) or HGMMA (Hopper wgmma) for "
            "tensor cores; shared-memory loads as LDS / LDSM, generic loads as LD, global loads as LDG, "
            "asynchronous copies as LDGSTS, bulk tensor copies as UTMALDG; BAR: barriers.", "", sass, ""]


def _profiled(run: _Run) -> pd.DataFrame:
    return ncu_table(run.ncu, run.hs) if run.hs else pd.DataFrame()


def _profile(run: _Run) -> list[str]:
    cfg, hs, fig, ceilings = run.cfg, run.hs, run.fig, run.ceilings
    prof = _profiled(run)
    unavailable = not_profiled(run.ncu)
    out = ["## Where the time goes (Nsight Compute)", ""]
    if not cfg.profile.enabled:
        return out + ["Profiling is disabled in this run's configuration (`profile.enabled: false`).", ""]
    if prof.empty:
        return out + ["No Nsight Compute metrics: " + ("; ".join(unavailable) if unavailable else "profiling unavailable") + ".", ""]
    if ceilings:
        tensor = (f"TF32 tensor-core probe (wgmma m64n256k8) **{ceilings['tf32_tflops']:.0f} TFLOP/s**, "
                  if ceilings.get("tf32_tflops") else "")
        out.append(f"Measured ceilings of this GPU: FP32 FMA probe **{ceilings['fp32_tflops']:.1f} TFLOP/s**, "
                   f"{tensor}device-to-device copy **{ceilings['dram_gbps']:.0f} GB/s** (read + write).")
    mt = model_table(cfg, run.ncu, hs, run.dispatch)
    if mt:
        out += ["", f"Traffic model of the notes vs measurement at {shape_label(*hs)} (loads per element of C; "
                    "L2→SM = sectors the SMs read from L2 × 32 B; the FFMA column checks that each stage does "
                    "M·N·K fused multiply-adds):", "", mt]
    out += ["", f"![roofline]({fig.get('roofline', '')})", "", f"![warp stalls]({fig.get('stalls', '')})", "",
            f"![bank conflicts and occupancy]({fig.get('memory', '')})", ""]
    if unavailable:
        out += ["Not profiled: " + "; ".join(unavailable) + ".", ""]
    return out + [f"All implementations are profiled in one Nsight Compute run; its report (for the GUI) is kept by "
                  f"the pipeline as `results/{cfg.run}/profile/ladder.ncu-rep`; the tidy metrics are `ncu_metrics.csv` "
                  "here.", ""]


def _cpu(run: _Run) -> list[str]:
    cpu = cpu_table(run.cfg, run.ok)
    return ["## GPU over CPU", "", cpu, ""] if cpu else []


def _stages(run: _Run) -> list[str]:
    out = ["## Stages", ""]
    for spec in run.cfg.kernels:
        out += _stage(run, spec)
    return out


def _stage(run: _Run, spec) -> list[str]:
    builds, ok, hs = run.builds, run.ok, run.hs
    prof = _profiled(run)
    out = [f"### `{spec.id}` — {spec.title}", ""]
    if spec.explain:
        out += [spec.explain, ""]
    br = builds[builds["kernel"] == spec.id]
    build_status = br.iloc[0].get("status") if len(br) else None
    if isinstance(build_status, str) and build_status != "ok":
        out.append(f"**Build failed**: {br.iloc[0].get('message', '')} (log `{br.iloc[0].get('log', '')}`); "
                   "this stage was not checked, timed or profiled.")
    elif len(br):
        r = br.iloc[0]
        if spec.autotuned and isinstance(r.get("tuned_from"), str):
            out.append(f"Chosen by the pipeline from the tile sweeps of {', '.join(f'`{t}`' for t in spec.tune_from)}: "
                       f"`{r['tuned_from']}` with {r['params']} ({r['tuned_tflops']:.2f} TFLOP/s at {r['tuned_on']} in the sweep).")
        if spec.dispatched:
            how = ("chosen by a cost model stated in the config and scored against the pipeline's own "
                   "measurements on this GPU" if spec.rule is not None else
                   "chosen by the pipeline from its own measurements on this GPU")
            out.append(f"Runs each shape with one of {len(spec.candidates)} configurations of "
                       f"`{spec.dispatch_from}`, {how} (the table below). Build figures are the largest over the "
                       "candidates it uses.")
        if r.get("backend", "cuda") == "host":
            out.append(f"Build: host C, `{r['source']}` (`{' '.join(eval_list(r['options']))}`).")
        else:
            out.append(f"Build: {int(r['registers'])} registers/thread, {int(r['shared_static_bytes'])} B static shared "
                       f"memory/block, {int(r['local_bytes'])} B local memory/thread; parameters {r['params']}.")
    mine = ok[ok.kernel == spec.id]
    r = _at(ok, spec.id, hs) if hs else None
    if r is not None:
        of = "cuBLAS TF32" if r.get("baseline") == "cublas_tf32" else "cuBLAS"
        out.append(f"At {shape_label(*hs)}: **{r.tflops:.2f} TFLOP/s, {_fmt(r.pct_cublas, '.1f')}% of {of}** "
                   f"(median {r.median_ms:.3f} ms, IQR {r.iqr_ms:.3f} ms over {int(r.reps)} runs).")
    elif len(mine):
        big = mine.assign(f=mine.m * mine.n * mine.k).sort_values("f").iloc[-1]
        out.append(f"Largest size run, {shape_label(big.m, big.n, big.k)}: {big.tflops * 1e3:.2f} GFLOP/s"
                   + (f", {_fmt(big.pct_cublas, '.2f')}% of cuBLAS." if big.pct_cublas == big.pct_cublas else "."))
    out += [f"Correctness: {check_status(run.checks, spec.id)}."]
    if spec.id in prof.index:
        r = prof.loc[spec.id]
        vals = [f"{label} {r[key] / 1e6:.3f} ms" if key == "duration" else
                f"{label} {_num(r[key])}{'B' if 'bytes' in key else ''}"
                for key, label in NCU_KEYS if key in r and r[key] == r[key]]
        out.append(f"Nsight Compute at {shape_label(*hs)}: " + "; ".join(vals)
                   + f"; occupancy limited by {occupancy_limiter(r)}; top stalls (cycles/instruction): {top_stalls(r)}.")
    out.append("")
    if spec.id in run.epilogues and len(run.epilogues[spec.id]):
        out += ["", epilogue_table(run.epilogues[spec.id]), ""]
    if spec.dispatched:
        out += dispatch_table(run.cfg, spec, run.dispatch)
    if spec.id in run.sweeps:
        out += sweep_summary(spec, run.sweeps[spec.id])
        out += ["", f"![tile sweep of {spec.id}](figures/sweep_{spec.id}.png)", ""]
    return out


def _method(run: _Run) -> list[str]:
    cfg, env, checks, b = run.cfg, run.env, run.checks, run.cfg.bench
    ok, gpu = run.ok, run.gpu
    clocks = pd.concat([ok["sm_clock_before_mhz"], ok["sm_clock_after_mhz"]]).dropna()
    tol_ks = sorted(set(int(k) for k in checks["k"])) if len(checks) else []
    out = ["## Method", "",
           f"- **Timing**: CUDA events around each launch on one stream; each point is warmed up for "
           f"{b.warmup_ms:.0f} ms of wall time first (the SM clock ramps up from idle; a later point of the same "
           f"job for at least {b.rewarm_ms:.0f} ms and until the clock is back within 3% of where the previous "
           "point's timed launches left it, else the full time), then timed "
           f"{b.min_reps}–{b.max_reps} times (about {b.target_ms:.0f} ms of GPU time); the table shows the median, "
           "`bench.csv` also min, quartiles and max. CPU stages: `time.perf_counter` around each call, "
           f"at least {cfg.cpu.min_reps} calls.",
           "- **L2 policy**: " + ("`flush` — a buffer of twice the L2 size "
                                   f"({2 * int(gpu.get('l2_bytes', 0)) // 2**20} MiB) is overwritten before every "
                                   "timed launch, outside the events, so every launch starts with a cold L2."
                                   if b.l2_policy == "flush" else
                                   "`warm` — back-to-back launches on the same buffers; operands may stay in L2."),
           "- **SM clock** read through NVML just before and after each point's timed launches: "
           + (f"{int(clocks.min())}–{int(clocks.max())} MHz (max {env.get('max_sm_clock_mhz', '?')} MHz)."
              if len(clocks) else "not available."),
           f"- **Verification**: fresh random inputs U[-1, 1) for every check and every timed point (checks also on "
           "the input distributions of the Accuracy section), each in two runs: C "
           f"read with alpha = {cfg.check.alpha}, beta = {cfg.check.beta}, then beta = 0 on a C pre-filled with NaN "
           "(catches unwritten outputs and reads of C when beta = 0); the check step adds a third with alpha = 0. "
           "Pass: no NaN/Inf and relative Frobenius error < "
           f"{cfg.check.tolerance_factor:g} · eps_fp32 · sqrt(K)"
           + (f" (e.g. {cfg.check.tolerance_factor * 2**-23 * math.sqrt(tol_ks[-1]):.1e} at K = {tol_ks[-1]})" if tol_ks else "")
           + f", and in the check step also at most {cfg.check.fp32_factor:g} times the error of cuBLAS strict FP32 "
           "on the same inputs (the absolute bound alone passes TF32 from K of about 2^16 on)"
           + (f"; TF32-class stages (`precision: tf32`): {cfg.check.tf32_tolerance_factor:g} · 2^-11 plus that bound"
              if any(k.precision == "tf32" for k in cfg.kernels) else "")
           + ". Reference: float64 NumPy on the CPU in the check rule; float64 cuBLAS DGEMM on the GPU for timed GPU "
           "points (fast at 8192³).",
           f"- **Tile sweeps** at {cfg.sweep.shape}: every grid point is checked against the stage's constraints, "
           "thread and shared-memory limits of this GPU before compiling (filtered points keep their reason), compiled "
           f"in parallel, then verified and timed like a bench point ({cfg.sweep.warmup_ms:.0f} ms warm-up, "
           f"~{cfg.sweep.target_ms:.0f} ms timed). The autotuned stage takes the fastest verified point without local memory.",
           f"- **cuBLAS** through nvmath-python on PyCUDA's primary context, row-major via C^T = B^T A^T, math mode "
           f"`{env.get('cublas_math_mode', '?')}` (strict FP32, checked not to be TF32), same alpha and beta."
           + (" `cublas_tf32`: the same call with `TF32_TENSOR_OP_MATH` (inputs rounded to TF32, FP32 accumulation), "
              "held to the TF32 tolerance; TF32-class stages are compared with it (\"% of TF32\")."
              if cfg.cublas_tf32 else ""),
           "- **Isolation**: jobs run in parallel, but every step that times or profiles holds an exclusive lock on "
           "its GPU, host-wide (`/tmp/sgemm-lab-locks/gpu.<uuid>.lock`, shared by every checkout on the host), while "
           "checks, sanitizers and builds share it: no other pipeline runs on the GPU during a measurement. CPU "
           "stages are timed with no other job running. Each point runs in a supervised "
           f"child process with a {cfg.watchdog_s:g} s watchdog; a hang, crash or CUDA error is a row with a status.",
           "- **Other work on the GPU**: before and after its timed launches, each GPU point asks the driver (NVML) "
           "which other processes hold its GPU and how busy they kept it; a point that saw any is timed again, and "
           "one disturbed on every try is recorded as `disturbed` with what was seen (`disturbance` in `bench.csv`), "
           "never as a clean median. " + disturbance_summary(run.bench),
           ""]
    return out + failure_section(cfg, run.failures)


def _sanitizers(run: _Run) -> list[str]:
    out = ["## Sanitizers", ""]
    if not run.cfg.sanitize:
        return out + ["compute-sanitizer is disabled in this run's configuration (`sanitize: false`).", ""]
    if run.sanitize is None or run.sanitize.empty:
        return out + ["No sanitizer results.", ""]
    return out + [sanitize_table(run.sanitize), ""]


def _environment(run: _Run) -> list[str]:
    env, gpu = run.env, run.gpu
    pk = env.get("packages", {})
    env_rows = [["GPU", f"{gpu.get('name')} ({gpu.get('arch')}, {gpu.get('multiprocessors')} SMs, "
                        f"{int(gpu.get('l2_bytes', 0)) // 2**20} MiB L2)"],
                ["driver / CUDA (driver API)", f"{env.get('driver_version')} / {env.get('cuda_driver_api')}"],
                ["CUDA toolkit (PyCUDA build)", env.get("cuda_toolkit_pycuda")],
                ["nvcc", env.get("nvcc")], ["cuBLAS", env.get("cublas")], ["Nsight Compute", env.get("ncu")],
                ["CPU", env.get("cpu")], ["Python", env.get("python")]] + [[name, ver] for name, ver in pk.items()]
    return ["## Environment", "", md_table(["component", "version"], [[a, f"{b}"] for a, b in env_rows], align="ll"), ""]


def disturbance_summary(bench: pd.DataFrame) -> str:
    """How many GPU points of this run were watched and found clean, clean only on a retry, disturbed,
    or could not be watched (``disturbance`` column; a run from before it: not recorded)."""
    if bench is None or bench.empty or "disturbance" not in bench:
        return "This run did not record it."
    seen = bench[bench["status"].isin(["ok", "disturbed"])]["disturbance"].fillna("").astype(str)
    seen = seen[~seen.str.startswith("n/a")]  # CPU timings
    clean = seen.str.startswith("none")
    retried = clean & seen.str.contains("clean on try")
    unchecked = seen.str.startswith("unchecked")
    disturbed = int((bench["status"] == "disturbed").sum())
    text = (f"In this run: {int(clean.sum())} of {len(seen)} GPU points clean ({int(retried.sum())} of them only on "
            f"a retry), {disturbed} disturbed")
    return text + (f", **{int(unchecked.sum())} not watched** (no NVML answer: read them as unchecked, not clean)."
                   if unchecked.any() else ".")


def _failures_and_skips(run: _Run) -> list[str]:
    bench, checks = run.bench, run.checks
    bad = bench[bench["status"] != "ok"]
    badc = checks[checks["status"] == "fail"] if len(checks) else checks
    out = ["## Failures and skips", ""]
    if bad.empty and (badc is None or badc.empty):
        return out + ["None: every configured point ran and verified.", ""]
    rows = [[f"`{r.kernel}`", shape_label(r.m, r.n, r.k), "bench", r.status, str(r.reason)] for r in bad.itertuples()]
    if badc is not None and len(badc):
        rows += [[f"`{r.kernel}`", shape_label(r.m, r.n, r.k),
                  f"check ({r.mode}" + (f", {r.distribution}" if str(getattr(r, "distribution", "uniform")) not in
                                        ("uniform", "nan") else "") + ")", r.status, str(r.reason)]
                 for r in badc.itertuples()]
    return out + [md_table(["kernel", "shape", "where", "status", "reason"], rows, align="lllll"), ""]


def failure_section(cfg: LabConfig, failures: pd.DataFrame | None) -> list[str]:
    """The GPU half of the bad-input catalogue as exercised in this run (the rest runs in CI)."""
    out = ["### Failure handling exercised on this GPU", ""]
    if not cfg.failure_tests:
        return out + ["Not run in this configuration (`failure_tests: false`); run `python -m pytest tests/gpu`.", ""]
    if failures is None or failures.empty:
        return out + ["No results.", ""]
    out += ["Deliberately broken kernels run through the real steps (`tests/gpu`, rule `failure_tests`); the cases "
            "that need no GPU (configuration, compile and constraint errors, missing tools, host-side hangs and "
            "crashes) are tested in CI.", ""]
    rows = [[str(r.case), "pass" if r.outcome == "passed" else f"**{str(r.outcome).upper()}**",
             "" if pd.isna(r.message) else str(r.message).replace("|", "\\|")] for r in failures.itertuples()]
    return out + [md_table(["case", "outcome", "detail"], rows, align="lll"), ""]


def eval_list(text) -> list[str]:
    """A list stored in a CSV cell (written as Python/JSON list syntax)."""
    import ast

    try:
        val = ast.literal_eval(text) if isinstance(text, str) else text
    except (ValueError, SyntaxError):
        return [str(text)]
    return [str(v) for v in val] if isinstance(val, (list, tuple)) else [str(val)]
