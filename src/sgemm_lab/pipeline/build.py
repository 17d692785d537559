"""The build step: compile a stage for the machine at hand and record its resources (the
autotuned stage picks its configuration first; a dispatch stage is built by sgemm_lab.pipeline.dispatch_steps).
"""

from __future__ import annotations

import time
from pathlib import Path

from ..config.records import LabConfig
from ..errors import CompileError
from ..measure.gpulock import gpu_lock
from ..results import io
from ..results.common import log


def _epilogue_variants(cfg: LabConfig, spec) -> list:
    """The activation variants the epilogue step of a fused stage compiles, other than ``spec`` itself."""
    if spec.signature != "fused":
        return []
    from ..epilogue.comparison import variant

    out = []
    for act in cfg.epilogue.acts:
        v = variant(spec, act)
        if v.params != spec.params and all(v.params != w.params for w in out):
            out.append(v)
    return out


def _stage_specs(cfg: LabConfig, spec) -> list:
    """What a plain GPU stage's build compiles: the stage and its epilogue variants (named after it)."""
    from dataclasses import replace

    return [spec, *(replace(v, id=f"{spec.id}.epilogue{i}") for i, v in enumerate(_epilogue_variants(cfg, spec)))]


def precompile_specs(cfg: LabConfig, dev=None) -> list:
    """What the builds of ``cfg`` compile that is known before any GPU has measured anything: every plain
    GPU stage with its epilogue variants, and every candidate of a dispatch stage (autotuned stages are
    picked from their sweeps; host stages use the C compiler); with the device's limits ``dev``, also
    every tile-sweep point that passes them (``sweep.sweep_todo``). In the order the GPU's steps come to
    need them beside it (the parallel default): the sweep points first (the tile sweep goes first on the
    GPU), then the dispatch candidates (shape sweeps), then the stages and their epilogue variants."""
    from dataclasses import replace

    from ..dispatch.choice import candidate_specs
    from .sweep import sweep_todo

    points, candidates, stages = [], [], []
    for spec in cfg.kernels:
        if spec.backend == "host" or spec.autotuned:
            continue
        if spec.dispatched:
            candidates += candidate_specs(cfg, spec)
        else:
            stages += _stage_specs(cfg, spec)
    if dev is not None:
        for spec in cfg.swept:
            points += [replace(sp, id=f"{spec.id}.sweep{i}") for i, (_, sp, _) in enumerate(sweep_todo(cfg, spec, dev)[1])]
    return points + candidates + stages


def precompile(cfg: LabConfig, *, env_json: Path, out: Path, jobs: int | None = None) -> None:
    """Compile ``precompile_specs`` side by side (nvcc only, no GPU, at low priority) and keep the
    binaries beside the run's results (``gpu.build.prebuilt_dir``), so that the builds and tile sweeps,
    which run one at a time under ``--cores 1``, read them instead of starting compile workers. A stage that
    does not compile is left to its own build, which fails with its own log; here it is only counted."""
    import os

    from ..gpu.build import compile_many, prebuilt_dir

    from ..gpu.device import DeviceInfo

    env = io.read_json(env_json)
    try:
        dev = DeviceInfo(**env["gpu"])
    except TypeError:  # a record without the device's limits: the sweeps compile their own points
        dev = None
    specs = precompile_specs(cfg, dev)
    arch = env["gpu"]["arch"]
    jobs = jobs or os.cpu_count() or 1
    t0 = time.perf_counter()
    results = compile_many(specs, arch, jobs=jobs, prebuilt=prebuilt_dir(env_json.parent, env), keep=True)
    dt = time.perf_counter() - t0
    failed = [sp.id for sp, (_, err) in zip(specs, results) if err is not None]
    log.info("precompiled %d builds in %.1f s (%d jobs)%s", len(specs) - len(failed), dt, jobs,
             f"; left to their own builds: {', '.join(failed)}" if failed else "")
    io.write_json(out, dict(compiled=[sp.id for sp in specs if sp.id not in failed], failed=failed,
                            seconds=round(dt, 3), arch=arch))


