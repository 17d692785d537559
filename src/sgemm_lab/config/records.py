"""Configuration records: the frozen dataclasses that the rest of the package uses (a stage, a shape, the
settings of each step, the whole run), the paths they name and the library baselines.

Their loading (the schema's defaults, the checks a schema cannot make, the dict turned into records) is
``load``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator, Mapping

from ..errors import ConfigError

def _lab_root() -> Path:
    """The checkout this package runs from; or, installed from a wheel, the lab's files the wheel carries
    under ``sys.prefix/share/sgemm-lab`` (the schema, the base config and the kernels; pyproject.toml)."""
    import sys

    here = Path(__file__).resolve().parents[3]
    if (here / "workflow" / "schemas" / "config.schema.yaml").is_file():
        return here
    shared = Path(sys.prefix) / "share" / "sgemm-lab"
    return shared if (shared / "workflow" / "schemas" / "config.schema.yaml").is_file() else here


ROOT = _lab_root()
# the kernel sources; SGEMM_LAB_KERNELS points elsewhere (e.g. a directory of experimental stages)
KERNEL_DIR = Path(os.environ.get("SGEMM_LAB_KERNELS") or ROOT / "kernels")
BASELINES = ("cublas", "cublas_tf32", "numpy")
GPU_BASELINES = ("cublas", "cublas_tf32")
# The precision classes a stage may declare (KernelSpec.precision): fp32 (FFMA), tf32 (TF32 tensor cores),
# 3xtf32 (TF32 tensor cores with error compensation) and ozaki2 (exact INT8 tensor-core products of
# residues, rebuilt by the Chinese remainder theorem: the Ozaki scheme II). The FP32-accurate ones are held
# to the FP32 limit and race cuBLAS strict FP32.
PRECISIONS = ("fp32", "tf32", "3xtf32", "ozaki2")
FP32_ACCURATE = ("fp32", "3xtf32", "ozaki2")
# The precision class of each library baseline (a stage declares its own: KernelSpec.precision).
BASELINE_PRECISION = {"cublas": "fp32", "cublas_tf32": "tf32", "numpy": "fp32"}
# The races a user of the lab picks a stage from: each one's cuBLAS and the precision classes that run in it.
RACES = {"fp32": ("cublas", ("fp32",)), "fp32_accurate": ("cublas", FP32_ACCURATE), "tf32": ("cublas_tf32", ("tf32",))}


@dataclass(frozen=True, kw_only=True, order=True)
class Shape:
    m: int
    n: int
    k: int

    def __str__(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    @classmethod
    def of(cls, mnk: "Shape | tuple[int, int, int] | list[int]") -> "Shape":
        if isinstance(mnk, Shape):
            return mnk
        m, n, k = mnk
        return cls(m=int(m), n=int(n), k=int(k))


class FrozenMap(Mapping):
    """A read-only mapping (a stage's parameters, a sweep grid, a candidate): like ``MappingProxyType``, but it
    pickles, so that a ``LabConfig`` crosses to a child process as itself."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping = ()):
        object.__setattr__(self, "_items", dict(items))

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __getitem__(self, key):
        return self._items[key]

    def __iter__(self) -> Iterator:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __or__(self, other: Mapping) -> dict:
        return {**self._items, **other}

    def __ror__(self, other: Mapping) -> dict:
        return {**other, **self._items}

    def __repr__(self) -> str:
        return repr(self._items)

    def __reduce__(self):
        return FrozenMap, (self._items,)


def frozen(d: Mapping) -> Mapping:
    return FrozenMap(d)


@dataclass(frozen=True, kw_only=True)
class DispatchRule:
    """How a dispatch stage chooses a candidate on any shape: ``cost`` (an integer expression, see
    ``sgemm_lab.config.geometry.plan_names`` for its names) is evaluated for each candidate, with ``step[i]``
    as candidate i's ``STEP``, and the cheapest candidate runs."""

    cost: str
    step: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class RaceRule:
    """How a race (``RACES``) picks among stages of different kernels on any shape: the stages of its classes
    with a ``time_model`` are its members; each one's time in ns is predicted as the sum of its terms (integer
    expressions, see ``sgemm_lab.dispatch.race.term_names``) each times its coefficient, and the member of
    the least runs (:meth:`LabConfig.race_rule`)."""

    race: str
    members: Mapping[str, Mapping[str, float]]  # stage id -> term -> ns per unit of the term
    fitted: tuple[str, ...] = ()                 # what the members' coefficients were fitted on, in words


@dataclass(frozen=True, kw_only=True)
class KernelSpec:
    """One stage of the ladder, as configured. An autotuned stage (``tune_from``) has no source of its
    own until the pipeline resolves it from the tile sweeps (see ``dispatch.autotune.resolve``)."""

    id: str
    title: str
    source: str = ""
    entry: str = ""
    geometry: str = ""
    backend: str = "cuda"
    params: Mapping[str, int] = field(default_factory=lambda: frozen({}))
    shapes: str = "tile_multiple"
    max_local_bytes: int = 0
    explain: str = ""
    constraints: tuple[str, ...] = ()
    runs_when: tuple[str, ...] = ()  # expressions over the parameters and M, N, K: the shapes it runs
    shared_bytes: str = "0"
    dynamic_shared: bool = False
    sweep: tuple[Mapping[str, tuple[int, ...]], ...] = ()  # grids; the sweep is the union of their products
    sweep_axes: tuple[str, ...] = ()
    tune_from: tuple[str, ...] = ()
    dispatch_from: str = ""  # a per-shape dispatch stage: its base stage (see sgemm_lab.dispatch.choice)
    candidates: tuple[Mapping[str, int], ...] = ()  # ... and the parameter overrides it chooses among
    rule: DispatchRule | None = None  # ... by this model; without one, by its measured table
    precision: str = "fp32"  # one of PRECISIONS: the class of its tolerance (results.verify.tolerance_for)
    signature: str = "gemm"
    micro_tile: tuple[str, str] = ("TM", "TN")
    max_dim: int | None = None  # shapes with a larger dimension are skipped (host stages: cpu.max_dim)
    max_dim_source: str = "max_dim"  # the config key it came from, for the skip reason
    suite: bool = True  # also timed on the suite shapes (LabConfig.suite)
    held_out: bool = False  # also timed on the held-out shapes (LabConfig.held_out), with cuBLAS FP32
    arch: str = ""  # compile target instead of the device's (e.g. sm_90a); see gpu.compile.target_arch
    tensor_maps: tuple[Mapping[str, Any], ...] = ()  # TMA maps the launcher writes (see sgemm_lab.gpu.tensormap)
    # geometry phases: a stage of several kernels (see sgemm_lab.config.phases)
    sizes: Mapping[str, str] = field(default_factory=lambda: frozen({}))
    workspace: tuple[Mapping[str, Any], ...] = ()
    phases: tuple[Mapping[str, Any], ...] = ()
    main_roof: Mapping[str, str] = field(default_factory=lambda: frozen({}))  # {ops, ceiling}: the main phase's rate
    time_model: Mapping[str, float] = field(default_factory=lambda: frozen({}))  # term -> ns per unit (races)
    time_fitted: str = ""

    @property
    def source_path(self) -> Path:
        return KERNEL_DIR / self.source

    @property
    def autotuned(self) -> bool:
        return bool(self.tune_from)

    @property
    def dispatched(self) -> bool:
        return bool(self.dispatch_from)

    @property
    def has_sweep(self) -> bool:
        return bool(self.sweep)

    @property
    def swept_names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(n for g in self.sweep for n in g))

    def with_params(self, **changes: int) -> "KernelSpec":
        return replace(self, params=frozen({**self.params, **changes}))


