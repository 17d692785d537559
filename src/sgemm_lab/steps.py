"""The pipeline's step bodies, one function per rule (``sgemm_lab.entry.main`` calls them).

A step writes its results and returns None when all is well, or a ``StepStatus`` saying what is wrong
with what it measured (a check that failed, points that did not verify, a tool that is unavailable).
Errors it cannot get past are raised (LabError); ``entry`` turns them into one line and a status.
"""

from __future__ import annotations

import logging
import time
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from . import io
from .config import BASELINES, KernelSpec, LabConfig, Shape, from_dict
from .errors import CompileError, LabError
from .geometry import unsupported_reason
from .gpulock import gpu_lock, lock_mode, lock_path
from .logs import setup as setup_logging
from .outcome import FAILED, UNAVAILABLE, NotRun, StepStatus, first_line

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger("sgemm_lab")


# ------------------------------------------------------------------------------------- helpers
def point_seed(base: int, impl: str, shape: Shape, purpose: str) -> int:
    """A reproducible per-(implementation, shape) seed derived from the run's base seed."""
    ss = np.random.SeedSequence([base, zlib.crc32(impl.encode()), zlib.crc32(purpose.encode()), shape.m, shape.n, shape.k])
    return int(ss.generate_state(1, dtype=np.uint64)[0] >> 1)


def base_seed(cfg: LabConfig) -> int:
    return cfg.seed if cfg.seed is not None else int(np.random.SeedSequence().entropy % (2**63))


def load_spec(cfg: LabConfig, impl: str, record: Path | None) -> KernelSpec | None:
    """The concrete spec of ``impl`` (None for a library baseline), autotuned stages resolved from their
    build record, dispatch stages as their base. Raises NotRun when that record says the build failed."""
    from . import dispatch
    from .autotune import resolve

    if impl in BASELINES:
        return None
    spec = cfg.kernel(impl)
    rec = io.read_json(record) if record is not None else None
    if rec is not None and rec.get("status", "ok") != "ok":
        raise NotRun(f"build failed: {rec.get('message', '')}".rstrip(": "))
    if spec.dispatched:
        return dispatch.resolve(cfg, spec)
    return resolve(cfg, spec, rec) if spec.autotuned else spec


def _runner(cfg: LabConfig, impl: str, binary: Path | None, record: Path | None):
    from .runners import make_runner

    return make_runner(cfg, impl, load_spec(cfg, impl, record), binary)


class _Guard:
    """Turns CUDA driver errors into one-line LabErrors naming what was running."""

    def __init__(self, what: str):
        self.what = what

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        if et is not None and type(ev).__module__.startswith("pycuda"):
            raise LabError(f"{self.what}: CUDA error: {str(ev).splitlines()[0]}") from ev
        return False


# --------------------------------------------------------------------------------------- steps
def environment(cfg: LabConfig, *, out: Path) -> None:
    from . import envinfo

    rec = envinfo.capture()
    rec["run"] = cfg.run
    log.info("GPU %s (%s), driver %s, cuBLAS %s", rec["gpu"]["name"], rec["gpu"]["arch"], rec["driver_version"], rec["cublas"])
    io.write_json(out, rec)


def _epilogue_variants(cfg: LabConfig, spec) -> list:
    """The activation variants the epilogue step of a fused stage compiles, other than ``spec`` itself."""
    if spec.signature != "fused":
        return []
    from .epilogue import variant

    out = []
    for act in cfg.epilogue.acts:
        v = variant(spec, act)
        if v.params != spec.params and all(v.params != w.params for w in out):
            out.append(v)
    return out


