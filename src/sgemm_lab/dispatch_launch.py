"""Launching a stage's build: one module, or for a dispatch stage one module per candidate that its
table uses, with the table choosing per shape (``sgemm_lab.dispatch``)."""

from __future__ import annotations

from .config import KernelSpec, Shape
from .dispatch import candidate_spec, choose, unpack


def launcher_for(spec: KernelSpec, binary: bytes):
    """The launcher of a resolved CUDA stage: ``gpu.KernelLauncher``, or a DispatchLauncher."""
    from . import gpu

    return DispatchLauncher(spec, binary) if spec.dispatched else gpu.KernelLauncher(spec, binary)


class DispatchLauncher:
    """Runs each shape with the candidate the dispatch table gives it (the nearest measured shape's
    choice for a shape that was not measured). Same call as ``gpu.KernelLauncher``."""

    def __init__(self, spec: KernelSpec, bundle: bytes):
        from . import gpu

        cubins, self.table = unpack(bundle)
        self.spec = spec
        self.launchers = {idx: gpu.KernelLauncher(candidate_spec(spec, entry["params"]), cubins[idx])
                          for idx, entry in ((int(e["candidate"]), e) for e in self.table)}

    def for_shape(self, shape: Shape):
        return self.launchers[int(choose(self.table, shape)["candidate"])]

    def launch_problem(self, dev) -> str | None:
        for idx, launcher in sorted(self.launchers.items()):
            problem = launcher.launch_problem(dev)
            if problem:
                return f"candidate {idx}: {problem}"
        return None

    def check_launchable(self, dev) -> None:
        for launcher in self.launchers.values():
            launcher.check_launchable(dev)

    def __call__(self, shape: Shape, alpha: float, a, b, beta: float, c, stream) -> None:
        self.for_shape(shape)(shape, alpha, a, b, beta, c, stream)
