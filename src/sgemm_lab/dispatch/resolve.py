"""The concrete spec of an implementation as a step runs it: a library baseline has none, an autotuned stage
is its best tile configuration (from its build record), a dispatch stage is its base stage with the
candidates its rule or table picks from."""

from __future__ import annotations

from pathlib import Path

from ..config.records import BASELINES, KernelSpec, LabConfig
from ..results import io
from ..results.outcome import NotRun


def load_spec(cfg: LabConfig, impl: str, record: Path | None) -> KernelSpec | None:
    """The concrete spec of ``impl`` (None for a library baseline), autotuned stages resolved from their
    build record, dispatch stages as their base. Raises NotRun when that record says the build failed."""
    from . import choice
    from .autotune import resolve

    if impl in BASELINES:
        return None
    spec = cfg.kernel(impl)
    rec = io.read_json(record) if record is not None else None
    if rec is not None and rec.get("status", "ok") != "ok":
        raise NotRun(f"build failed: {rec.get('message', '')}".rstrip(": "))
    if spec.dispatched:
        return choice.resolve(cfg, spec)
    return resolve(cfg, spec, rec) if spec.autotuned else spec