def build(cfg: LabConfig, kernel: str, *, env_json: Path, binary_out: Path, record_out: Path,
          sweeps: list[Path] = (), shape_sweep: Path | None = None) -> None:
    """Compile one stage for the machine at hand; record its resources (and, if autotuned, its pick;
    if a dispatch stage, its table: see sgemm_lab.dispatch_steps)."""
    from dataclasses import asdict

    from .autotune import pick, resolve
    from .compile import source_hash

    spec = cfg.kernel(kernel)
    if spec.dispatched:
        from .dispatch_steps import build_dispatch

        return build_dispatch(cfg, kernel, env_json=env_json, shape_sweep=shape_sweep, binary_out=binary_out,
                              record_out=record_out)
    extra = {}
    if spec.autotuned:
        import pandas as pd

        frames = {Path(p).stem: pd.read_csv(p) for p in sweeps}
        stage, params, row = pick(frames)
        extra = dict(tuned_from=stage, params=params, tuned_tflops=float(row["tflops"]),
                     tuned_on=f"{int(row['m'])}x{int(row['n'])}x{int(row['k'])}")
        spec = resolve(cfg, spec, extra)
        log.info("%s: fastest verified sweep point is %s %s (%.2f TFLOP/s at %s)", kernel, stage, params,
                 row["tflops"], extra["tuned_on"])
    if spec.backend == "host":
        from . import host

        t0 = time.perf_counter()
        binary, cmd, _ = host.compile_shared(spec, cfg.cpu.cflags)
        rec = dict(kernel=kernel, entry=spec.entry, arch="host", options=cmd[1:-3], registers=None,
                   shared_static_bytes=None, local_bytes=None, max_threads_per_block=None,
                   compile_s=time.perf_counter() - t0)
    else:
        from . import gpu

        arch = io.read_json(env_json)["gpu"]["arch"]
        t0 = time.perf_counter()
        # A fused stage's activation variants compile alongside (in parallel, into the compile cache),
        # so that its epilogue step, which needs them, does not wait for nvcc again.
        extra_specs = _epilogue_variants(cfg, spec)
        (binary, err), *_ = gpu.compile_many([spec, *extra_specs], arch, jobs=1 + len(extra_specs))
        if err:  # nvcc only, no GPU, at low priority
            raise err
        dt = time.perf_counter() - t0
        with gpu_lock(exclusive=False):  # loading the module does
            launcher = gpu.KernelLauncher(spec, binary)
            launcher.check_launchable(gpu.device_info())
            rec = asdict(launcher.resources(arch, dt))
        from .sass import record as sass_record

        rec.update(sass_record(binary, spec.entry))  # instruction counts (none without cuobjdump)
        if rec["local_bytes"] > spec.max_local_bytes:
            raise CompileError(f"kernel {kernel}: {rec['local_bytes']} B of local memory per thread "
                               f"(spills or stack); config allows {spec.max_local_bytes}")
        log.info("%s: %d registers, %d B static shared memory, %d B local memory per thread, compiled in %.2f s%s",
                 kernel, rec["registers"], rec["shared_static_bytes"], rec["local_bytes"], dt,
                 f" (with {len(extra_specs)} epilogue variants in parallel)" if extra_specs else "")
    rec.update(status="ok", source=f"kernels/{spec.source}", source_sha256=source_hash(spec),
               params=dict(spec.params), backend=spec.backend)
    rec.update(extra)
    rec.setdefault("tuned_from", None)
    io.write_bytes(binary_out, binary)
    io.write_json(record_out, rec)


def point_worker(raw_config: dict, impl: str, binary: str | None, record: str | None, kind: str):
    """Built in the isolated child process: verifies (``check``) or measures (``bench``) one shape."""
    from .runners import TimingSettings

    cfg = from_dict(raw_config, trusted=True)
    setup_logging(None)
    runner = _runner(cfg, impl, Path(binary) if binary else None, Path(record) if record else None)
    b = cfg.bench
    timing = TimingSettings(warmup_ms=b.warmup_ms, target_ms=b.target_ms, min_reps=b.min_reps, max_reps=b.max_reps,
                            l2_policy=b.l2_policy, rewarm_ms=b.rewarm_ms)

    def work(point):
        (m, n, k), seed = point
        shape = Shape(m=m, n=n, k=k)
        head = dict(kernel=impl, m=m, n=n, k=k)
        reason = runner.skip_reason(shape)
        if reason:
            return [dict(head, mode="-", status="skipped", reason=reason, verified=False)]
        if kind == "check":
            return [dict(head, status="pass" if r["passed"] else "fail", **r) for r in runner.check(shape, seed)]
        r = runner.bench(shape, seed, timing)
        return [dict(head, status="ok" if r["verified"] else "failed", **r)]

    return work


