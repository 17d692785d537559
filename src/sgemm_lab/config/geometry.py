"""Launch geometry and shape preconditions, derived from a kernel's parameters in one place.

A kernel's config entry names a geometry rule and gives its compile-time parameters; the rule
derives the block size, the grid for a shape, and the tile that the shape must be a multiple of.
The entry's ``constraints`` (integer expressions mirroring the kernel's static_asserts) and
``shared_bytes`` are checked here too, so that an impossible configuration is rejected before
anything is compiled; its ``runs_when`` (expressions over the parameters and the shape's ``M``, ``N``,
``K``) say which shapes a stage built for some shapes only runs. Launchers never compute a grid themselves. Parameter and sweep values must
lie in int64, and a sweep may expand to at most ``MAX_SWEEP_POINTS`` points; expressions are evaluated
within the bounds of :mod:`sgemm_lab.config.expr`, and every refusal names the stage and the config key.

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
    lie past N. A kernel with ``NARROW_ROWS = 1`` (stage 19: outputs narrow on either side) runs an output
    of at most ``BN`` rows and more than ``BN`` columns as its transpose (:func:`oriented`): the grid's
    tiles, K-slices and dispatch names are those of the shape with M and N swapped, so that blocks own
    ``BM`` columns of its ``M <= BN`` rows.
host
    A C function on the CPU: no launch.
phases
    Several kernels in turn, on a workspace of their own, all of it data in the entry
    (:mod:`sgemm_lab.config.phases`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Mapping

from ..errors import ConfigError, ShapeError
from . import expr, phases
from .bindings import MAX_GRID_X, MAX_GRID_YZ, MAX_THREADS_PER_BLOCK, Launch, env, evaluate, threads_per_block

if TYPE_CHECKING:  # annotations only: config imports this module, not the other way round
    from .records import KernelSpec, Shape

SHAPE_NAMES = ("M", "N", "K")  # the names a runs_when expression may use beside the parameters
STATIC_SHARED_LIMIT = 48 * 1024  # static __shared__ arrays can never exceed this
# A sweep's grids may expand to at most this many points: every point is checked, compiled and timed,
# so a grid beyond it is a typo (or a generated list gone wrong), never a sweep anyone could run.
MAX_SWEEP_POINTS = 100_000


_REQUIRED = {"elementwise": ("BLOCK",), "grid2d": ("BX", "BY"), "block_tile": ("BM", "BN", "BK"), "host": (),
             "phases": ()}


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


def shared_bytes(spec: KernelSpec) -> int:
    return int(evaluate(spec, "shared_bytes", spec.shared_bytes))


def micro_tile(spec: KernelSpec) -> tuple[int, int]:
    """Results per thread along M and along N (the ``micro_tile`` expressions)."""
    e = env(spec)
    tm, tn = (int(evaluate(spec, f"micro_tile[{i}]", text, e)) for i, text in enumerate(spec.micro_tile))
    return tm, tn


def _expressions(spec: KernelSpec) -> list[tuple[str, str]]:
    """(config key, text) of every expression of ``spec``."""
    out = [(f"constraints[{i}]", c) for i, c in enumerate(spec.constraints)] + [("shared_bytes", spec.shared_bytes)]
    out += [(f"micro_tile[{i}]", t) for i, t in enumerate(spec.micro_tile)]
    out += [(f"runs_when[{i}]", t) for i, t in enumerate(spec.runs_when)]
    out += [(f"tensor_maps[{i}].box[{j}]", str(b)) for i, m in enumerate(spec.tensor_maps) for j, b in enumerate(m["box"])]
    return out


def sweep_size(spec: KernelSpec) -> int:
    """How many points the sweep's grids expand to (before repeats are dropped)."""
    return sum(math.prod(len(vals) for vals in g.values()) for g in spec.sweep)


def check_sweep_size(spec: KernelSpec) -> None:
    """ConfigError when the sweep's grids expand to more than MAX_SWEEP_POINTS points (nothing is expanded)."""
    n = sweep_size(spec)
    if n > MAX_SWEEP_POINTS:
        raise ConfigError(f"kernel {spec.id}: sweep expands to {expr.describe(n)} points (at most {MAX_SWEEP_POINTS})")


