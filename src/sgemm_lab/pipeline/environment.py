"""Environment record: what hardware and software produced a set of results; the environment step
(GPU, driver, tool versions: fails first without a GPU) and the measured ceilings of the GPU.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import asdict
from importlib import metadata
from pathlib import Path

from ..config.records import ROOT, LabConfig
from ..results import io
from ..results.common import base_seed, log
from ..results.outcome import StepStatus


def _run(cmd: list[str]) -> str | None:
    exe = shutil.which(cmd[0])
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, *cmd[1:]], capture_output=True, text=True, timeout=60, cwd=ROOT)
    except (subprocess.SubprocessError, OSError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _last_line(text: str | None) -> str | None:
    return text.splitlines()[-1].strip() if text else None


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def software() -> dict:
    """Versions that need no GPU: Python packages, nvcc, ncu, git commit, date."""
    # SGEMM_LAB_GIT_COMMIT names the commit of a copy of the sources whose own .git is missing or not
    # theirs (a container build context, an archive, a synced working tree): it wins over git.
    # git's status counts only where its HEAD is the commit recorded (a stale .git compares the files with
    # another commit); so a copy named by the commit its stale .git holds is still seen to differ from it.
    head = _run(["git", "rev-parse", "HEAD"])
    commit = os.environ.get("SGEMM_LAB_GIT_COMMIT") or head
    same = bool(head) and len(commit) >= 7 and head.startswith(commit)  # commit is set wherever head is
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"]) if same else None
    return {
        "captured_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": commit,
        "git_dirty": bool(status) if status is not None else None,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": platform.processor() or platform.machine(),
        "nvcc": _last_line(_run(["nvcc", "--version"])),
        "ncu": _last_line(_run(["ncu", "--version"])),
        "packages": {d: _version(d) for d in
                     ("pycuda", "nvmath-python", "numpy", "pandas", "seaborn", "matplotlib", "snakemake")},
        "container": container(),
        "slurm": slurm(),
    }


def container() -> dict | None:
    """The lab's image this runs in (None outside it): the image sets SGEMM_LAB_IMAGE_BASE (the base it
    was built on); SGEMM_LAB_CONTAINER_IMAGE names the image itself (name@digest: docker/test.sh sets
    it, a user may). Marker files such as /.dockerenv are not used: machines made from a container
    image keep them without running in one."""
    base = os.environ.get("SGEMM_LAB_IMAGE_BASE")
    if not base:
        return None
    return {"image": os.environ.get("SGEMM_LAB_CONTAINER_IMAGE"), "base": base}


def slurm() -> dict | None:
    """The SLURM job this step runs in (None outside one): its id, cluster, node and the GPUs SLURM gave
    it. Each step's own job is named here for the environment step; a run through SLURM keeps every job
    in ``reports/<run>/slurm_jobs.csv`` (tools/slurm_gpu_host.sh)."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return None
    return {"job_id": job, "cluster": os.environ.get("SLURM_CLUSTER_NAME"),
            "node": os.environ.get("SLURMD_NODENAME"),
            "gpus": os.environ.get("SLURM_STEP_GPUS") or os.environ.get("SLURM_JOB_GPUS"),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}


def capture() -> dict:
    """Full record, GPU included (needs a CUDA device)."""
    from ..gpu.device import device_info, driver
    from ..gpu.launch import CublasLauncher

    cuda = driver()
    dev = device_info()
    drv = cuda.get_driver_version()
    smi = _run(["nvidia-smi", f"--id={dev.pci_bus_id}", "--query-gpu=driver_version,clocks.max.sm,power.limit",
                "--format=csv,noheader,nounits"])
    driver_version, max_sm_clock, power_limit = (smi.split(", ") + [None] * 3)[:3] if smi else (None, None, None)
    stream = cuda.Stream()
    blas = CublasLauncher(stream)
    try:
        cublas_version, math_mode = blas.version, blas.math_mode
    finally:
        blas.close()
    rec = software()
    rec.update({
        "gpu": asdict(dev),
        "driver_version": driver_version,
        "cuda_driver_api": f"{drv // 1000}.{drv % 1000 // 10}",
        "cuda_toolkit_pycuda": ".".join(map(str, cuda.get_version())),
        "cublas": cublas_version,
        "cublas_math_mode": math_mode,
        "max_sm_clock_mhz": max_sm_clock,
        "power_limit_w": power_limit,
    })
    return rec


def environment(cfg: LabConfig, *, out: Path) -> None:
    rec = capture()
    rec["run"] = cfg.run
    # The run's check seed (config seed, else drawn here once): every check job of the run draws its
    # inputs from it, so that all implementations meet the same inputs (pipeline.points.check_seed).
    rec["check_seed"] = base_seed(cfg)
    log.info("GPU %s (%s), driver %s, cuBLAS %s", rec["gpu"]["name"], rec["gpu"]["arch"], rec["driver_version"], rec["cublas"])
    io.write_json(out, rec)


def ceilings(cfg: LabConfig, *, env_json: Path, out: Path) -> StepStatus | None:
    """The roofline's roofs: the probes compiled first (no GPU), then timed under the exclusive lock, each
    watched for other work on the GPU like a bench point; a disturbed one is kept, marked, and counted in
    the step's message."""
    from ..measure.ceilings import compile_probes, measure_ceilings
    from ..measure.gpulock import gpu_lock

    cubins = compile_probes(io.read_json(env_json)["gpu"]["arch"])
    with gpu_lock(exclusive=True):
        rec = measure_ceilings(cubins)
    log.info("FP32 FMA probe %.1f TFLOP/s, device-to-device copy %.0f GB/s%s", rec["fp32_tflops"], rec["dram_gbps"],
             "".join(f", {name} {rec[key]:.0f} {unit}" for key, name, unit in (
                 ("tf32_tflops", "TF32 wgmma", "TFLOP/s"), ("int8_tops", "INT8 wgmma", "TOPS")) if key in rec))
    io.write_json(out, rec)
    probes = {k: v for k, v in rec.items() if k.endswith("_probe") and "disturbance" in v}
    for name, probe in probes.items():
        log.info("%s: other work on the GPU: %s", name, probe["disturbance"])
    disturbed = [k for k, v in probes.items() if v["disturbed"]]
    if disturbed:
        return StepStatus(message=f"{len(disturbed)} of {len(probes)} ceilings disturbed by other work on the GPU "
                                  f"(first: {disturbed[0]}: {probes[disturbed[0]]['disturbance']})")
    return None