@dataclass(frozen=True, kw_only=True)
class Distribution:
    """Input values of a check (see results.verify.draw): ``kind`` and its parameters, under a ``name``."""

    name: str
    kind: str = "uniform"
    log2_range: tuple[int, int] = (-20, 20)  # loguniform: the exponents of the magnitudes
    scale_log2: int = 120                    # extreme: A scaled by 2^scale_log2, B by 2^-scale_log2
    int_max: int = 8                         # integers: nonzero whole numbers in [-int_max, int_max]
    bits: int = 8                            # short: significands of this many bits (8: bfloat16's)
    zeros: float = 0.9                       # sparse: the share of elements that are zero
    shapes: tuple["Shape", ...] = ()         # the check shapes it runs at (none: distribution_shapes)


UNIFORM = Distribution(name="uniform")


@dataclass(frozen=True, kw_only=True)
class CheckSettings:
    shapes: tuple[Shape, ...]
    alpha: float
    beta: float
    tolerance_factor: float
    tf32_tolerance_factor: float = 2.0
    fp32_factor: float = 64.0  # FP32 class: error at most this times cuBLAS strict FP32's on the same inputs
    distributions: tuple[Distribution, ...] = ()  # beyond uniform, run at distribution_shapes
    distribution_shapes: tuple[Shape, ...] = ()

    def points(self) -> tuple[tuple[Shape, Distribution], ...]:
        """Every check point: each shape with uniform inputs, then each further distribution at its own
        shapes, or else at the distribution shapes."""
        return tuple((s, UNIFORM) for s in self.shapes) + tuple(
            (s, d) for d in self.distributions for s in (d.shapes or self.distribution_shapes))


