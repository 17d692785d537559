"""The report's accuracy tables, from check rows (``check.csv``): whether the FP32 class can tell TF32
from FP32 at every check shape, every FP32-accurate stage's error on each input distribution as
a multiple of cuBLAS strict FP32's on the same inputs, and whether it is exact where cuBLAS is.

Rows from runs before these columns existed (no ``distribution``, ``cublas_rel_err``, ``fp32_limit``)
give no table (None).
"""

from __future__ import annotations

import math

import pandas as pd

from ..config.records import FP32_ACCURATE

# the modes in which A @ B is computed (alpha0 only scales C, which TF32 does exactly)
MULTIPLYING = ("beta", "beta0_poisoned")


def _label(m, n, k) -> str:
    return f"{int(m)}x{int(n)}x{int(k)}"


def _table(header: list[str], rows: list[list[str]], align: str) -> str:
    marks = {"l": ":--", "r": "--:"}
    return "\n".join(["| " + " | ".join(header) + " |", "| " + " | ".join(marks[a] for a in align) + " |"]
                     + ["| " + " | ".join(r) + " |" for r in rows])


def _ran(checks: pd.DataFrame | None, *columns: str) -> pd.DataFrame | None:
    if checks is None or checks.empty or any(c not in checks for c in ("rel_err", *columns)):
        return None
    ran = checks[(checks["status"].isin(["pass", "fail"])) & checks["rel_err"].notna()].copy()
    if "distribution" in ran:
        ran["distribution"] = ran["distribution"].fillna("uniform")
    return ran


def uniform_rows(checks: pd.DataFrame | None) -> pd.DataFrame | None:
    """The check rows on uniform inputs (all rows of a run without distributions)."""
    if checks is None or "distribution" not in checks:
        return checks
    return checks[checks["distribution"].fillna("uniform") == "uniform"]


def class_power(checks: pd.DataFrame | None, tf32_impl: str = "cublas_tf32") -> tuple[str, int, int] | None:
    """Per uniform check shape: cuBLAS FP32's error, the FP32-class limit, the absolute bound's share in
    it, cuBLAS TF32's error, and whether TF32 fails the FP32 class there (in both modes that multiply).
    Returns (table, shapes where TF32 fails, shapes measured)."""
    ran = _ran(uniform_rows(checks), "fp32_limit", "cublas_rel_err")
    if ran is None:
        return None
    tf = ran[(ran["kernel"] == tf32_impl) & ran["mode"].isin(MULTIPLYING)]
    if tf.empty:
        return None
    rows, fails = [], 0
    for (m, n, k), g in tf.groupby(["m", "n", "k"], sort=False):
        ratio = (g["rel_err"] / g["fp32_limit"]).min()  # the mode in which TF32 came closest to passing
        failed = bool(ratio > 1)
        fails += failed
        worst = g.loc[g["rel_err"].idxmax()]
        rows.append([_label(m, n, k), f"{g['cublas_rel_err'].max():.2e}", f"{g['fp32_limit'].min():.2e}",
                     f"{worst['rel_err']:.2e}",
                     f"fails ({ratio:.0f}x the limit)" if failed else f"**passes** ({ratio:.2f}x the limit)"])
    table = _table(["check shape", "cuBLAS FP32 error", "FP32 limit", "cuBLAS TF32 error", "TF32 held to the FP32 class"],
                   rows, "lrrrl")
    return table, fails, len(rows)


def distribution_groups(checks: pd.DataFrame | None, configured=(), only=None) -> dict[tuple, list[str]]:
    """The distributions beyond uniform that the run's checks ran (``checks``: what ran, not what the
    config says now; ``only``: these of them), grouped by the shapes they ran at: (shape labels) ->
    ["name (kind)", ...], in the order they ran; the kind is the configured one of that name, where there
    is one."""
    if checks is None or "distribution" not in checks:
        return {}
    kinds = {d.name: d.kind for d in configured}
    rows = checks[checks["distribution"].fillna("uniform") != "uniform"]
    if only is not None:
        rows = rows[rows["distribution"].isin(list(only))]
    groups: dict[tuple, list[str]] = {}
    for name, g in rows.groupby("distribution", sort=False):
        shapes = tuple(dict.fromkeys(_label(m, n, k) for m, n, k in zip(g["m"], g["n"], g["k"])))
        groups.setdefault(shapes, []).append(f"{name} ({kinds[name]})" if name in kinds else str(name))
    return groups


