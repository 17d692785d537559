"""The driver's NVML, through its maintained Python binding (``cuda.bindings.nvml``, installed with
nvmath-python): everything the lab asks a GPU without CUDA, in one place. Which GPUs there are and their
UUIDs (``gpu.discovery``), a GPU's SM clock (``gpu.device``), the processes on it, their utilisation
samples and names (``measure.processes``, ``measure.foreign``).

``nvml()`` is the one way in: the binding initialised once per process (a forked child initialises it
again), or None where there is no driver library or it will not start. Every question answers None (or
an empty list where that is the answer) instead of raising, so that a missing answer is the caller's to
word. The tests put a stand-in with the same methods in its place (``tests/fake_nvml.py``), to run the
GPU locks and the watch on timed points with simulated GPUs on a machine without one.

The per-process utilisation samples come from NVML's versioned call
(``nvmlDeviceGetProcessesUtilizationInfo``, the binding's ``device_get_processes_utilization_info``),
whose structure carries the count of entries the driver wrote. The older call's binding
(``device_get_process_utilization``) returns the whole buffer it sized, and the driver fills fewer entries
than its sizing call announced: on an H200 with cuda-bindings 13.3.1 the unfilled ones came back as
processes such as "pid 33620068, SM 2037543968%", which the watch would take for other work on the GPU.
An entry that cannot be a sample (SM above 100%, a time stamp outside the asked window) is dropped all the
same (``samples``).
"""

from __future__ import annotations

import os
import time

KINDS = ("compute", "mps", "graphics")  # the driver's process lists


class Nvml:
    """NVML's answers, each None where the driver cannot give it."""

    def __init__(self, binding):
        self.b = binding

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
        call = getattr(self.b, "device_get_processes_utilization_info", None)  # cuda-bindings 13.5 has it
        if call is None:
            return None
        for _ in range(3):  # a process starting between the driver's sizing and its filling: ask again
            try:
                info = call(handle, since_us)
            except self.b.NotFoundError:  # no sample since then
                return []
            except self.b.InsufficientSizeError:
                continue
            except self.b.NvmlError:
                return None
            return samples(info.proc_util_array, since_us, int(time.time() * 1e6))
        return None

    def process_name(self, pid: int) -> str | None:
        name = self._ask(self.b.system_get_process_name, pid)
        return os.path.basename(name.strip()) or None if name else None


VALUE_NOT_AVAILABLE = 2**64 - 1  # used bytes when the driver cannot say
CLOCK_SM = 1                     # nvmlClockType_t NVML_CLOCK_SM (the binding's enum member is named
                                 # CLOCK_SM in one version and SM in another; the value is the ABI's)


def samples(entries, since_us: int, now_us: int) -> list[tuple[int, int]]:
    """(pid, SM %) of the binding's ``ProcessUtilizationInfo_v1`` entries that are samples of the window
    (``since_us``, a minute past ``now_us``]: later than asked, not from the future (CPU clock, microseconds),
    at most 100% SM."""
    out = []
    for i in range(len(entries)):
        e = entries[i]
        ts, sm = int(e.time_stamp), int(e.sm_util)
        if since_us < ts <= now_us + 60_000_000 and sm <= 100:
            out.append((int(e.pid), sm))
    return out


def _open() -> Nvml | None:
    """NVML initialised, or None (no binding, no driver library, or it will not start)."""
    try:
        from cuda.bindings import nvml as binding
    except ImportError:
        return None
    try:
        binding.init_v2()
    except (RuntimeError, OSError, binding.NvmlError):  # the binding's "no driver library" is a RuntimeError
        return None
    return Nvml(binding)


_lib: tuple[int, Nvml | None] | None = None  # (pid, NVML or None: it would not start) of the last process to ask


def nvml() -> Nvml | None:
    """NVML for this process (initialised once per process), or None."""
    global _lib
    if _lib is None or _lib[0] != os.getpid():
        _lib = (os.getpid(), _open())
    return _lib[1]
