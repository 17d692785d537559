"""Launch geometry and shape preconditions, derived from a kernel's parameters in one place.

A kernel's config entry names a geometry rule and gives its compile-time parameters; the rule
derives the block size, the grid for a shape, and the tile that the shape must be a multiple of.
Launchers never compute a grid themselves.

Rules
-----
elementwise
    One thread per element of C on a 1-D grid: ``BLOCK`` threads a block,
    ``ceil(M*N / BLOCK)`` blocks. Any shape.
block_tile
    One block per ``BM x BN`` tile of C on a 2-D grid (x over N, y over M). Each thread computes a
    ``TM x TN`` micro-tile (default 1 x 1), so a block has ``THREADS = BM*BN / (TM*TN)`` threads
    unless ``THREADS`` is given. ``BK`` is the depth of one K-step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from .config import KernelSpec, Shape
from .errors import ConfigError, ShapeError

MAX_THREADS_PER_BLOCK = 1024
MAX_GRID_X = 2**31 - 1
MAX_GRID_YZ = 65535


@dataclass(frozen=True, kw_only=True)
class Launch:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int = 0  # dynamic shared memory

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def blocks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _need(spec: KernelSpec, *names: str) -> None:
    missing = [n for n in names if n not in spec.params]
    if missing:
        raise ConfigError(
            f"kernel {spec.id}: geometry '{spec.geometry}' needs parameter(s) {', '.join(missing)}"
        )


def tile(spec: KernelSpec) -> tuple[int, int, int]:
    """(BM, BN, BK): the multiple each of M, N, K must be for a tile_multiple kernel."""
    p = spec.params
    if spec.geometry == "elementwise":
        return (1, 1, 1)
    return (p["BM"], p["BN"], p["BK"])


def threads_per_block(spec: KernelSpec) -> int:
    p = spec.params
    if spec.geometry == "elementwise":
        return p["BLOCK"]
    return p.get("THREADS", (p["BM"] * p["BN"]) // (p.get("TM", 1) * p.get("TN", 1)))


def check_params(spec: KernelSpec) -> None:
    """Reject parameter sets that no device could launch; raise ConfigError naming the kernel."""
    p: Mapping[str, int] = spec.params
    bad = sorted(name for name, v in p.items() if v <= 0)
    if bad:
        raise ConfigError(f"kernel {spec.id}: parameter(s) {', '.join(bad)} must be positive")
    if spec.geometry == "elementwise":
        _need(spec, "BLOCK")
        if spec.shapes != "any":
            raise ConfigError(f"kernel {spec.id}: geometry 'elementwise' handles any shape; set shapes: any")
    elif spec.geometry == "block_tile":
        _need(spec, "BM", "BN", "BK")
        tm, tn = p.get("TM", 1), p.get("TN", 1)
        if p["BM"] % tm or p["BN"] % tn:
            raise ConfigError(
                f"kernel {spec.id}: BM={p['BM']} must be a multiple of TM={tm} and BN={p['BN']} of TN={tn}"
            )
    else:  # the schema already restricts this; kept for callers that bypass it
        raise ConfigError(f"kernel {spec.id}: unknown geometry '{spec.geometry}'")
    t = threads_per_block(spec)
    if t > MAX_THREADS_PER_BLOCK or t < 1:
        raise ConfigError(
            f"kernel {spec.id}: {t} threads per block (limit {MAX_THREADS_PER_BLOCK}) from {dict(p)}"
        )


def unsupported_reason(spec: KernelSpec, shape: Shape) -> str | None:
    """Why ``spec`` cannot run ``shape``, or None when it can."""
    if spec.shapes == "tile_multiple":
        bm, bn, bk = tile(spec)
        off = [f"{d}={v}" for d, v, t in (("M", shape.m, bm), ("N", shape.n, bn), ("K", shape.k, bk)) if v % t]
        if off:
            return f"needs M, N, K multiples of {bm}, {bn}, {bk} ({', '.join(off)} not)"
    grid = _grid(spec, shape)
    if grid[0] > MAX_GRID_X or grid[1] > MAX_GRID_YZ:
        return f"grid {grid} exceeds the CUDA grid limits"
    return None


def _grid(spec: KernelSpec, shape: Shape) -> tuple[int, int, int]:
    if spec.geometry == "elementwise":
        return (_cdiv(shape.m * shape.n, spec.params["BLOCK"]), 1, 1)
    bm, bn, _ = tile(spec)
    return (_cdiv(shape.n, bn), _cdiv(shape.m, bm), 1)


def plan(spec: KernelSpec, shape: Shape) -> Launch:
    """Grid and block for ``spec`` on ``shape``; ShapeError (one line) if the shape is unsupported."""
    reason = unsupported_reason(spec, shape)
    if reason:
        raise ShapeError(f"kernel {spec.id} cannot run {shape}: {reason}")
    return Launch(grid=_grid(spec, shape), block=(threads_per_block(spec), 1, 1))