def _isolated_points(cfg: LabConfig, impl: str, kind: str, shapes, seed_of, *, binary, record, raw_config) -> list[dict]:
    """Run each shape in a supervised child process; a hang, crash or CUDA error becomes a row."""
    from . import isolate

    points = [((s.m, s.n, s.k), seed_of(s)) for s in shapes]
    rows = []
    for o in isolate.run(points, factory="sgemm_lab.steps:point_worker",
                         args=(raw_config, impl, str(binary) if binary else None, str(record) if record else None, kind),
                         timeout_s=cfg.watchdog_s, log=log,
                         gate=gpu_lock.for_mode(lock_mode(kind, cfg, impl))):
        (m, n, k), _ = o.point
        tag = f"[{kind} {impl}] {o.index + 1}/{len(points)} {m}x{n}x{k}"
        if o.status != "ok":
            rows.append(dict(kernel=impl, m=m, n=n, k=k, mode="-", status=o.status, reason=o.message, verified=False))
            log.warning("%s: %s (%s)", tag, o.status.upper(), o.message)
            continue
        rows += o.rows
        for r in o.rows:
            if r["status"] == "skipped":
                log.info("%s: skipped (%s)", tag, r["reason"])
            elif kind == "check":
                log.info("%s %s: %s (rel err %.2e, tol %.2e)", tag, r["mode"],
                         "pass" if r["passed"] else "FAIL " + r["reason"], r["rel_err"], r["tolerance"])
            else:
                log.info("%s: %.3f TFLOP/s (median %.4f ms, IQR %.4f ms, %d reps, SM %s->%s MHz)%s", tag, r["tflops"],
                         r["median_ms"], r["iqr_ms"], r["reps"], r["sm_clock_before_mhz"], r["sm_clock_after_mhz"],
                         "" if r["verified"] else " NOT VERIFIED: " + r["reason"])
    return rows


def point_problems(rows: list[dict], good: tuple[str, ...], what: str = "points") -> StepStatus | None:
    """A failed status naming the first bad point, when any row's status is not in ``good``."""
    bad = [r for r in rows if r.get("status") not in good]
    if not bad:
        return None
    r = bad[0]
    where = r["params"] if "params" in r else f"{r['m']}x{r['n']}x{r['k']}"
    mode = f" ({r['mode']})" if r.get("mode") not in (None, "-") else ""
    more = f" (+{len(bad) - 1} more of {len(rows)} {what})" if len(bad) > 1 else ""
    label = "NOT VERIFIED" if r["status"] == "failed" else str(r["status"]).upper()
    return StepStatus(status=FAILED, message=f"{label} at {where}{mode}: {first_line(r.get('reason', ''), 160)}{more}")


def check(cfg: LabConfig, impl: str, *, binary: Path | None, record: Path | None, out: Path,
          raw_config: dict | None = None) -> StepStatus | None:
    """Verify ``impl`` at the check shapes against float64 (a supervised child process)."""
    load_spec(cfg, impl, record)  # NotRun before any process starts if the build failed
    base = base_seed(cfg)
    rows = _isolated_points(cfg, impl, "check", cfg.check.shapes, lambda s: point_seed(base, impl, s, "check"),
                            binary=binary, record=record, raw_config=raw_config)
    ran = [r for r in rows if r["status"] != "skipped"]
    status = "pass" if ran and all(r["status"] == "pass" for r in ran) else ("skipped" if not ran else "fail")
    io.write_json(out, {"kernel": impl, "status": status, "base_seed": base, "points": rows})
    return point_problems(rows, ("pass", "skipped"), "runs")


BENCH_COLUMNS = ["kernel", "m", "n", "k", "status", "reason", "verified", "rel_err", "max_abs_err", "tolerance",
                 "reference", "median_ms", "min_ms", "q1_ms", "q3_ms", "iqr_ms", "max_ms", "reps", "tflops",
                 "l2_policy", "sm_clock_before_mhz", "sm_clock_after_mhz", "warmup_s", "warmup_launches",
                 "alpha", "beta", "seed"]


def bench(cfg: LabConfig, impl: str, *, binary: Path | None, record: Path | None, out: Path,
          raw_config: dict | None = None) -> StepStatus | None:
    """Verify and time ``impl`` at every bench shape and, for the stages in the suite, the suite shapes
    (a supervised child process holding the GPU)."""
    load_spec(cfg, impl, record)  # NotRun before any process starts if the build failed
    base = base_seed(cfg)
    rows = _isolated_points(cfg, impl, "bench", cfg.bench_shapes(impl), lambda s: point_seed(base, impl, s, "bench"),
                            binary=binary, record=record, raw_config=raw_config)
    io.write_csv(out, rows, columns=BENCH_COLUMNS)
    return point_problems(rows, ("ok", "skipped"), "shapes")


