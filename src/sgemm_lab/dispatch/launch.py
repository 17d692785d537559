"""Launching a stage's build: one module, or for a dispatch stage one module per candidate that its
table uses, with the table choosing per shape (``sgemm_lab.dispatch.choice``)."""

from __future__ import annotations

from ..config.records import KernelSpec, Shape
from ..errors import LabError
from .choice import candidate_spec, choose, listed_candidate, rule_choice, unpack


def launcher_for(spec: KernelSpec, binary: bytes):
    """The launcher of a resolved CUDA stage: ``gpu.launch.KernelLauncher``, a DispatchLauncher, or for a
    stage of several kernels ``gpu.phased.PhasedLauncher``."""
    if spec.dispatched:
        return DispatchLauncher(spec, binary)
    if spec.geometry == "phases":
        from ..gpu.phased import PhasedLauncher

        return PhasedLauncher(spec, binary)
    from ..gpu.launch import KernelLauncher

    return KernelLauncher(spec, binary)


class DispatchLauncher:
    """Runs each shape with the candidate its rule gives it, or without a rule the one its dispatch
    table gives it (the nearest measured shape's choice for a shape that was not measured). Same call
    as ``gpu.launch.KernelLauncher``. ``spec`` is the resolved dispatch stage (``choice.resolve``)."""

    def __init__(self, spec: KernelSpec, bundle: bytes):
        from ..gpu.launch import KernelLauncher

        cubins, self.table = unpack(bundle)
        self.spec = spec
        if spec.rule is not None:  # the rule may run any candidate: the bundle holds them all
            specs = {i: listed_candidate(spec, i) for i in range(len(spec.candidates))}
            missing = sorted(set(specs) - set(cubins))
            if missing:
                raise LabError(f"kernel {spec.id}: its bundle lacks candidates {missing}, which its rule may run")
        else:
            specs = {int(e["candidate"]): candidate_spec(spec, e["params"]) for e in self.table}
        self.launchers = {idx: KernelLauncher(cand, cubins[idx]) for idx, cand in specs.items()}
        self._picks: dict[Shape, int] = {}

    def for_shape(self, shape: Shape):
        # once per shape: evaluating the rule takes about 0.1 ms of Python, which back-to-back timed
        # launches of a small shape would otherwise wait for (and did: a floor of 0.14-0.21 ms)
        pick = self._picks.get(shape)
        if pick is None:
            pick = self._picks[shape] = (rule_choice(self.spec, shape) if self.spec.rule is not None
                                         else int(choose(self.table, shape)["candidate"]))
        return self.launchers[pick]

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
