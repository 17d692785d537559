"""The two steps of a per-shape dispatch stage (``sgemm_lab.dispatch.choice``): the shape sweep, which
verifies and times every candidate on every shape the stage is timed on, and the build, which turns
those rows into the dispatch table and compiles the candidates that the table uses into one bundle."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict
from pathlib import Path

from ..config.records import LabConfig
from ..errors import CompileError, LabError
from ..measure.gpulock import gpu_lock
from ..results import io
from ..results.outcome import StepStatus
from ..dispatch import choice

log = logging.getLogger("sgemm_lab")

SHAPE_SWEEP_COLUMNS = ["kernel", "candidate", "params", "m", "n", "k", "status", "reason", "verified", "tflops",
                       "median_ms", "iqr_ms", "reps", "registers", "local_bytes", "within_local_budget"]


def shape_sweep(cfg: LabConfig, kernel: str, *, env_json: Path, out: Path) -> StepStatus | None:
    """Every candidate of dispatch stage ``kernel`` on every shape it is timed on (bench and suite):
    compiled in parallel without the GPU, then verified and timed with the GPU to itself, each point in
    a supervised child process, with the tile sweeps' timing settings."""
    from ..config.geometry import unsupported_reason, violations
    from ..gpu.build import compile_many, prebuilt_dir
    from ..gpu.compile import compile_options, source_hash
    from ..gpu.device import DeviceInfo
    from ..dispatch.resolve import load_spec
    from ..results.common import machine, point_problems
    from .sweep import time_points

    spec = load_spec(cfg, kernel, None)
    env = io.read_json(env_json)
    dev = DeviceInfo(**env["gpu"])
    shapes = cfg.bench_shapes(kernel)
    cands = choice.candidate_params(cfg.kernel(spec.dispatch_from), spec.candidates)
    provenance = dict(source_sha256=source_hash(spec), **machine(env))
    rows, todo = [], []
    for idx, params in enumerate(cands):
        sp = choice.candidate_spec(spec, params)
        head = dict(kernel=kernel, candidate=idx, params=json.dumps(params, sort_keys=True), **provenance)
        limit = dev.max_shared_per_block_optin if sp.dynamic_shared else dev.max_shared_per_block
        problems = violations(sp, max_shared=limit)
        if problems:
            rows += [dict(head, m=s.m, n=s.n, k=s.k, status="filtered", reason="; ".join(problems)) for s in shapes]
        else:
            todo.append((head, sp, params))
    log.info("[shape sweep %s] %d candidates x %d shapes (%d candidates filtered before compiling)", kernel,
             len(cands), len(shapes), len(cands) - len(todo))
    t0 = time.perf_counter()
    built = compile_many([sp for _, sp, _ in todo], dev.arch, jobs=cfg.sweep.jobs, prebuilt=prebuilt_dir(env_json.parent, env))
    log.info("[shape sweep %s] compiled in %.1f s", kernel, time.perf_counter() - t0)
    runnable = []
    for (head, sp, params), (cubin, err) in zip(todo, built):
        for s in shapes:
            at = dict(head, m=s.m, n=s.n, k=s.k, compile_options=" ".join(compile_options(sp)))
            reason = str(err) if err else unsupported_reason(sp, s)
            if reason:
                rows.append(dict(at, status="compile_error" if err else "filtered", reason=reason))
            else:
                runnable.append((at, (params, cubin, (s.m, s.n, s.k))))
    rows += time_points(cfg, kernel, runnable, label=lambda h: f"[shape sweep {kernel}] candidate {h['candidate']} at {h['m']}x{h['n']}x{h['k']}")
    rows.sort(key=lambda r: (r["m"], r["n"], r["k"], r["candidate"]))
    io.write_csv(out, rows, columns=SHAPE_SWEEP_COLUMNS + sorted({c for r in rows for c in r} - set(SHAPE_SWEEP_COLUMNS)))
    return point_problems(rows, ("ok", "filtered"), "shape-sweep points")


