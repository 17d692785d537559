"""The driver's NVML, through its maintained Python binding (``cuda.bindings.nvml``, installed with
nvmath-python): everything the lab asks a GPU without CUDA, in one place. Which GPUs there are and their
UUIDs (``gpu.discovery``), a GPU's SM clock (``gpu.device``), the processes on it, their utilisation
samples and names (``measure.processes``, ``measure.foreign``).

``nvml()`` is the one way in: the binding initialised once per process (a forked child initialises it
again), or None where there is no driver library or it will not start. Every question answers None (or
an empty list where that is the answer) instead of raising, so that a missing answer is the caller's to
word. The tests put a stand-in with the same methods in its place (``tests/fake_nvml.py``), to run the
GPU locks and the watch on timed points with simulated GPUs on a machine without one.

One call stays on ctypes: the per-process utilisation samples (``nvmlDeviceGetProcessUtilization``).
The binding's ``device_get_process_utilization`` returns the buffer it sized whole, and the driver fills
fewer entries than the sizing call announced (it says how many in the count it hands back, which the
binding drops): on an H200 with cuda-bindings 13.3.1 the unfilled entries came back as processes such as
"pid 33620068, SM 2037543968%", which the watch would take for other work on the GPU.
"""

from __future__ import annotations

import ctypes
import os

KINDS = ("compute", "mps", "graphics")  # the driver's process lists


class Nvml:
    """NVML's answers, each None where the driver cannot give it."""

    def __init__(self, binding, samples=None):
        self.b = binding
        self.samples = samples  # (handle, since_us) -> the utilisation samples (``ctypes_samples``)

    def _ask(self, fn, *args):
        try:
            return fn(*args)
        except self.b.NvmlError:
            return None

    def count(self) -> int | None:
        return self._ask(self.b.device_get_count_v2)

    def handle_by_index(self, index: int):
        return self._ask(self.b.device_get_handle_by_index_v2, index)

    def handle_by_pci(self, bus_id: str):
        """The handle of the GPU at ``bus_id`` (as CUDA writes it), None when NVML knows none there."""
        return self._ask(self.b.device_get_handle_by_pci_bus_id_v2, bus_id)

    def uuid(self, handle) -> str | None:
        return self._ask(self.b.device_get_uuid, handle)

    def sm_clock(self, handle) -> int | None:
        """The SM clock now, in MHz."""
        mhz = self._ask(self.b.device_get_clock_info, handle, CLOCK_SM)
        return None if mhz is None else int(mhz)

    def processes(self, handle, kind: str) -> list[tuple[int, int | None]] | None:
        """(pid, used bytes or None) of one of the driver's process lists (``KINDS``); None when it cannot
        be read."""
        fn = {"compute": self.b.device_get_compute_running_processes_v3,
              "mps": self.b.device_get_mps_compute_running_processes_v3,
              "graphics": self.b.device_get_graphics_running_processes_v3}[kind]
        infos = self._ask(fn, handle)
        if infos is None:
            return None
        out = []
        for i in range(len(infos)):
            used = int(infos[i].used_gpu_memory)
            out.append((int(infos[i].pid), None if used == VALUE_NOT_AVAILABLE else used))
        return out

    def utilisation(self, handle, since_us: int) -> list[tuple[int, int]] | None:
        """(pid, SM %) of the per-process utilisation samples taken after ``since_us`` (microseconds of the
        CPU clock); [] when there is none since then, None where the GPU or driver keeps none."""
        return self.samples(handle, since_us)

    def process_name(self, pid: int) -> str | None:
        name = self._ask(self.b.system_get_process_name, pid)
        return os.path.basename(name.strip()) or None if name else None


VALUE_NOT_AVAILABLE = 2**64 - 1  # used bytes when the driver cannot say
CLOCK_SM = 1                     # nvmlClockType_t NVML_CLOCK_SM (the binding's enum member is named
                                 # CLOCK_SM in one version and SM in another; the value is the ABI's)
SUCCESS, ERROR_NOT_FOUND, ERROR_INSUFFICIENT_SIZE = 0, 6, 7


class ProcessUtilizationSample(ctypes.Structure):
    """``nvmlProcessUtilizationSample_t`` (32 bytes): timeStamp in microseconds of the CPU clock, the
    utilisations in percent of the sample period."""
    _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong), ("smUtil", ctypes.c_uint),
                ("memUtil", ctypes.c_uint), ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]


def ctypes_samples(lib, handle, since_us: int) -> list[tuple[int, int]] | None:
    """(pid, SM %) of ``nvmlDeviceGetProcessUtilization`` through ctypes (``lib``: the driver's
    libnvidia-ml), only the entries the driver wrote; [] when none since ``since_us``, None when the
    GPU or driver keeps none."""
    fn = getattr(lib, "nvmlDeviceGetProcessUtilization", None)
    if fn is None:
        return None
    dev = ctypes.c_void_p(handle)
    count = ctypes.c_uint(0)
    rc = fn(dev, None, ctypes.byref(count), ctypes.c_ulonglong(since_us))
    for _ in range(5):
        if rc == ERROR_NOT_FOUND:  # no sample since then
            return []
        if rc not in (SUCCESS, ERROR_INSUFFICIENT_SIZE):
            return None
        if count.value == 0:
            return []
        cap = count.value + 4
        buf, count = (ProcessUtilizationSample * cap)(), ctypes.c_uint(cap)
        rc = fn(dev, buf, ctypes.byref(count), ctypes.c_ulonglong(since_us))
        if rc == SUCCESS:
            return [(int(buf[i].pid), int(buf[i].smUtil)) for i in range(count.value) if buf[i].timeStamp > since_us]
    return None


def _open() -> Nvml | None:
    """NVML initialised, or None (no binding, no driver library, or it will not start)."""
    try:
        from cuda.bindings import nvml as binding
    except ImportError:
        return None
    try:
        binding.init_v2()
        lib = ctypes.CDLL("libnvidia-ml.so.1")  # the library the binding loaded (initialised once more: counted)
        if lib.nvmlInit_v2() != SUCCESS:
            return None
    except (RuntimeError, OSError, binding.NvmlError):  # the binding's "no driver library" is a RuntimeError
        return None
    return Nvml(binding, samples=lambda handle, since_us: ctypes_samples(lib, handle, since_us))


_lib: tuple[int, Nvml | None] | None = None  # (pid, NVML or None: it would not start) of the last process to ask


def nvml() -> Nvml | None:
    """NVML for this process (initialised once per process), or None."""
    global _lib
    if _lib is None or _lib[0] != os.getpid():
        _lib = (os.getpid(), _open())
    return _lib[1]