def by_distribution(checks: pd.DataFrame | None, order: list[str], precision: dict[str, str]) -> str | None:
    """Every FP32-accurate implementation (classes fp32 and 3xtf32) and cuBLAS TF32 for scale: per input
    distribution, the worst error over the shapes and modes that multiply, as a multiple of cuBLAS
    FP32's on the same inputs; a failed check is marked."""
    ran = _ran(checks, "distribution", "cublas_rel_err")
    if ran is None:
        return None
    ran = ran[ran["mode"].isin(MULTIPLYING) & (ran["cublas_rel_err"] > 0)]
    dists = list(dict.fromkeys(ran["distribution"]))
    if len(dists) < 2:
        return None
    ran = ran.assign(ratio=ran["rel_err"] / ran["cublas_rel_err"])
    rows = []
    for impl in order:
        if precision.get(impl, "fp32") not in FP32_ACCURATE and impl != "cublas_tf32":
            continue
        mine = ran[ran["kernel"] == impl]
        if mine.empty:
            continue
        cells = []
        for d in dists:
            g = mine[mine["distribution"] == d]
            if g.empty:
                cells.append("–")
                continue
            worst = g.loc[g["ratio"].idxmax()]
            mark = " ✗" if (g["status"] == "fail").any() else ""
            cells.append(f"{worst['ratio']:.2g}x{mark}")
        rows.append([f"`{impl}`", precision.get(impl, "fp32"), *cells])
    if not rows:
        return None
    return _table(["implementation", "class", *dists], rows, "ll" + "r" * len(dists))


def exactness(checks: pd.DataFrame | None, order: list[str], precision: dict[str, str]) -> tuple[str, list[str]] | None:
    """Where cuBLAS strict FP32 returns the exact result (its error 0 against float64: inputs whose products
    and sums FP32 holds, such as small integers), whether each FP32-accurate stage does too, over the modes
    that multiply; a NaN or infinity in a stage's output is not exact, whatever its error over the finite
    entries says. cuBLAS itself is the reference here and has no row. Returns (table, one line per stage
    that is not exact at some such point), or None when cuBLAS was exact nowhere."""
    if checks is None or checks.empty or any(c not in checks for c in ("rel_err", "cublas_rel_err", "status")):
        return None
    ran = checks[checks["status"].isin(["pass", "fail"]) & checks["mode"].isin(MULTIPLYING)
                 & (checks["cublas_rel_err"] == 0)].copy()
    if ran.empty:
        return None
    if "distribution" not in ran:
        ran["distribution"] = "uniform"
    ran["distribution"] = ran["distribution"].fillna("uniform")
    nonfinite = ran["nonfinite"].fillna(0) > 0 if "nonfinite" in ran else False
    ran["off"] = (ran["rel_err"] != 0) | ran["rel_err"].isna() | nonfinite
    rows, inexact = [], []
    for impl in order:
        if impl == "cublas" or precision.get(impl, "fp32") not in FP32_ACCURATE:
            continue
        mine = ran[ran["kernel"] == impl]
        if mine.empty:
            continue
        points = mine.groupby(["distribution", "m", "n", "k"], sort=False).agg(off=("off", "any"),
                                                                             err=("rel_err", "max"))
        off = points[points["off"]]
        where = ", ".join(f"{d} {_label(m, n, k)}" for d, m, n, k in off.index[:4]) + (" ..." if len(off) > 4 else "")
        # a point off with no positive error over its finite entries had NaN or Inf in its output
        largest = "0" if off.empty else "NaN/Inf" if not (off["err"] > 0).all() else f"{off['err'].max():.2e}"
        rows.append([f"`{impl}`", precision.get(impl, "fp32"), str(len(points)), str(len(points) - len(off)),
                     largest, f"**inexact** at {len(off)}: {where}" if len(off) else "exact"])
        if len(off):
            inexact.append(f"`{impl}`: not exact at {len(off)} of {len(points)} points where cuBLAS FP32 is "
                           f"(largest error {largest}: {where})")
    if not rows:
        return None
    return _table(["implementation", "class", "points where cuBLAS FP32 is exact", "exact there",
                   "largest error there", "verdict"], rows, "llrrrl"), inexact


