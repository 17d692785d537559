"""The report's first screen: per class of shapes users bring, which stage to use in each precision race,
how fast it is against cuBLAS there and how accurate, with the caveats; then the table of contents.

A class's shapes are every timed shape of the run in it: the suite's and the bench's
(``config.shape_classes.classes_of``, a shape may be in several) and the held-out draw's (the class it
was drawn for). In each race the stage to use is the one with the highest geometric-mean ratio to the
race's cuBLAS among the stages verified on the most shapes of the class that cuBLAS was timed on: one
stage a user can call for the whole class, not the best of each shape. Nothing here is measured again; every
number is read from the bench and check rows the rest of the report reads.
"""

from __future__ import annotations

import math

import pandas as pd

from ..config.records import LabConfig, Shape
from ..config.shape_classes import CLASSES, classes_of
from .markdown import anchor, md_table
from .numbers import UNSTEADY_NOTE, unsteady
from .tables import row_at, fp32_accurate_stages, geomean, shape_label

CLASS_NAMES = {"long_k": "small output, long K", "skinny": "skinny (GEMV-like)", "short_k": "short K",
               "odd": "odd sizes", "tall_skinny": "tall-skinny", "square": "large squares"}


def class_shapes(cfg: LabConfig) -> dict[str, list[Shape]]:
    """Every timed shape of the run by class, in the order of ``CLASSES`` (a class with none is left out)."""
    out: dict[str, list[Shape]] = {c: [] for c in CLASSES}
    for s in (*cfg.suite, *cfg.bench.shapes):
        for c in classes_of(s):
            if s not in out[c]:
                out[c].append(s)
    for c, s in zip(cfg.held_out_classes, cfg.held_out):
        if s not in out[c]:
            out[c].append(s)
    return {c: v for c, v in out.items() if v}


def _races(cfg: LabConfig, checks: pd.DataFrame | None) -> list[tuple[str, str, list[str]]]:
    """(race, its cuBLAS, the stages that run in it)."""
    gpu = [k for k in cfg.kernels if k.backend == "cuda" or k.autotuned]
    return [("strict FP32", "cublas", [k.id for k in gpu if k.precision == "fp32"]),
            ("FP32-accurate", "cublas", fp32_accurate_stages(cfg, checks)),
            ("TF32", "cublas_tf32", [k.id for k in gpu if k.precision == "tf32"])]


def _verified(ok: pd.DataFrame, impl: str, s: Shape) -> pd.Series | None:
    row = row_at(ok, impl, (s.m, s.n, s.k))
    if row is None or ("verified" in row and not bool(row["verified"])):
        return None
    return row


def pick(ok: pd.DataFrame, shapes: list[Shape], baseline: str, stages: list[str]):
    """The stage to use over ``shapes``: (stage, [(ratio, shape, unsteady)], shapes the baseline was timed
    on), or None where no stage verified on any of them. The stage verified on the most of those shapes
    wins, then the highest geometric-mean ratio: a stage timed on fewer shapes of the class (the TF32
    stages, timed on the bench's squares only) is not ranked over one timed on all of them."""
    timed = [(s, ref) for s in shapes if (ref := _verified(ok, baseline, s)) is not None]
    best = None
    for stage in stages:
        points = [(ref["median_ms"] / row["median_ms"], s, unsteady(row, ref))
                  for s, ref in timed if (row := _verified(ok, stage, s)) is not None]
        if points:
            key = (len(points), geomean(r for r, _, _ in points))
            if best is None or key > best[0]:
                best = (key, stage, points)
    return None if best is None else (best[1], best[2], len(timed))


