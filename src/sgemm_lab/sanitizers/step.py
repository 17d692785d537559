"""The sanitize step: compute-sanitizer's tools on every CUDA stage in one job.
"""

from __future__ import annotations

from pathlib import Path

from ..config.records import LabConfig
from ..measure.gpulock import gpu_lock
from ..results import io
from ..dispatch.resolve import load_spec
from ..results.common import log
from ..results.outcome import FAILED, UNAVAILABLE, NotRun, StepStatus


SANITIZE_COLUMNS = ["kernel", "tool", "status", "summary", "log", "m", "n", "k"]


def sanitize(cfg: LabConfig, *, builds: dict[str, tuple[Path | None, Path | None]], outs: dict[str, Path],
             log_dir: Path) -> StepStatus | None:
    """compute-sanitizer's four tools on every CUDA stage (``builds``: stage -> binary, record), each at a
    small shape it supports, the tools of all stages side by side (one process per core); one table per
    stage (``outs``). A stage whose build failed gets an empty table (its build's status says why)."""
    import os

    from ..config import handoff
    from ..profiling.ncu import target_args
    from .sanitize import run_all, sanitize_shape

    config = handoff.write(cfg, log_dir / "config.pickle")  # for the target processes
    stages, shapes = {}, {}
    for impl, (binary, record) in builds.items():
        try:
            spec = load_spec(cfg, impl, record)
        except NotRun as exc:
            log.info("[sanitize %s] not run: %s", impl, exc)
            io.write_csv(outs[impl], [], columns=SANITIZE_COLUMNS)
            continue
        shapes[impl] = sanitize_shape(spec, cfg.check.shapes)
        stages[impl] = target_args(config=config, impl=impl, binary=binary, record=record, shapes=[shapes[impl]])
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

