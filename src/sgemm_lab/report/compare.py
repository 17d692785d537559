"""Comparing runs: is one run's kernel really faster than another's (two GPUs, two commits, before and
after a change)?

For every implementation and shape that two runs both timed and verified (``reports/<run>/bench.csv``),
the speed-up of run B over run A is the ratio of median times, with a 95% interval from each run's own
repetitions: a median's standard error is taken as 1.2533 * sigma / sqrt(reps), sigma estimated from
the interquartile range (IQR / 1.349), and the two medians' relative errors are combined on the log
scale. A difference whose interval contains 1 is "within noise".

An interval from a run's own repetitions cannot tell a disturbed run (another process on the GPU, a
clock that did not settle) from a real change: a point whose spread in one run is several times its
spread in the other, and large, is marked ``unsteady`` (with the run it is unsteady in); its speed-up
says more about that run than about the implementation, and repeating the run is the check.

That interval covers the repetition noise inside each run, not drift between runs (clock, temperature,
another host of the same model). cuBLAS timed at the same shape in both runs shows that drift: its own
ratio should be 1 on the same GPU and library, and ``vs_cublas`` divides it out (the kernel's speed-up
relative to the library's between the two runs), with an interval that adds cuBLAS's repetition noise
and a verdict of its own (``verdict_vs_cublas``). Between two runs of the same code on the same GPU
model, cuBLAS itself moves by up to about 1%: a raw "faster" or "slower" of that size says more about
the runs than about the kernel.

A run's table is refused, with one line naming it, when it is damaged (``io.read_table``) or holds rows
of another run: a GPU or commit other than its ``environment.json``'s, or several of either.
Implementations timed in one run only (or in both, but at no shape verified in both) are listed on the
page and in the log, not left out silently.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from .table_checks import finished_run
from .tables import shape_label

Z95 = 1.959964
# A point is unsteady in a run when its relative IQR there is over UNSTEADY_REL and over UNSTEADY_RATIO
# times the other run's.
UNSTEADY_REL = 0.05
UNSTEADY_RATIO = 4.0
KEYS = ["kernel", "m", "n", "k"]
# What a run's bench.csv must hold for a comparison (its other columns are carried along unread).
REQUIRED = [*KEYS, "status", "verified", "median_ms", "iqr_ms", "reps", "gpu"]
NUMBERS = ["m", "n", "k", "median_ms", "iqr_ms", "reps"]
COLUMNS = ["kernel", "m", "n", "k", "run_a", "run_b", "gpu_a", "gpu_b", "median_ms_a", "median_ms_b", "iqr_ms_a",
           "iqr_ms_b", "reps_a", "reps_b", "speedup", "ci_low", "ci_high", "verdict", "cublas_speedup", "vs_cublas", "vs_cublas_low",
           "vs_cublas_high", "verdict_vs_cublas", "unsteady", "commit_a", "commit_b", "code_differs"]


def output_dir(runs: list[str]) -> str:
    """Where the comparison of ``runs`` goes: reports/compare/<run>-vs-<run>..., slashes of probe runs
    (probes/<name>) as underscores; a name past what a file name may hold (255) is cut at 180 characters
    and a hash of the whole added, so that it stays one folder of its own."""
    import hashlib

    name = "-vs-".join(r.replace("/", "_") for r in runs)
    if len(name) > 200:
        name = name[:180] + "-" + hashlib.sha256(name.encode()).hexdigest()[:16]
    return "reports/compare/" + name


def _rel_se(median, iqr, reps):
    """Relative standard error of a median from the IQR of its repetitions (normal approximation)."""
    return 1.2533 * (iqr / 1.349) / (reps ** 0.5) / median


def pairwise(a: pd.DataFrame, b: pd.DataFrame, *, run_a: str, run_b: str) -> pd.DataFrame:
    """One row per implementation and shape timed and verified in both runs (``COLUMNS``)."""
    def usable(df):
        ok = df[(df["status"] == "ok") & df["verified"].astype(bool)] if len(df) else df
        ok = ok.assign(commit=ok["git_commit"].astype(str).str[:7] if "git_commit" in ok else "",
                       source=ok["source_sha256"].fillna("").astype(str) if "source_sha256" in ok else "")
        return ok[KEYS + ["median_ms", "iqr_ms", "reps", "gpu", "commit", "source"]]

    m = usable(a).merge(usable(b), on=KEYS, suffixes=("_a", "_b"))
    if m.empty:
        return pd.DataFrame(columns=COLUMNS)
    m["run_a"], m["run_b"] = run_a, run_b
    # the same implementation built from other source in the two runs: its speed-up is partly the code's
    m["code_differs"] = (m.source_a != m.source_b) & (m.source_a != "") & (m.source_b != "")
    m["speedup"] = m.median_ms_a / m.median_ms_b
    se = (_rel_se(m.median_ms_a, m.iqr_ms_a, m.reps_a) ** 2 + _rel_se(m.median_ms_b, m.iqr_ms_b, m.reps_b) ** 2) ** 0.5
    m["ci_low"] = m.speedup * (-Z95 * se).map(math.exp)
    m["ci_high"] = m.speedup * (Z95 * se).map(math.exp)
    m["verdict"] = _verdicts(m.ci_low, m.ci_high)
    rel_a, rel_b = m.iqr_ms_a / m.median_ms_a, m.iqr_ms_b / m.median_ms_b
    m["unsteady"] = ["A" if ra > UNSTEADY_REL and ra > UNSTEADY_RATIO * rb else
                     "B" if rb > UNSTEADY_REL and rb > UNSTEADY_RATIO * ra else ""
                     for ra, rb in zip(rel_a, rel_b)]
    m["_se"] = se
    lib = m[m.kernel == "cublas"][["m", "n", "k", "speedup", "_se"]].rename(
        columns={"speedup": "cublas_speedup", "_se": "_se_lib"})
    m = m.merge(lib, on=["m", "n", "k"], how="left")
    m["vs_cublas"] = m.speedup / m.cublas_speedup
    se_norm = (m._se ** 2 + m._se_lib ** 2) ** 0.5
    m["vs_cublas_low"] = m.vs_cublas * (-Z95 * se_norm).map(math.exp)
    m["vs_cublas_high"] = m.vs_cublas * (Z95 * se_norm).map(math.exp)
    m["verdict_vs_cublas"] = _verdicts(m.vs_cublas_low, m.vs_cublas_high)
    lib_rows = m.kernel == "cublas"  # cuBLAS against itself: nothing to say
    m.loc[lib_rows, ["vs_cublas", "vs_cublas_low", "vs_cublas_high"]] = float("nan")
    m.loc[lib_rows, "verdict_vs_cublas"] = ""
    return m[COLUMNS]


def _commits(column: pd.Series) -> str:
    """The commits a run's rows name, short, joined by "/" (one, as a run has; empty where none)."""
    return "/".join(sorted(set(column.astype(str)) - {"", "nan"}))


