"""The check and bench steps: the points of one implementation, each verified (and timed) in a
supervised child process (``point_worker``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from ..config.records import LabConfig, Shape
from ..measure.gpulock import gpu_lock
from ..results import io
from ..measure.runners import runner_for
from ..results.common import base_seed, log, point_problems, point_seed
from ..dispatch.resolve import load_spec
from ..results.logs import setup as setup_logging
from ..results.outcome import StepStatus


def point_worker(cfg: LabConfig, impl: str, binary: str | None, record: str | None, kind: str,
                 inputs: str | None = None):
    """Built in the isolated child process: verifies (``check``) or measures (``bench``) one shape."""
    from ..measure.runners import TimingSettings

    setup_logging(None)
    if kind == "bench":  # which processes hold the GPU before this one starts CUDA (see measure.foreign)
        from ..measure.foreign import note_before_cuda_once

        note_before_cuda_once()
    runner = runner_for(cfg, impl, Path(binary) if binary else None, Path(record) if record else None)
    b = cfg.bench
    timing = TimingSettings(warmup_ms=b.warmup_ms, target_ms=b.target_ms, min_reps=b.min_reps, max_reps=b.max_reps,
                            l2_policy=b.l2_policy, rewarm_ms=b.rewarm_ms, retimes=b.retimes)

    dists = {d.name: d for _shape, d in cfg.check.points()}

    def work(point):
        (m, n, k), seed, *dist = point  # a check point also names its input distribution
        shape = Shape(m=m, n=n, k=k)
        head = dict(kernel=impl, m=m, n=n, k=k, **({"distribution": dist[0]} if dist else {}))
        reason = runner.skip_reason(shape, kind)
        if reason:
            return [dict(head, mode="-", status="skipped", reason=reason, verified=False)]
        if kind == "check":
            return [dict(head, status="pass" if r["passed"] else "fail", **r)
                    for r in runner.check(shape, seed, dists[dist[0]], inputs=Path(inputs) if inputs else None)]
        from ..results.outcome import DISTURBED

        r = runner.bench(shape, seed, replace(timing, target_ms=cfg.point_target_ms(shape, timing.target_ms)))
        r.setdefault("disturbance", "n/a (CPU timing)")  # a host stage: no GPU to share
        status = "failed" if not r["verified"] else DISTURBED if r.pop("disturbed", False) else "ok"
        if status == DISTURBED:  # verified, but every timed try shared the GPU with other work
            r["reason"] = f"other work on the GPU: {r['disturbance']}"
        return [dict(head, status=status, **r)]

    return work


def batch_worker(cfg: LabConfig, members: dict, kind: str, inputs: str | None = None):
    """Built in one child process for the points of several implementations (a batch job, see
    ``pipeline.batches``): ``(impl, *point)``, each implementation's worker made when its first point comes."""
    from ..measure.isolate import per_stage

    return per_stage(lambda impl: point_worker(cfg, impl, *members[impl], kind, inputs))


def _outcome_rows(kind: str, impl: str, o, total: int, log=log) -> list[dict]:
    """The rows of one point's outcome (a failed point becomes a row), each logged in one line."""
    (m, n, k), _, *dist = o.point
    tag = f"[{kind} {impl}] {o.index + 1}/{total} {m}x{n}x{k}" + (f" {dist[0]}" if dist else "")
    if o.status != "ok":
        log.warning("%s: %s (%s)", tag, o.status.upper(), o.message)
        return [dict(kernel=impl, m=m, n=n, k=k, **({"distribution": dist[0]} if dist else {}), mode="-",
                     status=o.status, reason=o.message, verified=False)]
    for r in o.rows:
        if r["status"] == "skipped":
            log.info("%s: skipped (%s)", tag, r["reason"])
        elif kind == "check":
            log.info("%s %s: %s (rel err %.2e, limit %.2e, cuBLAS FP32 %.2e)", tag, r["mode"],
                     "pass" if r["passed"] else "FAIL " + r["reason"], r["rel_err"], r["tolerance"],
                     r.get("cublas_rel_err", float("nan")))
        else:
            from ..measure.foreign import log_note
            from ..results.outcome import DISTURBED

            (log.warning if r["status"] == DISTURBED else log.info)(
                "%s: %.3f TFLOP/s (median %.4f ms, IQR %.4f ms, %d reps, SM %s->%s MHz)%s%s", tag, r["tflops"],
                r["median_ms"], r["iqr_ms"], r["reps"], r["sm_clock_before_mhz"], r["sm_clock_after_mhz"],
                "" if r["verified"] else " NOT VERIFIED: " + r["reason"], log_note(r))
    return o.rows


