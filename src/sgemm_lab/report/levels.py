"""The memory hierarchy at the profiled shape: for each stage, the bytes Nsight Compute counted at each
level (DRAM, L2, L1, shared memory), the FLOPs per byte they give, and the bandwidth they took as a share
of that level's peak. A peak is ncu's own (bytes per cycle the level can sustain, times the clock the
level ran at during that launch), so a share is what ncu's ``pct_of_peak_sustained_elapsed`` would say.
The level nearest its peak is the one a stage's hierarchical roofline point sits closest to its roof at
(``profile_plots.levels_figure``).

What the counters do not see: wgmma reads its operands from shared memory by descriptor, and TMA writes
shared memory without passing L1's tag stage; neither is SASS data traffic, so for stages (and cuBLAS
kernels) built on them the L1 and shared bytes are only the rest (epilogue, bookkeeping)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import PurePath

import pandas as pd

from .markdown import md_table
from .run_files import FIGURES
from .stage_tables import ncu_table


@dataclass(frozen=True, kw_only=True)
class Level:
    """One level of the hierarchy: the metrics (short names, ``profiling.ncu.METRICS``) whose sum is its
    bytes, and the two whose product is its peak in bytes per second."""

    name: str
    bytes: tuple[str, ...]
    per_cycle: str
    clock: str


LEVELS = (
    Level(name="DRAM", bytes=("dram_bytes_read", "dram_bytes_write"), per_cycle="dram_peak_bytes_per_cycle",
          clock="dram_clock_hz"),
    Level(name="L2", bytes=("l2_bytes",), per_cycle="l2_peak_bytes_per_cycle", clock="l2_clock_hz"),
    # L1's data path and shared memory are one array of banks, 128 bytes a cycle an SM: L1's peak is the
    # shared-memory one (ncu's own hierarchical roofline takes 128 B per LSU writeback cycle, the same);
    # ``l1tex__t_bytes.sum.peak_sustained`` is the tag stage's lookup rate, four times that
    Level(name="L1", bytes=("l1_bytes",), per_cycle="smem_peak_bytes_per_cycle", clock="sm_clock_hz"),
    Level(name="shared", bytes=("smem_bytes",), per_cycle="smem_peak_bytes_per_cycle", clock="sm_clock_hz"),
)

COLUMNS = ["kernel", "precision", "tflops", "level", "bytes", "intensity", "tbps", "peak_tbps", "of_peak", "pipe"]
# the shared-memory pipe's busy share (ncu's wavefronts, which bank conflicts multiply): what bytes alone
# do not show about how near shared memory is to holding a stage
PIPE = {"shared": "smem_pipe_pct"}


def level_table(ncu: pd.DataFrame, bench: pd.DataFrame, *, order: list[str], shape,
                precision: dict[str, str] | None = None) -> pd.DataFrame:
    """One row a stage and level (``COLUMNS``) at ``shape``: TFLOP/s from the bench (median), bytes and
    the bandwidth from the profiled launch (bytes / ncu's duration), intensity = 2·M·N·K / bytes. Stages
    without the level's counters, or not timed at the shape, have no row; a run profiled before these
    counters were collected gives an empty table."""
    m, n, k = shape
    table = ncu_table(ncu, shape)
    if table.empty or bench is None or bench.empty:
        return pd.DataFrame(columns=COLUMNS)
    timed = bench[(bench.status == "ok") & (bench.m == m) & (bench.n == n) & (bench.k == k)]
    tflops = timed.groupby("kernel").tflops.first()
    flops = 2.0 * m * n * k
    rows = []
    for impl in order:
        if impl not in table.index or impl not in tflops.index or "duration" not in table:
            continue
        seconds = table.loc[impl, "duration"] * 1e-9
        for lv in LEVELS:
            need = [*lv.bytes, lv.per_cycle, lv.clock]
            if not all(c in table for c in need) or table.loc[impl, need].isna().any() or not seconds > 0:
                continue
            nbytes = float(table.loc[impl, list(lv.bytes)].sum())
            if nbytes <= 0:
                continue
            peak = table.loc[impl, lv.per_cycle] * table.loc[impl, lv.clock]
            pipe = PIPE.get(lv.name)
            rows.append(dict(kernel=impl, precision=(precision or {}).get(impl, "fp32"), tflops=tflops[impl],
                             level=lv.name, bytes=nbytes, intensity=flops / nbytes, tbps=nbytes / seconds / 1e12,
                             peak_tbps=peak / 1e12, of_peak=nbytes / seconds / peak,
                             pipe=table.loc[impl, pipe] / 100 if pipe in table else math.nan))
    return pd.DataFrame(rows, columns=COLUMNS)


def roofs(table: pd.DataFrame) -> dict[str, float]:
    """Each level's peak (TB/s) for the figure: the median over the profiled launches (the clock differs a
    little from launch to launch)."""
    return {lv.name: float(table[table.level == lv.name].peak_tbps.median())
            for lv in LEVELS if (table.level == lv.name).any()}


def nearest(table: pd.DataFrame) -> pd.Series:
    """Each stage's level nearest its peak (the highest share), by stage."""
    if table.empty:
        return pd.Series(dtype=object)
    return table.loc[table.groupby("kernel").of_peak.idxmax()].set_index("kernel").level


def markdown(table: pd.DataFrame, *, order: list[str]) -> str:
    """The share of each level's peak a stage took, the level nearest its peak, and the peaks themselves
    in the header; empty when the run has none of these counters."""
    if table.empty:
        return ""
    peaks = roofs(table)
    levels = [lv.name for lv in LEVELS if lv.name in peaks]
    near = nearest(table)
    cell = {(r.kernel, r.level): f"{100 * r.of_peak:.0f}%" + (f" (pipe {100 * r.pipe:.0f}%)" if r.pipe == r.pipe else "")
            for r in table.itertuples()}
    rows = [[f"`{impl}`", *[cell.get((impl, lv), "–") for lv in levels], near[impl]]
            for impl in order if impl in near.index]
    head = ["stage", *[f"{lv} ({peaks[lv]:.1f} TB/s)" for lv in levels], "nearest its peak"]
    return md_table(head, rows, align="l" + "r" * len(levels) + "l")


def section(ncu: pd.DataFrame | None, bench: pd.DataFrame, *, order: list[str], shape, figures: dict,
            precision: dict[str, str] | None = None) -> list[str]:
    """The report's lines on the hierarchy: the figure (``figures``: the report's figures by file stem),
    then the table of shares (or one line saying why there is none)."""
    m, n, k = shape
    table = level_table(ncu, bench, order=order, shape=shape, precision=precision)
    if table.empty:
        return ["The hierarchical roofline needs Nsight Compute's L2, L1 and shared-memory byte counters, which "
                "this run's profile does not have (it was profiled before the lab collected them).", ""]
    figure = figures.get(PurePath(FIGURES["levels"]).stem, "")
    return [f"![hierarchical roofline]({figure})", "",
            f"Bandwidth at each memory level at {m}x{n}x{k}, as a share of that level's peak (Nsight Compute's "
            "bytes a cycle at the clock of the launch; bytes over the profiled launch's duration), and for shared "
            "memory the share of time its pipe was busy (bank conflicts cost wavefronts, not bytes). A stage "
            "near 100% at a level is held by that level; the compute roof is the other limit. wgmma's operand "
            "reads and TMA's copies into shared memory are not SASS traffic, so the L1 and shared shares of "
            "stages built on them count only the rest.", "", markdown(table, order=order), ""]
