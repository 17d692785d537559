"""A stand-in for the driver's libnvidia-ml, called through ctypes exactly as the pipeline calls the real
one, answering from Python data: GPUs, the processes on them, per-process utilisation samples.

Install it with ``install(monkeypatch, fake)`` (or ``discovery._open_library = lambda: fake`` in a child
process): ``discovery.nvml()`` then returns it. Symbols a driver would not export raise AttributeError,
as a ctypes.CDLL does; process lists check that the caller's entries have the size of their version's
struct, so that a wrong layout fails here instead of on a GPU.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

SUCCESS, NOT_SUPPORTED, NOT_FOUND, INSUFFICIENT_SIZE = 0, 3, 6, 7
ENTRY_BYTES = {"_v3": 24, "_v2": 24, "": 16}  # nvmlProcessInfo_t / _v1_t
SAMPLE_BYTES = 32                             # nvmlProcessUtilizationSample_t


@dataclass
class FakeGpu:
    uuid: str
    bus_id: str = "00000000:01:00.0"
    compute: list = field(default_factory=list)   # (pid, used bytes)
    graphics: list = field(default_factory=list)
    mps: list = field(default_factory=list)
    samples: list = field(default_factory=list)   # (pid, time stamp in us, SM %)


def _obj(ref):
    """The ctypes object behind a byref() argument (or the object itself)."""
    return getattr(ref, "_obj", ref)


class FakeNvml:
    def __init__(self, gpus: list[FakeGpu], *, versions=("_v3", "_v2", ""), names: dict[int, str] | None = None,
                 utilization: bool = True, null_count_rc: int = SUCCESS, refused=()):
        self.gpus = gpus
        self.versions = versions
        self.refused = refused  # versions exported but answering NOT_SUPPORTED
        self.names = names or {}
        self.utilization = utilization
        self.null_count_rc = null_count_rc  # what the sizing call of the utilisation samples returns
        self.calls: list[str] = []
        self.between = None  # called between a list's sizing call and its filling call (a process starts)
        for kind in ("Compute", "Graphics", "MPSCompute"):
            for v in versions:
                setattr(self, f"nvmlDeviceGet{kind}RunningProcesses{v}", self._lister(kind, v))

    def __getattr__(self, name):  # a symbol this driver does not export
        raise AttributeError(name)

    def _gpu(self, handle) -> FakeGpu:
        return self.gpus[_obj(handle).value - 1]

    # ---------------------------------------------------------------------------- devices
    def nvmlInit_v2(self):
        return SUCCESS

    def nvmlDeviceGetCount_v2(self, count):
        _obj(count).value = len(self.gpus)
        return SUCCESS

    def nvmlDeviceGetHandleByIndex_v2(self, index, handle):
        index = _obj(index).value if isinstance(index, ctypes.c_uint) else index
        if index >= len(self.gpus):
            return 2
        _obj(handle).value = index + 1
        return SUCCESS

    def nvmlDeviceGetHandleByPciBusId_v2(self, bus_id: bytes, handle):
        for i, g in enumerate(self.gpus):
            if g.bus_id.lower().endswith(bus_id.decode().lower()[-12:]):
                _obj(handle).value = i + 1
                return SUCCESS
        return NOT_FOUND

    def nvmlDeviceGetUUID(self, handle, buf, length):
        buf.value = self._gpu(handle).uuid.encode()
        return SUCCESS

    # ---------------------------------------------------------------------------- processes
    def _lister(self, kind: str, version: str):
        attr = {"Compute": "compute", "Graphics": "graphics", "MPSCompute": "mps"}[kind]

        def fn(handle, count, infos):
            self.calls.append(f"{attr}{version}")
            if version in self.refused:
                return NOT_SUPPORTED
            procs = list(getattr(self._gpu(handle), attr))
            c = _obj(count)
            if infos is None or c.value < len(procs):
                c.value = len(procs)
                if infos is None and self.between is not None:
                    self.between()
                return INSUFFICIENT_SIZE if procs else SUCCESS
            assert ctypes.sizeof(infos._type_) == ENTRY_BYTES[version], "wrong struct for this version"
            for i, (pid, used) in enumerate(procs):
                infos[i].pid = pid
                infos[i].usedGpuMemory = used
            c.value = len(procs)
            return SUCCESS

        return fn

    def nvmlSystemGetProcessName(self, pid, buf, length):
        name = self.names.get(_obj(pid).value)
        if name is None:
            return NOT_FOUND
        buf.value = name.encode()
        return SUCCESS

    def nvmlDeviceGetProcessUtilization(self, handle, samples, count, since):
        self.calls.append("utilization")
        if not self.utilization:
            return NOT_SUPPORTED
        after = [s for s in self._gpu(handle).samples if s[1] > _obj(since).value]
        c = _obj(count)
        if not after:
            return NOT_FOUND
        if samples is None or c.value < len(after):
            c.value = len(after)
            return self.null_count_rc if samples is None else INSUFFICIENT_SIZE
        assert ctypes.sizeof(samples._type_) == SAMPLE_BYTES
        for i, (pid, ts, sm) in enumerate(after):
            samples[i].pid, samples[i].timeStamp, samples[i].smUtil = pid, ts, sm
        c.value = len(after)
        return SUCCESS


def install(monkeypatch, fake) -> None:
    """Make ``devices.nvml()`` (and so ``visible_gpus`` and ``foreign``) answer from ``fake``; a
    ``fake`` of None: no driver library."""
    from sgemm_lab.gpu import discovery as devices
    from sgemm_lab.measure import foreign

    def open_library():
        if fake is None:
            raise OSError("libnvidia-ml.so.1: cannot open shared object file")
        return fake

    monkeypatch.setattr(devices, "_open_library", open_library)
    monkeypatch.setattr(devices, "_lib", None)
    monkeypatch.setattr(devices, "_cache", {})
    monkeypatch.setattr(foreign, "_state", {})
