"""Stages of several kernels (geometry ``phases``): what they launch, in which order, on what workspace.

A scheme such as the Ozaki scheme II (stage 22) is not one kernel: it scales A and B, takes residues,
multiplies them and rebuilds the product, one kernel after another on one stream, through device
buffers of its own. Its config entry says all of it as data, so that its launcher
(``sgemm_lab.gpu.phased``) knows no stage:

``sizes``
    named integer expressions over the parameters and ``M``, ``N``, ``K`` (and sizes named before
    them), e.g. ``KP: "(K + 15) // 16 * 16"``;
``workspace``
    device buffers: a lower-case ``name``, its ``bytes`` (an expression over the same names), and
    ``zero: true`` for a buffer set to zero before the first phase of every call;
``phases``
    the kernels in launch order: the ``entry``, its ``grid`` and ``block`` (one to three expressions
    each), its dynamic ``shared`` bytes (an expression over the parameters only: the launcher opts in
    once), and its ``args``, names in the order of the kernel's parameters: ``M``, ``N``, ``K``, a size
    or a parameter (passed as int), ``alpha`` or ``beta`` (float), ``A``, ``B``, ``C`` or a workspace
    buffer (a pointer); optionally ``when``, an expression like the sizes': the phase launches only at
    shapes where it is nonzero (a split-K sum where the plan splits K), and its grid is not evaluated
    elsewhere; the main phase always launches;
``tensor_maps``
    entries with ``buffer`` (a workspace name, or ``A``, ``B`` or ``C`` for the call's own matrix) in
    place of ``operand``: the map's ``dims`` (inner, outer) in elements and ``row_bytes`` as expressions,
    ``elem_bytes`` 1 or 4;
``main_roof``
    optionally, the main phase's operations (``ops``, an expression like the sizes') and the measured
    ceiling they run against (``ceiling``, a key of the ceilings step's record such as ``int8_tops``):
    the report gives the main phase's rate against that roof.

The stage's ``entry`` names its main phase: the kernel whose resources the build records and which
Nsight Compute profiles. Nothing here needs a GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from ..errors import ConfigError, ShapeError
from . import expr
from .bindings import MAX_GRID_X, MAX_GRID_YZ, MAX_THREADS_PER_BLOCK, Launch, env, evaluate

if TYPE_CHECKING:
    from .records import KernelSpec, Shape

SHAPE_NAMES = ("M", "N", "K")
FLOAT_ARGS = ("alpha", "beta")
OPERANDS = ("A", "B", "C")
_BUFFER = re.compile(r"^[a-z][a-z0-9_]*\Z")


@dataclass(frozen=True, kw_only=True)
class Phase:
    """One kernel launch of a plan: the entry, its launch, its arguments' names."""

    entry: str
    launch: Launch
    args: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Buffer:
    name: str
    bytes: int
    zero: bool = False


@dataclass(frozen=True, kw_only=True)
class PhasePlan:
    """Everything a phased stage launches for one shape: the integer names (parameters, THREADS, M, N, K,
    sizes), the workspace and the phases."""

    names: Mapping[str, int]
    workspace: tuple[Buffer, ...]
    phases: tuple[Phase, ...]


def is_phased(spec: KernelSpec) -> bool:
    return spec.geometry == "phases"


def arg_kind(spec: KernelSpec, name: str) -> str:
    """The PyCUDA ``prepare`` letter of argument ``name``: i (an integer), f (alpha, beta), P (a pointer)."""
    if name in FLOAT_ARGS:
        return "f"
    if name in OPERANDS or name in buffers(spec):
        return "P"
    return "i"


def signature(spec: KernelSpec, phase: Mapping) -> str:
    return "".join(arg_kind(spec, a) for a in phase["args"])


def buffers(spec: KernelSpec) -> tuple[str, ...]:
    return tuple(b["name"] for b in spec.workspace)


def shape_names(spec: KernelSpec, shape: Shape) -> dict[str, int]:
    """The names of ``spec``'s expressions at ``shape``: its parameters, THREADS, M, N, K and its sizes."""
    names = {**env(spec), "M": shape.m, "N": shape.n, "K": shape.k}
    for size, text in spec.sizes.items():
        names[size] = int(evaluate(spec, f"sizes.{size}", str(text), names))
    return names


def _dims(spec: KernelSpec, key: str, texts, names: Mapping[str, int]) -> tuple[int, int, int]:
    vals = [int(evaluate(spec, f"{key}[{j}]", str(t), names)) for j, t in enumerate(texts)]
    return tuple(vals + [1] * (3 - len(vals)))  # type: ignore[return-value]


MAX_BLOCK = (1024, 1024, 64)  # CUDA's limits of a block's dimensions (and MAX_THREADS_PER_BLOCK in all)