def _points_of(shapes, seed_of) -> list:
    return [((s.m, s.n, s.k), seed_of(s)) if not isinstance(s, tuple) else
            ((s[0].m, s[0].n, s[0].k), seed_of(s), s[1].name) for s in shapes]


def _isolated_points(cfg: LabConfig, impl: str, kind: str, points: list, *, binary, record, gpu: str | None,
                     inputs: Path | None = None) -> list[dict]:
    """Run each shape in a supervised child process, holding the GPU's lock as ``gpu`` says ('exclusive',
    'shared' or None: ``pipeline.steps.lock_mode``); a hang, crash or CUDA error becomes a row."""
    from ..measure import isolate

    rows = []
    for o in isolate.run(points, factory=point_worker,
                         args=(cfg, impl, str(binary) if binary else None, str(record) if record else None, kind,
                               str(inputs) if inputs else None),
                         timeout_s=cfg.watchdog_s, log=log,
                         gate=gpu_lock.for_mode(gpu)):
        rows += _outcome_rows(kind, impl, o, len(points))
    return rows


def check_seed(base: int, shape: Shape, dist_name: str) -> int:
    """A check point's seed: the run's check seed, the shape and the distribution, the same for every
    implementation, so that all are checked on the same inputs (kept once: measure.shared_inputs)."""
    return point_seed(base, "check", shape, "check" if dist_name == "uniform" else f"check:{dist_name}")


def run_check_seed(cfg: LabConfig, env_json: Path | None) -> int:
    """The run's check seed: ``seed`` of the config, else the one the environment step drew for this run
    (every check job of the run reads the same), else (no environment record) a fresh one."""
    if cfg.seed is not None:
        return cfg.seed
    if env_json is not None and env_json.exists():
        seed = io.read_json(env_json).get("check_seed")
        if seed is not None:
            return int(seed)
    return base_seed(cfg)


def _check_plan(cfg: LabConfig, impl: str, record: Path | None, env_json: Path | None) -> tuple[int, list]:
    load_spec(cfg, impl, record)  # NotRun before any process starts if the build failed
    base = run_check_seed(cfg, env_json)
    return base, _points_of(cfg.check.points(), lambda pt: check_seed(base, pt[0], pt[1].name))


def _check_done(impl: str, rows: list[dict], out: Path, base: int) -> StepStatus | None:
    ran = [r for r in rows if r["status"] != "skipped"]
    status = "pass" if ran and all(r["status"] == "pass" for r in ran) else ("skipped" if not ran else "fail")
    io.write_json(out, {"kernel": impl, "status": status, "base_seed": base, "points": rows})
    return point_problems(rows, ("pass", "skipped"), "runs")


def check(cfg: LabConfig, impl: str, *, binary: Path | None, record: Path | None, out: Path,
          gpu: str | None, env_json: Path | None = None) -> StepStatus | None:
    """Verify ``impl`` at the check shapes against float64 (a supervised child process), on the run's
    shared inputs (``out``'s folder, ``inputs/``); ``gpu``: how it holds the GPU (``pipeline.steps``)."""
    base, points = _check_plan(cfg, impl, record, env_json)
    rows = _isolated_points(cfg, impl, "check", points, binary=binary, record=record, gpu=gpu,
                            inputs=out.parent / "inputs")
    return _check_done(impl, rows, out, base)


BENCH_COLUMNS = ["kernel", "m", "n", "k", "status", "reason", "verified", "rel_err", "max_abs_err", "tolerance",
                 "reference", "median_ms", "min_ms", "q1_ms", "q3_ms", "iqr_ms", "max_ms", "reps", "tflops",
                 "l2_policy", "sm_clock_before_mhz", "sm_clock_after_mhz", "warmup_s", "warmup_launches",
                 "alpha", "beta", "seed", "device_index", "device_uuid", "device_name", "disturbance", "retimed"]


