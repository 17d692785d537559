"""Every step of the workflow, described once: how Snakemake's job becomes the step's arguments, how it uses
the GPU, what its failure means and what a failed step leaves in place of its outputs.

``entry`` runs a step from this table (its record, its one line on failure, the batches); the workflow's
rules ask ``uses_gpu`` for their scheduler request. A new step is one entry here, its body in a module of
its own and its rule and script in ``workflow/``.

GPU use, as the step's lock (``measure.gpulock``) takes it: "exclusive" for a step that times something
(nothing else may run on the GPU meanwhile), "shared" for one that only needs correct results (checks,
sanitizers, device queries: several at once, never beside a timing step), None for one that never touches
it. A step that ``locks_itself`` takes that lock after its part that needs no GPU (compiling, process start,
imports); the entry takes it for the others around the whole step.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..config.records import LabConfig
from ..epilogue import step as epilogue_step
from ..failures import step as failures_step
from ..profiling import step as profile_step
from ..report import step as report_step
from ..results import io
from ..results.outcome import StepRecord, StepStatus, first_line
from ..sanitizers import step as sanitize_step
from . import build as build_step
from . import dispatch_steps
from . import environment as environment_step
from . import points as points_step
from . import sweep as sweep_step
from . import timeshape as time_step

Body = Callable[[LabConfig, object], "StepStatus | None"]  # (the run's config, Snakemake's job)
Leftover = Callable[[object, StepRecord], None]            # (Snakemake's job, the failed step's record)


@dataclass(frozen=True, kw_only=True)
class Step:
    run: Body                      # Snakemake's job -> the step's own call
    gpu: str | None = None         # "exclusive", "shared" or None (see the module's docstring)
    locks_itself: bool = False     # takes its lock itself, after the part that needs no GPU
    host_stages_off: bool = False  # a host stage's (or NumPy's) job of this step never touches the GPU
    tolerant: bool = False         # a failure is one stage's (or one figure's): recorded, the run goes on
    leftover: Leftover | None = None  # what a failed tolerant step leaves: valid, empty, never taken for a result


# ------------------------------------------------------------------ Snakemake's job -> arguments
def _optional(item) -> Path | None:
    """An input that is one file or none (Snakemake gives a named input of a one-item list as a list)."""
    if item is None or isinstance(item, (str, Path)):
        return Path(item) if item else None
    return next((Path(p) for p in item), None)


def _paths(job, name: str) -> list[Path]:
    return [Path(p) for p in getattr(job, name, [])]


def _builds(job) -> dict[str, tuple[Path | None, Path | None]]:
    """impl -> (binary, record) from the rule's params (empty strings for cuBLAS)."""
    return {impl: tuple(Path(x) if x else None for x in pair) for impl, pair in job.params.builds.items()}


def _stage(job) -> tuple[str | None, Path | None, Path | None]:
    """The job's stage, and its build's binary and record where the step reads them."""
    i = job.input
    return (getattr(job.wildcards, "kernel", None), Path(i.binary) if getattr(i, "binary", None) else None,
            Path(i.record) if getattr(i, "record", None) else None)


def _threads(job) -> int:
    return int(getattr(job, "threads", 1) or 1)


def _check(c: LabConfig, job):
    impl, binary, record = _stage(job)
    return points_step.check(c, impl, binary=binary, record=record, out=Path(job.output[0]), env_json=Path(job.input.env),
                             gpu=lock_mode("check", c, impl))


def _bench(c: LabConfig, job):
    impl, binary, record = _stage(job)
    return points_step.bench(c, impl, binary=binary, record=record, out=Path(job.output[0]),
                             gpu=lock_mode("bench", c, impl))


def _build(c: LabConfig, job):
    i, o = job.input, job.output
    return build_step.build(c, job.wildcards.kernel, env_json=Path(i.env), binary_out=Path(o.binary),
                            record_out=Path(o.record), sweeps=_paths(i, "sweeps"),
                            shape_sweep=_optional(getattr(i, "shape_sweep", None)))


def _time(c: LabConfig, job):
    return time_step.time_shapes(c, builds=_builds(job), out_csv=Path(job.output.csv), out_md=Path(job.output.md),
                                 gpu=lambda impl: lock_mode("time", c, impl))


