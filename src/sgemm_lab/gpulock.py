"""GPU arbitration across the pipeline's processes: an flock on ``results/.gpu.lock``.

Snakemake may start as many jobs as it has cores; GPU jobs do their CPU-side work (process start,
imports, compiling) in parallel and queue here for the GPU. Steps that time or profile take the lock
exclusively, steps that only need correct results (checks, sanitizers, builds) share it, so however
the pipeline is started no timing ever overlaps other GPU work.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from .config import BASELINES, LabConfig

log = logging.getLogger("sgemm_lab")

# How each step uses the GPU. "exclusive": it times something, so nothing else may run on the GPU
# meanwhile. "shared": it only needs correct results (checks, sanitizers, device queries), so several
# such steps may run at once, but never next to a timing step. The steps in SELF_LOCKING take the
# lock themselves, after their part that needs no GPU (compiling, process start, imports).
GPU_LOCK = {"environment": "shared", "build": "shared", "check": "shared", "sanitize": "shared", "bench": "exclusive",
            "profile": "exclusive", "sweep": "exclusive", "shape_sweep": "exclusive", "epilogue": "exclusive",
            "ceilings": "exclusive"}
SELF_LOCKING = {"build", "sweep", "shape_sweep", "check", "sanitize", "bench", "profile", "epilogue"}


def lock_path() -> Path:
    """``results/.gpu.lock`` in the working directory, or ``$SGEMM_LAB_GPU_LOCK`` (a pipeline started by
    a test inside a running pipeline shares its lock)."""
    return Path(os.environ.get("SGEMM_LAB_GPU_LOCK") or "results/.gpu.lock")


class gpu_lock:
    """The lock, exclusive for steps that time, shared for steps that only check."""

    def __init__(self, exclusive: bool = True, path: Path | None = None):
        self.path = Path(path) if path is not None else lock_path()
        self.exclusive = exclusive
        self.fh = None

    @classmethod
    def for_mode(cls, mode: str | None) -> "gpu_lock | None":
        """The lock for a ``lock_mode`` result (None: the step does not use the GPU)."""
        return None if mode is None else cls(exclusive=mode == "exclusive")

    def __enter__(self):
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fh = open(self.path, "a")
        t0 = time.perf_counter()
        fcntl.flock(self.fh, fcntl.LOCK_EX if self.exclusive else fcntl.LOCK_SH)
        waited = time.perf_counter() - t0
        if waited > 1:
            log.info("waited %.1f s for the GPU (%s)", waited, "exclusive" if self.exclusive else "shared")
        return self

    def __exit__(self, *exc):
        import fcntl

        fcntl.flock(self.fh, fcntl.LOCK_UN)
        self.fh.close()
        return False


def lock_mode(step: str, cfg: LabConfig, impl: str | None) -> str | None:
    """'exclusive', 'shared' or None (no GPU: host stages, the NumPy baseline, plots, report)."""
    if impl == "numpy":
        return None
    if impl and impl not in BASELINES and step in ("build", "check", "bench"):
        spec = cfg.kernel(impl)
        if spec.backend == "host" and not spec.autotuned:
            return None
    return GPU_LOCK.get(step)