@dataclass(frozen=True, kw_only=True)
class BenchSettings:
    shapes: tuple[Shape, ...]
    warmup_ms: float
    rewarm_ms: float
    target_ms: float
    min_reps: int
    max_reps: int
    l2_policy: str
    retimes: int = 0


@dataclass(frozen=True, kw_only=True)
class CpuSettings:
    max_dim: int
    cflags: tuple[str, ...]
    min_reps: int
    target_ms: float


@dataclass(frozen=True, kw_only=True)
class SweepSettings:
    shape: Shape
    warmup_ms: float
    rewarm_ms: float
    target_ms: float
    min_reps: int
    max_reps: int
    jobs: int


@dataclass(frozen=True, kw_only=True)
class ProfileSettings:
    enabled: bool
    shapes: tuple[Shape, ...]


@dataclass(frozen=True, kw_only=True)
class EpilogueSettings:
    shapes: tuple[Shape, ...]
    padded_shape: Shape
    acts: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class HeldOutDraw:
    """The draw of held-out shapes (``suite.held_out``): ``per_class`` shapes of every class of
    ``sgemm_lab.config.shape_classes``, from the score stream of ``seed``; the fit stream of the same seed
    is what the dispatch rules are fitted on (``tools/fit_rules.py``)."""
    seed: int
    per_class: int
    target_ms: float = 40.0  # a held-out point's timing budget (below the bench's and sweeps' own, never above)


