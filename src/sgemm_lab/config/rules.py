"""What the schema cannot say about a configuration, in plain words.

Settings that would make verification vacuous or undefined (alpha = 0, non-finite alpha or beta, one
term of alpha * A @ B + beta * C scaled so far below the other that dropping it passes, no check shape), problem sizes the kernels cannot address, repetition bounds that contradict each other,
architectures no compiler knows, and stages that refer to themselves or to a source of the wrong
language. Each refusal is one line: the key, what is wrong, and why it matters; ``where`` prefixes the
file that set the key (see ``files.Origins``).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Callable, Mapping

from ..errors import ConfigError

# Every dimension of a problem is an int in the common signature, and the kernels index A, B and C
# with 32-bit arithmetic: an operand of more elements than this is beyond any of them.
MAX_ELEMENTS = 2**31 - 1
MAX_SEED = 2**63 - 1
_ARCH = re.compile(r"sm_([0-9]+)(a|f)?")  # (fullmatch: no trailing newline)
MIN_ARCH, MAX_ARCH = 50, 199  # sm_50 (Maxwell) on; nvcc 13 itself starts at sm_75

# check.alpha and check.beta: each term of alpha * A @ B + beta * C must stay visible beside the other
# (inputs are of order 1), so that a kernel that drops either fails by far more than any limit
TERM_MIN, TERM_MAX, TERM_RATIO = 2.0**-8, 2.0**8, 16.0

Where = Callable[[tuple], str]


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x != 0 and math.isfinite(x)


def _key(path: tuple) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "<top level>"


def _fail(where: Where, path: tuple, message: str) -> None:
    raise ConfigError(f"{where(path)}: {_key(path)} {message}")


def finite_numbers(cfg: Any, where: Where, path: tuple = ()) -> None:
    """Every number in the config is finite (YAML's .nan and .inf are numbers to a schema)."""
    if isinstance(cfg, Mapping):
        for k, v in cfg.items():
            finite_numbers(v, where, path + (k,))
    elif isinstance(cfg, list):
        for i, v in enumerate(cfg):
            finite_numbers(v, where, path + (i,))
    elif isinstance(cfg, float) and not math.isfinite(cfg):
        _fail(where, path, f"must be a finite number, not {cfg}")


def run_name(cfg: dict) -> None:
    """A run named by a number (``run: 2024``) is a name: YAML made it an int."""
    if isinstance(cfg.get("run"), int) and not isinstance(cfg.get("run"), bool):
        cfg["run"] = str(cfg["run"])


def _shape_sets(cfg: Mapping) -> list[tuple[tuple, Any]]:
    """(key path, [M, N, K]) of every problem shape the config names."""
    out = []
    for section, key in (("check", "shapes"), ("check", "distribution_shapes"), ("bench", "shapes"),
                         ("suite", "shapes"), ("profile", "shapes"), ("epilogue", "shapes")):
        for i, s in enumerate(cfg.get(section, {}).get(key, []) or []):
            out.append(((section, key, i), s))
    for i, s in enumerate(cfg.get("bench", {}).get("square", []) or []):
        out.append((("bench", "square", i), [s, s, s]))
    for i, d in enumerate(cfg.get("check", {}).get("distributions", []) or []):
        for j, s in enumerate((d.get("shapes") or []) if isinstance(d, Mapping) else []):
            out.append((("check", "distributions", i, "shapes", j), s))
    for section, key in (("sweep", "shape"), ("epilogue", "padded_shape")):
        if key in cfg.get(section, {}):
            out.append(((section, key), cfg[section][key]))
    return out


def shapes_fit(cfg: Mapping, where: Where) -> None:
    """Every problem is one the kernels can address: no operand over 2^31 - 1 elements."""
    for path, s in _shape_sets(cfg):
        if not (isinstance(s, list) and len(s) == 3 and all(isinstance(x, int) for x in s)):
            continue  # the schema says what is wrong with it
        m, n, k = s
        for name, rows, cols in (("A", m, k), ("B", k, n), ("C", m, n)):
            if rows * cols > MAX_ELEMENTS:
                _fail(where, path, f"{m}x{n}x{k}: {name} would have {rows * cols:.3g} elements, more than the "
                                   f"2^31 - 1 that the kernels' 32-bit indices address")


def verification(cfg: Mapping, where: Where) -> None:
    """The checks mean something: alpha and beta non-zero, at least one check shape, the further
    distributions with shapes to run at."""
    check = cfg.get("check", {})
    if check.get("alpha") == 0:
        _fail(where, ("check", "alpha"), "must not be 0: with alpha = 0 the result is beta * C whatever A @ B "
                                         "is, so a kernel that never multiplies would pass (the alpha0 mode "
                                         "already checks that case)")
    if check.get("beta") == 0:
        _fail(where, ("check", "beta"), "must not be 0: the beta0 mode already checks it, and a non-zero "
                                        "beta is what makes the check read C")
    alpha, beta = check.get("alpha"), check.get("beta")
    for key, x in (("alpha", alpha), ("beta", beta)):
        if _number(x) and not TERM_MIN <= abs(x) <= TERM_MAX:
            _fail(where, ("check", key), f"({x:g}) must lie between 2^-8 and 2^8 in magnitude: with inputs of "
                                         "order 1, a term scaled further drowns the other or vanishes in it")
    if _number(alpha) and _number(beta) and not 1 / TERM_RATIO <= abs(alpha / beta) <= TERM_RATIO:
        _fail(where, ("check", "alpha"), f"/ check.beta = {abs(alpha / beta):.3g}: the two must be within a factor "
                                         f"of {TERM_RATIO:g} of each other, or a kernel that drops the smaller term "
                                         "(alpha * A @ B, or beta * C) could pass within rounding")
    if check.get("shapes") == []:
        _fail(where, ("check", "shapes"), "must list at least one shape: with none, nothing is verified")
    dists = check.get("distributions") or []
    names = [d.get("name") for d in dists if isinstance(d, Mapping)]
    for i, name in enumerate(names):
        if name == "uniform":
            _fail(where, ("check", "distributions", i, "name"),
                  "must not be 'uniform': uniform inputs already run at every check shape")
        if name in names[:i]:
            _fail(where, ("check", "distributions", i, "name"), f"'{name}' is given twice")
    homeless = [d.get("name") for d in dists if isinstance(d, Mapping) and not d.get("shapes")]
    if homeless and not check.get("distribution_shapes"):
        _fail(where, ("check", "distribution_shapes"),
              f"is empty, so check.distributions {', '.join(map(str, homeless))} would never run: list the shapes "
              "they run at (here, or as their own shapes)")
    own = {"log2_range": "loguniform", "scale_log2": "extreme", "int_max": "integers", "bits": "short",
           "zeros": "sparse"}  # a distribution's parameters and the kind each belongs to
    for i, d in enumerate(dists):
        if isinstance(d, Mapping):
            for key, kind in own.items():
                if key in d and d.get("kind") != kind:
                    _fail(where, ("check", "distributions", i, key),
                          f"is a parameter of kind {kind}, not of kind {d.get('kind')}: it would change nothing")
        lo_hi = d.get("log2_range") if isinstance(d, Mapping) else None
        if isinstance(lo_hi, list) and len(lo_hi) == 2 and lo_hi[0] >= lo_hi[1]:
            _fail(where, ("check", "distributions", i, "log2_range"), f"{lo_hi}: the first must be below the second")


def repetitions(cfg: Mapping, where: Where) -> None:
    """min_reps <= max_reps wherever both are set."""
    for section in ("bench", "sweep"):
        s = cfg.get(section, {})
        lo, hi = s.get("min_reps"), s.get("max_reps")
        if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
            _fail(where, (section, "min_reps"), f"({lo}) is above {section}.max_reps ({hi})")
    seed = cfg.get("seed")
    if isinstance(seed, int) and seed > MAX_SEED:
        _fail(where, ("seed",), f"{seed} does not fit in 63 bits (at most 2^63 - 1)")


def _arch(value: Any, where: Where, path: tuple) -> None:
    if not isinstance(value, str):
        return
    m = _ARCH.fullmatch(value)
    if not m or not MIN_ARCH <= int(m.group(1)) <= MAX_ARCH:
        _fail(where, path, f"'{value}' is not a GPU architecture (sm_ and a compute capability from "
                           f"{MIN_ARCH} on, e.g. sm_90 or sm_90a)")


def stages(cfg: Mapping, where: Where) -> None:
    """Architectures exist, sources are in their stage's language, no stage tunes from itself."""
    _arch(cfg.get("arch"), where, ("arch",))
    for i, k in enumerate(cfg.get("kernels") or []):
        if not isinstance(k, Mapping):
            continue
        kid = k.get("id", "?")
        _arch(k.get("arch"), where, ("kernels", i, "arch"))
        if kid in (k.get("tune_from") or []):
            _fail(where, ("kernels", i, "tune_from"), f"of {kid} names {kid} itself: an autotuned stage picks "
                                                      "from other stages' sweeps")
        if k.get("dispatch_from") == kid:
            _fail(where, ("kernels", i, "dispatch_from"), f"of {kid} names {kid} itself")
        src = k.get("source")
        if isinstance(src, str) and src:
            host = k.get("backend", "cuda") == "host"
            if host and not src.endswith(".c"):
                _fail(where, ("kernels", i, "source"), f"of host stage {kid} is '{src}': host stages are C (.c)")
            if not host and not src.endswith(".cu"):
                _fail(where, ("kernels", i, "source"), f"of CUDA stage {kid} is '{src}': CUDA stages are .cu files")


def split_waves(k: Mapping, source: Path, here: str) -> None:
    """A stage given SPLIT_WAVES > 1 (in its parameters, a candidate or its sweep) has a source that reads
    it: the launch plan would split over several waves, and a source whose split-K workspace holds one
    would stop at run time (its bound check), not here. ``source``: the file the stage builds (a dispatch
    stage's, its base's)."""
    places = [("params.SPLIT_WAVES", (k.get("params") or {}).get("SPLIT_WAVES"))]
    places += [(f"candidates[{j}].SPLIT_WAVES", c.get("SPLIT_WAVES")) for j, c in enumerate(k.get("candidates") or [])]
    grids = k.get("sweep") or []
    for j, g in enumerate([grids] if isinstance(grids, Mapping) else grids):
        places += [(f"sweep[{j}].SPLIT_WAVES", v) for v in g.get("SPLIT_WAVES", [])]
    wide = [(key, v) for key, v in places if isinstance(v, int) and not isinstance(v, bool) and v > 1]
    if wide and "SPLIT_WAVES" not in source.read_text():
        key, v = wide[0]
        raise ConfigError(f"{here}: {key} is {v}, but kernels/{source.name} never reads SPLIT_WAVES: its split-K "
                          "workspace holds one wave of SPLIT_SLOTS blocks, so a split over several would stop the "
                          "kernel at run time")


def dispatch_rule(k: Mapping, base: Mapping, here: str) -> None:
    """A dispatch stage's rule: one STEP per candidate, no two candidates alike (the STEPs would no
    longer say which is which), and a cost expression over names it will have."""
    from . import expr
    from .geometry import PLAN_NAMES

    rule, cands, params = k["rule"], k["candidates"], base.get("params", {})
    if len(rule["step"]) != len(cands):
        raise ConfigError(f"{here}: rule.step has {len(rule['step'])} entries for {len(cands)} candidates: "
                          "one relative time per K-step for each candidate, in their order")
    merged = [tuple(sorted({**params, **c}.items())) for c in cands]
    twins = [j for j, m in enumerate(merged) if merged.index(m) != j]
    if twins:
        raise ConfigError(f"{here}: candidates[{twins[0]}] is the same configuration as "
                          f"candidates[{merged.index(merged[twins[0]])}]; a rule tells candidates apart")
    known = set(params) | {"THREADS"} | set(PLAN_NAMES)
    if params.get("SPLIT_SLOTS", 0) <= 0:
        known -= {"SLOTS", "WAVES"}
    try:
        used = expr.names(rule["cost"], key="rule.cost")
    except ConfigError as exc:
        raise ConfigError(f"{here}: {exc}") from None
    unknown = sorted(used - known)
    if unknown:
        raise ConfigError(f"{here}: rule.cost '{rule['cost']}' uses {', '.join(unknown)}, which it will not have "
                          f"(names: the parameters of {base['id']}, THREADS, {', '.join(sorted(known - set(params) - {'THREADS'}))})")


def term_names(k: Mapping, base: Mapping) -> set[str]:
    """The names a race rule's terms for stage ``k`` may use (``base``: the stage it builds, itself or its
    dispatch base): M, N, K, its parameters and THREADS; with a launch plan of tiles, the plan's names
    (``geometry.PLAN_NAMES``; a dispatch stage's are those of the candidate its rule picks, with that
    candidate's STEP and COST, the rule's cost); a stage of several kernels (geometry phases), its sizes."""
    from .geometry import PLAN_NAMES

    params = base.get("params", {})
    known = set(params) | {"THREADS", "M", "N", "K"}
    if base.get("geometry") == "block_tile":
        known |= set(PLAN_NAMES) - ({"STEP"} if "dispatch_from" not in k else set())
        if params.get("SPLIT_SLOTS", 0) <= 0:
            known -= {"SLOTS", "WAVES"}
    if "dispatch_from" in k:
        known.add("COST")
    return known | (set(base.get("sizes", {})) if base.get("geometry") == "phases" else set())


def time_models(cfg: Mapping, where: Where) -> None:
    """A stage's ``time_model`` (its predicted time in the races it runs in) is for a stage that the config
    alone builds (CUDA, not autotuned, a dispatch stage only with a rule of its own), each term over names
    that stage will have (:func:`term_names`)."""
    from . import expr

    kernels = {k["id"]: k for k in cfg["kernels"]}
    for i, k in enumerate(cfg["kernels"]):
        if "time_model" not in k:
            continue
        path = ("kernels", i, "time_model")
        head = f"({k['id']}) "
        if k.get("backend", "cuda") != "cuda" or k.get("tune_from") or ("dispatch_from" in k and "rule" not in k):
            _fail(where, path, head + "is for a stage the config alone builds: this one is built from a run's sweeps "
                  "or runs on the host (a dispatch stage with a rule is one the config builds)")
        known = term_names(k, kernels.get(k.get("dispatch_from", ""), k))
        for term in k["time_model"]["terms"]:
            try:
                unknown = sorted(expr.names(str(term), key="time_model.terms") - known)
            except ConfigError as exc:
                _fail(where, path, head + str(exc))
            if unknown:
                _fail(where, path, head + f"term '{term}' uses {', '.join(unknown)}, which {k['id']} will not have "
                      f"(names: {', '.join(sorted(known))})")


def check_all(cfg: Mapping, where: Where) -> None:
    """Every rule above, in the order a reader would fix them."""
    verification(cfg, where)
    repetitions(cfg, where)
    shapes_fit(cfg, where)
    stages(cfg, where)