def sweep_worker(raw_config: dict, kernel: str, seed: int):
    """Built in the isolated child: loads, verifies and times one sweep point compiled by the parent."""
    import json

    from . import gpu
    from .dispatch import candidate_spec
    from .runners import GpuRunner, TimingSettings

    cfg = from_dict(raw_config, trusted=True)
    setup_logging(None)
    spec = load_spec(cfg, kernel, None)
    s = cfg.sweep
    timing = TimingSettings(warmup_ms=s.warmup_ms, target_ms=s.target_ms, min_reps=s.min_reps, max_reps=s.max_reps,
                            rewarm_ms=s.rewarm_ms)
    dev = gpu.device_info()
    runner = None

    def work(point) -> list[dict]:
        """``(params, cubin)`` timed at the sweep shape, or ``(params, cubin, (m, n, k))`` at that shape."""
        nonlocal runner
        params, cubin, *where = point
        shape = Shape.of(where[0]) if where else s.shape
        sp = candidate_spec(spec, params)  # a dispatch stage's candidate; any other stage with these parameters
        launcher = gpu.KernelLauncher(sp, cubin)
        f = launcher.func
        head = dict(registers=f.num_regs, shared_static_bytes=f.shared_size_bytes, local_bytes=f.local_size_bytes,
                    within_local_budget=f.local_size_bytes <= sp.max_local_bytes)
        problem = launcher.launch_problem(dev)
        if problem:
            return [dict(head, status="filtered", reason=f"after compiling: {problem}")]
        if runner is None:
            runner = GpuRunner(cfg, kernel, sp, cubin)
        runner.spec, runner.launch = sp, launcher
        r = runner.bench(shape, point_seed(seed, json.dumps(params, sort_keys=True), shape, "sweep"), timing)
        return [dict(head, status="ok" if r["verified"] else "failed", **r)]

    return work


def time_points(cfg: LabConfig, kernel: str, runnable: list[tuple[dict, tuple]], *, raw_config: dict | None,
                label) -> list[dict]:
    """Verify and time compiled points ``(head, (params, cubin[, (m, n, k)]))`` with the GPU to this
    step, each in a supervised child process (``sweep_worker``): one row per point, ``head`` merged
    into it, a hang or CUDA error being that point's row. ``label(head)`` names a point in the log."""
    from . import isolate

    rows = []
    for o in isolate.run([p for _, p in runnable], factory="sgemm_lab.steps:sweep_worker",
                         args=(raw_config, kernel, base_seed(cfg)), timeout_s=cfg.watchdog_s, log=log,
                         gate=gpu_lock(exclusive=True)):
        head = runnable[o.index][0]
        tag = f"{label(head)} ({o.index + 1}/{len(runnable)})"
        if o.status != "ok":
            rows.append(dict(head, status=o.status, reason=o.message))
            log.warning("%s: %s (%s)", tag, o.status.upper(), o.message)
            continue
        r = o.rows[0]
        rows.append(dict(head, **r))
        if r["status"] in ("ok", "failed"):
            log.info("%s: %.2f TFLOP/s, %d regs, %d B local%s", tag, r["tflops"], r["registers"], r["local_bytes"],
                     "" if r["verified"] else " NOT VERIFIED")
    return rows


def sweep(cfg: LabConfig, kernel: str, *, env_json: Path, out: Path,
          raw_config: dict | None = None) -> StepStatus | None:
    """Tile sweep of one stage on ``cfg.sweep.shape``: filter against the device limits recorded by the
    environment step and compile in parallel (no GPU needed), then, with the GPU to itself, verify and
    time each point in a supervised child process (a hang or CUDA error is that point's row)."""
    import json

    from . import geometry, gpu
    from .autotune import sweep_points
    from .compile import compile_options, source_hash

    spec = cfg.kernel(kernel)
    env = io.read_json(env_json)
    dev = gpu.DeviceInfo(**env["gpu"])
    arch = dev.arch
    shape = cfg.sweep.shape
    points = sweep_points(spec)
    provenance = dict(source_sha256=source_hash(spec), **machine(env))
    rows, todo = [], []
    for params in points:
        sp = spec.with_params(**params)
        head = dict(kernel=kernel, m=shape.m, n=shape.n, k=shape.k, params=json.dumps(params, sort_keys=True), **params,
                    threads=geometry.threads_per_block(sp), shared_bytes=geometry.shared_bytes(sp), **provenance)
        limit = dev.max_shared_per_block_optin if sp.dynamic_shared else dev.max_shared_per_block
        problems = geometry.violations(sp, max_shared=limit)
        reason = geometry.unsupported_reason(sp, shape)
        if problems or reason:
            rows.append(dict(head, status="filtered", reason="; ".join(problems + ([reason] if reason else []))))
        else:
            todo.append((dict(head, compile_options=" ".join(compile_options(sp))), sp, params))
    log.info("[sweep %s] %d points: %d filtered before compiling, %d to compile (%d parallel jobs)", kernel,
             len(points), len(rows), len(todo), cfg.sweep.jobs)

    t0 = time.perf_counter()
    built = gpu.compile_many([sp for _, sp, _ in todo], arch, jobs=cfg.sweep.jobs)
    log.info("[sweep %s] compiled in %.1f s", kernel, time.perf_counter() - t0)
    runnable = []
    for (head, sp, params), (cubin, err) in zip(todo, built):
        if err:
            rows.append(dict(head, status="compile_error", reason=str(err)))
        else:
            runnable.append((head, (params, cubin)))
    rows += time_points(cfg, kernel, runnable, raw_config=raw_config,
                        label=lambda head: f"[sweep {kernel}] {head['params']}")
    io.write_csv(out, rows)
    return point_problems(rows, ("ok", "filtered"), "sweep points")