def _bench_plan(cfg: LabConfig, impl: str, record: Path | None, env_json: Path | None = None) -> tuple[None, list]:
    load_spec(cfg, impl, record)  # NotRun before any process starts if the build failed
    base = base_seed(cfg)
    return None, _points_of(cfg.bench_shapes(impl), lambda s: point_seed(base, impl, s, "bench"))


def bench_at(cfg: LabConfig, impl: str, shapes, *, binary: Path | None, record: Path | None,
             gpu: str | None) -> list[dict]:
    """The bench's rows of ``impl`` at ``shapes`` (each verified and timed in a supervised child process,
    as the bench step does; the target ``time``), holding the GPU as ``gpu`` says."""
    load_spec(cfg, impl, record)
    base = base_seed(cfg)
    points = _points_of(list(shapes), lambda s: point_seed(base, impl, s, "bench"))
    return _isolated_points(cfg, impl, "bench", points, binary=binary, record=record, gpu=gpu)


def _bench_done(impl: str, rows: list[dict], out: Path, _base=None) -> StepStatus | None:
    io.write_csv(out, rows, columns=BENCH_COLUMNS)
    return point_problems(rows, ("ok", "skipped"), "shapes")


def bench(cfg: LabConfig, impl: str, *, binary: Path | None, record: Path | None, out: Path,
          gpu: str | None) -> StepStatus | None:
    """Verify and time ``impl`` at every bench shape and, for the stages in the suite, the suite shapes
    (a supervised child process holding the GPU as ``gpu`` says: 'exclusive', or None for a host stage)."""
    _, points = _bench_plan(cfg, impl, record)
    rows = _isolated_points(cfg, impl, "bench", points, binary=binary, record=record, gpu=gpu)
    return _bench_done(impl, rows, out)


@dataclass(frozen=True, kw_only=True)
class Part:
    """One stage of a batch job (``pipeline.batches``) for ``many``."""

    impl: str
    binary: Path | None
    record: Path | None
    out: Path
    log: Path | None


def many(kind: str, cfg: LabConfig, parts: list[Part], *, gpu: str | None, env_json: Path | None = None) -> dict[str, tuple[object, float]]:
    """``check`` or ``bench`` of several implementations in one supervised child process per GPU (one
    CUDA context and warm clock for the batch; a hang, crash or CUDA error still ends only its point, and
    the next point gets a fresh child), holding the GPU as ``gpu`` says (the batch's stages alike). Each
    stage's log is its own. Returns impl -> (its StepStatus or
    None, or the exception that stopped it; seconds spent on it)."""
    from ..measure.gpulock import child_gates
    from .batches import StagePoints, run_stages
    from ..results.logs import stage_logger

    plan, done = (_check_plan, _check_done) if kind == "check" else (_bench_plan, _bench_done)
    results: dict[str, tuple[object, float]] = {}
    planned: dict[str, tuple[Part, object]] = {}
    plans = []
    for p in parts:
        try:
            base, points = plan(cfg, p.impl, p.record, env_json)
        except Exception as exc:  # noqa: BLE001 - the stage's own problem (its entry records it)
            results[p.impl] = (exc, 0.0)
            continue
        planned[p.impl] = (p, base)
        plans.append(StagePoints(stage=p.impl, points=points, log=stage_logger(p.impl, p.log)))
    if not plans:
        return results
    first = plans[0].stage
    gates = [None] if gpu is None else child_gates(exclusive=gpu == "exclusive")
    inputs = planned[first][0].out.parent / "inputs" if kind == "check" else None
    members = {impl: (str(p.binary) if p.binary else None, str(p.record) if p.record else None)
               for impl, (p, _) in planned.items()}

    def finish(pl, kept: list) -> StepStatus | None:
        p, base = planned[pl.stage]
        return done(pl.stage, [r for rows in kept for r in rows], p.out, base)

    return results | run_stages(
        plans, factory=batch_worker,
        args=(cfg, members, kind, str(inputs) if inputs else None), gates=gates, timeout_s=cfg.watchdog_s,
        on_point=lambda pl, o: _outcome_rows(kind, pl.stage, o, len(pl.points), log=pl.log), finish=finish)
