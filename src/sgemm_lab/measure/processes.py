"""What NVML says about the processes on a GPU (ctypes, no CUDA): the process lists in the newest form
the driver has, the driver's utilisation samples, a process's name; and which processes are this
pipeline's own (``own_pids``: this process, its ancestors and its descendants) and which belong to the
same pipeline run (``run_pids``). ``foreign`` watches a timed point with them.
"""

from __future__ import annotations

import ctypes
import os

NVML_SUCCESS, NVML_ERROR_NOT_FOUND, NVML_ERROR_INSUFFICIENT_SIZE = 0, 6, 7
NVML_VALUE_NOT_AVAILABLE = 2**64 - 1  # usedGpuMemory when the driver cannot say


class ProcessInfo(ctypes.Structure):
    """``nvmlProcessInfo_t`` of the ``_v2`` and ``_v3`` process lists (24 bytes)."""
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


class ProcessInfoV1(ctypes.Structure):
    """``nvmlProcessInfo_v1_t`` of the unsuffixed process lists of older drivers (16 bytes)."""
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


class ProcessUtilizationSample(ctypes.Structure):
    """``nvmlProcessUtilizationSample_t`` (32 bytes): timeStamp in microseconds of the CPU clock, the
    utilisations in percent of the sample period."""
    _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong), ("smUtil", ctypes.c_uint),
                ("memUtil", ctypes.c_uint), ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]


# (kind, function): the newest version the driver exports is used, see listed_pids
PROCESS_LISTS = (("compute", "nvmlDeviceGetComputeRunningProcesses"),
                 ("mps", "nvmlDeviceGetMPSComputeRunningProcesses"),
                 ("graphics", "nvmlDeviceGetGraphicsRunningProcesses"))
VERSIONS = (("_v3", ProcessInfo), ("_v2", ProcessInfo), ("", ProcessInfoV1))


def _function(lib, name: str):
    try:
        return getattr(lib, name)
    except AttributeError:  # (a driver too old to export it)
        return None


def listed_pids(lib, handle, name: str) -> list[tuple[int, int | None]] | None:
    """(pid, used bytes or None) of one of the driver's process lists; None when it cannot be read."""
    for suffix, struct in VERSIONS:
        fn = _function(lib, name + suffix)
        if fn is None:
            continue
        count = ctypes.c_uint(0)
        rc = fn(handle, ctypes.byref(count), None)  # how many: NVML_SUCCESS when there are none
        if rc == NVML_SUCCESS:
            return []
        if rc != NVML_ERROR_INSUFFICIENT_SIZE:
            continue  # this version refuses: an older one may answer
        for _ in range(5):  # the list may grow between the two calls
            if rc != NVML_ERROR_INSUFFICIENT_SIZE:
                break
            cap = count.value + 4
            buf, count = (struct * cap)(), ctypes.c_uint(cap)
            rc = fn(handle, ctypes.byref(count), buf)
            if rc == NVML_SUCCESS:
                return [(int(buf[i].pid), None if buf[i].usedGpuMemory == NVML_VALUE_NOT_AVAILABLE
                         else int(buf[i].usedGpuMemory)) for i in range(count.value)]
        return None
    return None


def utilisation_samples(lib, handle, since_us: int) -> list[tuple[int, int]] | None:
    """(pid, SM %) of the driver's per-process utilisation samples taken after ``since_us`` (None: not
    available on this GPU or driver)."""
    fn = _function(lib, "nvmlDeviceGetProcessUtilization")
    if fn is None:
        return None
    count = ctypes.c_uint(0)
    rc = fn(handle, None, ctypes.byref(count), ctypes.c_ulonglong(since_us))
    for _ in range(5):
        if rc == NVML_ERROR_NOT_FOUND:  # no sample since then
            return []
        if rc not in (NVML_SUCCESS, NVML_ERROR_INSUFFICIENT_SIZE):
            return None
        if count.value == 0:
            return []
        cap = count.value + 4
        buf, count = (ProcessUtilizationSample * cap)(), ctypes.c_uint(cap)
        rc = fn(handle, buf, ctypes.byref(count), ctypes.c_ulonglong(since_us))
        if rc == NVML_SUCCESS:
            return [(int(buf[i].pid), int(buf[i].smUtil)) for i in range(count.value)
                    if buf[i].timeStamp > since_us]
    return None


def process_name(lib, pid: int, same_namespace: bool) -> str | None:
    """The process's name: NVML's (``nvmlSystemGetProcessName``), else /proc's when its PIDs are ours."""
    fn = _function(lib, "nvmlSystemGetProcessName")
    if fn is not None:
        buf = ctypes.create_string_buffer(256)
        if fn(ctypes.c_uint(pid), buf, ctypes.c_uint(len(buf))) == NVML_SUCCESS and buf.value:
            return os.path.basename(buf.value.decode(errors="replace").strip()) or None
    if same_namespace:
        try:
            with open(f"/proc/{pid}/comm") as fh:
                return fh.read().strip() or None
        except OSError:
            return None
    return None


# ------------------------------------------------------------------------------ whose processes
def _parents() -> dict[int, int]:
    """pid -> parent pid of every process this one can see (/proc)."""
    out = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue  # ended meanwhile
        fields = stat[stat.rfind(")") + 2:].split()  # after "pid (name) ": state, ppid, ...
        if len(fields) > 1:
            out[int(entry.name)] = int(fields[1])
    return out


def _is_snakemake(pid: int) -> bool:
    """Whether ``pid`` runs Snakemake (its command line names it)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
    except OSError:
        return False
    return any(b"snakemake" in os.path.basename(a) or a == b"snakemake" for a in argv[:3])


def run_pids(pid: int | None = None) -> set[int]:
    """The processes of the pipeline run ``pid`` (default: this process) belongs to: every descendant of
    its outermost Snakemake ancestor (the run's own command; a job's Snakemake below it is one of them).
    Empty outside a Snakemake run."""
    pid = os.getpid() if pid is None else pid
    parents = _parents()
    root, up, seen = None, pid, set()
    while up and up not in seen:
        seen.add(up)
        if _is_snakemake(up):
            root = up
        up = parents.get(up)
    return set() if root is None else _descendants(root, parents)


def _descendants(pid: int, parents: dict[int, int]) -> set[int]:
    """``pid`` and every process below it, from the pid -> parent map ``parents``."""
    children: dict[int, list[int]] = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    out, todo = {pid}, [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def own_pids(pid: int | None = None) -> set[int]:
    """``pid`` (default: this process), its ancestors and its descendants: the pipeline's own processes
    from its point of view."""
    pid = os.getpid() if pid is None else pid
    parents = _parents()
    own, up = _descendants(pid, parents), parents.get(pid)
    while up and up not in own:
        own.add(up)
        up = parents.get(up)
    return own