def epilogue(cfg: LabConfig, kernel: str, *, env_json: Path, out: Path) -> StepStatus | None:
    """Fused-epilogue comparison of one stage with cuBLASLt and cuBLAS + a separate kernel."""
    from . import epilogue as ep
    from . import gpu
    from .compile import compile_options, source_hash

    spec = cfg.kernel(kernel)
    base = base_seed(cfg)
    env = io.read_json(env_json)
    arch = env["gpu"]["arch"]
    variants = {act: ep.variant(spec, act) for act in cfg.epilogue.acts}
    cubins = {}
    for act, (cubin, err) in zip(variants, gpu.compile_many(list(variants.values()), arch, jobs=len(variants))):
        if err:
            raise err
        cubins[act] = cubin
    with gpu_lock(exclusive=True), _Guard(f"epilogue {kernel}"):
        rows = ep.run(cfg, spec, cubins=cubins,
                      seed_for=lambda shape, padded: point_seed(base, f"{kernel}/{padded}", shape, "epilogue"))
    digest = source_hash(spec)
    libs = {"cublaslt": f"cuBLASLt {env.get('cublas')}", "cublas+bias_act": f"cuBLAS {env.get('cublas')} + bias/act kernel"}
    for r in rows:
        own = r["implementation"] == spec.id
        r.update(source_sha256=digest if own else libs.get(r["implementation"]),
                 compile_options=" ".join(compile_options(variants[r["act"]])) if own else "", **machine(env))
    io.write_csv(out, rows)
    bad = [r for r in rows if not r["verified"]]
    if bad:
        r = bad[0]
        return StepStatus(status=FAILED, message=f"NOT VERIFIED: {r['implementation']} {r['act']} at "
                                                 f"{r['m']}x{r['n']}x{r['k']}: {first_line(r.get('reason', ''), 160)}")
    return None


PROFILE_COLUMNS = ["kernel", "m", "n", "k", "status", "metric", "value", "unit"]


def _not_profiled(out: Path, impl: str, shapes, why: str) -> None:
    """A profile table that says, for each shape, why ``impl`` has no metrics."""
    io.write_csv(out, [dict(kernel=impl, m=s.m, n=s.n, k=s.k, status=why) for s in shapes], columns=PROFILE_COLUMNS)


