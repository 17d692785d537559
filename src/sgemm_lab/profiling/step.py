"""The profile step: Nsight Compute on every GPU implementation in one ncu run.
"""

from __future__ import annotations

from pathlib import Path

from ..config.geometry import unsupported_reason
from ..config.phases import is_phased, launched
from ..config.records import LabConfig
from ..errors import LabError
from ..measure.lockfiles import lock_path
from ..results import io
from ..dispatch.resolve import load_spec
from ..results.common import log
from ..results.outcome import UNAVAILABLE, NotRun, StepStatus


PROFILE_COLUMNS = ["kernel", "m", "n", "k", "status", "metric", "value", "unit"]


def _not_profiled(out: Path, impl: str, shapes, why: str) -> None:
    """A profile table that says, for each shape, why ``impl`` has no metrics."""
    io.write_csv(out, [dict(kernel=impl, m=s.m, n=s.n, k=s.k, status=why) for s in shapes], columns=PROFILE_COLUMNS)


def profile(cfg: LabConfig, *, builds: dict[str, tuple[Path | None, Path | None]], outs: dict[str, Path],
            report: Path) -> StepStatus | None:
    """Nsight Compute on every GPU implementation (``builds``: impl -> binary, record; none for cuBLAS) at
    the profile shapes each supports, in one ncu run; one tidy table per implementation (``outs``).
    A stage whose build failed, or that supports no profile shape, gets a row saying so."""
    from .ncu import ProfileItem, Profiler

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
        phases = tuple(launched(spec, s) for s in shapes) if spec is not None and is_phased(spec) else ()
        items.append(ProfileItem(impl=impl, entry=None if spec is None else spec.entry, shapes=shapes,
                                 binary=str(binary or ""), record=str(record or ""), kernels=phases))
    for impl, why in skipped.items():
        log.info("[profile %s] %s", impl, why)
        _not_profiled(outs[impl], impl, cfg.profile.shapes, why)
    if not items:
        return None
    profiler = Profiler(items=items, cfg=cfg, report=report, log=log, gpu_lock=lock_path().resolve())
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
        log.info("[profile %s] %d metrics for %s%s", item.impl, len(part), ", ".join(map(str, item.shapes)),
                 f" ({' or '.join(map(str, sorted({len(k) for k in item.kernels})))} kernels a call)" if item.kernels else "")
        io.write_csv(outs[item.impl], part)
    log.info("[profile] report %s", report)
    return None