def compile_ahead(cfg: LabConfig, kernels: list[str], *, env_json: Path, jobs: int | None = None) -> None:
    """Compile the plain GPU stages among ``kernels`` (with their epilogue variants) side by side, nvcc
    only, into the run's folder of binaries (``gpu.build.prebuilt_dir``), before a build job's first
    stage takes the GPU: the job keeps the GPU lock from its first module load to its end (a CUDA context
    lives as long as its process, ``measure.gpulock``), so its compiles, and the SASS listings of the
    build records (``gpu.sass.records_ahead``), must not run inside it. What is
    there already (from the precompile step) is not compiled again; a stage that does not compile is left
    to its own build, which records the error."""
    import os

    from ..gpu.build import compile_many, prebuilt_dir

    specs = []
    for impl in kernels:
        spec = cfg.kernel(impl)
        if spec.backend == "host" or spec.autotuned or spec.dispatched:
            continue
        specs += _stage_specs(cfg, spec)
    if not specs:
        return
    from ..gpu.sass import records_ahead

    env = io.read_json(env_json)
    t0 = time.perf_counter()
    jobs = jobs or os.cpu_count() or 1
    results = compile_many(specs, env["gpu"]["arch"], jobs=jobs, prebuilt=prebuilt_dir(env_json.parent, env), keep=True)
    t1 = time.perf_counter()
    # the instruction counts of the build records too (cuobjdump, about half a second a stage), side by side
    records_ahead([(binary, sp.entry) for sp, (binary, err) in zip(specs, results) if err is None and sp.id in kernels],
                  jobs)
    log.info("compiled ahead of the GPU: %d builds of %d stages in %.1f s, their SASS listed in %.1f s", len(specs),
             len(kernels), t1 - t0, time.perf_counter() - t1)


def build(cfg: LabConfig, kernel: str, *, env_json: Path, binary_out: Path, record_out: Path,
          sweeps: list[Path] = (), shape_sweep: Path | None = None) -> None:
    """Compile one stage for the machine at hand; record its resources (and, if autotuned, its pick;
    if a dispatch stage, its table: see sgemm_lab.pipeline.dispatch_steps)."""
    from dataclasses import asdict

    from ..dispatch.autotune import pick, resolve
    from ..gpu.compile import source_hash

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
        from ..gpu import host

        t0 = time.perf_counter()
        binary, cmd, _ = host.compile_shared(spec, cfg.cpu.cflags)
        rec = dict(kernel=kernel, entry=spec.entry, arch="host", options=cmd[1:-3], registers=None,
                   shared_static_bytes=None, local_bytes=None, max_threads_per_block=None,
                   compile_s=time.perf_counter() - t0)
    else:
        from ..gpu.build import compile_many, prebuilt_dir, prebuilt_file
        from ..gpu.device import device_info
        from ..dispatch.launch import launcher_for

        env = io.read_json(env_json)
        arch = env["gpu"]["arch"]
        prebuilt = prebuilt_dir(env_json.parent, env)
        precompiled = prebuilt_file(prebuilt, spec, arch) is not None
        t0 = time.perf_counter()
        # A fused stage's activation variants compile alongside (in parallel, into the compile cache),
        # so that its epilogue step, which needs them, does not wait for nvcc again; all of them are
        # read from the precompile step's binaries when it made them.
        extra_specs = _epilogue_variants(cfg, spec)
        (binary, err), *_ = compile_many([spec, *extra_specs], arch, jobs=1 + len(extra_specs), prebuilt=prebuilt)
        if err:  # nvcc only, no GPU, at low priority
            raise err
        dt = time.perf_counter() - t0
        from ..gpu.sass import record as sass_record

        counts = sass_record(binary, spec.entry)  # instruction counts (none without cuobjdump): before the GPU
        with gpu_lock(exclusive=False):  # loading the module does
            launcher = launcher_for(spec, binary)
            launcher.check_launchable(device_info())
            rec = dict(asdict(launcher.resources(arch, dt)), precompiled=precompiled)
            if hasattr(launcher, "phase_resources"):  # a stage of several kernels: each one's too
                rec["phases"] = launcher.phase_resources()
        rec.update(counts)
        for part in [rec, *rec.get("phases", ())]:  # a stage of several kernels: every one of them
            if part["local_bytes"] > spec.max_local_bytes:
                raise CompileError(f"kernel {kernel}: {part['local_bytes']} B of local memory per thread in "
                                   f"{part.get('entry', spec.entry)} (spills or stack); config allows {spec.max_local_bytes}")
        log.info("%s: %d registers, %d B static shared memory, %d B local memory per thread, %s in %.2f s%s",
                 kernel, rec["registers"], rec["shared_static_bytes"], rec["local_bytes"],
                 "read from the precompile step" if precompiled else "compiled", dt,
                 f" (with {len(extra_specs)} epilogue variants in parallel)" if extra_specs else "")
    rec.update(status="ok", source=f"kernels/{spec.source}", source_sha256=source_hash(spec),
               params=dict(spec.params), backend=spec.backend)
    rec.update(extra)
    rec.setdefault("tuned_from", None)
    io.write_bytes(binary_out, binary)
    io.write_json(record_out, rec)

