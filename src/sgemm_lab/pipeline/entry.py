"""The entry point of every workflow script (``main``): Snakemake's job -> one step -> a status record.

A step that fails for one stage (a compile error, a crashed job, a check that fails) never stops the
pipeline: its outputs are written empty but valid, its status record says what failed and where the
log is, one line names the step, the stage and the log on the console, and the job ends successfully,
so that every other stage is still measured and the report is written. The run's exit status is
decided at the end from the status records (``sgemm_lab.results.outcome.verdict``).

Steps without which there is nothing to report (environment: no GPU; aggregate and report: the
report itself) still end the run with one line and a non-zero exit, as does any step that refuses a
damaged input file (``io.DamagedFile``): its previous outputs are then kept.
"""

from __future__ import annotations

import time
import traceback
from contextlib import nullcontext
from pathlib import Path
from typing import Callable

from ..config.load import from_dict, remeasured
from ..config.records import LabConfig
from . import dispatch_steps
from ..epilogue import step as epilogue_step
from ..errors import LabError
from ..failures import step as failures_step
from ..measure.gpulock import SELF_LOCKING, gpu_lock, lock_mode
from ..profiling import step as profile_step
from ..report import step as report_step
from ..sanitizers import step as sanitize_step
from . import build as build_step
from . import environment as environment_step
from ..results import io, logs, outcome
from . import points as points_step
from . import sweep as sweep_step
from . import timeshape as time_step
from ..results.outcome import FAILED, NOT_RUN, OK, StepRecord, StepStatus, first_line

log = logs.log

# Steps whose failure is one stage's (or one figure's) problem: recorded, and the run goes on.
TOLERANT = {"precompile", "build", "check", "sanitize", "bench", "profile", "sweep", "shape_sweep", "epilogue", "ceilings",
            "failure_tests", "plot"}


def _optional(item) -> Path | None:
    """An input that is one file or none (Snakemake gives a named input of a one-item list as a list)."""
    if item is None or isinstance(item, (str, Path)):
        return Path(item) if item else None
    return next((Path(p) for p in item), None)


def _builds(builds: dict) -> dict[str, tuple[Path | None, Path | None]]:
    """impl -> (binary, record) from the profile rule's params (empty strings for cuBLAS)."""
    return {impl: tuple(Path(x) if x else None for x in pair) for impl, pair in builds.items()}


def _profile_outs(o) -> dict[str, Path]:
    """impl -> its tidy profile table (``results/<run>/profile/<impl>.csv``)."""
    return {Path(p).stem: Path(p) for p in o.profiles}