def profile(cfg: LabConfig, *, builds: dict[str, tuple[Path | None, Path | None]], outs: dict[str, Path],
            report: Path, raw_config: dict) -> StepStatus | None:
    """Nsight Compute on every GPU implementation (``builds``: impl -> binary, record; none for cuBLAS) at
    the profile shapes each supports, in one ncu run; one tidy table per implementation (``outs``).
    A stage whose build failed, or that supports no profile shape, gets a row saying so."""
    from .profile import ProfileItem, Profiler

    items, skipped = [], {}
    for impl, (binary, record) in builds.items():
        try:
            spec = load_spec(cfg, impl, record)
        except NotRun as exc:
            skipped[impl] = f"not run: {exc}"
            continue
        shapes = tuple(s for s in cfg.profile.shapes if spec is None or unsupported_reason(spec, s) is None)
        if not shapes:
            skipped[impl] = "unavailable: no profile shape is supported by this stage"
            continue
        items.append(ProfileItem(impl=impl, entry=None if spec is None else spec.entry, shapes=shapes,
                                 binary=str(binary or ""), record=str(record or "")))
    for impl, why in skipped.items():
        log.info("[profile %s] %s", impl, why)
        _not_profiled(outs[impl], impl, cfg.profile.shapes, why)
    if not items:
        return None
    profiler = Profiler(items=items, config=raw_config, report=report, log=log, gpu_lock=lock_path().resolve())
    log.info("[profile] %d implementations: %s", len(items), ", ".join(i.impl for i in items))
    try:
        df = profiler.start().wait(timeout_s=cfg.watchdog_s + 30 * len(items))
    except LabError as exc:
        if not str(exc).startswith("unavailable"):
            raise
        log.warning("[profile] %s", exc)
        for item in items:
            _not_profiled(outs[item.impl], item.impl, item.shapes, str(exc))
        return StepStatus(status=UNAVAILABLE, message="profile: " + str(exc).removeprefix("unavailable: "))
    finally:
        profiler.kill()
    df.insert(4, "status", "ok")
    for item in items:
        part = df[df.kernel == item.impl]
        log.info("[profile %s] %d metrics for %s", item.impl, len(part), ", ".join(map(str, item.shapes)))
        io.write_csv(outs[item.impl], part)
    log.info("[profile] report %s", report)
    return None


SANITIZE_COLUMNS = ["kernel", "tool", "status", "summary", "log", "m", "n", "k"]


def sanitize(cfg: LabConfig, *, builds: dict[str, tuple[Path | None, Path | None]], outs: dict[str, Path],
             log_dir: Path, raw_config: dict) -> StepStatus | None:
    """compute-sanitizer's four tools on every CUDA stage (``builds``: stage -> binary, record), each at a
    small shape it supports, the tools of all stages side by side (one process per core); one table per
    stage (``outs``). A stage whose build failed gets an empty table (its build's status says why)."""
    import os

    from .profile import target_args
    from .sanitize import run_all, sanitize_shape

    stages, shapes = {}, {}
    for impl, (binary, record) in builds.items():
        try:
            spec = load_spec(cfg, impl, record)
        except NotRun as exc:
            log.info("[sanitize %s] not run: %s", impl, exc)
            io.write_csv(outs[impl], [], columns=SANITIZE_COLUMNS)
            continue
        shapes[impl] = sanitize_shape(spec)
        stages[impl] = target_args(config=raw_config, impl=impl, binary=binary, record=record, shapes=[shapes[impl]])
    parallel = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    log.info("[sanitize] %d stages x 4 tools, %d processes at a time", len(stages), parallel)

    def progress(r):
        log.info("[sanitize %s] %s at %s: %s %s", r["kernel"], r["tool"], shapes[r["kernel"]], r["status"],
                 r.get("summary", ""))

    with gpu_lock(exclusive=False):
        # not the per-point watchdog: a tool process takes seconds to start under instrumentation
        results = run_all(stages, log_dir=log_dir, parallel=parallel, on_row=progress)
    bad = []
    for impl, rows in results.items():
        s = shapes[impl]
        for r in rows:
            r.update(m=s.m, n=s.n, k=s.k)
        io.write_csv(outs[impl], rows, columns=SANITIZE_COLUMNS)
        bad += [r for r in rows if r["status"] != "clean"]
    if bad and all(r["status"].startswith("unavailable") for r in bad):
        return StepStatus(status=UNAVAILABLE, message="compute-sanitizer " + bad[0]["status"])
    real = [r for r in bad if not r["status"].startswith("unavailable")]
    if real:
        r = real[0]
        more = f" (+{len(real) - 1} more)" if len(real) > 1 else ""
        return StepStatus(status=FAILED, message=f"{r['kernel']}: {r['tool']} at {shapes[r['kernel']]}: {r['status']} "
                                                 f"({r.get('summary') or 'see ' + str(r.get('log'))}){more}")
    return None


def failure_tests(cfg: LabConfig, *, env_json: Path, out: Path) -> StepStatus | None:
    """Run the GPU failure tests (they take the GPU lock themselves) and record one row per case."""
    from . import failures

    rows = failures.run(log)
    env = io.read_json(env_json)
    for r in rows:
        r.update(machine(env))
        log.info("[failure tests] %s: %s%s", r["case"], r["outcome"], f" ({r['message']})" if r["message"] else "")
    io.write_csv(out, rows)
    bad = [r for r in rows if r["outcome"] not in ("passed", "skipped")]
    if bad and all(r["outcome"] == "unavailable" for r in bad):
        return StepStatus(status=UNAVAILABLE, message=bad[0]["message"])
    if bad:
        r = bad[0]
        more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
        return StepStatus(status=FAILED, message=f"{r['outcome']}: {r['case']}: {first_line(r['message'], 160)}{more}")
    return None