def _verdicts(low, high) -> list[str]:
    return ["" if lo != lo else ("faster" if lo > 1 else ("slower" if hi < 1 else "within noise"))
            for lo, hi in zip(low, high)]


def in_order(df: pd.DataFrame, order: list[str], *then: str) -> pd.DataFrame:
    """``df`` sorted by implementation in ladder ``order`` (others last), then by the columns ``then``."""
    rank = {k: i for i, k in enumerate(order)}
    return (df.assign(_r=df.kernel.map(lambda k: rank.get(k, len(rank))))
            .sort_values(["_r", *then], kind="stable").drop(columns="_r"))


def across_shapes(df: pd.DataFrame, *, order: list[str]) -> pd.DataFrame:
    """Per implementation over every shape both runs timed and verified: the geometric mean of the
    speed-ups (and of ``vs_cublas``), the smallest and largest, and how many shapes got each verdict."""
    rows = []
    for kernel, g in df.groupby("kernel", sort=False):
        vs = g.vs_cublas.dropna()
        rows.append(dict(kernel=kernel, shapes=len(g), geomean=math.exp(g.speedup.map(math.log).mean()),
                         low=g.speedup.min(), high=g.speedup.max(),
                         faster=int((g.verdict == "faster").sum()), slower=int((g.verdict == "slower").sum()),
                         noise=int((g.verdict == "within noise").sum()), unsteady=int((g.unsteady != "").sum()),
                         vs_cublas=math.exp(vs.map(math.log).mean()) if len(vs) else float("nan")))
    out = pd.DataFrame(rows, columns=["kernel", "shapes", "geomean", "low", "high", "faster", "slower", "noise",
                                      "unsteady", "vs_cublas"])
    return in_order(out, order)