def _from_snakemake(step: str, smk) -> Callable[[LabConfig], StepStatus | None]:
    i, o, w = smk.input, smk.output, smk.wildcards
    impl = getattr(w, "kernel", None)
    binary = Path(i.binary) if getattr(i, "binary", None) else None
    record = Path(i.record) if getattr(i, "record", None) else None
    ceilings = _optional(getattr(i, "ceilings", None))  # none when nothing runs on a GPU
    table: dict[str, Callable[[LabConfig], StepStatus | None]] = {
        "environment": lambda c: environment_step.environment(c, out=Path(o[0])),
        "precompile": lambda c: build_step.precompile(c, env_json=Path(i.env), out=Path(o[0])),
        "build": lambda c: build_step.build(c, impl, env_json=Path(i.env), binary_out=Path(o.binary),
                                   record_out=Path(o.record), sweeps=[Path(p) for p in getattr(i, "sweeps", [])],
                                   shape_sweep=_optional(getattr(i, "shape_sweep", None))),
        "check": lambda c: points_step.check(c, impl, binary=binary, record=record, out=Path(o[0]), raw_config=dict(smk.config),
                                             env_json=Path(i.env)),
        "sanitize": lambda c: sanitize_step.sanitize(c, builds=_builds(smk.params.builds), outs={Path(p).stem: Path(p) for p in o.tables},
                                         log_dir=Path(smk.params.log_dir), raw_config=dict(smk.config)),
        "bench": lambda c: points_step.bench(c, impl, binary=binary, record=record, out=Path(o[0]), raw_config=dict(smk.config)),
        "profile": lambda c: profile_step.profile(c, builds=_builds(smk.params.builds), outs=_profile_outs(o),
                                       report=Path(smk.params.report), raw_config=dict(smk.config)),
        "sweep": lambda c: sweep_step.sweep(c, impl, env_json=Path(i.env), out=Path(o[0]), raw_config=dict(smk.config)),
        "shape_sweep": lambda c: dispatch_steps.shape_sweep(c, impl, env_json=Path(i.env), out=Path(o[0]),
                                                            raw_config=dict(smk.config)),
        "epilogue": lambda c: epilogue_step.epilogue(c, impl, env_json=Path(i.env), out=Path(o[0])),
        "ceilings": lambda c: environment_step.ceilings(c, env_json=Path(i.env), out=Path(o[0])),
        "compare": lambda c: _compare(c, smk),
        "time": lambda c: time_step.time_shapes(c, builds=_builds(smk.params.builds), out_csv=Path(o.csv),
                                                out_md=Path(o.md), raw_config=dict(smk.config)),
        "failure_tests": lambda c: failures_step.failure_tests(c, env_json=Path(i.env), out=Path(o[0])),
        "aggregate": lambda c: report_step.aggregate(c, bench_csvs=list(i.bench), check_jsons=list(i.check),
                                           build_jsons=list(i.build), profile_csvs=list(getattr(i, "profiles", [])),
                                           sanitize_csvs=list(getattr(i, "sanitize", [])),
                                           sanitize_out=Path(o.sanitize), env_json=Path(i.env),
                                           bench_out=Path(o.bench), check_out=Path(o.check), build_out=Path(o.build),
                                           env_out=Path(o.env), ncu_out=Path(o.ncu),
                                           dispatch_out=Path(o.dispatch) if hasattr(o, "dispatch") else None),
        "plot": lambda c: report_step.plot(c, bench_csv=Path(i.bench), ncu_csv=Path(i.ncu), ceilings_json=ceilings, outs=o,
                                 sweeps=[Path(p) for p in getattr(i, "sweeps", [])],
                                 heatmaps=[Path(p) for p in getattr(o, "heatmaps", [])],
                                 check_csv=Path(i.check) if getattr(i, "check", None) else None,
                                 processes=int(getattr(smk, "threads", 1) or 1)),
        "report": lambda c: report_step.report(c, bench_csv=Path(i.bench), check_csv=Path(i.check), build_csv=Path(i.build),
                                     env_json=Path(i.env), figures=[Path(f) for f in i.figures],
                                     sweeps=[Path(p) for p in getattr(i, "sweeps", [])],
                                     epilogues=[Path(p) for p in getattr(i, "epilogues", [])],
                                     ncu_csv=Path(i.ncu), ceilings_json=ceilings, sanitize_csv=Path(i.sanitize),
                                     failures_csv=_optional(getattr(i, "failure_tests", None)),
                                     statuses=[Path(p) for p in getattr(i, "statuses", [])],
                                     start_json=Path(smk.params.start), out=Path(o[0]),
                                     steps_out=Path(o.steps) if hasattr(o, "steps") else None,
                                     dispatch_csv=_optional(getattr(i, "dispatch", None)),
                                     run_out=Path(o.run) if hasattr(o, "run") else None),
        "rerender": lambda c: report_step.rerender(c, run_dir=Path(smk.params.run_dir),
                                         configfiles=[Path(p) for p in smk.params.configfiles],
                                         log_path=Path(smk.log[0]) if smk.log else None,
                                         processes=int(getattr(smk, "threads", 1) or 1)),
    }
    return table[step]


def _compare(cfg: LabConfig, smk) -> None:
    from ..report import compare

    compare.run(runs=list(smk.params.runs), benches=[Path(p) for p in smk.input.bench], out_md=Path(smk.output.md),
                out_csv=Path(smk.output.csv), out_png=Path(smk.output.png), order=list(cfg.implementations))


# ------------------------------------------------------------------ outputs of a step that failed
def _empty_csv(columns: list[str]) -> Callable:
    def write(smk, rec: StepRecord) -> None:
        io.write_csv(Path(smk.output[0]), [], columns=columns)

    return write


