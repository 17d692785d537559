"""The tile sweep of a stage: filter, compile in parallel, then verify and time each point in a
supervised child process (``sweep_worker``); ``time_points`` is the timing loop the shape sweep shares.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from ..config.records import LabConfig, Shape
from ..errors import ConfigError
from ..measure.gpulock import child_gates
from ..results import io
from ..results.common import base_seed, log, machine, point_problems, point_seed
from ..dispatch.resolve import load_spec
from ..results.logs import setup as setup_logging
from ..results.outcome import StepStatus


# the columns its readers select by: a table without rows (the step failed) still has them
SWEEP_COLUMNS = ["kernel", "m", "n", "k", "params", "status", "reason"]

def sweep_worker(cfg: LabConfig, kernel: str, seed: int):
    """Built in the isolated child: loads, verifies and times one sweep point compiled by the parent."""
    import json

    from ..dispatch.choice import candidate_spec
    from ..gpu.device import device_info
    from ..gpu.launch import KernelLauncher
    from ..measure.runners import GpuRunner, TimingSettings

    setup_logging(None)
    spec = load_spec(cfg, kernel, None)
    s = cfg.sweep
    timing = TimingSettings(warmup_ms=s.warmup_ms, target_ms=s.target_ms, min_reps=s.min_reps, max_reps=s.max_reps,
                            rewarm_ms=s.rewarm_ms)
    from ..measure.foreign import note_before_cuda_once

    note_before_cuda_once()  # which processes hold the GPU before this one starts CUDA (see measure.foreign)
    dev = device_info()
    runner = None

    def work(point) -> list[dict]:
        """``(params, cubin)`` timed at the sweep shape, or ``(params, cubin, (m, n, k))`` at that shape."""
        nonlocal runner
        params, cubin, *where = point
        shape = Shape.of(where[0]) if where else s.shape
        here = replace(timing, target_ms=cfg.point_target_ms(shape, timing.target_ms))
        sp = candidate_spec(spec, params)  # a dispatch stage's candidate; any other stage with these parameters
        launcher = KernelLauncher(sp, cubin)
        f = launcher.func
        head = dict(registers=f.num_regs, shared_static_bytes=f.shared_size_bytes, local_bytes=f.local_size_bytes,
                    within_local_budget=f.local_size_bytes <= sp.max_local_bytes)
        problem = launcher.launch_problem(dev)
        if problem:
            return [dict(head, status="filtered", reason=f"after compiling: {problem}")]
        if runner is None:
            runner = GpuRunner(cfg, kernel, sp, cubin)
        runner.spec, runner.launch = sp, launcher
        r = runner.bench(shape, point_seed(seed, json.dumps(params, sort_keys=True), shape, "sweep"), here)
        # a point timed while other work shared the GPU is no candidate: the pick reads ok rows only
        status = "failed" if not r["verified"] else "disturbed" if r.pop("disturbed", False) else "ok"
        return [dict(head, status=status, **r)]

    return work


def sweep_batch_worker(cfg: LabConfig, seed: int):
    """Built in one child process for the points of several stages' sweeps (a batch job, see
    ``pipeline.batches``): ``(kernel, *point)``, each stage's worker made when its first point comes."""
    from ..measure.isolate import per_stage

    return per_stage(lambda kernel: sweep_worker(cfg, kernel, seed))


def _say_point(lg, tag: str, o) -> None:
    """One line for a timed sweep point (or what became of it)."""
    if o.status != "ok":
        lg.warning("%s: %s (%s)", tag, o.status.upper(), o.message)
    elif o.rows[0]["status"] in ("ok", "failed"):
        r = o.rows[0]
        lg.info("%s: %.2f TFLOP/s, %d regs, %d B local%s", tag, r["tflops"], r["registers"], r["local_bytes"],
                "" if r["verified"] else " NOT VERIFIED")


def time_points(cfg: LabConfig, kernel: str, runnable: list[tuple[dict, tuple]], *, label) -> list[dict]:
    """Verify and time compiled points ``(head, (params, cubin[, (m, n, k)]))`` with the GPU to this
    step, each in a supervised child process (``sweep_worker``): one row per point, ``head`` merged
    into it, a hang or CUDA error being that point's row. ``label(head)`` names a point in the log."""
    from ..measure import isolate

    def report(o) -> None:
        _say_point(log, f"{label(runnable[o.index][0])} ({o.index + 1}/{len(runnable)})", o)

    # With several GPUs the points are dealt over all of them, each share timed with its GPU to itself.
    outcomes = isolate.run_split([p for _, p in runnable], child_gates(exclusive=True),
                                 factory=sweep_worker,
                                 args=(cfg, kernel, base_seed(cfg)), timeout_s=cfg.watchdog_s, log=log,
                                 on_outcome=report)
    rows = []
    for o in outcomes:
        head = runnable[o.index][0]
        rows.append(dict(head, status=o.status, reason=o.message) if o.status != "ok" else dict(head, **o.rows[0]))
    return rows


