"""Configuration: JSON-schema validation with defaults, then frozen records.

The schema (``workflow/schemas/config.schema.yaml``) is the single source of defaults; this module
fills them in, checks what a schema cannot (unique ids, sources that exist) and turns the dict into
immutable dataclasses that the rest of the package uses (``records``).
"""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from ..errors import ConfigError
from .geometry import check_params
from .rules import time_models
from .records import (BASELINES, KERNEL_DIR, ROOT, BenchSettings, CheckSettings, CpuSettings, DispatchRule,
                      Distribution, EpilogueSettings, HeldOutDraw, KernelSpec, LabConfig, ProfileSettings, Shape, SweepSettings,
                      frozen)

if TYPE_CHECKING:
    from .files import Origins

SCHEMA_PATH = ROOT / "workflow" / "schemas" / "config.schema.yaml"


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
    from . import rules
    from .files import numbers_as_numbers

    cfg = numbers_as_numbers(copy.deepcopy(dict(raw)))
    rules.run_name(cfg)

    def where(path) -> str:
        return origins.of(tuple(path)) if origins is not None else source

    rules.finite_numbers(cfg, where)
    schema = load_schema()
    for key, sub in schema["properties"].items():  # --config strict=false arrives as a string
        if sub.get("type") == "boolean" and isinstance(cfg.get(key), str) and cfg[key].lower() in ("true", "false"):
            cfg[key] = cfg[key].lower() == "true"
    import jsonschema

    validator = _with_defaults(jsonschema.Draft202012Validator)(schema)
    _command_line_numbers(cfg, validator, where)
    errors = sorted(validator.iter_errors(cfg), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        path = list(err.absolute_path)
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            allowed = set(err.schema.get("properties", {}))
            extra = sorted(k for k in err.instance if k not in allowed)
            path += extra[:1]  # (the file that set the unknown key, not the schema's defaults)
        message = err.message
        if err.validator == "type" and isinstance(err.instance, str) and err.schema.get("maxItems") == 3 \
                and err.schema.get("minItems") == 3:
            message = f"{err.instance!r} is not a shape: write [M, N, K], or \"MxNxK\" on the command line"
        raise ConfigError(f"{where(path)}: {_where(err)}: {message}{more}")
    rules.check_all(cfg, where)
    ids = [k["id"] for k in cfg["kernels"]]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ConfigError(f"{where(('kernels',))}: kernels: duplicate id(s) {', '.join(dupes)}")
    clash = sorted(set(ids) & set(BASELINES))
    if clash:
        raise ConfigError(f"{where(('kernels',))}: kernels: id(s) {', '.join(clash)} are reserved for baselines")
    cfg["remeasure"] = remeasured(cfg)
    stray = sorted(set(cfg["remeasure"]) - set(ids) - set(BASELINES))
    if stray:
        raise ConfigError(f"{where(('remeasure',))}: remeasure: {', '.join(stray)} is no configured stage "
                          f"or baseline (stages: {', '.join(ids)})")
    unknown = [s for s in cfg.get("time", {}).get("stages", []) if s not in ids and s not in BASELINES]
    if unknown:
        raise ConfigError(f"{where(('time',))}: time.stages: {', '.join(unknown)} is no configured stage or "
                          f"baseline (stages: {', '.join(ids)})")
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
            if base is None or "source" not in base or base.get("backend", "cuda") != "cuda" or base.get("geometry") == "phases":
                raise ConfigError(f"{here}: kernels[{i}] ({k['id']}): dispatch_from names '{k['dispatch_from']}', "
                                  "which is not an earlier CUDA stage of one kernel with a source")
            for j, over in enumerate(k["candidates"]):
                unknown = sorted(set(over) - set(base.get("params", {})))
                if unknown:
                    raise ConfigError(f"{here}: kernels[{i}] ({k['id']}): candidates[{j}] sets "
                                      f"{', '.join(unknown)}, which {base['id']} has no default for")
            if "rule" in k:
                rules.dispatch_rule(k, base, f"{here}: kernels[{i}] ({k['id']})")
        elif "rule" in k:
            raise ConfigError(f"{here}: kernels[{i}] ({k['id']}): rule is for dispatch stages (dispatch_from)")
        if "source" in k and not (KERNEL_DIR / k["source"]).is_file():
            raise ConfigError(
                f"{here}: kernels[{i}] ({k['id']}): source file kernels/{k['source']} does not exist"
            )
        built = base["source"] if "dispatch_from" in k else k.get("source")  # a dispatch stage builds its base's
        if built:
            rules.split_waves(k, KERNEL_DIR / built, f"{here}: kernels[{i}] ({k['id']})")
    return cfg


_INT = re.compile(r"[-+]?[0-9]+")
_SHAPE = re.compile(r"([0-9]+)\s*[x×]\s*([0-9]+)\s*[x×]\s*([0-9]+)")  # "1000x2000x3000", a shape as text
_NUMBER = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")


def _command_line_numbers(cfg: dict, validator, where) -> None:
    """Numbers nested in ``--config`` values read as numbers: Snakemake hands over the leaves of
    ``--config 'check={"alpha": 1.5}'`` as text. Only where the schema wants a number (or a boolean)
    there and the text is one, and only for keys ``--config`` set: a file's quoted "1.5" stays an
    error. A shape may be written as text there too, ``"1000x2000x3000"`` for [1000, 2000, 3000]."""
    for _ in range(10_000):  # (each pass turns at least one text into a number, or ends)
        changed = False
        for err in validator.iter_errors(cfg):
            want = err.validator_value if err.validator == "type" else None
            if not isinstance(err.instance, str) or want is None or where(err.absolute_path) != "--config":
                continue
            want = [want] if isinstance(want, str) else list(want)
            text = err.instance.strip()
            if len(text) > 40:  # (no number the configuration takes is that long)
                continue
            shape = _SHAPE.fullmatch(text) if "array" in want and err.schema.get("maxItems") == 3 else None
            if shape and err.schema.get("minItems") == 3:
                value = [int(x) for x in shape.groups()]
            elif "integer" in want and _INT.fullmatch(text):
                value = int(text)
            elif "number" in want and _NUMBER.fullmatch(text) and math.isfinite(float(text)):
                value = float(text) if not _INT.fullmatch(text) else int(text)
            elif "boolean" in want and text.lower() in ("true", "false"):
                value = text.lower() == "true"
            else:
                continue
            *parents, last = list(err.absolute_path)
            if not parents and last is None:
                continue
            node = cfg
            for part in parents:
                node = node[part]
            node[last] = value
            changed = True
        if not changed:
            return


def remeasured(raw: Mapping[str, Any]) -> list[str]:
    """The stage ids of ``remeasure`` (a list, or one string of ids separated by commas)."""
    value = raw.get("remeasure")
    if value is None or value == "":
        return []
    items = value.split(",") if isinstance(value, str) else value if isinstance(value, list) else [value]
    return [str(v).strip() for v in items if str(v).strip()]  # (an id of digits may arrive as a number)


def from_dict(raw: Mapping[str, Any], *, source: str = "config", trusted: bool = False,
              origins: "Origins | None" = None) -> LabConfig:
    """The LabConfig of ``raw``. ``trusted``: ``raw`` is a config that ``validate`` already filled in (the
    workflow does this once; its jobs then skip the schema, and importing jsonschema); a dict that turns
    out not to be complete is validated after all."""
    if trusted:
        try:
            return _records(raw, source=source, origins=origins)
        except KeyError:
            pass
    cfg = validate(raw, source=source, origins=origins)
    return _records(cfg, source=source, origins=origins)


def _records(cfg: Mapping[str, Any], *, source: str = "config", origins: "Origins | None" = None) -> LabConfig:
    """The records of a validated config; a stage's refusal names the file that set that stage
    (``origins``), else ``source``."""
    kernels = []
    for i, k in enumerate(cfg["kernels"]):
        here = origins.of(("kernels", i)) if origins is not None else source
        grids = k["sweep"] if isinstance(k["sweep"], list) else ([k["sweep"]] if k["sweep"] else [])
        sweep = tuple(frozen({name: tuple(vals) for name, vals in g.items()}) for g in grids)
        swept_names = list(dict.fromkeys(n for g in sweep for n in g))
        spec = KernelSpec(
            id=k["id"],
            source=k.get("source", ""),
            entry=k.get("entry", ""),
            title=k["title"],
            geometry=k.get("geometry", ""),
            backend=k["backend"],
            params=frozen(k["params"]),
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
            candidates=tuple(frozen(c) for c in k.get("candidates", ())),
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
            held_out=bool(k.get("held_out", False)),
            arch=k.get("arch", ""),
            tensor_maps=tuple(frozen({**m, "box": tuple(m["box"]), **({"dims": tuple(m["dims"])} if "dims" in m else {})})
                              for m in k["tensor_maps"]),
            sizes=frozen({name: str(text) for name, text in k.get("sizes", {}).items()}),
            workspace=tuple(frozen(b) for b in k.get("workspace", ())),
            phases=tuple(frozen({**ph, "grid": tuple(ph["grid"]), "block": tuple(ph["block"]), "args": tuple(ph["args"])})
                         for ph in k.get("phases", ())),
            main_roof=frozen({key: str(v) for key, v in k.get("main_roof", {}).items()}),
            time_model=frozen({str(t): float(c) for t, c in k.get("time_model", {}).get("terms", {}).items()}),
            time_fitted=" ".join(k.get("time_model", {}).get("fitted", "").split()),
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
            raise ConfigError(f"{here}: {exc}") from None
        kernels.append(spec)
    # after every stage's own checks: a term's names come from sizes and parameters those have accepted
    time_models(cfg, lambda path: origins.of(tuple(path)) if origins is not None else source)
    bench = cfg["bench"]
    shapes = [Shape(m=s, n=s, k=s) for s in bench["square"]] + [Shape.of(s) for s in bench["shapes"]]
    suite = tuple(dict.fromkeys(Shape.of(x) for x in cfg.get("suite", {}).get("shapes", [])))
    draw, held_out = _held_out(cfg, suite, tuple(shapes))
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
                                             scale_log2=int(d.get("scale_log2", 120)),
                                             int_max=int(d.get("int_max", 8)), bits=int(d.get("bits", 8)),
                                             zeros=float(d.get("zeros", 0.9)),
                                             shapes=tuple(dict.fromkeys(Shape.of(s) for s in d.get("shapes", ()))))
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
            retimes=int(bench["retimes"]),
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
        suite=suite,
        held_out=tuple(s for _, s in held_out),
        held_out_classes=tuple(c for c, _ in held_out),
        held_out_draw=draw,
        time_stages=tuple(cfg.get("time", {}).get("stages", ())),
        time_shapes=tuple(dict.fromkeys(Shape.of(s) for s in cfg.get("time", {}).get("shapes", ()))),
    )