def _build(smk, rec: StepRecord) -> None:
    io.write_bytes(Path(smk.output.binary), b"")
    io.write_json(Path(smk.output.record), dict(kernel=rec.kernel, status=rec.status, message=rec.message,
                                                log=rec.log, tuned_from=None, params={}))


def _check(smk, rec: StepRecord) -> None:
    io.write_json(Path(smk.output[0]), dict(kernel=rec.kernel, status=rec.status, message=rec.message, points=[]))


def _sanitize(smk, rec: StepRecord) -> None:
    for out in smk.output.tables:
        if not Path(out).exists():  # tables already written (stages sanitized before the failure) stay
            io.write_csv(Path(out), [], columns=sanitize_step.SANITIZE_COLUMNS)


def _profile(smk, rec: StepRecord) -> None:
    for out in smk.output.profiles:
        io.write_csv(Path(out), [], columns=profile_step.PROFILE_COLUMNS)


def _status_json(smk, rec: StepRecord) -> None:
    io.write_json(Path(smk.output[0]), dict(status=rec.status, message=rec.message))


def _figures(smk, rec: StepRecord) -> None:
    from ..report.plots import placeholder

    outs = list(smk.output) if isinstance(smk.output, list) else list(vars(smk.output).values())
    for out in outs:
        if str(out).endswith(".png"):
            placeholder(Path(out), f"{rec.what}: {rec.status} ({first_line(rec.message, 100)})")


# What a failed step leaves in place of its results: valid, empty, and never mistaken for a result.
EMPTY_OUTPUTS: dict[str, Callable] = {
    "precompile": _status_json,  # the builds compile for themselves
    "build": _build,
    "check": _check,
    "sanitize": _sanitize,
    "bench": _empty_csv(points_step.BENCH_COLUMNS),
    "profile": _profile,
    "sweep": _empty_csv(["kernel", "m", "n", "k", "params", "status", "reason"]),
    "shape_sweep": _empty_csv(dispatch_steps.SHAPE_SWEEP_COLUMNS),
    "epilogue": _empty_csv(["m", "n", "k", "act", "implementation", "padded", "verified", "tflops", "median_ms",
                            "reason"]),
    "failure_tests": _empty_csv(["case", "test", "outcome", "message", "seconds"]),
    "ceilings": _status_json,
    "plot": _figures,
}


# --------------------------------------------------------------------------------------- main
def main(step: str, smk) -> None:
    """Entry point for ``workflow/scripts/<step>.py``: run the step (for each stage of a batch job, see
    ``pipeline.batches``), record its status, one clear line on failure (the detail stays in the log)."""
    import sys

    batch = getattr(getattr(smk, "params", None), "members", None) is not None
    members = list(smk.params.members) if batch else [getattr(getattr(smk, "wildcards", None), "kernel", None)]
    given = _gpu_job(step, smk, members)
    code = _batch(step, smk, given) if batch else _run(step, smk, alloc=given)[0]
    if code:
        sys.exit(code)


def _gpu_job(step: str, smk, members: list) -> dict | None:
    """What a job that uses the GPU was given (``gpu.discovery.allocation``, read before anything pins the
    process); None for a job that does not use it. A job that uses the GPU while its rule asks the
    scheduler for none (``resources: gpu=0``) stops here, before it starts: on a cluster that confines
    devices it would find none, or a GPU another job was given."""
    import sys

    from .batches import uses_gpu

    if not uses_gpu(from_dict(smk.config, trusted=True), step, tuple(members)):
        return None
    asked = getattr(getattr(smk, "resources", None), "gpu", None)
    if asked is not None and int(asked) < 1:
        log.error("sgemm-lab %s: the job uses the GPU but its rule asks the scheduler for none (resources: gpu=%s)",
                  step, asked)
        sys.exit(1)
    from ..gpu.discovery import allocation

    return allocation()


def _allocated(alloc: dict | None) -> dict:
    """A step record's fields for the GPUs its job was given."""
    return dict(gpus=alloc.get("gpus"), slurm_job=alloc.get("slurm_job")) if alloc else {}


