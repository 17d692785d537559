"""Launch geometry and shape preconditions, derived from a kernel's parameters in one place.

A kernel's config entry names a geometry rule and gives its compile-time parameters; the rule
derives the block size, the grid for a shape, and the tile that the shape must be a multiple of.
The entry's ``constraints`` (integer expressions mirroring the kernel's static_asserts) and
``shared_bytes`` are checked here too, so that an impossible configuration is rejected before
anything is compiled. Launchers never compute a grid themselves.

Rules
-----
elementwise
    One thread per element of C on a 1-D grid: ``BLOCK`` threads a block,
    ``ceil(M*N / BLOCK)`` blocks.
grid2d
    One thread per element of C, ``BX x BY`` elements a block (launched as ``BX*BY`` threads in
    1-D; the kernel splits ``threadIdx.x``), grid ``(ceil(N/BX), ceil(M/BY))``.
block_tile
    One block per ``BM x BN`` tile of C on a 2-D grid (x over N, y over M). Each thread computes a
    ``TM x TN`` micro-tile (default 1 x 1), so a block has ``THREADS = BM*BN / (TM*TN)`` threads
    unless ``THREADS`` is given. ``BK`` is the depth of one K-step. A kernel with ``SPLIT_SLOTS``
    (split-K: its workspace holds that many blocks) gets a third grid dimension, the number of
    K-slices, from :func:`splits`. A kernel launched in clusters of ``CLUSTER_N`` blocks along N (its
    ``__cluster_dims__``) gets a grid x rounded up to a whole number of clusters; the extra blocks' tiles
    lie past N.
host
    A C function on the CPU: no launch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from . import expr
from .errors import ConfigError, ShapeError

if TYPE_CHECKING:  # annotations only: config imports this module, not the other way round
    from .config import KernelSpec, Shape

MAX_THREADS_PER_BLOCK = 1024
MAX_GRID_X = 2**31 - 1
MAX_GRID_YZ = 65535
STATIC_SHARED_LIMIT = 48 * 1024  # static __shared__ arrays can never exceed this


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


_REQUIRED = {"elementwise": ("BLOCK",), "grid2d": ("BX", "BY"), "block_tile": ("BM", "BN", "BK"), "host": ()}


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def tile(spec: KernelSpec) -> tuple[int, int, int]:
    """(BM, BN, BK): the multiple each of M, N, K must be for a tile_multiple kernel."""
    p = spec.params
    if spec.geometry == "block_tile":
        return (p["BM"], p["BN"], p["BK"])
    if spec.geometry == "grid2d":
        return (p["BY"], p["BX"], 1)
    return (1, 1, 1)


def threads_per_block(spec: KernelSpec) -> int:
    p = spec.params
    if spec.geometry == "elementwise":
        return p["BLOCK"]
    if spec.geometry == "grid2d":
        return p["BX"] * p["BY"]
    if spec.geometry == "block_tile":
        return p.get("THREADS", (p["BM"] * p["BN"]) // (p.get("TM", 1) * p.get("TN", 1)))
    return 1


def env(spec: KernelSpec) -> dict[str, int]:
    """Names visible to the spec's expressions: its parameters and THREADS."""
    return {**spec.params, "THREADS": threads_per_block(spec)}


def shared_bytes(spec: KernelSpec) -> int:
    return int(expr.evaluate(spec.shared_bytes, env(spec)))


def violations(spec: KernelSpec, *, max_shared: int | None = None) -> list[str]:
    """Every reason this parameter set cannot be compiled or launched (empty when it can).

    ``max_shared`` is the device's per-block limit for the kind of shared memory the kernel uses;
    without a device, the static limit (48 KiB) applies to static shared memory only.
    """
    p: Mapping[str, int] = spec.params
    missing = [n for n in _REQUIRED[spec.geometry] if n not in p]
    if missing:
        return [f"geometry '{spec.geometry}' needs parameter(s) {', '.join(missing)}"]
    out = []
    sizes = set(_REQUIRED[spec.geometry]) | {"TM", "TN", "THREADS"}
    bad = sorted(name for name, v in p.items() if name in sizes and v <= 0)
    if bad:
        out.append(f"parameter(s) {', '.join(bad)} must be positive")
        return out
    if spec.geometry == "block_tile":
        tm, tn = p.get("TM", 1), p.get("TN", 1)
        if p["BM"] % tm or p["BN"] % tn:
            out.append(f"BM={p['BM']} must be a multiple of TM={tm} and BN={p['BN']} of TN={tn}")
    t = threads_per_block(spec)
    if spec.geometry != "host" and not 1 <= t <= MAX_THREADS_PER_BLOCK:
        out.append(f"{t} threads per block (limit {MAX_THREADS_PER_BLOCK})")
    e = env(spec)
    for c in spec.constraints:
        if not expr.evaluate(c, e):
            out.append(f"constraint {c} fails")
    smem = shared_bytes(spec)
    limit = max_shared if max_shared is not None else (None if spec.dynamic_shared else STATIC_SHARED_LIMIT)
    if limit is not None and smem > limit:
        out.append(f"{smem} B shared memory per block > {limit} B")
    return out