def markdown(df: pd.DataFrame, *, order: list[str], shape=None) -> str:
    """The comparison as a report section: a summary line, then per implementation its speed-up at
    ``shape`` (default: the largest shape all compared implementations share)."""
    if df.empty:
        return "## Comparing runs\n\nNo implementation was timed and verified at the same shape in both runs.\n"
    run_a, run_b = df.run_a.iloc[0], df.run_b.iloc[0]
    counts = df.verdict.value_counts()
    ca, cb = _commits(df.commit_a) or "?", _commits(df.commit_b) or "?"
    changed = sorted(set(df.kernel[df.code_differs.astype(bool)]))  # (marked ‡ in both tables below)
    same_gpu = df.gpu_a.iloc[0] == df.gpu_b.iloc[0]
    if ca == cb:
        code = [f"Both runs are of commit `{ca}`: every difference below is the GPU's and the run's, not the code's."
                if not same_gpu else f"Both runs are of commit `{ca}`."]
    else:
        code = [f"**The runs are of two commits** (`{ca}` and `{cb}`): " + (
            f"{len(changed)} implementation{'s' if len(changed) > 1 else ''} built from other source in the two "
            f"(marked ‡ below: {', '.join(f'`{k}`' for k in changed)}), whose speed-ups mix the code's change with "
            + ("the GPU's." if not same_gpu else "the run's.") if changed else
            "no implementation's source differs between them.")]
    out = ["## Comparing runs", "", *code, "",
           f"Run **{run_b}** ({df.gpu_b.iloc[0]}, `{cb}`) against run **{run_a}** ({df.gpu_a.iloc[0]}, `{ca}`): "
           f"{len(df)} implementation × shape pairs timed and verified in both; "
           + ", ".join(f"{counts.get(v, 0)} {v}" for v in ("faster", "slower", "within noise"))
           + " (by repetition noise alone). Speed-up = median time in A / median time in B (above 1: B is "
           "faster), with a 95% interval from each run's repetitions. That interval does not cover drift "
           "between runs (clock, temperature, host): cuBLAS's own row shows it, and `vs cuBLAS` divides it "
           "out, with an interval that adds cuBLAS's noise.", ""]
    if shape is None:
        sizes = df.assign(f=df.m * df.n * df.k).sort_values("f")
        shape = tuple(int(x) for x in sizes.iloc[-1][["m", "n", "k"]])
    at = df[(df.m == shape[0]) & (df.n == shape[1]) & (df.k == shape[2])]
    at = in_order(at, order)
    rows = ["| implementation | A ms | B ms | speed-up | 95% interval | verdict | vs cuBLAS | 95% interval | verdict |",
            "| :--- | ---: | ---: | ---: | ---: | :--- | ---: | ---: | :--- |"]
    for r in at.itertuples():
        vs = ("| | |" if r.vs_cublas != r.vs_cublas else
              f"{r.vs_cublas:.3f} | {r.vs_cublas_low:.3f}–{r.vs_cublas_high:.3f} | {r.verdict_vs_cublas} |")
        mark = f" (unsteady in {r.unsteady})" if r.unsteady else ""
        code = " ‡" if r.code_differs else ""
        rows.append(f"| `{r.kernel}`{code} | {r.median_ms_a:.3f} | {r.median_ms_b:.3f} | **{r.speedup:.3f}×** | "
                    f"{r.ci_low:.3f}–{r.ci_high:.3f} | {r.verdict}{mark} | {vs}")
    out += [f"At {shape_label(*shape)}:", "", *rows, ""]
    summary = across_shapes(df, order=order)
    rows = ["| implementation | shapes | speed-up (geometric mean) | smallest–largest | faster / slower / within noise "
            "| unsteady | vs cuBLAS (geometric mean) |", "| :--- | ---: | ---: | ---: | :--- | ---: | ---: |"]
    for r in summary.itertuples():
        vs = "" if r.vs_cublas != r.vs_cublas else f"{r.vs_cublas:.3f}"
        rows.append(f"| `{r.kernel}`{' ‡' if r.kernel in changed else ''} | {r.shapes} | **{r.geomean:.3f}×** | {r.low:.3f}–{r.high:.3f} | "
                    f"{r.faster} / {r.slower} / {r.noise} | {r.unsteady or ''} | {vs} |")
    out += ["Over every shape both runs timed and verified (the size sweep and, for the stages in it, the "
            "suite):", "", *rows, ""]
    out += _unsteady_section(df, order=order)
    return "\n".join(out) + "\n"