def sweep_todo(cfg: LabConfig, spec, dev, machine_columns: dict | None = None
               ) -> tuple[list[dict], list[tuple[dict, object, dict]]]:
    """A stage's sweep points on ``cfg.sweep.shape`` against the device limits ``dev``: the rows of those
    filtered before compiling, and (row head, spec, params) of those to compile (the precompile step
    compiles the same)."""
    import json

    from ..config import geometry
    from ..dispatch.autotune import sweep_points
    from ..gpu.compile import compile_options, source_hash

    shape = cfg.sweep.shape
    provenance = dict(source_sha256=source_hash(spec), **(machine_columns or {}))
    rows, todo = [], []
    for params in sweep_points(spec):
        sp = spec.with_params(**params)
        head = dict(kernel=spec.id, m=shape.m, n=shape.n, k=shape.k, params=json.dumps(params, sort_keys=True), **params,
                    **provenance)
        try:
            head.update(threads=geometry.threads_per_block(sp), shared_bytes=geometry.shared_bytes(sp))
        except ConfigError as exc:  # an expression beyond its bounds at this point: filtered, with the reason
            rows.append(dict(head, status="filtered", reason=str(exc)))
            continue
        limit = dev.max_shared_per_block_optin if sp.dynamic_shared else dev.max_shared_per_block
        problems = geometry.violations(sp, max_shared=limit)
        reason = geometry.unsupported_reason(sp, shape)
        if problems or reason:
            rows.append(dict(head, status="filtered", reason="; ".join(problems + ([reason] if reason else []))))
        else:
            todo.append((dict(head, compile_options=" ".join(compile_options(sp))), sp, params))
    return rows, todo


def _plan(cfg: LabConfig, kernel: str, env_json: Path, say) -> tuple[list[dict], list]:
    """Filter and compile a stage's sweep points: rows of the points that will not run, and
    (head, (params, cubin)) of those that will."""
    from ..gpu.build import compile_many, prebuilt_dir
    from ..gpu.device import DeviceInfo

    env = io.read_json(env_json)
    dev = DeviceInfo(**env["gpu"])
    rows, todo = sweep_todo(cfg, cfg.kernel(kernel), dev, machine(env))
    say("[sweep %s] %d points: %d filtered before compiling, %d to compile (%d parallel jobs)", kernel,
        len(rows) + len(todo), len(rows), len(todo), cfg.sweep.jobs)
    t0 = time.perf_counter()
    built = compile_many([sp for _, sp, _ in todo], dev.arch, jobs=cfg.sweep.jobs,
                         prebuilt=prebuilt_dir(env_json.parent, env))
    say("[sweep %s] compiled in %.1f s", kernel, time.perf_counter() - t0)
    runnable = []
    for (head, sp, params), (cubin, err) in zip(todo, built):
        if err:
            rows.append(dict(head, status="compile_error", reason=str(err)))
        else:
            runnable.append((head, (params, cubin)))
    return rows, runnable


def _done(rows: list[dict], out: Path) -> StepStatus | None:
    io.write_csv(out, rows)
    return point_problems(rows, ("ok", "filtered"), "sweep points")


def sweep(cfg: LabConfig, kernel: str, *, env_json: Path, out: Path) -> StepStatus | None:
    """Tile sweep of one stage on ``cfg.sweep.shape``: filter against the device limits recorded by the
    environment step and compile in parallel (no GPU needed; the precompile step's binaries read where it
    made them), then, with the GPU to itself, verify and time each point in a supervised child process
    (a hang or CUDA error is that point's row)."""
    rows, runnable = _plan(cfg, kernel, env_json, log.info)
    rows += time_points(cfg, kernel, runnable, label=lambda head: f"[sweep {kernel}] {head['params']}")
    return _done(rows, out)


def sweep_many(cfg: LabConfig, parts: list[tuple[str, Path, Path | None]], *, env_json: Path) -> dict[str, tuple[object, float]]:
    """The sweeps of several stages ``(kernel, out, log)`` in a batch job: each filtered and compiled,
    then all their points in one supervised child process per GPU (``sweep_batch_worker``). Returns
    kernel -> (its StepStatus or None, or the exception that stopped it; seconds spent on it)."""
    from .batches import StagePoints, run_stages
    from ..results.logs import close, stage_logger

    results: dict[str, tuple[object, float]] = {}
    planned: dict[str, tuple[Path, list[dict], list]] = {}
    plans = []
    for kernel, out, path in parts:
        t0 = time.perf_counter()
        lg = stage_logger(kernel, path)
        try:
            filtered, runnable = _plan(cfg, kernel, env_json, lg.info)
        except Exception as exc:  # noqa: BLE001 - the stage's own problem (its entry records it)
            close(lg)
            results[kernel] = (exc, time.perf_counter() - t0)
            continue
        planned[kernel] = (out, filtered, runnable)
        plans.append(StagePoints(stage=kernel, points=[point for _, point in runnable], log=lg,
                                 seconds=time.perf_counter() - t0))

    def on_point(pl, o) -> dict:
        head = planned[pl.stage][2][o.index][0]
        _say_point(pl.log, f"[sweep {pl.stage}] {head['params']} ({o.index + 1}/{len(pl.points)})", o)
        return dict(head, status=o.status, reason=o.message) if o.status != "ok" else dict(head, **o.rows[0])

    def finish(pl, kept: list) -> StepStatus | None:
        out, filtered, _ = planned[pl.stage]
        return _done(filtered + kept, out)

    return results | run_stages(plans, factory=sweep_batch_worker,
                                args=(cfg, base_seed(cfg)), gates=child_gates(exclusive=True),
                                timeout_s=cfg.watchdog_s, on_point=on_point, finish=finish)