def build_dispatch(cfg: LabConfig, kernel: str, *, env_json: Path, shape_sweep: Path | None, binary_out: Path,
                   record_out: Path) -> None:
    """The dispatch table from the shape sweep (fastest verified candidate per shape), and the bundle
    of the candidates it uses. The record keeps the table, so the report can print it as data."""
    import pandas as pd

    from ..gpu.build import compile_many, prebuilt_dir
    from ..gpu.compile import source_hash
    from ..gpu.device import device_info
    from ..dispatch.resolve import load_spec
    from ..dispatch.launch import DispatchLauncher

    spec = load_spec(cfg, kernel, None)
    if shape_sweep is None and spec.rule is None:
        raise LabError(f"kernel {kernel}: a dispatch stage without a rule is built from its shape sweep, and "
                       "none was given")
    # without a shape sweep (the target `time`), a stage with a rule has no table: the rule runs every shape
    table = choice.pick_table(pd.read_csv(shape_sweep)) if shape_sweep is not None else []
    if shape_sweep is not None and not table:
        raise LabError(f"kernel {kernel}: no candidate verified on any shape of the shape sweep ({shape_sweep})")
    if spec.rule is not None:  # the rule may pick any candidate on a shape not measured: compile them all
        if shape_sweep is not None:
            table = choice.score_rule(spec, table, pd.read_csv(shape_sweep))
        params = dict(enumerate({**spec.params, **c} for c in spec.candidates))
        used = sorted(params)
    else:
        used = choice.used_candidates(table)
        params = {e["candidate"]: e["params"] for e in table}
    env = io.read_json(env_json)
    arch = env["gpu"]["arch"]
    t0 = time.perf_counter()
    built = compile_many([choice.candidate_spec(spec, params[i]) for i in used], arch, jobs=len(used),
                         prebuilt=prebuilt_dir(env_json.parent, env))
    dt = time.perf_counter() - t0
    errors = [err for _, err in built if err]
    if errors:
        raise errors[0]
    binary = choice.pack({i: cubin for i, (cubin, _) in zip(used, built)}, table)
    with gpu_lock(exclusive=False):  # loading the modules does
        launcher = DispatchLauncher(spec, binary)
        launcher.check_launchable(device_info())
        res = {i: asdict(launcher.launchers[i].resources(arch, dt)) for i in used}
    worst = max(res.values(), key=lambda r: (r["local_bytes"], r["registers"]))
    if worst["local_bytes"] > spec.max_local_bytes:
        raise CompileError(f"kernel {kernel}: {worst['local_bytes']} B of local memory per thread in a candidate "
                           f"(spills or stack); config allows {spec.max_local_bytes}")
    for e in table:
        log.info("%s: %dx%dx%d -> fastest candidate %d %s (%.2f TFLOP/s; next best %s)%s", kernel, e["m"], e["n"],
                 e["k"], e["candidate"], e["params"], e["tflops"],
                 f"{e['margin']:.3f}x its time" if e["margin"] else "none",
                 "" if spec.rule is None else f"; the rule runs candidate {e['rule_candidate']}" + (
                     f" at {e['rule_gap']:.3f}x the best time" if e["rule_gap"] else " (not verified there)"))
    rec = dict(worst, kernel=kernel, compile_s=dt, status="ok", source=f"kernels/{spec.source}",
               source_sha256=source_hash(spec), params=dict(spec.params), backend=spec.backend, tuned_from=None,
               dispatch_from=spec.dispatch_from, dispatch_table=table,
               dispatch_rule=None if spec.rule is None else dict(cost=spec.rule.cost, step=list(spec.rule.step)),
               candidates={str(i): dict(params=params[i], registers=res[i]["registers"],
                                        local_bytes=res[i]["local_bytes"]) for i in used})
    io.write_bytes(binary_out, binary)
    io.write_json(record_out, rec)
