"""Nsight Compute: one ncu run over every GPU implementation, tidy metrics read back from ncu's own CSV.

The profile step starts one ncu process (``Profiler.start``) over one profiled process
(``python -m sgemm_lab.profiling.target --plan``) that loads each implementation in turn and launches it
once per profile shape, after warming the GPU up with a spin kernel (``lab_spin``, never matched). One
ncu start-up, one perfworks set-up and one report for the whole ladder, instead of one per stage.
ncu selects the launches by kernel-name regex over demangled names (the entry names, and ``gemm`` or
``gemv`` for cuBLAS, whose kernel names vary) with ``--launch-count`` = number of launches and ``--clock-control none`` (the GPU's own
clocks, as timed); the profiled launches are matched back to (implementation, shape) in launch order,
and each match is checked against the kernel's name. A stage of several kernels (geometry ``phases``) has
every phase profiled: its main phase's rows as any stage's, the others' marked with their entry in ``phase``.
"""

from __future__ import annotations

import io as _io
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import handoff
from ..config.records import LabConfig, Shape
from ..errors import LabError

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
    "dram__bytes.sum.peak_sustained": "dram_peak_bytes_per_cycle",
    "dram__cycles_elapsed.avg.per_second": "dram_clock_hz",
    # the hierarchy's other levels (report.levels): bytes, and the peak as bytes a cycle times the clock
    "lts__t_bytes.sum": "l2_bytes",
    "lts__t_bytes.sum.peak_sustained": "l2_peak_bytes_per_cycle",
    "lts__cycles_elapsed.avg.per_second": "l2_clock_hz",
    "l1tex__t_bytes.sum": "l1_bytes",
    "sm__sass_data_bytes_mem_shared.sum": "smem_bytes",  # LDS/STS/LDSM bytes (not wgmma's operand reads)
    "sm__sass_data_bytes_mem_shared.sum.peak_sustained": "smem_peak_bytes_per_cycle",
    "sm__cycles_elapsed.avg.per_second": "sm_clock_hz",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed": "smem_pipe_pct",
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
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active": "tensor_pipe_pct",  # HMMA and HGMMA
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


@dataclass(frozen=True, kw_only=True)
class ProfileItem:
    """One implementation to profile: its kernel's entry name (None: cuBLAS), the shapes, and the build
    the profiled process loads (none for cuBLAS); ``kernels``: for a stage of several kernels, per shape
    (in the order of ``shapes``) every entry one call launches there, in launch order (the main ``entry``
    among them; a phase with a ``when`` may launch at some shapes only)."""

    impl: str
    entry: str | None
    shapes: tuple[Shape, ...]
    binary: str = ""
    record: str = ""
    kernels: tuple[tuple[str, ...], ...] = ()

    def launched(self, i: int) -> tuple[str | None, ...]:
        """The entries one call at ``shapes[i]`` launches, in order (cuBLAS: one launch of a kernel of its own)."""
        return self.kernels[i] if self.kernels else (self.entry,)

    @property
    def entries(self) -> set[str]:
        """Every entry of ours that any of its calls launches (its ``entry`` alone without ``kernels``, whatever
        its shapes: a caller that names no shapes still gets the entry to match)."""
        if not self.kernels:
            return {self.entry} if self.entry else set()
        return {e for k in self.kernels for e in k if e}

    def as_plan(self) -> dict:
        return dict(impl=self.impl, binary=self.binary, record=self.record,
                    shapes=[str(s) for s in self.shapes])


def kernel_regex(items: list[ProfileItem]) -> str:
    """The entry names, anchored, and ``gemm`` or ``gemv`` when cuBLAS is among them (its kernel names
    vary, and for outputs of a few rows or columns it may run a matrix-vector kernel)."""
    names = sorted(set().union(*(i.entries for i in items)))
    parts = [f"^({'|'.join(names)})$"] if names else []
    if any(i.entry is None for i in items):
        parts.append("gemm|gemv")
    return "regex:" + "|".join(parts)


def launches(items: list[ProfileItem]) -> list[tuple[ProfileItem, Shape, str | None]]:
    """Every profiled launch in the order the profiled process makes them: implementation, shape, entry."""
    return [(item, shape, entry) for item in items for i, shape in enumerate(item.shapes) for entry in item.launched(i)]


