"""The target ``time``: a few stages at a few shapes, beside their cuBLAS, and nothing else of the pipeline.

    snakemake --cores 1 time --config 'time={"stages": ["<stage id>"], "shapes": ["1000x2000x3000"]}'

Each named stage is built by the build step in a job of its own (rule ``time_build``: a dispatch stage with a
rule compiles every candidate and lets the rule choose per shape, without a shape sweep), then verified and timed at each shape as the bench step does (fresh
inputs against float64, the output poisoned, warm-up by time, the GPU lock, a child process per point); its
cuBLAS (strict FP32 for FP32 and 3xTF32 stages, TF32 for TF32 ones) is timed at the same shapes. Stages a run
builds from its sweeps (autotuned stages, dispatch stages without a rule) get a skipped row that says so.
Results: ``results/<run>/time/time.csv`` (the bench's columns, the baseline and the ratio to it) and
``time.md`` (a table)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..config.records import BASELINES, LabConfig
from ..errors import LabError
from ..results import io
from ..results.common import log, point_problems
from ..results.outcome import NOT_RUN, NotRun, StepStatus
from . import points

TIME_COLUMNS = points.BENCH_COLUMNS + ["baseline", "vs_baseline"]
EXAMPLE = 'time={"stages": ["<stage id>"], "shapes": ["1000x2000x3000"]}'


def baseline_of(cfg: LabConfig, impl: str) -> str | None:
    """The cuBLAS a stage is compared with: TF32 for TF32-class stages, else strict FP32; None for cuBLAS."""
    if impl in BASELINES:
        return None
    return "cublas_tf32" if cfg.kernel(impl).precision == "tf32" else "cublas"


def needs_sweeps(cfg: LabConfig, impl: str) -> str | None:
    """Why a stage cannot be built without a run's sweeps (None: it can)."""
    if impl in BASELINES:
        return None
    spec = cfg.kernel(impl)
    if spec.autotuned:
        return "built from its tile sweeps' fastest point (autotuned): the full pipeline builds it"
    if spec.dispatched and spec.rule is None:
        return "built from its shape sweep (a dispatch stage without a rule): the full pipeline builds it"
    return None


def plan(cfg: LabConfig) -> list[str]:
    """What the target times: the named stages in the order given, then the baselines they need."""
    if not cfg.time_stages or not cfg.time_shapes:
        raise LabError(f"time: name the stages and the shapes to time: --config '{EXAMPLE}'")
    extra = [b for b in dict.fromkeys(baseline_of(cfg, s) for s in cfg.time_stages) if b and b not in cfg.time_stages]
    return list(cfg.time_stages) + extra


def time_shapes(cfg: LabConfig, *, builds: dict[str, tuple[Path | None, Path | None]], out_csv: Path,
                out_md: Path, gpu: Callable[[str], str | None]) -> StepStatus | None:
    """Verify and time the target's stages at its shapes from their builds (impl -> (binary, record); none
    for a baseline or a stage that needs sweeps), each holding the GPU as ``gpu(impl)`` says (``pipeline.steps``);
    write the table and its page."""
    rows: list[dict] = []
    shapes = list(cfg.time_shapes)
    for impl in plan(cfg):
        reason = needs_sweeps(cfg, impl)
        if reason is not None:
            log.warning("time: %s: skipped (%s)", impl, reason)
            rows += [dict(kernel=impl, m=s.m, n=s.n, k=s.k, status="skipped", reason=reason, verified=False)
                     for s in shapes]
            continue
        binary, record = builds.get(impl, (None, None))
        try:
            rows += points.bench_at(cfg, impl, shapes, binary=binary, record=record, gpu=gpu(impl))
        except NotRun as exc:  # its build failed (the build job's record says why)
            rows += [dict(kernel=impl, m=s.m, n=s.n, k=s.k, status=NOT_RUN, reason=str(exc), verified=False)
                     for s in shapes]
    rows = with_ratios(cfg, rows)
    io.write_csv(out_csv, rows, columns=TIME_COLUMNS)
    io.write_text(out_md, page(cfg, rows))
    log.info("time: %s", out_md)
    return point_problems(rows, ("ok", "skipped"), "shapes")


def with_ratios(cfg: LabConfig, rows: list[dict]) -> list[dict]:
    """Each stage's row with its baseline and the ratio of the baseline's median time to its own."""
    medians = {(r["kernel"], r["m"], r["n"], r["k"]): r.get("median_ms") for r in rows if r.get("status") == "ok"}
    out = []
    for r in rows:
        base = baseline_of(cfg, r["kernel"])
        mine, theirs = medians.get((r["kernel"], r["m"], r["n"], r["k"])), medians.get((base, r["m"], r["n"], r["k"]))
        out.append(dict(r, baseline=base, vs_baseline=theirs / mine if mine and theirs else None))
    return out


def page(cfg: LabConfig, rows: list[dict]) -> str:
    """The markdown table of the target's rows: one line a stage and shape."""
    from ..report.numbers import mark, ratio_text, unsteady_note

    lines = [f"# Timed: {', '.join(cfg.time_stages)}", "",
             "Each point verified against float64 on fresh inputs, then timed (median of the repetitions; ratio = "
             "the baseline's median time over the stage's).", "",
             "| stage | shape | status | TFLOP/s | median ms | IQR / median | baseline | ratio |",
             "| :--- | :--- | :--- | ---: | ---: | ---: | :--- | ---: |"]
    for r in rows:
        shape = f"{r['m']}x{r['n']}x{r['k']}"
        if r.get("status") != "ok":
            lines.append(f"| `{r['kernel']}` | {shape} | {r.get('status')}: {r.get('reason', '')} | | | | | |")
            continue
        ratio = ratio_text(r["vs_baseline"]) if r.get("vs_baseline") else ""
        lines.append(f"| `{r['kernel']}` | {shape} | ok{mark(r)} | {r['tflops']:.2f} | {r['median_ms']:.4f} | "
                     f"{r['iqr_ms'] / r['median_ms']:.1%} | {r.get('baseline') or ''} | {ratio} |")
    return "\n".join(lines + unsteady_note("\n".join(lines))) + "\n"

