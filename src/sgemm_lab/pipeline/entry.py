"""The entry point of every workflow script (``main``): Snakemake's job -> one step -> a status record.
What each step is (its call, its GPU use, whether its failure is one stage's, what it leaves when it
fails) is ``steps``; this module runs it, a stage or a batch of stages at a time.

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

from ..config.load import from_dict, remeasured
from ..config.records import LabConfig
from ..errors import LabError
from ..measure.gpulock import gpu_lock
from ..results import io, logs, outcome
from ..results.outcome import FAILED, NOT_RUN, OK, StepRecord, StepStatus, first_line
from . import build as build_step
from . import points as points_step
from . import sweep as sweep_step
from .steps import STEPS, lock_mode, uses_gpu

log = logs.log


# --------------------------------------------------------------------------------------- main
def main(step: str, smk) -> None:
    """Entry point for ``workflow/scripts/<step>.py``: run the step (for each stage of a batch job, see
    ``pipeline.batches``), record its status, one clear line on failure (the detail stays in the log)."""
    import sys

    try:  # the config the workflow validated: its records, once for the job and every stage of it
        cfg = from_dict(smk.config, trusted=True)
    except LabError as exc:
        log.error("sgemm-lab %s: %s", step, first_line(exc))
        sys.exit(1)
    batch = getattr(getattr(smk, "params", None), "members", None) is not None
    members = list(smk.params.members) if batch else [getattr(getattr(smk, "wildcards", None), "kernel", None)]
    given = _gpu_job(step, smk, cfg, members)
    code = _batch(step, smk, cfg, given) if batch else _run(step, smk, cfg, alloc=given)[0]
    if code:
        sys.exit(code)


def _gpu_job(step: str, smk, cfg: LabConfig, members: list) -> dict | None:
    """What a job that uses the GPU was given (``gpu.discovery.allocation``, read before anything pins the
    process); None for a job that does not use it. A job that uses the GPU while its rule asks the
    scheduler for none (``resources: gpu=0``) stops here, before it starts: on a cluster that confines
    devices it would find none, or a GPU another job was given."""
    import sys

    if not uses_gpu(cfg, step, tuple(members)):
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


def _batch(step: str, smk, cfg: LabConfig, alloc: dict | None = None) -> int:
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
    given = _shared_child(step, cfg, [job for _, job, *_ in pending]) if len(pending) > 1 else {}
    for n, job, outs, key, where in pending:
        impl = job.wildcards.kernel
        result, spent = given.get(impl, (_ALONE, 0.0))
        stop, rec = _run(step, job, cfg, given=result, spent=spent, alloc=alloc)
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


def _shared_child(step: str, cfg: LabConfig, jobs: list) -> dict:
    """check, bench and sweep: the points of every stage of the batch in one supervised child process
    (``points.many``, ``sweep.sweep_many``): impl -> (what its step returned or raised, seconds). build:
    every stage compiled side by side first (``build.compile_ahead``), then {}. Other steps: {}."""
    if step == "build":
        try:  # only saves time: a stage whose compile fails here fails in its own build, with its log
            build_step.compile_ahead(cfg, [j.wildcards.kernel for j in jobs],
                                     env_json=Path(jobs[0].input.env))
        except Exception as exc:  # noqa: BLE001
            log.warning("compiling ahead of the builds: %s", first_line(exc))
        return {}
    if step not in ("check", "bench", "sweep"):
        return {}
    env = getattr(jobs[0].input, "env", None)
    if step == "sweep":
        return sweep_step.sweep_many(cfg, [(j.wildcards.kernel, Path(j.output[0]), Path(j.log[0])) for j in jobs],
                                     env_json=Path(env))
    parts = [points_step.Part(impl=j.wildcards.kernel, binary=Path(j.input.binary) if getattr(j.input, "binary", None) else None,
                              record=Path(j.input.record) if getattr(j.input, "record", None) else None,
                              out=Path(j.output[0]), log=Path(j.log[0])) for j in jobs]
    return points_step.many(step, cfg, parts, gpu=lock_mode(step, cfg, parts[0].impl),
                            env_json=Path(env) if env else None)


def _given(result):
    """A step body that hands back what the batch's shared child process made of this stage."""
    def body(cfg):
        if isinstance(result, BaseException):
            raise result
        return result

    return body


def _run(step: str, smk, cfg: LabConfig, *, given=_ALONE, spent: float = 0.0, alloc: dict | None = None) -> tuple[int, StepRecord]:
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
        described = STEPS[step]
        with gpu_lock.for_mode(None if described.locks_itself else lock_mode(step, cfg, kernel)) or nullcontext():
            status = (described.run(cfg, smk) if given is _ALONE else _given(given)(cfg)) or StepStatus()
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
    if raised and (not STEPS[step].tolerant or refused):
        log.error("sgemm-lab %s: %s%s", what, status.message, where)
        return 1, rec
    if raised:
        try:
            STEPS[step].leftover(smk, rec)
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