def ncu_command(*, ncu: str, report: Path, regex: str, launches: int, target: list[str],
                csv_log: Path | None = None) -> list[str]:
    """The profiling command; with ``csv_log`` ncu also writes the raw page as CSV to that file, so that
    no second ncu process has to read the report back."""
    csv = ["--csv", "--page", "raw", "--print-units", "base", "--log-file", str(csv_log)] if csv_log else []
    # demangled names: cuBLAS runs some shapes in CUTLASS templates whose function name is only
    # "Kernel2"; the template's arguments say gemm (the entries are extern "C", their names as written)
    return [ncu, "--clock-control", "none", "--kernel-name-base", "demangled", "--kernel-name", regex,
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


def tidy(raw_csv: str, *, items: list[ProfileItem]) -> "pd.DataFrame":
    """ncu's raw CSV page (header row, units row, one row per profiled launch) -> tidy rows.

    Launches are matched to ``launches(items)`` in order (the profiled process makes them in that
    order); a launch whose kernel name is not the entry expected there (or, for cuBLAS, has neither
    ``gemm`` nor ``gemv`` in it) means the order is off, and nothing is attributed. ``phase`` is empty for
    an implementation's main kernel and names the entry of any other phase of a stage of several kernels.
    """
    import pandas as pd

    df = pd.read_csv(_io.StringIO(raw_csv))
    units = df.iloc[0]
    data = df.iloc[1:].reset_index(drop=True)
    expected = launches(items)
    if len(data) != len(expected):
        raise LabError(f"ncu profiled {len(data)} launches, expected {len(expected)} "
                       f"({', '.join(i.impl for i in items)})")
    ours = set().union(*(i.entries for i in items))
    rows = []
    for i, (item, shape, entry) in enumerate(expected):
        name = str(data.loc[i, "Kernel Name"]) if "Kernel Name" in data else ""
        cublas_name = ("gemm" in name or "gemv" in name) and name not in ours
        if name and (name != entry if entry else not cublas_name):
            raise LabError(f"ncu launch {i} is {name}, expected {entry or 'a cuBLAS gemm or gemv kernel'} "
                           f"for {item.impl} at {shape}")
        phase = "" if entry == item.entry else entry
        for metric, short in METRICS.items():
            if metric not in data.columns:
                continue
            raw = str(data.loc[i, metric]).replace(",", "")
            try:
                value = float(raw)
            except ValueError:
                continue
            unit = units.get(metric)
            rows.append(dict(kernel=item.impl, m=shape.m, n=shape.n, k=shape.k, metric=short, value=value,
                             unit="" if pd.isna(unit) else str(unit), ncu_metric=metric, ncu_kernel=name, phase=phase))
    return pd.DataFrame(rows)


class Profiler:
    """One ncu run over the profiling target, started in the background (``start``) and read back
    (``wait``). The target takes the GPU lock itself once it has started, so ncu's and Python's start-up
    overlap whatever holds the GPU meanwhile."""

    def __init__(self, *, items: list[ProfileItem], cfg: LabConfig, report: Path, log, gpu_lock: Path | None = None):
        self.items, self.cfg, self.report, self.log = list(items), cfg, Path(report), log
        self.ncu = ncu_path()
        self.proc = None
        self.csv_log = self.report.with_suffix(".ncu.log")
        self.out = self.report.with_suffix(".ncu.out")
        self.plan = self.report.with_suffix(".plan.json")
        self.config = self.report.with_suffix(".config.pickle")  # the run's configuration, for the target
        self.target_args = ["--config", str(self.config), "--plan", str(self.plan),
                            "--gpu-lock", str(gpu_lock or "")]

    def start(self) -> "Profiler":
        if self.ncu is None:
            return self
        self.report.parent.mkdir(parents=True, exist_ok=True)
        self.plan.write_text(json.dumps([i.as_plan() for i in self.items], indent=1) + "\n")
        handoff.write(self.cfg, self.config)
        target = [sys.executable, "-m", "sgemm_lab.profiling.target", *self.target_args]
        cmd = ncu_command(ncu=self.ncu, report=self.report.with_suffix(""), regex=kernel_regex(self.items),
                          launches=len(launches(self.items)), target=target, csv_log=self.csv_log)
        self.log.info("$ %s", " ".join(cmd))
        env = dict(os.environ)
        src = str(Path(__file__).resolve().parents[2])  # the target imports this package from the checkout
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        with open(self.out, "w") as fh:
            self.proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def wait(self, timeout_s: float | None = None) -> "pd.DataFrame":
        """Tidy metrics; raises LabError('unavailable: ...') if ncu cannot profile here."""
        if self.ncu is None:
            raise LabError("unavailable: ncu not found on PATH")
        try:
            code = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise LabError(f"ncu did not finish within {timeout_s:g} s") from None
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
                return tidy(raw, items=self.items)
            except (LabError, ValueError, KeyError) as exc:  # fall back to reading the report
                self.log.info("ncu's CSV log could not be used (%s); reading the report back", exc)
        return tidy(export_csv(self.ncu, self.report), items=self.items)


def target_args(*, config: Path, impl: str, binary: Path | None, record: Path | None, shapes: list[Shape],
                gpu_lock: Path | None = None) -> list[str]:
    """Arguments of ``sgemm_lab.profiling.target`` for one implementation (the sanitizers' runs): ``config``
    the run's configuration as ``config.handoff`` wrote it; with ``gpu_lock`` the target takes that lock
    (exclusive) after its start-up."""
    return ["--config", str(config), "--impl", impl, "--binary", str(binary or ""),
            "--record", str(record or ""), "--gpu-lock", str(gpu_lock or ""),
            "--shapes", *map(str, shapes)]