def plan(spec: KernelSpec, shape: Shape) -> PhasePlan:
    """The plan of ``spec`` on ``shape``; ShapeError (one line) when a grid or block leaves CUDA's limits,
    a buffer's size is negative, or an expression cannot be evaluated at this shape (a division by zero,
    a value beyond int64)."""
    def cannot(why: str) -> ShapeError:
        return ShapeError(f"kernel {spec.id} cannot run {shape}: {why}")

    try:
        names = shape_names(spec, shape)
        work = tuple(Buffer(name=b["name"], bytes=int(evaluate(spec, f"workspace.{b['name']}.bytes", str(b["bytes"]), names)),
                            zero=bool(b.get("zero", False))) for b in spec.workspace)
        launches = [(p, _dims(spec, f"phases[{i}].grid", p["grid"], names), _dims(spec, f"phases[{i}].block", p["block"], names),
                     int(evaluate(spec, f"phases[{i}].shared", str(p.get("shared", 0)), names)))
                    for i, p in enumerate(spec.phases) if _launches(spec, i, names)]
    except ConfigError as exc:
        raise cannot(str(exc).split(": ", 1)[-1]) from None
    bad = [b.name for b in work if b.bytes < 0]
    if bad:
        raise cannot(f"workspace {', '.join(bad)} of a negative size")
    phases = []
    for p, grid, block, shared in launches:
        if grid[0] > MAX_GRID_X or grid[1] > MAX_GRID_YZ or grid[2] > MAX_GRID_YZ or min(grid) < 1:
            raise cannot(f"phase {p['entry']}'s grid {grid} is outside CUDA's limits")
        if not _block_fits(block):
            raise cannot(f"phase {p['entry']}'s block {block} is outside CUDA's limits")
        phases.append(Phase(entry=p["entry"], launch=Launch(grid=grid, block=block, shared_bytes=shared),
                            args=tuple(p["args"])))
    return PhasePlan(names=names, workspace=work, phases=tuple(phases))


def _block_fits(block: tuple[int, int, int]) -> bool:
    return (min(block) >= 1 and all(b <= lim for b, lim in zip(block, MAX_BLOCK))
            and block[0] * block[1] * block[2] <= MAX_THREADS_PER_BLOCK)


def blocks(spec: KernelSpec) -> tuple[tuple[str, tuple[int, int, int], int], ...]:
    """Every phase's entry, block and dynamic shared bytes (as at M = N = K = 1), whether its ``when`` holds
    there or not: what the config check holds to CUDA's limits and the launcher checks each kernel against."""
    from .records import Shape

    names = shape_names(spec, Shape(m=1, n=1, k=1))
    return tuple((p["entry"], _dims(spec, f"phases[{i}].block", p["block"], names),
                  int(evaluate(spec, f"phases[{i}].shared", str(p.get("shared", 0)), names)))
                 for i, p in enumerate(spec.phases))


def _launches(spec: KernelSpec, i: int, names: Mapping[str, int]) -> bool:
    """Whether phase ``i`` launches at the shape of ``names`` (its ``when``; always without one)."""
    when = spec.phases[i].get("when")
    return when is None or bool(evaluate(spec, f"phases[{i}].when", str(when), names))


def launched(spec: KernelSpec, shape: Shape) -> tuple[str, ...]:
    """The entries one call of ``spec`` launches at ``shape``, in order (every phase whose ``when`` holds)."""
    return tuple(p.entry for p in plan(spec, shape).phases)


def workspace_bytes(spec: KernelSpec, shape: Shape) -> int:
    """The device bytes of ``spec``'s workspace at ``shape`` (0 for a stage of one kernel)."""
    if not is_phased(spec) or not spec.workspace:
        return 0
    return sum(max(0, b.bytes) for b in plan(spec, shape).workspace)


def unsupported_reason(spec: KernelSpec, shape: Shape) -> str | None:
    try:
        plan(spec, shape)
    except ShapeError as exc:
        return str(exc).split(": ", 1)[1]
    return None


def main_ops(spec: KernelSpec, shape: Shape) -> int | None:
    """The main phase's operations at ``shape`` (``main_roof.ops``), None without them."""
    if not spec.main_roof:
        return None
    return int(evaluate(spec, "main_roof.ops", spec.main_roof["ops"], shape_names(spec, shape)))


def map_dims(spec: KernelSpec, i: int, names: Mapping[str, int]) -> tuple[tuple[int, int], int]:
    """Tensor map ``i`` of a buffer: its (inner, outer) extent in elements and its row pitch in bytes."""
    m = spec.tensor_maps[i]
    dims = tuple(int(evaluate(spec, f"tensor_maps[{i}].dims[{j}]", str(t), names)) for j, t in enumerate(m["dims"]))
    return dims, int(evaluate(spec, f"tensor_maps[{i}].row_bytes", str(m["row_bytes"]), names))  # type: ignore[return-value]


