"""The GPU side, one job a module; PyCUDA is imported lazily (none of this needs it until used).

- ``device``: the CUDA driver and context (the process's CUDA state), what the GPU is, its SM clock
- ``build``: nvcc compiles in worker processes, the build's resource record
- ``launch``: launchers for a configured kernel and for cuBLAS (the middle of the three layers: the
  CUDA kernel; a launcher that checks the shape, derives the launch from the config and launches;
  callers such as check and bench that only use launchers)
- ``buffers``: a problem's device buffers
- ``timing``: CUDA-event timing, warm-up by time, the L2 flush
- ``ceilings``: measured FMA throughput and DRAM bandwidth
- ``reference``: float64 references and device-side inputs and error measures
- ``padding``: copies with rows padded to 16 bytes, for the TMA stages on odd N or K

Callers use the names below (``from sgemm_lab import gpu; gpu.KernelLauncher(...)``).
"""

from .buffers import Buffers
from .build import BuildRecord, compile_many
from .ceilings import measure_ceilings
from .device import DeviceInfo, device_info, driver, driver_initialised, init_driver, sm_clock_mhz
from .launch import CublasLauncher, KernelLauncher, library_launcher
from .reference import DeviceCheck, Fp64Reference
from .timing import HOT_CLOCK_FRACTION, L2Flusher, Timing, time_launches, warm_enough

__all__ = ["Buffers", "BuildRecord", "compile_many", "measure_ceilings", "DeviceInfo", "device_info", "driver",
           "driver_initialised", "init_driver", "sm_clock_mhz", "CublasLauncher", "KernelLauncher",
           "library_launcher", "DeviceCheck", "Fp64Reference", "HOT_CLOCK_FRACTION", "L2Flusher", "Timing",
           "time_launches", "warm_enough"]
