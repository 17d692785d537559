"""Timing: CUDA events around launches, warm-up by wall time until the SM clock is up, an L2 flush
between repetitions, the median and spread of many repetitions."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

from ..results.stats import TimingStats, reps_for, summarize
from .device import driver, sm_clock_mhz

# Reads a buffer of zeros through L2 (the loads are kept by a store that zeros never take).
_EVICT_SRC = r"""
extern "C" __global__ void lab_l2_evict(const float4* __restrict__ p, long long n4, float* sink) {
    float s = 0.0f;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
        const float4 v = __ldcg(p + i);
        s += v.x + v.y + v.z + v.w;
    }
    if (s != 0.0f)
        *sink = s;
}
"""


class L2Flusher:
    """Evicts L2 before a timed launch by passing a buffer twice its size through it.

    ``read`` (the lab's policy) reads the buffer, so L2 is left holding clean lines of it: the timed
    launch then starts with its operands out of L2 and nothing for L2 to write back. ``write`` (the form
    used before, kept for comparison) overwrites the buffer with a memset, which leaves L2 full of dirty
    lines; DRAM then writes them back while the timed launch runs, up to the L2's size of extra traffic
    charged to it (measured: about 10 us on an H100, kernels/NOTES.md, "The L2 flush's write-back")."""

    def __init__(self, l2_bytes: int, mode: str = "read"):
        if mode not in ("read", "write"):
            raise ValueError(f"L2Flusher mode {mode!r}: read or write")
        cuda = driver()
        self.mode = mode
        self.words = max(2 * l2_bytes, 1 << 20) // 4 // 4 * 4  # whole float4s
        self.buf = cuda.mem_alloc(4 * self.words)
        cuda.memset_d32(self.buf, 0, self.words)
        if mode == "read":
            from pycuda.compiler import SourceModule

            self._sink = cuda.mem_alloc(4)
            self._evict = SourceModule(_EVICT_SRC, options=["-O3"], no_extern_c=True).get_function("lab_l2_evict")
            self._evict.prepare("PqP")

    def __call__(self, stream) -> None:
        if self.mode == "write":
            driver().memset_d32_async(self.buf, 0, self.words, stream)
        else:
            self._evict.prepared_async_call((1024, 1), (256, 1, 1), stream, self.buf, self.words // 4, self._sink)


@dataclass(frozen=True, kw_only=True)
class Timing:
    stats: TimingStats
    warmup_s: float
    warmup_launches: int
    sm_clock_before_mhz: int | None
    sm_clock_after_mhz: int | None

    def as_row(self) -> dict:
        row = {k: v for k, v in asdict(self.stats).items()}
        row["iqr_ms"] = self.stats.iqr_ms
        row.update(warmup_s=self.warmup_s, warmup_launches=self.warmup_launches,
                   sm_clock_before_mhz=self.sm_clock_before_mhz, sm_clock_after_mhz=self.sm_clock_after_mhz)
        return row


# The SM clock at the end of the last timed run of this process, per GPU (PCI bus id).
_hot_clock: dict[str, int] = {}
HOT_CLOCK_FRACTION = 0.97  # "back at speed": within 3% of that clock (clock steps are 15 MHz)


def warm_enough(elapsed_ms: float, *, warmup_ms: float, rewarm_ms: float | None, hot_clock: int | None,
                clock: Callable[[], int | None]) -> bool:
    """Whether a warm-up that has run for ``elapsed_ms`` may end: always after ``warmup_ms``; after
    ``rewarm_ms`` already when the SM clock (``clock()``, read only then) is back within 3% of
    ``hot_clock``, the clock at the end of the previous timed run in this process (the GPU did not
    idle down in between). Without a previous run the full warm-up applies."""
    if elapsed_ms >= warmup_ms:
        return True
    if rewarm_ms is None or hot_clock is None or elapsed_ms < rewarm_ms:
        return False
    now = clock()
    return now is not None and now >= HOT_CLOCK_FRACTION * hot_clock


def time_launches(run: Callable[[], None], stream, *, warmup_ms: float, target_ms: float,
                  min_reps: int, max_reps: int, flush: Callable | None, pci_bus_id: str,
                  rewarm_ms: float | None = None) -> Timing:
    """Median-of-many CUDA-event timing of ``run`` (launches on ``stream``).

    Warm-up is by wall time, not by count, so that the SM clock has ramped up from idle: ``warmup_ms``
    for the first point of a process, and for later ones until the clock is back where the previous
    point left it, at least ``rewarm_ms`` (``warm_enough``). Then a few timed launches estimate the
    cost and set the number of repetitions. ``flush`` (if given) runs before every repetition, outside
    the events. The clock before and after the timed launches is part of the result.
    """
    cuda = driver()

    def once():
        if flush is not None:
            flush(stream)
        run()

    # batches of 1, 2, 4, ... launches: a slow kernel is not launched more than needed, a fast one
    # keeps the GPU busy (not waiting on the host) so that the clock ramps up
    t0 = time.perf_counter()
    launches, batch = 0, 1
    while True:
        for _ in range(batch):
            once()
        launches += batch
        stream.synchronize()
        if warm_enough((time.perf_counter() - t0) * 1e3, warmup_ms=warmup_ms, rewarm_ms=rewarm_ms,
                       hot_clock=_hot_clock.get(pci_bus_id), clock=lambda: sm_clock_mhz(pci_bus_id)):
            break
        batch = min(batch * 2, 256)
    warmup_s = time.perf_counter() - t0

    def timed(n: int) -> list[float]:
        starts = [cuda.Event() for _ in range(n)]
        ends = [cuda.Event() for _ in range(n)]
        for s, e in zip(starts, ends):
            if flush is not None:
                flush(stream)
            s.record(stream)
            run()
            e.record(stream)
        ends[-1].synchronize()
        return [e.time_since(s) for s, e in zip(starts, ends)]

    estimate = float(np.median(timed(3))) if warmup_s / launches < 50.0 else warmup_s * 1e3 / launches
    reps = reps_for(estimate, target_ms=target_ms, min_reps=min_reps, max_reps=max_reps)
    clock_before = sm_clock_mhz(pci_bus_id)
    times = timed(reps)
    clock_after = sm_clock_mhz(pci_bus_id)
    if clock_after is not None:
        _hot_clock[pci_bus_id] = clock_after
    return Timing(stats=summarize(times), warmup_s=warmup_s, warmup_launches=launches,
                  sm_clock_before_mhz=clock_before, sm_clock_after_mhz=clock_after)
