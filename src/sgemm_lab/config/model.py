"""The traffic model of the reference notes, from a stage's parameters (no GPU).

Per element of C, a stage that keeps a BM x BN tile of C per block and steps through K in tiles loads
K/BN values of A and K/BM values of B... i.e. K*(1/BM + 1/BN) floats from global memory, and a thread
that computes an m x n micro-tile loads K*(1/m + 1/n) floats from shared memory. One-thread-per-result
stages load 2K floats from global memory. Predicted global (L2 -> SM) traffic is then
4*M*N*K*(1/BM + 1/BN) bytes, or 2*M*N*K*4 for the plain loops; arithmetic intensity is 2K flops over
the bytes loaded per result.
"""

from __future__ import annotations

from dataclasses import dataclass

from .geometry import micro_tile, tile
from .records import KernelSpec, Shape


@dataclass(frozen=True, kw_only=True)
class Traffic:
    global_loads_per_result: float   # floats, for this K
    smem_loads_per_result: float     # floats, for this K
    global_coeff: str                # the same per result, as a multiple of K (for the report)
    smem_coeff: str
    intensity: float                 # flops per byte of global loads
    predicted_bytes: float           # global (L2 -> SM) bytes for the whole problem


def _frac(x: float) -> str:
    if x == 0:
        return "0"
    inv = 1 / x
    if inv >= 1:
        return f"K/{inv:g}" if abs(inv - round(inv)) < 1e-9 else f"K/{inv:.1f}"
    return f"{x:g}·K"


def traffic(spec: KernelSpec, shape: Shape) -> Traffic | None:
    """The model's traffic for ``spec`` at ``shape``; None for a host stage and for a stage of several
    kernels (geometry phases), which no one tile describes."""
    if spec.backend == "host" or spec.geometry == "phases":
        return None
    k = shape.k
    if spec.geometry in ("elementwise", "grid2d"):
        g, s = 2.0, 0.0
    else:
        bm, bn, _ = tile(spec)
        tm, tn = micro_tile(spec)
        g, s = 1 / bm + 1 / bn, 1 / tm + 1 / tn
    return Traffic(global_loads_per_result=g * k, smem_loads_per_result=s * k, global_coeff=_frac(g),
                   smem_coeff=_frac(s), intensity=2 * k / (4 * g * k),
                   predicted_bytes=4.0 * shape.m * shape.n * k * g)
