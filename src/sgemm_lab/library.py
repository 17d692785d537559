"""The lab as a library: ``C = alpha * A @ B + beta * C`` on the caller's own GPU arrays, run by the stage a
committed run measured fastest for the shape's class.

    import cupy as cp                      # or torch, with tensors on the GPU
    from sgemm_lab.library import matmul
    a = cp.random.rand(1000, 3000, dtype=cp.float32)
    b = cp.random.rand(3000, 2000, dtype=cp.float32)
    c = matmul(a, b)                       # a new array of a's kind; matmul(a, b, c, beta=1.0) updates c

Arrays are float32, two-dimensional and row-major (C order), on the GPU of the lab's context (the first
visible one; ``CUDA_DEVICE=<ordinal>`` picks another), their addresses 16-byte aligned (what the stages'
vector and tensor-memory loads need), c apart from a and b; they are read through the CUDA array interface
(``__cuda_array_interface__``: CuPy arrays, PyTorch CUDA tensors, PyCUDA and Numba device arrays). The
product runs in the order of the caller's stream (``stream=``, else the stream the arrays' interface names:
the current stream of CuPy or PyTorch): after the work queued there, before the work queued there next,
without waiting on the host (``gpu.interop``).

Which stage runs (``stage=None``): the run's tables (``run``, default the committed H100 reference
``reports/h100``) are read as the report's summary reads them (``report.summary.pick``): among the stages
of the race (``race``: ``"fp32"`` strict FP32; ``"fp32_accurate"``, the stages that earned that label in
the run's checks, 3xTF32 ones among them; ``"tf32"``), the one verified on the most shapes of the shape's
class (``config.shape_classes``) with the highest geometric-mean speed against the race's cuBLAS there;
stages timed on none of the class's shapes (or every stage, for a shape of no class) ranked after them the
same way over all the run's shapes; the first in that order that can run this shape on this GPU (its
target architecture, its compile, its launch limits). Where the race has a rule (two or more of its stages
with a ``time_model`` in the config, ``dispatch.race``), the one it predicts fastest for this very shape,
among those of the ranking that can run it, goes first. Stages that need a run's sweeps to be built
(autotuned, and dispatch stages without a rule) are not offered. Each stage is compiled once per process
and device (nvcc in this process, seconds); the configuration and the ranking of a class are read once.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .config.records import RACES, ROOT, KernelSpec, LabConfig, Shape
from .errors import CompileError, LabError

DEFAULT_RUN = ROOT / "reports" / "h100"
DEFAULT_CONFIG = ROOT / "config" / "config.yaml"
ALIGN = 16  # bytes: the stages' 16-byte vector loads and the tensor memory accelerator's base addresses


@dataclass(frozen=True, kw_only=True)
class Operand:
    """A row-major float32 matrix on the GPU: its device address, its shape, and the stream its array
    interface names (None: none named)."""

    ptr: int
    rows: int
    cols: int
    stream: int | None = None

    @property
    def end(self) -> int:
        return self.ptr + 4 * self.rows * self.cols


def operand(x, name: str) -> Operand:
    """``x`` read through the CUDA array interface, or one line saying why it cannot be used."""
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is None:
        raise LabError(f"matmul: {name} is not a GPU array (no __cuda_array_interface__; a CuPy array or a "
                       f"PyTorch tensor on the GPU is one): got {type(x).__name__}")
    shape = tuple(int(d) for d in cai["shape"])
    if len(shape) != 2:
        raise LabError(f"matmul: {name} has {len(shape)} dimensions, a matrix has 2")
    if cai["typestr"] != "<f4":
        raise LabError(f"matmul: {name} is of type {cai['typestr']}, SGEMM takes float32 ('<f4')")
    strides = cai.get("strides")
    if strides is not None and shape[0] * shape[1] > 0 and tuple(strides) != (shape[1] * 4, 4):
        raise LabError(f"matmul: {name} is not row-major and contiguous (strides {tuple(strides)} bytes for "
                       f"shape {shape}); pass a C-ordered copy (.contiguous() in PyTorch, cupy.ascontiguousarray)")
    ptr = int(cai["data"][0])
    if ptr % ALIGN:
        raise LabError(f"matmul: {name} starts at {ptr:#x}, not on a {ALIGN}-byte boundary (a view into a "
                       "larger array?); the stages' vector loads need one: pass a copy")
    stream = cai.get("stream")
    return Operand(ptr=ptr, rows=shape[0], cols=shape[1], stream=int(stream) if stream is not None else None)


def check_apart(a: Operand, b: Operand, c: Operand) -> None:
    """c must not share memory with a or b: the product would read what it has written."""
    for name, x in (("a", a), ("b", b)):
        if c.ptr < x.end and x.ptr < c.end:
            raise LabError(f"matmul: c overlaps {name} in memory; the product would read what it writes: "
                           "pass a separate c")


def offered(spec: KernelSpec) -> bool:
    """Whether a stage can be built from the configuration alone (no run's sweeps needed)."""
    return spec.backend == "cuda" and not spec.autotuned and (not spec.dispatched or spec.rule is not None)


def resolved(cfg: LabConfig, spec: KernelSpec) -> KernelSpec:
    from .dispatch import choice

    return choice.resolve(cfg, spec) if spec.dispatched else spec


def race_stages(cfg: LabConfig, race: str, checks) -> list[str]:
    """The stages offered here that run in ``race``: for FP32-accurate, those that earned the label in
    the run's checks (``report.tables.fp32_accurate_stages``: every check passed against cuBLAS strict
    FP32 on the same inputs), as the report's summary has it."""
    from .report.tables import fp32_accurate_stages

    if race not in RACES:
        raise LabError(f"matmul: race '{race}' is none of {', '.join(RACES)}")
    ids = (fp32_accurate_stages(cfg, checks) if race == "fp32_accurate"
           else [k.id for k in cfg.kernels if k.precision in RACES[race][1]])
    return [i for i in ids if offered(cfg.kernel(i))]


def run_tables(run: Path):
    """A run's bench rows that ran (``bench.csv``, status ok) and its checks (``check.csv``, None where
    the run has none), or one line naming what is missing."""
    import pandas as pd

    table = Path(run) / "bench.csv"
    if not table.is_file():
        raise LabError(f"matmul: no run's tables at {run} (its bench.csv): name a run folder (run=...) or a "
                       "stage (stage=...)")
    bench = pd.read_csv(table)
    checks = Path(run) / "check.csv"
    return bench[bench["status"] == "ok"], (pd.read_csv(checks) if checks.is_file() else None)


def ranking(cfg: LabConfig, run: Path, shape: Shape, race: str) -> list[str]:
    """The stages of ``race`` offered here, best first for ``shape``'s class by ``run``'s bench rows."""
    from .config.shape_classes import classes_of
    from .report.summary import class_shapes

    if race not in RACES:
        raise LabError(f"matmul: race '{race}' is none of {', '.join(RACES)}")
    by_class = class_shapes(cfg)
    cls = next((c for c in classes_of(shape) if c in by_class), None)
    return list(_order(cfg, Path(run), cls, race))


def _order(cfg: LabConfig, run: Path, cls: str | None, race: str) -> tuple[str, ...]:
    from .report.summary import class_shapes, pick

    ok, checks = run_tables(run)
    stages = race_stages(cfg, race, checks)
    by_class = class_shapes(cfg)
    every = sorted({s for v in by_class.values() for s in v}, key=lambda s: (s.m, s.n, s.k))
    order = []
    # the class's shapes first; stages timed on none of them (the TF32 stages on the squares only) after,
    # ranked over every shape of the run
    for shapes in ([by_class[cls]] if cls else []) + [every]:
        while stages:
            best = pick(ok, shapes, RACES[race][0], stages)
            if best is None:
                break
            order.append(best[0])
            stages.remove(best[0])
    return tuple(order)


def can_run(cfg: LabConfig, stage: str, shape: Shape, arch: str | None = None) -> bool:
    """Whether ``stage`` takes ``shape`` (its limits) and, given the GPU's ``arch``, compiles for it."""
    from .config.geometry import unsupported_reason
    from .gpu.compile import target_arch

    spec = resolved(cfg, cfg.kernel(stage))
    if unsupported_reason(spec, shape) is not None:
        return False
    if arch is not None:
        specs = [spec] + (list(_candidates(spec)) if spec.dispatched else [])
        try:
            for sp in specs:
                target_arch(sp, arch)
        except CompileError:
            return False
    return True


def choose(cfg: LabConfig, run: Path, shape: Shape, race: str, arch: str | None = None) -> str:
    """The stage ``matmul`` runs for ``shape``: the race's rule's pick among the stages of ``ranking`` that can
    run it (on a GPU of ``arch``, when given), where the race has a rule; else the first of them."""
    names = rule_first(cfg, race, shape, [s for s in ranking(cfg, run, shape, race) if can_run(cfg, s, shape, arch)])
    if names:
        return names[0]
    on = f" on {arch}" if arch else ""
    raise LabError(f"matmul: no stage of the '{race}' race verified in {run} can run {shape}{on}")


def rule_first(cfg: LabConfig, race: str, shape: Shape, names) -> tuple[str, ...]:
    """``names`` (the ranking's stages that can run ``shape``) with the race's rule's pick among them first,
    where the race has a rule (``LabConfig.race_rule``) and one of its members is among them."""
    from .dispatch.race import pick

    names = tuple(names)
    rule = cfg.race_rule(race)
    chosen = pick(cfg, rule, shape, names) if rule is not None else None
    return names if chosen is None else (chosen,) + tuple(n for n in names if n != chosen)


def _candidates(spec: KernelSpec) -> list[KernelSpec]:
    from .dispatch import choice

    return [choice.listed_candidate(spec, i) for i in range(len(spec.candidates))]


_launchers: dict[tuple, object] = {}


def launcher(cfg: LabConfig, stage: str, device: int = 0):
    """The stage's launcher for the context's device ``device``, compiled on first use in this process
    (a dispatch stage: every candidate its rule may run); CompileError where it cannot run on this GPU."""
    key = (id(cfg), stage, device)
    if key in _launchers:
        return _launchers[key]
    from .dispatch import choice
    from .dispatch.launch import launcher_for
    from .gpu.build import nvcc
    from .gpu.compile import compile_options, source_text, target_arch
    from .gpu.device import device_info

    spec = cfg.kernel(stage)
    if not offered(spec):
        raise LabError(f"matmul: stage {stage} is built from a run's sweeps (or runs on the host); "
                       "name a CUDA stage of the config that is neither autotuned nor a dispatch without a rule")
    spec = resolved(cfg, spec)
    dev = device_info()
    specs = _candidates(spec) if spec.dispatched else [spec]
    # in this process: a pool of workers would re-import the caller's script, which may not be guarded;
    # nvcc's remarks on a stage's source (PyCUDA repeats them as warnings) are the lab's, not the caller's
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cubins = [nvcc(sp.id, source_text(sp), compile_options(sp), target_arch(sp, dev.arch)) for sp in specs]
    binary = choice.pack(dict(enumerate(cubins)), []) if spec.dispatched else cubins[0]
    launch = launcher_for(spec, binary)
    launch.check_launchable(dev)
    _launchers[key] = launch
    return launch


@lru_cache(maxsize=8)
def _config(path: str) -> LabConfig:
    from .config.load import load

    return load(Path(path))


@lru_cache(maxsize=256)
def _ranked(config: str, run: str, cls: str | None, race: str) -> tuple[str, ...]:
    return _order(_config(config), Path(run), cls, race)


@lru_cache(maxsize=1024)
def _rule_first(config: str, race: str, shape: Shape, names: tuple[str, ...]) -> tuple[str, ...]:
    """:func:`rule_first`, once per configuration, race, shape and runnable stages in a process."""
    return rule_first(_config(config), race, shape, names)


def _empty_like(a, rows: int, cols: int):
    """A new float32 matrix of ``a``'s library on ``a``'s device."""
    if hasattr(a, "new_empty"):  # PyTorch
        return a.new_empty((rows, cols))
    module = type(a).__module__.split(".")[0]
    if module == "cupy":
        import cupy

        with cupy.cuda.Device(a.device.id):
            return cupy.empty((rows, cols), dtype=cupy.float32)
    if module == "pycuda":  # in PyCUDA's current context, where the caller's arrays were made
        import numpy as np
        import pycuda.gpuarray as garray

        return garray.empty((rows, cols), np.float32)
    raise LabError(f"matmul: cannot make an output like a {type(a).__name__}: pass c (float32, {rows}x{cols})")


def _on_device(ops: dict[str, Operand]) -> int:
    """The ordinal of the context's device, after checking that every operand lives there."""
    from .gpu.interop import context_device, pointer_device

    here = context_device()
    for name, op in ops.items():
        where = pointer_device(op.ptr)
        if where is None:
            raise LabError(f"matmul: {name} is not in GPU memory the CUDA driver knows (address {op.ptr:#x})")
        if where != here:
            raise LabError(f"matmul: {name} is on GPU {where}, the lab's context on GPU {here} (the first visible "
                           f"one): run with CUDA_DEVICE={where}, or move {name}")
    return here


def _caller_stream(arrays, ops: tuple[Operand, ...]) -> int | None:
    """The stream the arrays' interface names (CuPy: its current stream); for PyTorch tensors, whose
    interface names none, PyTorch's current stream on their device."""
    named = next((op.stream for op in ops if op.stream is not None), None)
    if named is not None:
        return named
    for x in arrays:
        if type(x).__module__.split(".")[0] == "torch":
            import torch

            return int(torch.cuda.current_stream(x.device).cuda_stream)
    return None


_stream_order = None


def matmul(a, b, c=None, *, alpha: float = 1.0, beta: float = 0.0, stage: str | None = None,
           run: str | Path | None = None, race: str = "fp32", config: str | Path | None = None, stream=None):
    """``c = alpha * a @ b + beta * c`` by one of the lab's stages; returns ``c`` (a new array of ``a``'s
    kind when ``c`` is None, in which case ``beta`` must be 0). ``stage`` names the stage; otherwise the
    run's tables choose it (module docstring). ``config``: the configuration file (default the lab's).
    ``stream``: the caller's stream (a handle, a PyTorch, CuPy or PyCUDA stream; default the one the arrays name)."""
    global _stream_order
    from .config.shape_classes import classes_of
    from .gpu.device import device_info, driver
    from .gpu.interop import StreamOrder, stream_handle
    from .report.summary import class_shapes

    A, B = operand(a, "a"), operand(b, "b")
    if A.cols != B.rows:
        raise LabError(f"matmul: a is {A.rows}x{A.cols} and b {B.rows}x{B.cols}: a's columns must be b's rows")
    shape = Shape(m=A.rows, n=B.cols, k=A.cols)
    if min(shape.m, shape.n, shape.k) == 0:
        raise LabError(f"matmul: empty problem {shape}")
    if c is None:
        if beta != 0:
            raise LabError("matmul: beta is not 0 but no c was given to scale")
        c = _empty_like(a, shape.m, shape.n)
    C = operand(c, "c")
    if (C.rows, C.cols) != (shape.m, shape.n):
        raise LabError(f"matmul: c is {C.rows}x{C.cols}, the product is {shape.m}x{shape.n}")
    check_apart(A, B, C)
    if race not in RACES:
        raise LabError(f"matmul: race '{race}' is none of {', '.join(RACES)}")
    config_key = str(Path(config).resolve() if config else DEFAULT_CONFIG)
    cfg = _config(config_key)
    if stage is not None and stage not in [k.id for k in cfg.kernels]:
        raise LabError(f"matmul: no stage '{stage}' in the config")
    driver()  # the primary context, which CuPy and PyTorch use too
    device = _on_device({"a": A, "b": B, "c": C})
    handle = stream_handle(stream) if stream is not None else _caller_stream((c, a, b), (C, A, B))
    if stage is not None:
        names = [stage]
    else:
        by_class = class_shapes(cfg)
        cls = next((k for k in classes_of(shape) if k in by_class), None)
        arch = device_info().arch
        run_dir = str(Path(run).resolve() if run else DEFAULT_RUN)
        names = [s for s in _ranked(config_key, run_dir, cls, race) if can_run(cfg, s, shape, arch)]
        names = _rule_first(config_key, race, shape, tuple(names))
    tried = []
    for name in names:
        try:
            launch = launcher(cfg, name, device)
            break
        except CompileError as exc:  # this GPU cannot build or launch it: the next in the ranking
            if stage is not None:
                raise LabError(f"matmul: stage {stage} cannot run on this GPU: {exc}") from None
            tried.append(f"{name} ({exc})")
    else:
        raise LabError(f"matmul: no stage of the '{race}' race can run {shape} on this GPU"
                       + (f"; tried {'; '.join(tried)}" if tried else ""))
    if _stream_order is None:
        _stream_order = StreamOrder()
    with _stream_order.inside(handle):
        launch(shape, float(alpha), A.ptr, B.ptr, float(beta), C.ptr, None)
    return c
