"""Summary statistics of repeated timings (no GPU)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, kw_only=True)
class TimingStats:
    reps: int
    median_ms: float
    min_ms: float
    q1_ms: float
    q3_ms: float
    max_ms: float

    @property
    def iqr_ms(self) -> float:
        return self.q3_ms - self.q1_ms


def summarize(times_ms) -> TimingStats:
    t = np.asarray(times_ms, dtype=np.float64)
    if t.size == 0:
        raise ValueError("no timings to summarize")
    if not np.all(np.isfinite(t)) or np.any(t < 0):
        raise ValueError("timings must be finite and non-negative")
    q1, med, q3 = np.percentile(t, [25, 50, 75])
    return TimingStats(reps=int(t.size), median_ms=float(med), min_ms=float(t.min()),
                       q1_ms=float(q1), q3_ms=float(q3), max_ms=float(t.max()))


def tflops(flops: int, ms: float) -> float:
    """Throughput in TFLOP/s of ``flops`` floating-point operations done in ``ms`` milliseconds."""
    if ms <= 0:
        raise ValueError("time must be positive")
    return flops / (ms * 1e-3) / 1e12


def reps_for(estimate_ms: float, *, target_ms: float, min_reps: int, max_reps: int) -> int:
    """Number of timed repetitions so that they add up to about ``target_ms`` of GPU time."""
    if estimate_ms <= 0:
        return max_reps
    return int(min(max_reps, max(min_reps, round(target_ms / estimate_ms))))
