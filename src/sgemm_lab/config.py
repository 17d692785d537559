"""Configuration: JSON-schema validation with defaults, then frozen records.

The schema (``workflow/schemas/config.schema.yaml``) is the single source of defaults; this module
fills them in, checks what a schema cannot (unique ids, sources that exist) and turns the dict into
immutable dataclasses that the rest of the package uses.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping

from .errors import ConfigError
from .geometry import check_params

if TYPE_CHECKING:
    from .configfile import Origins

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = ROOT / "workflow" / "schemas" / "config.schema.yaml"
# the kernel sources; SGEMM_LAB_KERNELS points elsewhere (e.g. a directory of experimental stages)
KERNEL_DIR = Path(os.environ.get("SGEMM_LAB_KERNELS") or ROOT / "kernels")
BASELINES = ("cublas", "cublas_tf32", "numpy")
GPU_BASELINES = ("cublas", "cublas_tf32")
# The precision class of each library baseline (a stage declares its own: KernelSpec.precision).
BASELINE_PRECISION = {"cublas": "fp32", "cublas_tf32": "tf32", "numpy": "fp32"}


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


def _frozen(d: Mapping) -> Mapping:
    return MappingProxyType(dict(d))


@dataclass(frozen=True, kw_only=True)
class DispatchRule:
    """How a dispatch stage chooses a candidate on any shape: ``cost`` (an integer expression, see
    ``sgemm_lab.dispatch.rule_names`` for its names) is evaluated for each candidate, with ``step[i]``
    as candidate i's ``STEP``, and the cheapest candidate runs."""

    cost: str
    step: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class KernelSpec:
    """One stage of the ladder, as configured. An autotuned stage (``tune_from``) has no source of its
    own until the pipeline resolves it from the tile sweeps (see ``autotune.resolve``)."""

    id: str
    title: str
    source: str = ""
    entry: str = ""
    geometry: str = ""
    backend: str = "cuda"
    params: Mapping[str, int] = field(default_factory=lambda: _frozen({}))
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
    dispatch_from: str = ""  # a per-shape dispatch stage: its base stage (see sgemm_lab.dispatch)
    candidates: tuple[Mapping[str, int], ...] = ()  # ... and the parameter overrides it chooses among
    rule: DispatchRule | None = None  # ... by this model; without one, by its measured table
    precision: str = "fp32"  # fp32, tf32 or 3xtf32: the class of its tolerance (verify.tolerance_for)
    signature: str = "gemm"
    micro_tile: tuple[str, str] = ("TM", "TN")
    max_dim: int | None = None  # shapes with a larger dimension are skipped (host stages: cpu.max_dim)
    max_dim_source: str = "max_dim"  # the config key it came from, for the skip reason
    suite: bool = True  # also timed on the suite shapes (LabConfig.suite)
    arch: str = ""  # compile target instead of the device's (e.g. sm_90a); see compile.target_arch
    tensor_maps: tuple[Mapping[str, Any], ...] = ()  # TMA maps the launcher writes (see sgemm_lab.tensormap)

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
        return replace(self, params=_frozen({**self.params, **changes}))


@dataclass(frozen=True, kw_only=True)
class Distribution:
    """Input values of a check (see verify.draw): ``kind`` and its parameters, under a ``name``."""

    name: str
    kind: str = "uniform"
    log2_range: tuple[int, int] = (-20, 20)  # loguniform: the exponents of the magnitudes
    scale_log2: int = 120                    # extreme: A scaled by 2^scale_log2, B by 2^-scale_log2


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
        """Every check point: each shape with uniform inputs, then each further distribution at the
        distribution shapes."""
        return tuple((s, UNIFORM) for s in self.shapes) + tuple(
            (s, d) for d in self.distributions for s in self.distribution_shapes)