def ceilings(cfg: LabConfig, *, out: Path) -> None:
    from . import gpu

    rec = gpu.measure_ceilings()
    log.info("FP32 FMA probe %.1f TFLOP/s, device-to-device copy %.0f GB/s", rec["fp32_tflops"], rec["dram_gbps"])
    io.write_json(out, rec)


def machine(env: dict) -> dict:
    """The environment columns every result row carries."""
    return dict(gpu=env.get("gpu", {}).get("name"), driver=env.get("driver_version"), git_commit=env.get("git_commit"))


def add_provenance(df: pd.DataFrame, builds: list[dict], env: dict) -> pd.DataFrame:
    """Every result row carries what produced it: source hash, compile flags, GPU, driver, commit."""
    src = {b["kernel"]: (b.get("source_sha256"), " ".join(map(str, b.get("options") or []))) for b in builds}
    lib = {"cublas": (f"cuBLAS {env.get('cublas')} ({env.get('cublas_math_mode')})", ""),
           "cublas_tf32": (f"cuBLAS {env.get('cublas')} (TF32_TENSOR_OP_MATH)", ""),
           "numpy": (f"numpy {env.get('packages', {}).get('numpy')}", "")}
    out = df.copy()
    if out.empty:
        return out
    out["source_sha256"] = [src.get(k, lib.get(k, (None, None)))[0] for k in out.kernel]
    out["compile_options"] = [src.get(k, lib.get(k, (None, None)))[1] for k in out.kernel]
    for col, value in machine(env).items():
        out[col] = value
    return out


def aggregate(cfg: LabConfig, *, bench_csvs, check_jsons, build_jsons, profile_csvs, sanitize_csvs, env_json: Path,
              bench_out: Path, check_out: Path, build_out: Path, env_out: Path, ncu_out: Path,
              sanitize_out: Path, dispatch_out: Path | None = None) -> None:
    import pandas as pd

    from .dispatch_steps import DISPATCH_COLUMNS, dispatch_rows
    from .report import collect_bench

    bench_df = collect_bench([pd.read_csv(p) for p in bench_csvs], order=list(cfg.implementations),
                             tf32=tuple(k.id for k in cfg.kernels if k.precision == "tf32"))
    checks = [r for p in check_jsons for r in io.read_json(p)["points"]]
    builds = [io.read_json(p) for p in build_jsons]
    env = io.read_json(env_json)
    bench_df = add_provenance(bench_df, builds, env)
    io.write_csv(bench_out, bench_df)
    io.write_csv(check_out, add_provenance(pd.DataFrame(checks), builds, env))
    if dispatch_out is not None:
        io.write_csv(dispatch_out, dispatch_rows(builds), columns=DISPATCH_COLUMNS)
    nested = ("dispatch_table", "candidates")  # in dispatch.csv, one row per shape
    io.write_csv(build_out, pd.DataFrame([{k: v for k, v in b.items() if k not in nested} for b in builds]))
    io.write_json(env_out, io.read_json(env_json))
    frames = [pd.read_csv(p) for p in profile_csvs]
    ncu = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["kernel", "m", "n", "k", "status", "metric", "value", "unit"])
    io.write_csv(ncu_out, add_provenance(ncu, builds, env))
    frames = [pd.read_csv(p) for p in sanitize_csvs]
    io.write_csv(sanitize_out, add_provenance(pd.concat(frames, ignore_index=True) if frames else
                 pd.DataFrame(columns=SANITIZE_COLUMNS), builds, env))