def _check_values(spec: KernelSpec) -> None:
    """Parameter and sweep values within int64, and a sweep of at most MAX_SWEEP_POINTS points."""
    for name, v in spec.params.items():
        if not expr.in_int64(v):
            raise ConfigError(f"kernel {spec.id}: params.{name} {expr.describe(v)} is beyond int64")
    for i, g in enumerate(spec.sweep):
        where = f"sweep[{i}]" if len(spec.sweep) > 1 else "sweep"
        for name, vals in g.items():
            bad = next((v for v in vals if not expr.in_int64(v)), None)
            if bad is not None:
                raise ConfigError(f"kernel {spec.id}: {where}.{name} value {expr.describe(bad)} is beyond int64")
    check_sweep_size(spec)


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
        if not expr.in_int64(t):  # no expression over THREADS can be evaluated
            return out
    e = env(spec)
    for i, c in enumerate(spec.constraints):
        if not evaluate(spec, f"constraints[{i}]", c, e):
            out.append(f"constraint {c} fails")
    smem = shared_bytes(spec)
    limit = max_shared if max_shared is not None else (None if spec.dynamic_shared else STATIC_SHARED_LIMIT)
    if limit is not None and smem > limit:
        out.append(f"{smem} B shared memory per block > {limit} B")
    return out


def check_params(spec: KernelSpec) -> None:
    """Reject a configured entry whose default parameters no device could run (ConfigError)."""
    _check_values(spec)
    if spec.autotuned or spec.dispatched:
        return
    if spec.backend == "host" and spec.geometry != "host":
        raise ConfigError(f"kernel {spec.id}: backend 'host' needs geometry: host")
    if spec.backend == "cuda" and spec.geometry == "host":
        raise ConfigError(f"kernel {spec.id}: geometry 'host' is for backend: host")
    if spec.geometry == "phases":
        phases.check(spec)
    elif any("buffer" in m for m in spec.tensor_maps):
        raise ConfigError(f"kernel {spec.id}: tensor maps of workspace buffers are for geometry 'phases'; "
                          "a stage of one kernel maps its operands (operand: A or B)")
    if spec.geometry in ("elementwise", "host") and spec.shapes != "any":
        raise ConfigError(f"kernel {spec.id}: geometry '{spec.geometry}' handles any shape; set shapes: any")
    known = set(spec.params) | {"THREADS"}  # the names of env(), without computing THREADS (which may divide by 0)
    shape_names = set(SHAPE_NAMES)
    complete = all(n in spec.params for n in _REQUIRED[spec.geometry])
    for key, text in _expressions(spec):
        try:
            allowed = known | shape_names if key.startswith("runs_when") else known
            unknown = expr.names(text, key=key) - allowed if complete else set()
        except ConfigError as exc:
            raise ConfigError(f"kernel {spec.id}: {exc}") from None
        if unknown:
            raise ConfigError(f"kernel {spec.id}: {key} '{text}' uses unknown parameter(s) {', '.join(sorted(unknown))}")
    for name in spec.swept_names:
        if name not in spec.params:
            raise ConfigError(f"kernel {spec.id}: sweep parameter {name} has no default in params")
    for name in spec.sweep_axes:
        if name not in spec.swept_names:
            raise ConfigError(f"kernel {spec.id}: sweep_axes names {name}, which is not swept")
    problems = violations(spec)
    if problems:
        raise ConfigError(f"kernel {spec.id}: {'; '.join(problems)} (params {dict(spec.params)})")
    e = env(spec)
    for key, text in _expressions(spec):  # the rest evaluate too (the traffic model, the tensor maps)
        evaluate(spec, key, text, {**e, **dict.fromkeys(SHAPE_NAMES, 1)} if key.startswith("runs_when") else e)
    if spec.geometry == "block_tile":  # the traffic model divides by the micro-tile
        tiles = zip(spec.micro_tile, micro_tile(spec))
        bad = [f"micro_tile[{i}] '{text}' is {v}" for i, (text, v) in enumerate(tiles) if v <= 0]
        if bad:
            raise ConfigError(f"kernel {spec.id}: {'; '.join(bad)}, must be positive (params {dict(spec.params)})")