def _error_multiple(checks: pd.DataFrame | None, stage: str, baseline: str) -> float:
    """The stage's error against the race's cuBLAS on the check points: the worst multiple of cuBLAS strict
    FP32's error on the same inputs (where cuBLAS's is not zero); for TF32, the stage's median error over
    cuBLAS TF32's median on the uniform check points. NaN where the checks do not say."""
    if checks is None or checks.empty or "rel_err" not in checks:
        return math.nan
    mine = checks[(checks.kernel == stage) & checks.rel_err.notna() & (checks["mode"] != "alpha0")]
    if baseline == "cublas":
        if "cublas_rel_err" not in checks:
            return math.nan
        mine = mine[mine.cublas_rel_err > 0]
        return float((mine.rel_err / mine.cublas_rel_err).max()) if len(mine) else math.nan
    uniform = checks["distribution"] == "uniform" if "distribution" in checks else True
    base = checks[(checks.kernel == baseline) & checks.rel_err.notna() & uniform & (checks["mode"] != "alpha0")]
    mine = mine[uniform[mine.index]] if not isinstance(uniform, bool) else mine
    if not len(mine) or not len(base) or not base.rel_err.median():
        return math.nan
    return float(mine.rel_err.median() / base.rel_err.median())


def _cell(cfg: LabConfig, ok, checks, shapes, baseline, stages) -> tuple[str, str | None, list[str]]:
    """The race's cell for a class, the stage it names, and its caveats."""
    got = pick(ok, shapes, baseline, stages)
    if got is None:
        return "not timed", None, []
    stage, points, timed = got
    ratios = [r for r, _, _ in points]
    low, at, _ = min(points, key=lambda p: p[0])
    err = _error_multiple(checks, stage, baseline)
    text = (f"`{stage}` {geomean(ratios):.2f}×" + (f" (min {low:.2f}× at {shape_label(at.m, at.n, at.k)})"
            if len(points) > 1 else "") + (f", error {err:.2f}×" if err == err else ""))
    notes = []
    if len(points) < len(shapes):
        notes.append(f"timed on {len(points)} of the {len(shapes)} shapes")
    below = sum(r < 1 for r in ratios)
    if below:
        notes.append(f"below cuBLAS on {below} of {len(ratios)}")
    shaky = [shape_label(s.m, s.n, s.k) for _, s, u in points if u]
    if shaky:
        notes.append(f"unsteady at {', '.join(shaky)}")
    return text, stage, notes


def summary_section(cfg: LabConfig, ok: pd.DataFrame, checks: pd.DataFrame | None) -> list[str]:
    """The summary table: one row per class of the shapes this run timed."""
    classes = class_shapes(cfg)
    if not classes or ok.empty:
        return []
    races = _races(cfg, checks)
    rows = []
    for cls, shapes in classes.items():
        row, notes, named = [CLASS_NAMES.get(cls, cls), str(len(shapes))], [], set()
        for name, baseline, stages in races:
            text, stage, more = _cell(cfg, ok, checks, shapes, baseline, stages)
            row.append(text)
            if more and stage not in named:  # (a stage named by two races: its caveats once)
                notes.append(f"`{stage}` " + ", ".join(more))
            named.add(stage)
        rows.append(row + ["; ".join(notes) or "–"])
    return ["## Summary: which stage for which shapes", "",
            "Per class of shapes users bring (`sgemm_lab.config.shape_classes`; the suite's, the bench's and the "
            "held-out draw's shapes), the one stage to use in each race: of those verified on the most shapes of the "
            "class, the one with the highest geometric-mean speed against cuBLAS there: strict FP32 and FP32-accurate against cuBLAS strict FP32, TF32 "
            "against cuBLAS TF32 (ratio = cuBLAS median time / stage median time; error = the stage's worst error "
            "as a multiple of cuBLAS FP32's on the same check inputs, for TF32 its median error over cuBLAS TF32's). "
            "Unsteady as marked † in the tables below: " + UNSTEADY_NOTE[2:],
            "",
            md_table(["class", "shapes", "strict FP32", "FP32-accurate", "TF32", "caveats"], rows, align="lrllll"), ""]


def contents(lines: list[str]) -> list[str]:
    """A table of contents of the second-level headings in ``lines``."""
    heads = [line[3:].strip() for line in lines if line.startswith("## ")]
    if not heads:
        return []
    return ["**Contents:** " + " · ".join(f"[{h}](#{anchor(h)})" for h in heads), ""]