def _unsteady_section(df: pd.DataFrame, *, order: list[str]) -> list[str]:
    bad = df[df.unsteady != ""]
    head = (f"**Unsteady points** (the quartile range in one run over {UNSTEADY_REL:.0%} of the median and over "
            f"{UNSTEADY_RATIO:g}× the other run's): ")
    if bad.empty:
        return [head + "none.", ""]
    bad = in_order(bad.assign(f=bad.m * bad.n * bad.k), order, "f")
    rows = ["| implementation | shape | unsteady in | IQR / median A | IQR / median B | speed-up |",
            "| :--- | :--- | :--- | ---: | ---: | ---: |"]
    for r in bad.itertuples():
        rows.append(f"| `{r.kernel}` | {shape_label(int(r.m), int(r.n), int(r.k))} | {r.run_a if r.unsteady == 'A' else r.run_b} "
                    f"| {r.iqr_ms_a / r.median_ms_a:.1%} | {r.iqr_ms_b / r.median_ms_b:.1%} | {r.speedup:.3f}× |")
    return [head + f"{len(bad)}. Their speed-ups say more about the run than about the implementation; "
            "repeating the run is the check.", "", *rows, ""]


def read_runs(benches) -> list[pd.DataFrame]:
    """Each run's bench table (``reports/<run>/bench.csv``), refused with one line naming it when it is
    damaged (``io.read_table``), holds rows of another run (``table_checks.one_run``, against the
    ``environment.json`` beside it when there is one) or values no measurement gives
    (``table_checks.possible_values``)."""
    from ..results import io

    frames = []
    for bench in map(Path, benches):
        frame = io.read_table(bench, required=REQUIRED, numbers=NUMBERS)
        env_path = bench.parent / "environment.json"
        env = io.read_json_checked(env_path) if env_path.exists() else None
        if env is not None and not isinstance(env, dict):
            raise io.DamagedFile(f"{env_path}: not the environment record expected (a JSON object)")
        finished_run(frame, env, bench=bench, env_path=env_path if env is not None else None)
        frames.append(frame)
    return frames