def unsupported_reason(spec: KernelSpec, shape: Shape) -> str | None:
    """Why ``spec`` cannot run ``shape``, or None when it can."""
    if spec.max_dim is not None and max(shape.m, shape.n, shape.k) > spec.max_dim:
        return f"limited to dimensions <= {spec.max_dim} (config {spec.max_dim_source})"
    if spec.shapes == "tile_multiple":
        bm, bn, bk = tile(spec)
        off = [f"{d}={v}" for d, v, t in (("M", shape.m, bm), ("N", shape.n, bn), ("K", shape.k, bk)) if v % t]
        if off:
            return f"needs M, N, K multiples of {bm}, {bn}, {bk} ({', '.join(off)} not)"
    if spec.runs_when:
        names = {**env(spec), "M": shape.m, "N": shape.n, "K": shape.k}
        failing = [t for i, t in enumerate(spec.runs_when) if not evaluate(spec, f"runs_when[{i}]", t, names)]
        if failing:
            return f"runs only where {' and '.join(failing)} (runs_when; M={shape.m}, N={shape.n}, K={shape.k})"
    if spec.geometry == "phases":
        return phases.unsupported_reason(spec, shape)
    if spec.geometry != "host":
        grid = _grid(spec, shape)
        if grid[0] > MAX_GRID_X or grid[1] > MAX_GRID_YZ or grid[2] > MAX_GRID_YZ:
            return f"grid {grid} exceeds the CUDA grid limits"
    return None


def oriented(spec: KernelSpec, shape: Shape) -> Shape:
    """``shape`` as the launch plan tiles it: transposed (M and N swapped) for a kernel with ``NARROW_ROWS``
    on an output of at most BN rows and more than BN columns, as is otherwise."""
    p = spec.params
    if spec.geometry == "block_tile" and p.get("NARROW_ROWS", 0) and shape.m <= p["BN"] < shape.n:
        return dataclasses.replace(shape, m=shape.n, n=shape.m)
    return shape


SPLIT_MIN_KTILES = 8  # a K-slice shorter than this many K-steps spends more on its pipeline ramp than it gains
SPLIT_GAIN = 0.05     # a split over several waves is taken for a count of wave-steps at least this much lower