def plot(cfg: LabConfig, *, bench_csv: Path, ncu_csv: Path, ceilings_json: Path | None, outs,
         sweeps: list[Path] = (), heatmaps: list[Path] = (), check_csv: Path | None = None) -> StepStatus | None:
    """Every figure of the report; a figure that cannot be drawn becomes a picture saying why (and the
    step's status says which), so that one bad table never costs the others."""
    import pandas as pd

    from . import plots
    from .report import headline_shape, ladder_rows

    bench_df, ncu = pd.read_csv(bench_csv), pd.read_csv(ncu_csv)
    ceil = io.read_json(ceilings_json) if ceilings_json else {}
    order = list(cfg.implementations)
    ok = bench_df[bench_df.status == "ok"] if "status" in bench_df else bench_df
    shape = headline_shape(cfg, ok) or (cfg.sweep.shape.m, cfg.sweep.shape.n, cfg.sweep.shape.k)
    figures = {
        outs.size: lambda out: plots.tflops_vs_size(ladder_rows(cfg, bench_df), out, order=order),
        outs.ladder: lambda out: plots.ladder_bars(bench_df, out, order=order, shape=shape),
        outs.roofline: lambda out: plots.roofline(bench_df, ncu, ceil, out, order=order, shape=shape),
        outs.stalls: lambda out: plots.stall_bars(ncu, out, order=order, shape=shape),
        outs.memory: lambda out: plots.memory_occupancy(ncu, out, order=order, shape=shape),
    }
    if check_csv is not None and hasattr(outs, "accuracy"):
        from .config import BASELINE_PRECISION

        precision = BASELINE_PRECISION | {k.id: k.precision for k in cfg.kernels}
        figures[outs.accuracy] = lambda out: plots.accuracy_speed(bench_df, pd.read_csv(check_csv), out, order=order,
                                                                  shape=shape, precision=precision)
    for csv, png in zip(sweeps, heatmaps):  # the same order: the workflow lists both by swept stage
        spec = cfg.kernel(Path(csv).stem)
        figures[png] = lambda out, csv=csv, spec=spec: plots.sweep_heatmap(
            pd.read_csv(csv), out, kernel=spec.id, axes=spec.sweep_axes, title=f"{spec.id}: {spec.title}")
    broken = []
    for out, draw in figures.items():
        try:
            draw(out)
        except Exception as exc:  # noqa: BLE001 - drawn as a placeholder and reported
            import traceback

            log.debug("%s", traceback.format_exc())
            log.warning("figure %s: %s: %s", Path(out).name, type(exc).__name__, first_line(exc))
            plots.placeholder(out, f"{Path(out).stem}: no figure ({type(exc).__name__}: {first_line(exc, 120)})")
            broken.append(f"{Path(out).name}: {type(exc).__name__}: {first_line(exc, 120)}")
    if broken:
        return StepStatus(status=FAILED, message=f"{len(broken)} of {len(figures)} figures not drawn ({broken[0]})")
    return None


def report(cfg: LabConfig, *, bench_csv: Path, check_csv: Path, build_csv: Path, env_json: Path, figures: list[Path],
           sweeps: list[Path], epilogues: list[Path], ncu_csv: Path, ceilings_json: Path | None, sanitize_csv: Path,
           start_json: Path | None, out: Path, failures_csv: Path | None = None, statuses: list[Path] = (),
           steps_out: Path | None = None, dispatch_csv: Path | None = None) -> None:
    """The markdown report, and ``steps.csv``: what became of every step (status, message, log, seconds)."""
    from dataclasses import asdict

    import pandas as pd

    from . import outcome
    from .report import render

    start = io.read_json(start_json) if start_json and Path(start_json).exists() else {}
    started = start.get("started_unix")
    base = Path(out).parent
    records = outcome.read_all(statuses)
    ceil = io.read_json(ceilings_json) if ceilings_json else None
    text = render(cfg, command=start.get("command"), bench=pd.read_csv(bench_csv), checks=pd.read_csv(check_csv),
                  builds=pd.read_csv(build_csv), env=io.read_json(env_json),
                  figures={Path(f).stem: Path(f).relative_to(base) for f in figures},
                  sweeps={Path(p).stem: pd.read_csv(p) for p in sweeps},
                  epilogues={Path(p).stem: pd.read_csv(p) for p in epilogues},
                  ncu=pd.read_csv(ncu_csv), ceilings=ceil if ceil and "fp32_tflops" in ceil else None,
                  sanitize=pd.read_csv(sanitize_csv), failures=pd.read_csv(failures_csv) if failures_csv else None,
                  outcomes=records, wall_s=(time.time() - started) if started else None,
                  dispatch=pd.read_csv(dispatch_csv) if dispatch_csv else None)
    if steps_out is not None:
        io.write_csv(steps_out, pd.DataFrame([asdict(r) for r in records], columns=outcome.COLUMNS))
    io.write_text(out, text)