def target(runs: list[str], benches, *, md, log) -> str | None:
    """The ``compare`` target's check, after compare_runs: one line when fewer than two runs are set or
    when a run's table is refused (the comparison on disk is then the previous one, which Snakemake put
    back), else None and ``log`` says what was compared."""
    from ..errors import LabError
    from ..results import io

    if len(runs) < 2:
        return "compare: set at least two runs, e.g. --config 'compare={\"runs\": [\"h100\", \"h200\"]}'"
    try:
        read_runs(benches)
    except LabError as exc:
        return f"sgemm-lab compare: {exc} (the comparison in {output_dir(runs)} is the previous one)"
    io.write_text(Path(log), f"compared: {md}\n")
    return None


def one_sided(a: pd.DataFrame, b: pd.DataFrame, df: pd.DataFrame, *, order: list[str]) -> dict[str, list[str]]:
    """The implementations left out of a comparison: timed in A only, in B only, and in both but at no
    shape verified in both (``df``: their ``pairwise`` rows)."""
    rank = {k: i for i, k in enumerate(order)}

    def ordered(names):
        return sorted(names, key=lambda k: (rank.get(k, len(rank)), k))

    ka, kb = set(a.kernel.astype(str)), set(b.kernel.astype(str))
    return {"a": ordered(ka - kb), "b": ordered(kb - ka), "unmatched": ordered((ka & kb) - set(df.kernel.astype(str)))}


def one_sided_section(left_out: dict[str, list[str]], *, run_a: str, run_b: str) -> str:
    """A short paragraph of the page naming the implementations ``one_sided`` found."""
    def names(ks):
        return ", ".join(f"`{k}`" for k in ks) if ks else "none"

    if not any(left_out.values()):
        return "**In one run only**: none; both runs timed the same implementations, and all are compared.\n"
    text = (f"**In one run only** (not compared): in **{run_a}** only: {names(left_out['a'])}; "
            f"in **{run_b}** only: {names(left_out['b'])}.")
    if left_out["unmatched"]:
        text += f" Timed in both, but at no shape verified in both: {names(left_out['unmatched'])}."
    return text + "\n"


def run(*, runs: list[str], benches: list[Path], out_md: Path, out_csv: Path, out_png: Path,
        order: list[str]) -> None:
    """Compare the first run with each later one: one tidy CSV, one markdown page, one figure. Each
    run's table is read with ``io.read_table`` and checked against the run's environment record
    (``one_run``) first; the files are written only once all of them can be."""
    from ..results import io
    from ..results.logs import log
    from . import plots

    frames = read_runs(benches)
    parts, pages = [], []
    for r, f in zip(runs[1:], frames[1:]):
        part = pairwise(frames[0], f, run_a=runs[0], run_b=r)
        left_out = one_sided(frames[0], f, part, order=order)
        for key, where in (("a", f"in {runs[0]} only"), ("b", f"in {r} only"),
                           ("unmatched", "in both, at no shape verified in both")):
            if left_out[key]:
                log.warning("compare %s against %s: not compared, timed %s: %s", r, runs[0], where,
                            ", ".join(left_out[key]))
        parts.append(part)
        pages.append(markdown(part, order=order).rstrip("\n") + "\n\n"
                     + one_sided_section(left_out, run_a=runs[0], run_b=r))
    df = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=COLUMNS)
    # the figure first (the one that may fail on its own), the page last: no mix of old and new files
    plots.compare_runs(df, out_png, order=order)
    io.write_csv(out_csv, df, columns=COLUMNS)
    text = "\n".join(pages)
    # the later runs against the first, in the order of the page's own lines ("Run B against run A")
    def at(frame) -> str:
        c = _commits(frame["git_commit"].astype(str).str[:7]) if "git_commit" in frame else ""
        return f" (at {c})" if c else ""

    title = ", ".join(f"{r}{at(f)}" for r, f in zip(runs[1:], frames[1:])) + f" against {runs[0]}{at(frames[0])}"
    io.write_text(out_md, f"# {title}\n\n{text}\n![speed-ups]({out_png.name})\n")
