"""Nsight Compute: one ncu run per implementation, tidy metrics read back from ncu's own CSV export.

The profiled process (``python -m sgemm_lab.profile_target``) warms the GPU up with a spin kernel
(``lab_spin``, never matched), then launches the implementation once per profiled shape. ncu selects
the launches by kernel-name regex (the entry name; ``gemm`` for cuBLAS, whose kernel names vary) with
``--launch-count`` = number of shapes and ``--clock-control none`` (the GPU's own clocks, as timed).
"""

from __future__ import annotations

import io as _io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from typing import TYPE_CHECKING

from .config import Shape
from .errors import LabError

if TYPE_CHECKING:
    import pandas as pd

# metric -> short name used in the report (ncu's own unit is kept in the table)
METRICS = {
    "gpu__time_duration.sum": "duration",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_throughput_pct",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": "memory_throughput_pct",
    "dram__bytes_read.sum": "dram_bytes_read",
    "dram__bytes_write.sum": "dram_bytes_write",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_throughput_pct",
    "dram__bytes.sum.per_second": "dram_bandwidth",
    "lts__t_sectors_srcunit_tex_op_read.sum": "l2_sectors_read_by_sm",
    "lts__t_sector_hit_rate.pct": "l2_hit_rate_pct",
    "l1tex__t_sector_hit_rate.pct": "l1_hit_rate_pct",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": "smem_bank_conflicts_ld",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum": "smem_bank_conflicts_st",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": "smem_wavefronts_ld",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum": "smem_wavefronts_st",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
    "sm__maximum_warps_per_active_cycle_pct": "theoretical_occupancy_pct",
    "launch__occupancy_limit_registers": "occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem": "occupancy_limit_shared_mem",
    "launch__occupancy_limit_warps": "occupancy_limit_warps",
    "launch__occupancy_limit_blocks": "occupancy_limit_blocks",
    "launch__registers_per_thread": "registers_per_thread",
    "launch__shared_mem_per_block_static": "smem_static_per_block",
    "launch__shared_mem_per_block_dynamic": "smem_dynamic_per_block",
    "launch__block_size": "block_size",
    "launch__grid_size": "grid_size",
    "sm__inst_issued.avg.pct_of_peak_sustained_active": "issue_slot_utilisation_pct",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": "ffma_thread_instructions",
    "sm__sass_thread_inst_executed_op_fadd_pred_on.sum": "fadd_thread_instructions",
    "sm__sass_thread_inst_executed_op_fmul_pred_on.sum": "fmul_thread_instructions",
}
STALLS = ["long_scoreboard", "short_scoreboard", "mio_throttle", "barrier", "math_pipe_throttle", "not_selected",
          "selected", "wait", "lg_throttle", "dispatch_stall", "no_instruction", "membar", "branch_resolving",
          "drain", "sleeping", "tex_throttle", "imc_miss", "misc"]
for _s in STALLS:
    METRICS[f"smsp__average_warps_issue_stalled_{_s}_per_issue_active.ratio"] = f"stall_{_s}"

OCCUPANCY_LIMITS = ["registers", "shared_mem", "warps", "blocks"]


def ncu_path() -> str | None:
    return shutil.which("ncu")


def kernel_regex(impl: str, entry: str | None) -> str:
    return "regex:gemm" if entry is None else f"regex:^{entry}$"


def ncu_command(*, ncu: str, report: Path, regex: str, launches: int, target: list[str],
                csv_log: Path | None = None) -> list[str]:
    """The profiling command; with ``csv_log`` ncu also writes the raw page as CSV to that file, so that
    no second ncu process has to read the report back."""
    csv = ["--csv", "--page", "raw", "--print-units", "base", "--log-file", str(csv_log)] if csv_log else []
    return [ncu, "--clock-control", "none", "--kernel-name-base", "function", "--kernel-name", regex,
            "--launch-count", str(launches), "--metrics", ",".join(METRICS), "--force-overwrite",
            "--export", str(report), *csv, *target]


def csv_part(text: str) -> str:
    """The CSV table in ncu's log: its lines from the header row on, without ncu's own ==PROF== notes."""
    lines = [ln for ln in text.splitlines() if not ln.startswith("==")]
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    return "" if start is None else "\n".join(lines[start:]) + "\n"