def check(spec: KernelSpec) -> None:
    """ConfigError (one line, naming the stage and key) for an entry whose phases cannot be planned: names
    an expression cannot see, arguments no launch can pass, a main entry not among the phases, a block
    of no threads or more than a block may have. Every expression is evaluated at M = N = K = 1."""
    def refuse(msg: str) -> ConfigError:
        return ConfigError(f"kernel {spec.id}: {msg}")

    if not spec.phases:
        raise refuse("geometry 'phases' needs phases")
    if spec.shapes != "any":
        raise refuse("geometry 'phases' handles its own shapes; set shapes: any")
    if spec.signature != "gemm":
        raise refuse("geometry 'phases' has the gemm signature only")
    params = set(env(spec))
    passed = sorted((params | set(spec.sizes)) & set(OPERANDS))
    if passed:
        raise refuse(f"{', '.join(passed)} names an operand (a pointer in the arguments): name the parameter or size otherwise")
    known = params | set(SHAPE_NAMES)
    for size, text in spec.sizes.items():
        if size in known:
            raise refuse(f"sizes.{size} shadows a parameter or M, N, K")
        _names_within(spec, f"sizes.{size}", text, known)
        known.add(size)
    bufs = buffers(spec)
    bad = [b for b in bufs if not _BUFFER.match(b) or b in FLOAT_ARGS]
    if bad or len(set(bufs)) != len(bufs):
        raise refuse(f"workspace names {', '.join(bufs)}: lower-case identifiers, each once, not alpha or beta")
    for b in spec.workspace:
        _names_within(spec, f"workspace.{b['name']}.bytes", b["bytes"], known)
    entries = [p["entry"] for p in spec.phases]
    if len(set(entries)) != len(entries):
        raise refuse(f"phases launch an entry twice ({', '.join(entries)}): each entry once")
    if spec.entry not in entries:
        raise refuse(f"entry {spec.entry} (the main phase) is not among the phases ({', '.join(entries)})")
    passable = known | set(FLOAT_ARGS) | set(OPERANDS) | set(bufs)
    for i, p in enumerate(spec.phases):
        for key in ("grid", "block"):
            for j, t in enumerate(p[key]):
                _names_within(spec, f"phases[{i}].{key}[{j}]", t, known)
        _names_within(spec, f"phases[{i}].shared", p.get("shared", 0), params)
        if "when" in p:
            if p["entry"] == spec.entry:
                raise refuse(f"phases[{i}] ({p['entry']}) is the main phase, which always launches: no 'when'")
            _names_within(spec, f"phases[{i}].when", p["when"], known)
        unknown = [a for a in p["args"] if a not in passable]
        if unknown:
            raise refuse(f"phases[{i}] ({p['entry']}).args: {', '.join(unknown)} is no parameter, size, M, N, K, "
                         f"alpha, beta, A, B, C or workspace buffer")
    for i, m in enumerate(spec.tensor_maps):
        if "buffer" not in m:
            raise refuse(f"tensor_maps[{i}]: a phased stage's maps are of workspace buffers (buffer:, dims:, row_bytes:)")
        if m["buffer"] not in bufs and m["buffer"] not in OPERANDS:
            raise refuse(f"tensor_maps[{i}].buffer {m['buffer']} is neither in the workspace ({', '.join(bufs)}) "
                         f"nor an operand ({', '.join(OPERANDS)})")
        for j, t in enumerate(m["dims"]):
            _names_within(spec, f"tensor_maps[{i}].dims[{j}]", t, known)
        _names_within(spec, f"tensor_maps[{i}].row_bytes", m["row_bytes"], known)
    if spec.main_roof:
        _names_within(spec, "main_roof.ops", spec.main_roof["ops"], known)
    from .records import Shape

    try:
        one = plan(spec, Shape(m=1, n=1, k=1))
    except ShapeError as exc:
        raise refuse(str(exc).split(": ", 1)[1]) from None
    for entry, block, _ in blocks(spec):  # a phase with a `when` too, which the plan at 1 x 1 x 1 may leave out
        if not _block_fits(block):
            raise refuse(f"phase {entry}'s block {block} is outside CUDA's limits")
    if spec.has_sweep:
        raise refuse("a stage of several kernels has no tile sweep (the sweep times one kernel)")
    for i in range(len(spec.tensor_maps)):
        map_dims(spec, i, one.names)


def _names_within(spec: KernelSpec, key: str, text, allowed: set[str]) -> None:
    try:
        unknown = expr.names(str(text), key=key) - allowed
    except ConfigError as exc:
        raise ConfigError(f"kernel {spec.id}: {exc}") from None
    if unknown:
        raise ConfigError(f"kernel {spec.id}: {key} '{text}' uses unknown name(s) {', '.join(sorted(unknown))}")
