"""The lab as a library: ``C = alpha * A @ B + beta * C`` on the caller's own GPU arrays, run by the stage a
committed run measured fastest for the shape's class.

    import cupy as cp                      # or torch, with tensors on the GPU
    from sgemm_lab.library import matmul
    a = cp.random.rand(1000, 3000, dtype=cp.float32)
    b = cp.random.rand(3000, 2000, dtype=cp.float32)
    c = matmul(a, b)                       # a new array of a's kind; matmul(a, b, c, beta=1.0) updates c

Arrays are float32, two-dimensional and row-major (C order), read through the CUDA array interface
(``__cuda_array_interface__``: CuPy arrays, PyTorch CUDA tensors, Numba device arrays). The kernel runs on
the legacy default stream of the primary context, which CuPy and PyTorch share: it follows the work they
queued there and returns before it ends, as their own operations do.

Which stage runs (``stage=None``): the run's tables (``run``, default the committed H100 reference
``reports/h100``) are read as the report's summary reads them (``report.summary.pick``): among the stages
of the race (``race``: ``"fp32"`` strict FP32, ``"fp32_accurate"`` with the 3xTF32 stages, ``"tf32"``),
the one verified on the most shapes of the shape's class (``config.shape_classes``) with the highest
geometric-mean speed against the race's cuBLAS there; stages timed on none of the class's shapes (or every
stage, for a shape of no class) ranked after them the same way over all the run's shapes; the first in
that order that can run this shape. Stages that need a run's sweeps to be built (autotuned, and dispatch
stages without a rule) are not offered. Each stage is compiled once per process (nvcc, seconds).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .config.records import ROOT, KernelSpec, LabConfig, Shape
from .errors import LabError

RACES = {"fp32": ("cublas", ("fp32",)), "fp32_accurate": ("cublas", ("fp32", "3xtf32")),
         "tf32": ("cublas_tf32", ("tf32",))}
DEFAULT_RUN = ROOT / "reports" / "h100"


@dataclass(frozen=True, kw_only=True)
class Operand:
    """A row-major float32 matrix on the GPU: its device address and its shape."""

    ptr: int
    rows: int
    cols: int


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
    return Operand(ptr=int(cai["data"][0]), rows=shape[0], cols=shape[1])


def offered(spec: KernelSpec) -> bool:
    """Whether a stage can be built from the configuration alone (no run's sweeps needed)."""
    return spec.backend == "cuda" and not spec.autotuned and (not spec.dispatched or spec.rule is not None)


def resolved(cfg: LabConfig, spec: KernelSpec) -> KernelSpec:
    from .dispatch import choice

    return choice.resolve(cfg, spec) if spec.dispatched else spec


def ranking(cfg: LabConfig, run: Path, shape: Shape, race: str) -> list[str]:
    """The stages of ``race`` offered here, best first for ``shape``'s class by ``run``'s bench rows."""
    import pandas as pd

    from .config.shape_classes import classes_of
    from .report.summary import class_shapes, pick

    if race not in RACES:
        raise LabError(f"matmul: race '{race}' is none of {', '.join(RACES)}")
    table = run / "bench.csv"
    if not table.is_file():
        raise LabError(f"matmul: no run's tables at {run} (its bench.csv): name a run folder (run=...) or a "
                       "stage (stage=...)")
    bench = pd.read_csv(table)
    ok = bench[bench["status"] == "ok"]
    baseline, precisions = RACES[race]
    stages = [k.id for k in cfg.kernels if k.precision in precisions and offered(k)]
    by_class = class_shapes(cfg)
    every = sorted({s for v in by_class.values() for s in v}, key=lambda s: (s.m, s.n, s.k))
    mine = [by_class[c] for c in classes_of(shape) if c in by_class]
    order = []
    # the class's shapes first; stages timed on none of them (the TF32 stages on the squares only) after,
    # ranked over every shape of the run
    for shapes in ([mine[0]] if mine else []) + [every]:
        while stages:
            best = pick(ok, shapes, baseline, stages)
            if best is None:
                break
            order.append(best[0])
            stages.remove(best[0])
    return order


def choose(cfg: LabConfig, run: Path, shape: Shape, race: str) -> str:
    """The first stage of ``ranking`` that can run ``shape``."""
    from .config.geometry import unsupported_reason

    order = ranking(cfg, run, shape, race)
    for stage in order:
        if unsupported_reason(resolved(cfg, cfg.kernel(stage)), shape) is None:
            return stage
    raise LabError(f"matmul: no stage of the '{race}' race verified in {run} can run {shape}")


_launchers: dict[str, object] = {}


def launcher(cfg: LabConfig, stage: str):
    """The stage's launcher, compiled for this GPU on first use (a dispatch stage: every candidate its
    rule may run)."""
    if stage in _launchers:
        return _launchers[stage]
    from .dispatch import choice
    from .dispatch.launch import launcher_for
    from .gpu.build import compile_many
    from .gpu.device import device_info

    spec = cfg.kernel(stage)
    if not offered(spec):
        raise LabError(f"matmul: stage {stage} is built from a run's sweeps (or runs on the host); "
                       "name a CUDA stage of the config that is neither autotuned nor a dispatch without a rule")
    spec = resolved(cfg, spec)
    dev = device_info()
    if spec.dispatched:
        specs = [choice.listed_candidate(spec, i) for i in range(len(spec.candidates))]
    else:
        specs = [spec]
    built = compile_many(specs, dev.arch, jobs=len(specs))
    errors = [err for _, err in built if err]
    if errors:
        raise errors[0]
    binary = choice.pack(dict(enumerate(c for c, _ in built)), []) if spec.dispatched else built[0][0]
    launch = launcher_for(spec, binary)
    launch.check_launchable(dev)
    _launchers[stage] = launch
    return launch


def _empty_like(a, rows: int, cols: int):
    """A new float32 matrix of ``a``'s library on ``a``'s device."""
    if hasattr(a, "new_empty"):  # PyTorch
        return a.new_empty((rows, cols))
    module = type(a).__module__.split(".")[0]
    if module == "cupy":
        import cupy

        with cupy.cuda.Device(a.device.id):
            return cupy.empty((rows, cols), dtype=cupy.float32)
    raise LabError(f"matmul: cannot make an output like a {type(a).__name__}: pass c (float32, {rows}x{cols})")


def matmul(a, b, c=None, *, alpha: float = 1.0, beta: float = 0.0, stage: str | None = None,
           run: str | Path | None = None, race: str = "fp32", config: str | Path | None = None):
    """``c = alpha * a @ b + beta * c`` by one of the lab's stages; returns ``c`` (a new array of ``a``'s
    kind when ``c`` is None, in which case ``beta`` must be 0). ``stage`` names the stage; otherwise the
    run's tables choose it (module docstring). ``config``: the configuration file (default the lab's)."""
    from .config.load import load
    from .gpu.device import driver

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
    cfg = load(Path(config) if config else ROOT / "config" / "config.yaml")
    name = stage or choose(cfg, Path(run) if run else DEFAULT_RUN, shape, race)
    if name not in [k.id for k in cfg.kernels]:
        raise LabError(f"matmul: no stage '{name}' in the config")
    driver()  # the primary context, which CuPy and PyTorch use too
    launcher(cfg, name)(shape, float(alpha), A.ptr, B.ptr, float(beta), C.ptr, None)
    return c