@dataclass(frozen=True, kw_only=True)
class LabConfig:
    """The whole run's configuration, as every step and every child process receives it: the processes a
    step starts get this object (it pickles; ``handoff`` for a child started as a command), never the dict
    it was made from."""

    run: str
    strict: bool
    seed: int | None
    arch: str
    watchdog_s: float
    check: CheckSettings
    bench: BenchSettings
    cpu: CpuSettings
    sweep: SweepSettings
    epilogue: EpilogueSettings
    profile: ProfileSettings
    sanitize: bool
    failure_tests: bool
    cublas: bool
    numpy: bool
    kernels: tuple[KernelSpec, ...]
    suite: tuple[Shape, ...] = ()  # the shapes of the "vs cuBLAS" table, beyond the size sweep
    cublas_tf32: bool = False      # cuBLAS SGEMM in TF32 tensor-op math: the baseline of TF32-class stages
    # shapes no rule was fitted on and no stage tuned for (suite.held_out), with the class each was drawn for
    held_out: tuple[Shape, ...] = ()
    held_out_classes: tuple[str, ...] = ()
    held_out_draw: HeldOutDraw | None = None
    # the target `time`: these stages at these shapes only (config key time)
    time_stages: tuple[str, ...] = ()
    time_shapes: tuple[Shape, ...] = ()

    def race_rule(self, race: str) -> RaceRule | None:
        """The rule of ``race``: its stages with a ``time_model``, where there are two or more (else None)."""
        if race not in RACES:
            raise ConfigError(f"race '{race}' is none of {', '.join(RACES)}")
        members = {k.id: k.time_model for k in self.kernels if k.time_model and k.precision in RACES[race][1]}
        if len(members) < 2:
            return None
        fitted = tuple(dict.fromkeys(k.time_fitted for k in self.kernels if k.id in members and k.time_fitted))
        return RaceRule(race=race, members=frozen(members), fitted=fitted)

    def bench_shapes(self, impl: str) -> tuple[Shape, ...]:
        """What the bench step times for ``impl``: the size sweep, then the suite shapes it does not
        already hold for cuBLAS and every GPU stage with ``suite: true`` (host stages and NumPy: never),
        then the held-out shapes for cuBLAS FP32 and every GPU stage with ``held_out: true``."""
        if impl == "numpy" or (impl not in GPU_BASELINES and not self._in_suite(self.kernel(impl))):
            shapes = self.bench.shapes
        else:
            shapes = self.bench.shapes + self.suite
        if impl == "cublas" or (impl not in BASELINE_PRECISION and self.times_held_out(self.kernel(impl))):
            shapes = shapes + self.held_out
        return tuple(dict.fromkeys(shapes))

    def point_target_ms(self, shape: Shape, target_ms: float) -> float:
        """The timing budget of one point at ``shape`` in a step whose own is ``target_ms``: the held-out
        draw's where ``shape`` is held out and that is lower (its shapes are mostly small, and a median
        settles in far fewer repetitions than the bench's budget buys them), else the step's."""
        if self.held_out_draw is not None and shape in self.held_out:
            return min(target_ms, self.held_out_draw.target_ms)
        return target_ms

    @staticmethod
    def times_held_out(spec: KernelSpec) -> bool:
        """Whether the bench times ``spec`` on the held-out shapes: ``held_out: true`` and a GPU stage."""
        return spec.held_out and (spec.backend == "cuda" or spec.autotuned)

    @staticmethod
    def _in_suite(spec: KernelSpec) -> bool:
        return spec.suite and (spec.backend == "cuda" or spec.autotuned)

    def on_host(self, impl: str) -> bool:
        """Whether ``impl`` is built and timed without the GPU (the C compiler, the CPU to itself): a host
        stage that is not autotuned, or the NumPy baseline. Its check still uses the GPU (cuBLAS FP32
        beside it)."""
        if impl == "numpy":
            return True
        if impl in BASELINES:
            return False
        spec = self.kernel(impl)
        return spec.backend == "host" and not spec.autotuned

    @property
    def gpu_implementations(self) -> tuple[str, ...]:
        """What runs on the GPU (and so is profiled): CUDA stages and cuBLAS."""
        return tuple(k.id for k in self.kernels if k.backend == "cuda") + self.gpu_baselines

    @property
    def precisions(self) -> dict[str, str]:
        """The precision class of every implementation: the stages' own, the library baselines' fixed."""
        return BASELINE_PRECISION | {k.id: k.precision for k in self.kernels}

    @property
    def gpu_baselines(self) -> tuple[str, ...]:
        """The cuBLAS baselines this run times: strict FP32, and TF32 when configured."""
        return (("cublas",) if self.cublas else ()) + (("cublas_tf32",) if self.cublas_tf32 else ())

    @property
    def fused(self) -> tuple[KernelSpec, ...]:
        return tuple(k for k in self.kernels if k.signature == "fused")

    @property
    def swept(self) -> tuple[KernelSpec, ...]:
        return tuple(k for k in self.kernels if k.has_sweep)

    def kernel(self, kernel_id: str) -> KernelSpec:
        for spec in self.kernels:
            if spec.id == kernel_id:
                return spec
        known = ", ".join(k.id for k in self.kernels)
        raise ConfigError(f"unknown kernel id '{kernel_id}' (configured: {known})")

    @property
    def implementations(self) -> tuple[str, ...]:
        """Every timed implementation: the configured kernels, then the library baseline."""
        return tuple(k.id for k in self.kernels) + self.gpu_baselines + (("numpy",) if self.numpy else ())