def check_params(spec: KernelSpec) -> None:
    """Reject a configured entry whose default parameters no device could run (ConfigError)."""
    if spec.autotuned or spec.dispatched:
        return
    if spec.backend == "host" and spec.geometry != "host":
        raise ConfigError(f"kernel {spec.id}: backend 'host' needs geometry: host")
    if spec.backend == "cuda" and spec.geometry == "host":
        raise ConfigError(f"kernel {spec.id}: geometry 'host' is for backend: host")
    if spec.geometry in ("elementwise", "host") and spec.shapes != "any":
        raise ConfigError(f"kernel {spec.id}: geometry '{spec.geometry}' handles any shape; set shapes: any")
    boxes = [str(b) for m in spec.tensor_maps for b in m["box"]]
    for text in (*spec.constraints, spec.shared_bytes, *boxes):
        unknown = expr.names(text) - set(env(spec)) if not [n for n in _REQUIRED[spec.geometry] if n not in spec.params] else set()
        if unknown:
            raise ConfigError(f"kernel {spec.id}: expression '{text}' uses unknown parameter(s) {', '.join(sorted(unknown))}")
    for name in spec.swept_names:
        if name not in spec.params:
            raise ConfigError(f"kernel {spec.id}: sweep parameter {name} has no default in params")
    for name in spec.sweep_axes:
        if name not in spec.swept_names:
            raise ConfigError(f"kernel {spec.id}: sweep_axes names {name}, which is not swept")
    problems = violations(spec)
    if problems:
        raise ConfigError(f"kernel {spec.id}: {'; '.join(problems)} (params {dict(spec.params)})")


def unsupported_reason(spec: KernelSpec, shape: Shape) -> str | None:
    """Why ``spec`` cannot run ``shape``, or None when it can."""
    if spec.max_dim is not None and max(shape.m, shape.n, shape.k) > spec.max_dim:
        return f"limited to dimensions <= {spec.max_dim} (config {spec.max_dim_source})"
    if spec.shapes == "tile_multiple":
        bm, bn, bk = tile(spec)
        off = [f"{d}={v}" for d, v, t in (("M", shape.m, bm), ("N", shape.n, bn), ("K", shape.k, bk)) if v % t]
        if off:
            return f"needs M, N, K multiples of {bm}, {bn}, {bk} ({', '.join(off)} not)"
    if spec.shapes == "rows16":
        off = [f"{d}={v}" for d, v in (("N", shape.n), ("K", shape.k)) if v % 4]
        if off:
            return f"needs N and K multiples of 4, rows on 16-byte boundaries ({', '.join(off)} not)"
    if spec.geometry != "host":
        grid = _grid(spec, shape)
        if grid[0] > MAX_GRID_X or grid[1] > MAX_GRID_YZ or grid[2] > MAX_GRID_YZ:
            return f"grid {grid} exceeds the CUDA grid limits"
    return None


SPLIT_MIN_KTILES = 8  # a K-slice shorter than this many K-steps spends more on its pipeline ramp than it gains


def splits(spec: KernelSpec, shape: Shape) -> int:
    """K-slices for a split-K kernel on ``shape`` (1 = no split).

    When the output tiles alone leave most of the ``SPLIT_SLOTS`` resident blocks idle, K is cut into
    as many slices as fit (at most ``SPLIT_MAX``, each at least ``SPLIT_MIN_KTILES`` K-steps deep), so
    that tiles * slices <= SPLIT_SLOTS, the size of the kernel's workspace. Slices are equal in
    K-steps; the count is then reduced so that none is empty.
    """
    p = spec.params
    slots = p.get("SPLIT_SLOTS", 0)
    if spec.geometry != "block_tile" or slots <= 0:
        return 1
    tiles = _cdiv(shape.m, p["BM"]) * _cdiv(shape.n, p["BN"])
    k_tiles = _cdiv(shape.k, p["BK"])
    s = min(slots // tiles, k_tiles // SPLIT_MIN_KTILES, p.get("SPLIT_MAX", slots))
    if s <= 1:
        return 1
    return _cdiv(k_tiles, _cdiv(k_tiles, s))


def _grid(spec: KernelSpec, shape: Shape) -> tuple[int, int, int]:
    if spec.geometry == "elementwise":
        return (_cdiv(shape.m * shape.n, spec.params["BLOCK"]), 1, 1)
    bm, bn, _ = tile(spec)
    cluster = spec.params.get("CLUSTER_N", 1) if spec.geometry == "block_tile" else 1
    return (_cdiv(_cdiv(shape.n, bn), cluster) * cluster, _cdiv(shape.m, bm), splits(spec, shape))


def plan(spec: KernelSpec, shape: Shape) -> Launch:
    """Grid and block for ``spec`` on ``shape``; ShapeError (one line) if the shape is unsupported."""
    reason = unsupported_reason(spec, shape)
    if reason:
        raise ShapeError(f"kernel {spec.id} cannot run {shape}: {reason}")
    return Launch(grid=_grid(spec, shape), block=(threads_per_block(spec), 1, 1),
                  shared_bytes=shared_bytes(spec) if spec.dynamic_shared else 0)
