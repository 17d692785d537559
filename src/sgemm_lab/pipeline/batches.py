"""Which stages share one job, and what one stage of such a job sees.

A job per stage and step (build, check, bench, tile sweep) cost about 1.5 s each before its step began
(Snakemake's own bookkeeping, a fresh interpreter, its imports, the configuration read again): with 25
stages, about two minutes of a run. The workflow runs them in *batches* instead: one job per step and
class of stage, each stage still with its own outputs, log and status record, so that everything
downstream (and a reader) sees the same files as before. A stage stays addressable: a batch job reruns
what changed for one stage and reuses the others' results when nothing they depend on changed
(``pipeline.reuse``).

The classes follow what a job needs, never a kernel's name:

- build: ``host`` (the C compiler), ``gpu`` (read from the precompile step), ``tuned`` (autotuned and
  dispatch stages: they wait for the tile and shape sweeps they are picked from);
- check and bench: ``host`` (host stages and the NumPy baseline: timed with every core to themselves,
  they need no GPU slot of their own) and ``gpu``;
- sweep: one batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable

from ..config.records import LabConfig
from ..results.logs import log

BATCHED = ("build", "check", "bench", "sweep")


def batches(cfg: LabConfig, step: str) -> dict[str, tuple[str, ...]]:
    """Batch name -> its stages (in the config's order) for ``step``; empty batches are left out."""
    if step == "build":
        def cls(k) -> str:
            return "tuned" if k.autotuned or k.dispatched else "host" if k.backend == "host" else "gpu"

        groups = {"host": [], "gpu": [], "tuned": []}
        for k in cfg.kernels:
            groups[cls(k)].append(k.id)
    elif step in ("check", "bench"):
        groups = {"host": [], "gpu": []}
        for impl in cfg.implementations:
            groups["host" if cfg.on_host(impl) else "gpu"].append(impl)
    elif step == "sweep":
        groups = {"all": [k.id for k in cfg.swept]}
    else:
        raise ValueError(f"no batches for step {step!r}")
    return {name: tuple(ids) for name, ids in groups.items() if ids}


class Named(list):
    """A list whose items may also have names, like Snakemake's ``input``/``output`` (``o[0]``, ``o.status``)."""

    def __init__(self, items: list[tuple[str | None, Any]]):
        super().__init__(value for _, value in items)
        for name, value in items:
            if name:
                setattr(self, name, value)


@dataclass(frozen=True)
class MemberJob:
    """One stage of a batch job, in the shape of the Snakemake job object that the steps read
    (``input``, ``output``, ``log``, ``wildcards``, ``params``, ``config``)."""

    input: Named
    output: Named
    log: list
    wildcards: SimpleNamespace
    params: SimpleNamespace
    config: dict


def member_jobs(smk) -> list[MemberJob]:
    """The stages of a batch job, from its ``params.members`` (written by workflow/rules/common.smk:
    impl -> {"input": [[name, value], ...], "output": [[name, path], ...], "log": path, "params": {...}})."""
    return [MemberJob(input=Named(m["input"]), output=Named(m["output"]), log=[m["log"]],
                      wildcards=SimpleNamespace(kernel=impl), params=SimpleNamespace(**m.get("params", {})),
                      config=smk.config)
            for impl, m in smk.params.members.items()]


@dataclass(frozen=True, kw_only=True)
class StagePoints:
    """One stage's points for ``run_stages``: what its worker takes (without the stage), its logger (closed
    by ``run_stages``) and the seconds it took to plan them."""

    stage: str
    points: list
    log: Any
    seconds: float = 0.0


def run_stages(plans: list[StagePoints], *, factory: Callable, args: tuple, gates: list, timeout_s: float,
               on_point, finish) -> dict[str, tuple[object, float]]:
    """The points of several stages in supervised child processes, one per gate (``isolate.run_split``;
    one GPU: one child for the batch, a fresh one after a hang, a crash or a CUDA error). ``factory``
    builds a worker that takes ``(stage, *point)`` (``isolate.per_stage``). ``on_point(plan, outcome)``
    sees each point as it comes back (the outcome's index and point are the stage's own) and returns what
    to keep of it; ``finish(plan, kept)`` writes a stage's results from what was kept of its points, in
    order, and returns its verdict. Returns stage -> (its verdict, or the exception that stopped it or the
    supervisor before its last point; its seconds: planning, then each point's time since the one before
    it, the first point of a stage including its worker's set-up)."""
    import time

    from ..measure import isolate
    from ..measure.isolate import Outcome
    from ..results.logs import close

    flat = [(p.stage, *pt) for p in plans for pt in p.points]
    where = [(p, i) for p in plans for i in range(len(p.points))]
    kept: dict[str, dict[int, Any]] = {p.stage: {} for p in plans}
    spent = {p.stage: p.seconds for p in plans}
    mark = [time.perf_counter()]

    def arrived(o) -> None:
        plan, i = where[o.index]
        now = time.perf_counter()
        spent[plan.stage] += now - mark[0]
        mark[0] = now
        kept[plan.stage][i] = on_point(plan, Outcome(i, tuple(o.point[1:]), o.status, o.rows, o.message))

    stopped = None
    if flat:
        try:
            isolate.run_split(flat, gates, factory=factory, args=args, timeout_s=timeout_s, log=log,
                              on_outcome=arrived)
        except Exception as exc:  # noqa: BLE001 - recorded for the stages it left unfinished
            stopped = exc
    results: dict[str, tuple[object, float]] = {}
    for p in plans:
        close(p.log)
        got = kept[p.stage]
        if len(got) < len(p.points):  # the supervisor stopped before this stage's last point
            results[p.stage] = (stopped, spent[p.stage])
            continue
        try:
            verdict = finish(p, [got[i] for i in range(len(p.points))])
        except Exception as exc:  # noqa: BLE001 - the stage's own problem (its entry records it)
            verdict = exc
        results[p.stage] = (verdict, spent[p.stage])
    return results
