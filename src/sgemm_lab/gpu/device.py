"""The device: PyCUDA imported lazily, the CUDA driver and the primary context, what the GPU is
(DeviceInfo), and its current SM clock (NVML). The one place that holds the process's CUDA state."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from ..errors import NoGPUError

_cuda = None


def import_pycuda():
    """pycuda.driver, imported but not initialised (no context: compiling needs none), or NoGPUError."""
    try:
        import pycuda.driver as cuda
    except ImportError as exc:
        raise NoGPUError(
            f"no CUDA device: PyCUDA cannot be loaded ({exc}); GPU rules need an NVIDIA GPU, "
            "its driver and the packages in env/pipeline.txt"
        ) from None
    return cuda


_initialised = False


def driver_initialised() -> bool:
    """Whether this process has initialised the CUDA driver (a forked child could not use it)."""
    return _initialised


def init_driver():
    """pycuda.driver with the CUDA driver initialised (cuInit) but no context, or NoGPUError."""
    global _initialised
    cuda = import_pycuda()
    _initialised = True
    try:
        cuda.init()
        count = cuda.Device.count()
    except cuda.Error as exc:
        raise NoGPUError(f"no CUDA device: the CUDA driver reports '{exc}'") from None
    if count == 0:
        raise NoGPUError("no CUDA device: the CUDA driver sees no GPU")
    return cuda


def context_started() -> bool:
    """Whether this process holds a CUDA context (``driver`` made one): it lives until the process ends,
    so the GPU lock that let it start is kept that long too (``measure.gpulock``)."""
    return _cuda is not None


def driver():
    """pycuda.driver with the primary context of the first visible device current, or NoGPUError. The
    context stays until the process ends: take the GPU lock first (``measure.gpulock.gpu_lock``)."""
    global _cuda
    if _cuda is not None:
        return _cuda
    cuda = init_driver()
    import pycuda.autoprimaryctx  # noqa: F401  retains the primary context (shared with cuBLAS)

    _cuda = cuda
    return cuda


@dataclass(frozen=True, kw_only=True)
class DeviceInfo:
    name: str
    arch: str
    compute_capability: str
    multiprocessors: int
    l2_bytes: int
    global_mem_bytes: int
    max_threads_per_block: int
    max_shared_per_block: int        # default (static + dynamic) limit
    max_shared_per_block_optin: int  # with cudaFuncAttributeMaxDynamicSharedMemorySize raised
    max_registers_per_block: int
    pci_bus_id: str


def device_info() -> DeviceInfo:
    cuda = driver()
    dev = cuda.Context.get_device()
    a = cuda.device_attribute
    major, minor = dev.compute_capability()
    return DeviceInfo(
        name=dev.name(),
        arch=f"sm_{major}{minor}",
        compute_capability=f"{major}.{minor}",
        multiprocessors=dev.get_attribute(a.MULTIPROCESSOR_COUNT),
        l2_bytes=dev.get_attribute(a.L2_CACHE_SIZE),
        global_mem_bytes=dev.total_memory(),
        max_threads_per_block=dev.get_attribute(a.MAX_THREADS_PER_BLOCK),
        max_shared_per_block=dev.get_attribute(a.MAX_SHARED_MEMORY_PER_BLOCK),
        max_shared_per_block_optin=dev.get_attribute(a.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
        max_registers_per_block=dev.get_attribute(a.MAX_REGISTERS_PER_BLOCK),
        pci_bus_id=dev.pci_bus_id(),
    )


def sm_clock_mhz(pci_bus_id: str) -> int | None:
    """Current SM clock in MHz (NVML, else nvidia-smi; None when neither is available)."""
    from .nvml import nvml

    lib = nvml()  # microseconds; nvidia-smi gives the same number in ~0.1 s, and timing reads it twice a point
    handle = lib.handle_by_pci(pci_bus_id) if lib is not None else None
    fast = lib.sm_clock(handle) if handle is not None else None
    if fast is not None:
        return fast
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, f"--id={pci_bus_id}", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10)
        return int(out.stdout.strip().splitlines()[0])
    except (subprocess.SubprocessError, ValueError, IndexError):
        return None