def _compare(c: LabConfig, job):
    from ..report import compare

    compare.run(runs=list(job.params.runs), benches=_paths(job.input, "bench"), out_md=Path(job.output.md),
                out_csv=Path(job.output.csv), out_png=Path(job.output.png), order=list(c.implementations))


def _aggregate(c: LabConfig, job):
    i, o = job.input, job.output
    return report_step.aggregate(c, bench_csvs=list(i.bench), check_jsons=list(i.check), build_jsons=list(i.build),
                                 profile_csvs=list(getattr(i, "profiles", [])),
                                 sanitize_csvs=list(getattr(i, "sanitize", [])), sanitize_out=Path(o.sanitize),
                                 env_json=Path(i.env), bench_out=Path(o.bench), check_out=Path(o.check),
                                 build_out=Path(o.build), env_out=Path(o.env), ncu_out=Path(o.ncu),
                                 dispatch_out=Path(o.dispatch) if hasattr(o, "dispatch") else None)


def _plot(c: LabConfig, job):
    i, o = job.input, job.output
    return report_step.plot(c, bench_csv=Path(i.bench), ncu_csv=Path(i.ncu),
                            ceilings_json=_optional(getattr(i, "ceilings", None)), outs=o, sweeps=_paths(i, "sweeps"),
                            heatmaps=_paths(o, "heatmaps"), check_csv=Path(i.check) if getattr(i, "check", None) else None,
                            processes=_threads(job))


def _report(c: LabConfig, job):
    i, o = job.input, job.output
    return report_step.report(c, bench_csv=Path(i.bench), check_csv=Path(i.check), build_csv=Path(i.build),
                              env_json=Path(i.env), figures=_paths(i, "figures"), sweeps=_paths(i, "sweeps"),
                              epilogues=_paths(i, "epilogues"), ncu_csv=Path(i.ncu),
                              ceilings_json=_optional(getattr(i, "ceilings", None)), sanitize_csv=Path(i.sanitize),
                              failures_csv=_optional(getattr(i, "failure_tests", None)),
                              statuses=_paths(i, "statuses"), start_json=Path(job.params.start), out=Path(o[0]),
                              steps_out=Path(o.steps) if hasattr(o, "steps") else None,
                              dispatch_csv=_optional(getattr(i, "dispatch", None)),
                              run_out=Path(o.run) if hasattr(o, "run") else None)


# ------------------------------------------------------------------ what a failed step leaves
def _empty_csv(columns: list[str]) -> Leftover:
    def write(job, rec: StepRecord) -> None:
        io.write_csv(Path(job.output[0]), [], columns=columns)

    return write


def _no_build(job, rec: StepRecord) -> None:
    io.write_bytes(Path(job.output.binary), b"")
    io.write_json(Path(job.output.record), dict(kernel=rec.kernel, status=rec.status, message=rec.message,
                                                log=rec.log, tuned_from=None, params={}))


def _no_check(job, rec: StepRecord) -> None:
    io.write_json(Path(job.output[0]), dict(kernel=rec.kernel, status=rec.status, message=rec.message, points=[]))


def _no_sanitize(job, rec: StepRecord) -> None:
    for out in job.output.tables:
        if not Path(out).exists():  # tables already written (stages sanitized before the failure) stay
            io.write_csv(Path(out), [], columns=sanitize_step.SANITIZE_COLUMNS)


def _no_profile(job, rec: StepRecord) -> None:
    for out in job.output.profiles:
        io.write_csv(Path(out), [], columns=profile_step.PROFILE_COLUMNS)


def _status_only(job, rec: StepRecord) -> None:
    io.write_json(Path(job.output[0]), dict(status=rec.status, message=rec.message))


def _placeholder_figures(job, rec: StepRecord) -> None:
    from ..report.plots import placeholder

    outs = list(job.output) if isinstance(job.output, list) else list(vars(job.output).values())
    for out in outs:
        if str(out).endswith(".png"):
            placeholder(Path(out), f"{rec.what}: {rec.status} ({first_line(rec.message, 100)})")