def held_out_streams(draw: HeldOutDraw, suite, bench):
    """(fit, score): the (class, shape) pairs of the draw's two streams, neither holding a shape of the suite
    or the bench (shape_classes.fit_and_score): the dispatch rules are fitted on the first, the pipeline
    times the second as held out. One place for the exclusion, for the config and the tools alike."""
    from . import shape_classes

    return shape_classes.fit_and_score(draw.seed, draw.per_class, exclude=tuple(suite) + tuple(bench))


def _held_out(cfg: Mapping[str, Any], suite: tuple[Shape, ...], bench: tuple[Shape, ...]):
    """The held-out draw (suite.held_out) and its (class, shape) pairs: the score stream of the seed."""
    h = cfg.get("suite", {}).get("held_out")
    if not h or not h.get("per_class"):
        return None, []
    draw = HeldOutDraw(seed=int(h["seed"]), per_class=int(h["per_class"]), target_ms=float(h["target_ms"]))
    return draw, held_out_streams(draw, suite, bench)[1]


def load(path: str | Path, overrides: Mapping[str, Any] | None = None) -> LabConfig:
    """Read a YAML config file (plus optional top-level overrides) into a LabConfig."""
    from .files import Origins, read

    raw = read(path)
    origins = Origins([(str(path), raw)], overrides)
    raw.update(overrides or {})
    return from_dict(raw, source=str(path), origins=origins)