def shown_distributions(checks: pd.DataFrame | None) -> list[str]:
    """The distributions beyond uniform that ``by_distribution`` has a column for: those with a point where
    cuBLAS FP32's error is not 0 (a multiple of it means something there)."""
    ran = _ran(checks, "distribution", "cublas_rel_err")
    if ran is None:
        return []
    ran = ran[ran["mode"].isin(MULTIPLYING) & (ran["cublas_rel_err"] > 0) & (ran["distribution"] != "uniform")]
    return list(dict.fromkeys(ran["distribution"]))


def failed_points(checks: pd.DataFrame | None, precision: dict[str, str]) -> list[str]:
    """One line per FP32-class or 3xTF32 check point that failed on a distribution other than uniform."""
    ran = _ran(checks, "distribution")
    if ran is None:
        return []
    bad = ran[(ran["status"] == "fail") & (ran["distribution"] != "uniform")
              & ran["kernel"].map(lambda k: precision.get(k, "fp32") in FP32_ACCURATE)]
    out = []
    for _, r in bad.iterrows():
        lib = r.get("cublas_rel_err", math.nan)
        out.append(f"`{r['kernel']}` at {_label(r['m'], r['n'], r['k'])} ({r['distribution']}, {r['mode']}): "
                   f"error {r['rel_err']:.2e}, limit {r['tolerance']:.2e}"
                   + (f", cuBLAS FP32 {lib:.2e}" if isinstance(lib, float) and math.isfinite(lib) else ""))
    return out


def against_k(checks: pd.DataFrame | None, precision: dict[str, str], cls: str = "3xtf32") -> tuple[str, list[str]] | None:
    """The stages of class ``cls`` per input distribution and K: cuBLAS FP32's error, then each stage's
    worst error over the shapes of that K and the modes that multiply, as a multiple of cuBLAS's on the
    same inputs (bold above 1x, ✗ for a failed check). Returns (table, the cells above 1x), or None."""
    ran = _ran(checks, "distribution", "cublas_rel_err")
    if ran is None:
        return None
    stages = [k for k, p in precision.items() if p == cls and k in set(ran["kernel"])]
    if not stages:
        return None
    ran = ran[ran["mode"].isin(MULTIPLYING) & (ran["cublas_rel_err"] > 0)]
    ran = ran.assign(ratio=ran["rel_err"] / ran["cublas_rel_err"])
    rows, above = [], []
    for (dist, k), g in ran.groupby(["distribution", "k"], sort=False):
        cells = []
        for impl in stages:
            mine = g[g["kernel"] == impl]
            if mine.empty:
                cells.append("–")
                continue
            worst = mine.loc[mine["ratio"].idxmax()]
            text = f"{worst['ratio']:.2f}x" + (" ✗" if (mine["status"] == "fail").any() else "")
            if worst["ratio"] > 1:
                text = f"**{text}**"
                above.append(f"`{impl}` {dist} at {_label(worst['m'], worst['n'], k)} ({worst['ratio']:.2f}x)")
            cells.append(text)
        rows.append([dist, str(int(k)), f"{g['cublas_rel_err'].max():.2e}", *cells])
    order = {d: i for i, d in enumerate(dict.fromkeys(ran["distribution"]))}
    rows.sort(key=lambda r: (order[r[0]], int(r[1])))
    return _table(["inputs", "K", "cuBLAS FP32 error", *[f"`{s}`" for s in stages]], rows,
                  "lrr" + "r" * len(stages)), above


def compensated_speed(ok: pd.DataFrame, precision: dict[str, str], shape, cls: str = "3xtf32") -> list[str]:
    """What each stage of class ``cls`` pays for its accuracy: cuBLAS strict FP32's time over its own at
    ``shape`` (the headline shape), one line; nothing without cuBLAS or such a stage there."""
    from .tables import row_at, shape_label

    ref = row_at(ok, "cublas", shape) if shape else None
    if ref is None:
        return []
    parts = [f"`{k}` {ref.median_ms / mine.median_ms:.2f}×" for k, p in precision.items()
             if p == cls and (mine := row_at(ok, k, shape)) is not None]
    if not parts:
        return []
    return [f"Their speed at {shape_label(*shape)}, as cuBLAS strict FP32's time over theirs: " + "; ".join(parts) + ".",
            ""]