def _batch(step: str, smk, alloc: dict | None = None) -> int:
    """Each stage of a batch job in turn: its kept results when nothing it depends on changed
    (``pipeline.reuse``), else its step; one progress line per stage. Exit status 1 when a stage's step
    could not even record a failure (a damaged input, outputs that could not be written)."""
    from ..config.records import KERNEL_DIR
    from . import reuse
    from .batches import member_jobs

    jobs = member_jobs(smk)
    results = Path(jobs[0].output.status).parents[2]  # results/<run>/status/<step>/<stage>.json
    allowed = bool(smk.config.get("reuse", True))
    again = set(remeasured(smk.config))  # stages whose kept results are not read
    headers = sorted(KERNEL_DIR.glob("*.cuh")) if step in ("build", "sweep") else []
    batch_log = Path(smk.log[0]) if smk.log else None
    logs.setup(batch_log, append=True)  # what the job says outside any one stage's step
    code = 0
    pending = []  # (n, job, outs, key, where) of the stages whose step runs
    for n, job in enumerate(jobs, 1):
        impl, t0 = job.wildcards.kernel, time.monotonic()
        outs = [p for p in job.output if p != getattr(job.output, "status", None)]
        read = [v for _name, v in smk.params.members[impl]["input"]]  # what the step reads
        where, key, kept = reuse.folder(results, step, impl), None, None
        try:  # reuse only saves time: when it cannot be read, the step runs
            key = reuse.key(step, impl, read, smk.config, extra=headers)
            kept = reuse.restore(where, key, outs, job.log[0]) if allowed and impl not in again else None
        except OSError as exc:
            _progress(batch_log, f"[{step} {n}/{len(jobs)}] {impl}: kept results not read ({exc}): the step runs")
        if kept is None:
            pending.append((n, job, outs, key, where))
            continue
        outcome.write(Path(job.output.status), StepRecord(step=step, kernel=impl, status=kept["status"],
                                                          message=kept["message"], log=job.log[0],
                                                          seconds=round(time.monotonic() - t0, 3), reused=True,
                                                          **_allocated(alloc)))
        _progress(batch_log, f"[{step} {n}/{len(jobs)}] {impl}: {kept['status']}, inputs unchanged: results kept "
                             f"from {where}")
    given = _shared_child(step, smk, [job for _, job, *_ in pending]) if len(pending) > 1 else {}
    for n, job, outs, key, where in pending:
        impl = job.wildcards.kernel
        result, spent = given.get(impl, (_ALONE, 0.0))
        stop, rec = _run(step, job, given=result, spent=spent, alloc=alloc)
        code = max(code, stop)
        logs.setup(batch_log, append=True)
        if rec.status == OK and key is not None:
            try:
                reuse.keep(where, key, outs, dict(status=OK, message=rec.message), job.log[0])
            except OSError as exc:
                _progress(batch_log, f"[{step} {n}/{len(jobs)}] {impl}: results not kept for reuse ({exc})")
        _progress(batch_log, f"[{step} {n}/{len(jobs)}] {impl}: {rec.status} in {rec.seconds:.1f} s")
    return code


def _progress(batch_log: Path | None, line: str) -> None:
    import sys

    print(line, file=sys.stderr)
    logs.append(batch_log, line)


_ALONE = object()  # a stage whose step runs on its own (not in a batch's shared child process)


def _shared_child(step: str, smk, jobs: list) -> dict:
    """check, bench and sweep: the points of every stage of the batch in one supervised child process
    (``points.many``, ``sweep.sweep_many``): impl -> (what its step returned or raised, seconds). build:
    every stage compiled side by side first (``build.compile_ahead``), then {}. Other steps: {}."""
    if step == "build":
        try:  # only saves time: a stage whose compile fails here fails in its own build, with its log
            build_step.compile_ahead(from_dict(smk.config, trusted=True), [j.wildcards.kernel for j in jobs],
                                     env_json=Path(jobs[0].input.env))
        except Exception as exc:  # noqa: BLE001
            log.warning("compiling ahead of the builds: %s", first_line(exc))
        return {}
    if step not in ("check", "bench", "sweep"):
        return {}
    cfg = from_dict(smk.config, trusted=True)
    env = getattr(jobs[0].input, "env", None)
    if step == "sweep":
        return sweep_step.sweep_many(cfg, [(j.wildcards.kernel, Path(j.output[0]), Path(j.log[0])) for j in jobs],
                                     env_json=Path(env), raw_config=dict(smk.config))
    parts = [points_step.Part(impl=j.wildcards.kernel, binary=Path(j.input.binary) if getattr(j.input, "binary", None) else None,
                              record=Path(j.input.record) if getattr(j.input, "record", None) else None,
                              out=Path(j.output[0]), log=Path(j.log[0])) for j in jobs]
    return points_step.many(step, cfg, parts, raw_config=dict(smk.config), env_json=Path(env) if env else None)


