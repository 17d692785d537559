"""Nsight Compute: one ncu run per implementation, tidy metrics read back from ncu's own CSV export.

The bench step starts ncu before its own timing (``Profiler.start``) and reads the metrics after it
(``Profiler.wait``). The profiled process (``python -m sgemm_lab.profile_target``) warms the GPU up with a spin kernel
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


class Profiler:
    """One ncu run over the profiling target, started in the background (``start``) and read back
    (``wait``). The target takes the GPU lock itself once it has started, so ncu's and Python's start-up
    overlap whatever holds the GPU meanwhile (the bench step's own timing, say)."""

    def __init__(self, *, impl: str, entry: str | None, shapes: list[Shape], target_args: list[str], report: Path,
                 log):
        self.impl, self.entry, self.shapes, self.report, self.log = impl, entry, shapes, Path(report), log
        self.target_args = target_args
        self.ncu = ncu_path()
        self.proc = None
        self.csv_log = self.report.with_suffix(".ncu.log")
        self.out = self.report.with_suffix(".ncu.out")

    def start(self) -> "Profiler":
        if self.ncu is None:
            return self
        target = [sys.executable, "-m", "sgemm_lab.profile_target", *self.target_args]
        cmd = ncu_command(ncu=self.ncu, report=self.report.with_suffix(""), regex=kernel_regex(self.impl, self.entry),
                          launches=len(self.shapes), target=target, csv_log=self.csv_log)
        self.log.info("$ %s", " ".join(cmd))
        env = dict(os.environ)
        src = str(Path(__file__).resolve().parents[1])  # the target imports this package from the checkout
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        self.report.parent.mkdir(parents=True, exist_ok=True)
        with open(self.out, "w") as fh:
            self.proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def wait(self) -> "pd.DataFrame":
        """Tidy metrics; raises LabError('unavailable: ...') if ncu cannot profile here."""
        if self.ncu is None:
            raise LabError("unavailable: ncu not found on PATH")
        code = self.proc.wait()
        output = self.out.read_text() if self.out.exists() else ""
        tool_log = self.csv_log.read_text() if self.csv_log.exists() else ""
        for f in (self.out, self.csv_log):
            f.unlink(missing_ok=True)
        self.log.info("%s", output[-4000:])
        self.log.info("%s", "\n".join(ln for ln in tool_log.splitlines() if ln.startswith("==")))
        text = output + tool_log
        if "ERR_NVGPUCTRPERM" in text:
            raise LabError("unavailable: ERR_NVGPUCTRPERM (no permission for GPU performance counters; run with "
                           "--cap-add SYS_ADMIN or set NVreg_RestrictProfilingToAdminUsers=0)")
        if code != 0 or not self.report.exists():
            last = next((ln for ln in reversed(text.splitlines()) if ln.strip()), "no output")
            raise LabError(f"unavailable: ncu exited with {code} ({last.strip()[:200]})")
        raw = csv_part(tool_log)
        if raw:
            try:
                return tidy(raw, kernel=self.impl, shapes=self.shapes)
            except (LabError, ValueError, KeyError) as exc:  # fall back to reading the report
                self.log.info("ncu's CSV log could not be used (%s); reading the report back", exc)
        return tidy(export_csv(self.ncu, self.report), kernel=self.impl, shapes=self.shapes)


def run_profile(*, impl: str, entry: str | None, shapes: list[Shape], target_args: list[str], report: Path,
                log) -> "pd.DataFrame":
    """Profile ``impl`` now; return tidy metrics. Raises LabError('unavailable: ...') if ncu cannot."""
    return Profiler(impl=impl, entry=entry, shapes=shapes, target_args=target_args, report=report, log=log).start().wait()


def target_args(*, config: dict, impl: str, binary: Path | None, record: Path | None, shapes: list[Shape],
                gpu_lock: Path | None = None) -> list[str]:
    """Arguments of ``sgemm_lab.profile_target``; with ``gpu_lock`` the target takes that lock (exclusive)
    after its start-up, so ncu's and Python's start overlap other jobs' GPU work."""
    return ["--config-json", json.dumps(config), "--impl", impl, "--binary", str(binary or ""),
            "--record", str(record or ""), "--gpu-lock", str(gpu_lock or ""),
            "--shapes", *[f"{s.m}x{s.n}x{s.k}" for s in shapes]]