def export_csv(ncu: str, report: Path) -> str:
    proc = subprocess.run([ncu, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise LabError(f"ncu --import {report} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return proc.stdout


def tidy(raw_csv: str, *, kernel: str, shapes: list[Shape]) -> "pd.DataFrame":
    """ncu's raw CSV page (header row, units row, one row per profiled launch) -> tidy rows.

    Launches are matched to ``shapes`` in order (the target launches them in that order).
    """
    import pandas as pd

    df = pd.read_csv(_io.StringIO(raw_csv))
    units = df.iloc[0]
    data = df.iloc[1:].reset_index(drop=True)
    if len(data) != len(shapes):
        raise LabError(f"ncu profiled {len(data)} launches of {kernel}, expected {len(shapes)}")
    rows = []
    for i, shape in enumerate(shapes):
        name = str(data.loc[i, "Kernel Name"]) if "Kernel Name" in data else ""
        for metric, short in METRICS.items():
            if metric not in data.columns:
                continue
            raw = str(data.loc[i, metric]).replace(",", "")
            try:
                value = float(raw)
            except ValueError:
                continue
            unit = units.get(metric)
            rows.append(dict(kernel=kernel, m=shape.m, n=shape.n, k=shape.k, metric=short, value=value,
                             unit="" if pd.isna(unit) else str(unit), ncu_metric=metric, ncu_kernel=name))
    return pd.DataFrame(rows)


def run_profile(*, impl: str, entry: str | None, shapes: list[Shape], target_args: list[str], report: Path,
                log) -> "pd.DataFrame":
    """Profile ``impl``; return tidy metrics. Raises LabError('unavailable: ...') if ncu cannot."""
    ncu = ncu_path()
    if ncu is None:
        raise LabError("unavailable: ncu not found on PATH")
    target = [sys.executable, "-m", "sgemm_lab.profile_target", *target_args]
    csv_log = report.with_suffix(".ncu.log")
    cmd = ncu_command(ncu=ncu, report=report.with_suffix(""), regex=kernel_regex(impl, entry), launches=len(shapes),
                      target=target, csv_log=csv_log)
    log.info("$ %s", " ".join(cmd))
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[1])  # the target imports this package from the checkout
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    tool_log = csv_log.read_text() if csv_log.exists() else ""
    csv_log.unlink(missing_ok=True)
    log.info("%s", proc.stdout[-4000:])
    log.info("%s", proc.stderr[-4000:])
    log.info("%s", "\n".join(ln for ln in tool_log.splitlines() if ln.startswith("==")))
    text = proc.stdout + proc.stderr + tool_log
    if "ERR_NVGPUCTRPERM" in text:
        raise LabError("unavailable: ERR_NVGPUCTRPERM (no permission for GPU performance counters; run with "
                       "--cap-add SYS_ADMIN or set NVreg_RestrictProfilingToAdminUsers=0)")
    if proc.returncode != 0 or not report.exists():
        last = next((ln for ln in reversed(text.splitlines()) if ln.strip()), "no output")
        raise LabError(f"unavailable: ncu exited with {proc.returncode} ({last.strip()[:200]})")
    raw = csv_part(tool_log)
    if raw:
        try:
            return tidy(raw, kernel=impl, shapes=shapes)
        except (LabError, ValueError, KeyError) as exc:  # fall back to reading the report
            log.info("ncu's CSV log could not be used (%s); reading the report back", exc)
    return tidy(export_csv(ncu, report), kernel=impl, shapes=shapes)


def target_args(*, config: dict, impl: str, binary: Path | None, record: Path | None, shapes: list[Shape],
                gpu_lock: Path | None = None) -> list[str]:
    """Arguments of ``sgemm_lab.profile_target``; with ``gpu_lock`` the target takes that lock (exclusive)
    after its start-up, so ncu's and Python's start overlap other jobs' GPU work."""
    return ["--config-json", json.dumps(config), "--impl", impl, "--binary", str(binary or ""),
            "--record", str(record or ""), "--gpu-lock", str(gpu_lock or ""),
            "--shapes", *[f"{s.m}x{s.n}x{s.k}" for s in shapes]]
