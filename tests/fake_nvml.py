"""A stand-in for ``sgemm_lab.gpu.nvml.Nvml`` (the driver's NVML through cuda-bindings), answering from
Python data: GPUs, the processes on them, per-process utilisation samples, process names.

Install it with ``install(monkeypatch, fake)`` (or ``nvml._open = lambda: fake`` in a child process):
``sgemm_lab.gpu.nvml.nvml()`` then returns it, and with it ``visible_gpus``, the SM clock and the watch on
timed points (``measure.foreign``). A ``fake`` of None: no driver. It answers as ``Nvml`` does: None where
the driver could not, [] where the answer is none.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class FakeGpu:
    uuid: str
    bus_id: str = "00000000:01:00.0"
    compute: list = field(default_factory=list)   # (pid, used bytes)
    graphics: list = field(default_factory=list)
    mps: list = field(default_factory=list)
    samples: list = field(default_factory=list)   # (pid, time stamp in us, SM %)
    sm_clock: int = 1980


class FakeNvml:
    def __init__(self, gpus: list[FakeGpu], *, names: dict[int, str] | None = None, utilization: bool = True,
                 lists: bool = True):
        self.gpus = gpus
        self.names = names or {}
        self.utilization = utilization  # whether the driver keeps per-process samples
        self.lists = lists              # whether it can list the processes at all
        self.calls: list[str] = []

    def _gpu(self, handle) -> FakeGpu:
        return self.gpus[handle - 1]

    def count(self) -> int | None:
        return len(self.gpus)

    def handle_by_index(self, index: int):
        return index + 1 if index < len(self.gpus) else None

    def handle_by_pci(self, bus_id: str):
        for i, g in enumerate(self.gpus):
            if g.bus_id.lower().endswith(bus_id.lower()[-12:]):
                return i + 1
        return None

    def uuid(self, handle) -> str | None:
        return self._gpu(handle).uuid

    def sm_clock(self, handle) -> int | None:
        return self._gpu(handle).sm_clock

    def processes(self, handle, kind: str) -> list[tuple[int, int | None]] | None:
        self.calls.append(kind)
        if not self.lists:
            return None
        return list(getattr(self._gpu(handle), kind))

    def utilisation(self, handle, since_us: int) -> list[tuple[int, int]] | None:
        self.calls.append("utilization")
        if not self.utilization:
            return None
        return [(pid, sm) for pid, ts, sm in self._gpu(handle).samples if ts > since_us]

    def process_name(self, pid: int) -> str | None:
        name = self.names.get(pid)
        return name.rsplit("/", 1)[-1] if name else None


def install(monkeypatch, fake) -> None:
    """Make ``gpu.nvml.nvml()`` (and so ``visible_gpus`` and ``foreign``) answer from ``fake``; a ``fake`` of
    None: no driver."""
    from sgemm_lab.gpu import discovery
    from sgemm_lab.gpu import nvml as nvml_mod
    from sgemm_lab.measure import foreign

    monkeypatch.setattr(nvml_mod, "_open", lambda: fake)
    monkeypatch.setattr(nvml_mod, "_lib", None)
    monkeypatch.setattr(discovery, "_cache", {})
    monkeypatch.setattr(foreign, "_state", {})