# ------------------------------------------------------------------ the steps
STEPS: dict[str, Step] = {
    "environment": Step(run=lambda c, j: environment_step.environment(c, out=Path(j.output[0])), gpu="shared"),
    "precompile": Step(run=lambda c, j: build_step.precompile(c, env_json=Path(j.input.env), out=Path(j.output[0])),
                       tolerant=True, leftover=_status_only),  # the builds compile for themselves
    "build": Step(run=_build, gpu="shared", locks_itself=True, host_stages_off=True, tolerant=True, leftover=_no_build),
    # a host stage's check shares the GPU too: cuBLAS on the same inputs sets its FP32 limit
    "check": Step(run=_check, gpu="shared", locks_itself=True, tolerant=True, leftover=_no_check),
    "sanitize": Step(run=lambda c, j: sanitize_step.sanitize(c, builds=_builds(j),
                                                             outs={Path(p).stem: Path(p) for p in j.output.tables},
                                                             log_dir=Path(j.params.log_dir)),
                     gpu="shared", locks_itself=True, tolerant=True, leftover=_no_sanitize),
    "bench": Step(run=_bench, gpu="exclusive", locks_itself=True, host_stages_off=True, tolerant=True,
                  leftover=_empty_csv(points_step.BENCH_COLUMNS)),
    "profile": Step(run=lambda c, j: profile_step.profile(c, builds=_builds(j), report=Path(j.params.report),
                                                          outs={Path(p).stem: Path(p) for p in j.output.profiles}),
                    gpu="exclusive", locks_itself=True, tolerant=True, leftover=_no_profile),
    "sweep": Step(run=lambda c, j: sweep_step.sweep(c, j.wildcards.kernel, env_json=Path(j.input.env),
                                                    out=Path(j.output[0])),
                  gpu="exclusive", locks_itself=True, tolerant=True, leftover=_empty_csv(sweep_step.SWEEP_COLUMNS)),
    "shape_sweep": Step(run=lambda c, j: dispatch_steps.shape_sweep(c, j.wildcards.kernel, env_json=Path(j.input.env),
                                                                    out=Path(j.output[0])),
                        gpu="exclusive", locks_itself=True, tolerant=True,
                        leftover=_empty_csv(dispatch_steps.SHAPE_SWEEP_COLUMNS)),
    "epilogue": Step(run=lambda c, j: epilogue_step.epilogue(c, j.wildcards.kernel, env_json=Path(j.input.env),
                                                             out=Path(j.output[0])),
                     gpu="exclusive", locks_itself=True, tolerant=True,
                     leftover=_empty_csv(epilogue_step.EPILOGUE_COLUMNS)),
    "ceilings": Step(run=lambda c, j: environment_step.ceilings(c, env_json=Path(j.input.env), out=Path(j.output[0])),
                     gpu="exclusive", locks_itself=True, tolerant=True, leftover=_status_only),
    # the failure tests' pytest session takes the lock for each case
    "failure_tests": Step(run=lambda c, j: failures_step.failure_tests(c, env_json=Path(j.input.env),
                                                                       out=Path(j.output[0])),
                          gpu="exclusive", locks_itself=True, tolerant=True,
                          leftover=_empty_csv(failures_step.FAILURE_COLUMNS)),
    "time": Step(run=_time, gpu="exclusive", locks_itself=True, host_stages_off=True),
    "compare": Step(run=_compare),
    "aggregate": Step(run=_aggregate),
    "plot": Step(run=_plot, tolerant=True, leftover=_placeholder_figures),
    "report": Step(run=_report),
    "rerender": Step(run=lambda c, j: report_step.rerender(c, run_dir=Path(j.params.run_dir),
                                                           configfiles=_paths(j.params, "configfiles"),
                                                           log_path=Path(j.log[0]) if j.log else None,
                                                           processes=_threads(j))),
}


def lock_mode(step: str, cfg: LabConfig, impl: str | None) -> str | None:
    """How ``step`` of ``impl`` uses the GPU: 'exclusive', 'shared' or None (a step without the GPU; a host
    stage's or NumPy's build, bench or time)."""
    s = STEPS.get(step)
    if s is None or (impl and s.host_stages_off and cfg.on_host(impl)):
        return None
    return s.gpu


def uses_gpu(cfg: LabConfig, step: str, members: tuple[str | None, ...]) -> bool:
    """Whether a job of ``step`` for ``members`` (its stages; ``(None,)`` for a job of no stage) needs the
    GPU: its Snakemake resource, which a scheduler turns into a GPU request."""
    return any(lock_mode(step, cfg, k) is not None for k in members)