def _given(result):
    """A step body that hands back what the batch's shared child process made of this stage."""
    def body(cfg):
        if isinstance(result, BaseException):
            raise result
        return result

    return body


def _run(step: str, smk, *, given=_ALONE, spent: float = 0.0, alloc: dict | None = None) -> tuple[int, StepRecord]:
    """One step (of one stage): its status record written and returned with 1 where the run must stop
    (see the module docstring), else 0. ``given``: what the step already returned or raised in a batch's shared child
    process (``spent`` seconds), its log already begun. ``alloc``: the GPUs its job was given (``_gpu_job``)."""
    t0 = time.monotonic() - spent
    log_path = Path(smk.log[0]) if smk.log else None
    logs.setup(log_path, append=given is not _ALONE)
    if alloc:  # into the step's log only: the console keeps one line a failure
        logs.file_only("GPUs given to this job: {} (CUDA_VISIBLE_DEVICES={}{})".format(
            alloc.get("gpus") or "none found", alloc.get("visible"),
            f"; SLURM job {alloc['slurm_job']}, GPUs {alloc.get('slurm_gpus')}" if alloc.get("slurm_job") else ""))
    kernel = getattr(smk.wildcards, "kernel", None)
    where = f" (log: {log_path})" if log_path else ""
    raised, refused = True, False
    try:
        cfg = from_dict(smk.config, trusted=True)
        with gpu_lock.for_mode(None if step in SELF_LOCKING else lock_mode(step, cfg, kernel)) or nullcontext():
            status = (_from_snakemake(step, smk) if given is _ALONE else _given(given))(cfg) or StepStatus()
        raised = False
    except outcome.NotRun as exc:
        status = StepStatus(status=NOT_RUN, message=str(exc))
    except LabError as exc:
        if len(exc.args) > 1:
            logs.append(log_path, str(exc.args[1]))
        status = StepStatus(status=FAILED, message=first_line(exc))
        refused = isinstance(exc, io.DamagedFile)  # a damaged input is never one stage's problem
    except Exception as exc:  # unexpected: the traceback goes to the log, one line to the console
        logs.append(log_path, traceback.format_exc())
        status = StepStatus(status=FAILED, message=f"unexpected {type(exc).__name__}: {first_line(exc)}")

    rec = StepRecord(step=step, kernel=kernel, status=status.status, message=status.message,
                     log=str(log_path) if log_path else None, seconds=round(time.monotonic() - t0, 3),
                     **_allocated(alloc))
    what = rec.what
    if raised and (step not in TOLERANT or refused):
        log.error("sgemm-lab %s: %s%s", what, status.message, where)
        return 1, rec
    if raised:
        try:
            EMPTY_OUTPUTS[step](smk, rec)
        except Exception as exc:  # noqa: BLE001 - cannot even write empty results: the job fails
            logs.append(log_path, traceback.format_exc())
            log.error("sgemm-lab %s: %s; and its outputs could not be written: %s%s", what, status.message,
                      first_line(exc), where)
            return 1, rec
    if rec.status == FAILED:
        log.error("sgemm-lab %s: %s%s", what, rec.message, where)
    elif rec.status != OK:
        log.warning("sgemm-lab %s: %s: %s%s", what, rec.status, rec.message, where)
    status_out = getattr(smk.output, "status", None)
    if status_out:
        outcome.write(Path(status_out), rec)
    return 0, rec
