"""The environment step (GPU, driver, tool versions: fails first without a GPU) and the measured
ceilings of the GPU.
"""

from __future__ import annotations

from pathlib import Path

from .. import io
from ..config import LabConfig
from .common import log


def environment(cfg: LabConfig, *, out: Path) -> None:
    from .. import envinfo

    rec = envinfo.capture()
    rec["run"] = cfg.run
    log.info("GPU %s (%s), driver %s, cuBLAS %s", rec["gpu"]["name"], rec["gpu"]["arch"], rec["driver_version"], rec["cublas"])
    io.write_json(out, rec)


def ceilings(cfg: LabConfig, *, out: Path) -> None:
    from .. import gpu

    rec = gpu.measure_ceilings()
    log.info("FP32 FMA probe %.1f TFLOP/s, device-to-device copy %.0f GB/s", rec["fp32_tflops"], rec["dram_gbps"])
    io.write_json(out, rec)