@dataclass(frozen=True, kw_only=True)
class BenchSettings:
    shapes: tuple[Shape, ...]
    warmup_ms: float
    rewarm_ms: float
    target_ms: float
    min_reps: int
    max_reps: int
    l2_policy: str


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
class LabConfig:
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

    def bench_shapes(self, impl: str) -> tuple[Shape, ...]:
        """What the bench step times for ``impl``: the size sweep, then the suite shapes it does not
        already hold for cuBLAS and every GPU stage with ``suite: true`` (host stages and NumPy: never)."""
        if impl == "numpy" or (impl not in GPU_BASELINES and not self._in_suite(self.kernel(impl))):
            return self.bench.shapes
        return tuple(dict.fromkeys(self.bench.shapes + self.suite))

    @staticmethod
    def _in_suite(spec: KernelSpec) -> bool:
        return spec.suite and (spec.backend == "cuda" or spec.autotuned)

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


def load_schema() -> dict:
    import yaml

    with open(SCHEMA_PATH) as fh:
        return yaml.safe_load(fh)


def _with_defaults(validator_class):
    """Extend a jsonschema validator so that validation also fills ``default`` values."""
    import jsonschema

    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if "default" in sub and name not in instance:
                    instance[name] = copy.deepcopy(sub["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def _where(error) -> str:
    parts = []
    for p in error.absolute_path:
        parts.append(f"[{p}]" if isinstance(p, int) else (f".{p}" if parts else str(p)))
    return "".join(parts) or "<top level>"


def validate(raw: Mapping[str, Any], *, source: str = "config", origins: "Origins | None" = None) -> dict:
    """Return a validated copy of ``raw`` with every schema default filled in.

    Raises ConfigError with one line naming the file that set the offending key (``origins``: which
    file set which key; else ``source``), the key, and what is wrong.
    """
    from . import config_rules
    from .configfile import numbers_as_numbers

    cfg = numbers_as_numbers(copy.deepcopy(dict(raw)))
    config_rules.run_name(cfg)

    def where(path) -> str:
        return origins.of(tuple(path)) if origins is not None else source

    config_rules.finite_numbers(cfg, where)
    schema = load_schema()
    for key, sub in schema["properties"].items():  # --config strict=false arrives as a string
        if sub.get("type") == "boolean" and isinstance(cfg.get(key), str) and cfg[key].lower() in ("true", "false"):
            cfg[key] = cfg[key].lower() == "true"
    import jsonschema

    validator = _with_defaults(jsonschema.Draft202012Validator)(schema)
    errors = sorted(validator.iter_errors(cfg), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ConfigError(f"{where(err.absolute_path)}: {_where(err)}: {err.message}{more}")
    config_rules.check_all(cfg, where)
    ids = [k["id"] for k in cfg["kernels"]]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ConfigError(f"{where(('kernels',))}: kernels: duplicate id(s) {', '.join(dupes)}")
    clash = sorted(set(ids) & set(BASELINES))
    if clash:
        raise ConfigError(f"{where(('kernels',))}: kernels: id(s) {', '.join(clash)} are reserved for baselines")
    for i, k in enumerate(cfg["kernels"]):
        here = where(("kernels", i))
        for src in k.get("tune_from", []):
            target = next((t for t in cfg["kernels"] if t["id"] == src), None)
            if target is None or not target.get("sweep"):
                raise ConfigError(f"{here}: kernels[{i}] ({k['id']}): tune_from names '{src}', "
                                  "which is not a configured stage with a tile sweep")
        if "dispatch_from" in k:
            earlier = {t["id"]: t for t in cfg["kernels"][:i]}
            base = earlier.get(k["dispatch_from"])
            if base is None or "source" not in base or base.get("backend", "cuda") != "cuda":
                raise ConfigError(f"{here}: kernels[{i}] ({k['id']}): dispatch_from names '{k['dispatch_from']}', "
                                  "which is not an earlier CUDA stage with a source")
            for j, over in enumerate(k["candidates"]):
                unknown = sorted(set(over) - set(base.get("params", {})))
                if unknown:
                    raise ConfigError(f"{here}: kernels[{i}] ({k['id']}): candidates[{j}] sets "
                                      f"{', '.join(unknown)}, which {base['id']} has no default for")
            if "rule" in k:
                config_rules.dispatch_rule(k, base, f"{here}: kernels[{i}] ({k['id']})")
        elif "rule" in k:
            raise ConfigError(f"{here}: kernels[{i}] ({k['id']}): rule is for dispatch stages (dispatch_from)")
        if "source" in k and not (KERNEL_DIR / k["source"]).is_file():
            raise ConfigError(
                f"{here}: kernels[{i}] ({k['id']}): source file kernels/{k['source']} does not exist"
            )
    return cfg


def from_dict(raw: Mapping[str, Any], *, source: str = "config", trusted: bool = False,
              origins: "Origins | None" = None) -> LabConfig:
    """The LabConfig of ``raw``. ``trusted``: ``raw`` is a config that ``validate`` already filled in (the
    workflow does this once; its jobs then skip the schema, and importing jsonschema); a dict that turns
    out not to be complete is validated after all."""
    if trusted:
        try:
            return _records(raw)
        except KeyError:
            pass
    cfg = validate(raw, source=source, origins=origins)
    return _records(cfg, source=source if origins is None else origins.of(("kernels",)))


def _records(cfg: Mapping[str, Any], *, source: str = "config") -> LabConfig:
    kernels = []
    for k in cfg["kernels"]:
        grids = k["sweep"] if isinstance(k["sweep"], list) else ([k["sweep"]] if k["sweep"] else [])
        sweep = tuple(_frozen({name: tuple(vals) for name, vals in g.items()}) for g in grids)
        swept_names = list(dict.fromkeys(n for g in sweep for n in g))
        spec = KernelSpec(
            id=k["id"],
            source=k.get("source", ""),
            entry=k.get("entry", ""),
            title=k["title"],
            geometry=k.get("geometry", ""),
            backend=k["backend"],
            params=_frozen(k["params"]),
            shapes=k["shapes"],
            max_local_bytes=k["max_local_bytes"],
            explain=k["explain"].strip(),
            constraints=tuple(k["constraints"]),
            runs_when=tuple(k["runs_when"]),
            shared_bytes=k["shared_bytes"],
            dynamic_shared=k["dynamic_shared"],
            sweep=sweep,
            sweep_axes=tuple(k.get("sweep_axes") or swept_names[:2]),
            tune_from=tuple(k.get("tune_from", ())),
            dispatch_from=k.get("dispatch_from", ""),
            candidates=tuple(_frozen(c) for c in k.get("candidates", ())),
            rule=DispatchRule(cost=k["rule"]["cost"], step=tuple(k["rule"]["step"])) if "rule" in k else None,
            # a dispatch stage runs its base stage's kernel: it computes, and is judged, as that stage
            precision=next(b.precision for b in kernels if b.id == k["dispatch_from"]) if "dispatch_from" in k
            else k["precision"],
            signature=k["signature"],
            micro_tile=tuple(k.get("micro_tile") or (("TM" if "TM" in k["params"] else "1"),
                                                     ("TN" if "TN" in k["params"] else "1"))),
            max_dim=k.get("max_dim", cfg["cpu"]["max_dim"] if k["backend"] == "host" else None),
            max_dim_source="max_dim" if "max_dim" in k else "cpu.max_dim",
            suite=bool(k.get("suite", True)),
            arch=k.get("arch", ""),
            tensor_maps=tuple(_frozen({**m, "box": tuple(m["box"])}) for m in k["tensor_maps"]),
        )
        try:
            check_params(spec)
            if spec.dispatched:  # every candidate must be a configuration its base stage can run
                base = next(b for b in kernels if b.id == spec.dispatch_from)
                for j, over in enumerate(spec.candidates):
                    try:
                        check_params(base.with_params(**over))
                    except ConfigError as exc:
                        raise ConfigError(f"kernel {spec.id}: candidates[{j}]: {exc}") from None
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None
        kernels.append(spec)
    bench = cfg["bench"]
    shapes = [Shape(m=s, n=s, k=s) for s in bench["square"]] + [Shape.of(s) for s in bench["shapes"]]
    check = cfg["check"]
    return LabConfig(
        run=cfg["run"],
        strict=bool(cfg["strict"]),
        seed=cfg["seed"],
        arch=cfg["arch"],
        watchdog_s=float(cfg["watchdog_s"]),
        check=CheckSettings(
            shapes=tuple(dict.fromkeys(Shape.of(s) for s in check["shapes"])),
            alpha=float(check["alpha"]),
            beta=float(check["beta"]),
            tolerance_factor=float(check["tolerance_factor"]),
            tf32_tolerance_factor=float(check["tf32_tolerance_factor"]),
            fp32_factor=float(check["fp32_factor"]),
            distributions=tuple(Distribution(name=d["name"], kind=d["kind"],
                                             log2_range=tuple(d.get("log2_range", (-20, 20))),
                                             scale_log2=int(d.get("scale_log2", 120)))
                                for d in check["distributions"]),
            distribution_shapes=tuple(dict.fromkeys(Shape.of(s) for s in check["distribution_shapes"])),
        ),
        bench=BenchSettings(
            shapes=tuple(dict.fromkeys(shapes)),
            warmup_ms=float(bench["warmup_ms"]),
            rewarm_ms=min(float(bench["rewarm_ms"]), float(bench["warmup_ms"])),
            target_ms=float(bench["target_ms"]),
            min_reps=int(bench["min_reps"]),
            max_reps=max(int(bench["max_reps"]), int(bench["min_reps"])),
            l2_policy=bench["l2_policy"],
        ),
        cpu=CpuSettings(max_dim=cfg["cpu"]["max_dim"], cflags=tuple(cfg["cpu"]["cflags"]),
                        min_reps=cfg["cpu"]["min_reps"], target_ms=float(cfg["cpu"]["target_ms"])),
        sweep=SweepSettings(shape=Shape.of(cfg["sweep"]["shape"]), warmup_ms=float(cfg["sweep"]["warmup_ms"]),
                            rewarm_ms=min(float(cfg["sweep"]["rewarm_ms"]), float(cfg["sweep"]["warmup_ms"])),
                            target_ms=float(cfg["sweep"]["target_ms"]), min_reps=cfg["sweep"]["min_reps"],
                            max_reps=max(cfg["sweep"]["max_reps"], cfg["sweep"]["min_reps"]), jobs=cfg["sweep"]["jobs"]),
        epilogue=EpilogueSettings(shapes=tuple(Shape.of(x) for x in cfg["epilogue"]["shapes"]),
                                  padded_shape=Shape.of(cfg["epilogue"]["padded_shape"]),
                                  acts=tuple(cfg["epilogue"]["acts"])),
        profile=ProfileSettings(enabled=cfg["profile"]["enabled"],
                                shapes=tuple(Shape.of(x) for x in cfg["profile"]["shapes"])),
        sanitize=bool(cfg["sanitize"]),
        failure_tests=bool(cfg["failure_tests"]),
        cublas=bool(cfg["baseline"]["cublas"]),
        cublas_tf32=bool(cfg["baseline"]["cublas_tf32"]),
        numpy=bool(cfg["baseline"]["numpy"]),
        kernels=tuple(kernels),
        suite=tuple(dict.fromkeys(Shape.of(x) for x in cfg.get("suite", {}).get("shapes", []))),
    )


def load(path: str | Path, overrides: Mapping[str, Any] | None = None) -> LabConfig:
    """Read a YAML config file (plus optional top-level overrides) into a LabConfig."""
    from .configfile import Origins, read

    raw = read(path)
    origins = Origins([(str(path), raw)], overrides)
    raw.update(overrides or {})
    return from_dict(raw, source=str(path), origins=origins)