def splits(spec: KernelSpec, shape: Shape) -> int:
    """K-slices for a split-K kernel on ``shape`` (1 = no split).

    When the output tiles alone leave most of the ``SPLIT_SLOTS`` resident blocks idle, K is cut into
    as many slices as fit (at most ``SPLIT_MAX``, each at least ``SPLIT_MIN`` K-steps deep, by default
    ``SPLIT_MIN_KTILES``), so that tiles * slices <= SPLIT_SLOTS, the size of the kernel's workspace.
    A kernel whose workspace holds ``SPLIT_WAVES`` > 1 waves of ``SPLIT_SLOTS`` blocks may also split
    an output of more tiles than one wave: of the counts that fit, the one of the fewest waves x K-steps
    a slice (the wave quantisation of ``tiles * slices`` over the resident blocks), where that is at least
    ``SPLIT_GAIN`` below the count that fits one wave.
    Slices are equal in K-steps; the count is then reduced so that none is empty.
    """
    p = spec.params
    slots = p.get("SPLIT_SLOTS", 0)
    if spec.geometry != "block_tile" or slots <= 0:
        return 1
    shape = oriented(spec, shape)
    cluster = p.get("CLUSTER_N", 1)  # a cluster's spare blocks past N hold resident slots too
    tiles = _cdiv(shape.m, p["BM"]) * _cdiv(_cdiv(shape.n, p["BN"]), cluster) * cluster
    k_tiles = _cdiv(shape.k, p["BK"])
    waves = p.get("SPLIT_WAVES", 1)
    shortest = k_tiles // max(1, p.get("SPLIT_MIN", SPLIT_MIN_KTILES))
    s = max(1, min(slots // tiles, shortest, p.get("SPLIT_MAX", slots)))  # as many as one wave holds
    if waves > 1:
        # Slices over several waves: the count of the fewest waves x K-steps a slice (the fewest slices on
        # a tie), taken only where it is SPLIT_GAIN below the one-wave count's: the last wave's idle slots
        # shrink as the slices grow shorter, but every slice adds a partial tile to store and sum, which the
        # count does not see (512 x 512 x 16384 ran 4% slower in 33 slices over two waves than in 16 over
        # one, for a count 1.6% lower).
        top = min(slots * waves // tiles, shortest, p.get("SPLIT_MAX", slots * waves))
        cost = {c: _cdiv(tiles * c, slots) * _cdiv(k_tiles, c) for c in range(s, top + 1)}
        if cost:
            best = min(cost, key=lambda c: (cost[c], c))
            if cost[best] < cost[s] * (1 - SPLIT_GAIN):
                s = best
    if s <= 1:
        return 1
    return _cdiv(k_tiles, _cdiv(k_tiles, s))


# Names a dispatch rule's cost may use beside the candidate's parameters (see :func:`plan_names`).
PLAN_NAMES = ("M", "N", "K", "TILES", "SPLIT", "KSTEPS", "SLOTS", "WAVES", "STEP", "ALIGNED")


def plan_names(spec: KernelSpec, shape: Shape, step: int) -> dict[str, int]:
    """What a dispatch rule knows of ``spec``'s plan for ``shape``: its parameters and THREADS, the
    shape (``M``, ``N``, ``K``), output ``TILES``, K-slices ``SPLIT`` (:func:`splits`), ``KSTEPS`` (K-steps
    of one slice), ``ALIGNED`` (1 where the rows of A and B start on 16-byte boundaries, K and N multiples
    of 4, else 0), and for a kernel with ``SPLIT_SLOTS`` resident blocks, ``SLOTS`` and ``WAVES`` =
    ceil(TILES * SPLIT / SLOTS); ``STEP`` is the candidate's relative time per K-step of a wave."""
    p = spec.params
    bm, bn, bk = tile(spec)
    split = splits(spec, shape)
    aligned = int(shape.k % 4 == 0 and shape.n % 4 == 0)  # of the problem as given, before any transpose
    shape = oriented(spec, shape)
    tiles = _cdiv(shape.m, bm) * _cdiv(shape.n, bn)
    names = {**env(spec), "M": shape.m, "N": shape.n, "K": shape.k, "TILES": tiles, "SPLIT": split,
             "KSTEPS": _cdiv(_cdiv(shape.k, bk), split), "STEP": step,
             "ALIGNED": aligned}
    if p.get("SPLIT_SLOTS", 0) > 0:
        names.update(SLOTS=p["SPLIT_SLOTS"], WAVES=_cdiv(tiles * split, p["SPLIT_SLOTS"]))
    return names


def _grid(spec: KernelSpec, shape: Shape) -> tuple[int, int, int]:
    if spec.geometry == "elementwise":
        return (_cdiv(shape.m * shape.n, spec.params["BLOCK"]), 1, 1)
    bm, bn, _ = tile(spec)
    cluster = spec.params.get("CLUSTER_N", 1) if spec.geometry == "block_tile" else 1
    shape = oriented(spec, shape)
    return (_cdiv(_cdiv(shape.n, bn), cluster) * cluster, _cdiv(shape.m, bm), splits(spec, shape))


def plan(spec: KernelSpec, shape: Shape) -> Launch:
    """Grid and block for ``spec`` on ``shape``; ShapeError (one line) if the shape is unsupported."""
    reason = unsupported_reason(spec, shape)
    if reason:
        raise ShapeError(f"kernel {spec.id} cannot run {shape}: {reason}")
    return Launch(grid=_grid(spec, shape), block=(threads_per_block(spec), 1, 1),
                  shared_bytes=shared_bytes(spec) if spec.dynamic_shared else 0)
