"""Per-shape dispatch: a stage that runs, on each shape, one configuration of another stage.

A dispatch stage names a base stage (``dispatch_from``) and a list of ``candidates``: parameter
overrides of the base. The pipeline times every candidate on every shape the stage will be timed on
(a shape sweep); :func:`pick_table` turns those rows into the dispatch table, one entry per shape
with its fastest verified candidate, which the build records as data and the report prints.

How a shape finds its candidate:

- with a ``rule`` (a cost model stated in the config), every shape, measured or not, runs the
  candidate of the lowest cost (:func:`rule_choice`); the table then says how far the rule's choice
  is from the best measured one on each shape (:func:`score_rule`);
- without one, a measured shape runs its table entry and any other shape the entry of the nearest
  measured shape in log space (:func:`choose`).

The compiled candidates travel as one bundle with the table (:func:`pack` / :func:`unpack`). No GPU
and no CUDA import here (the launcher that uses the bundle is ``sgemm_lab.dispatch.launch``).
"""

from __future__ import annotations

import io
import json
import math
import zipfile
from dataclasses import replace
from typing import TYPE_CHECKING, Iterable, Mapping

from ..config.records import KernelSpec, LabConfig, Shape
from ..errors import LabError

if TYPE_CHECKING:
    import pandas as pd


def candidate_params(base: KernelSpec, candidates: Iterable[Mapping[str, int]]) -> list[dict[str, int]]:
    """Full parameter sets of the candidates (base parameters with each override), in order, no repeats.
    The config has already refused overrides of parameters the base stage does not have."""
    out, seen = [], set()
    for over in candidates:
        p = {**base.params, **over}
        key = json.dumps(p, sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def resolve(cfg: LabConfig, spec: KernelSpec) -> KernelSpec:
    """The concrete spec of a dispatch stage: its base stage (source, entry, geometry, parameters) under
    the dispatch stage's id, title and explanation; the candidates keep their place."""
    base = cfg.kernel(spec.dispatch_from)
    return replace(base, id=spec.id, title=spec.title, explain=spec.explain, sweep=(), sweep_axes=(),
                   dispatch_from=spec.dispatch_from, candidates=spec.candidates, rule=spec.rule, suite=spec.suite)


def candidate_spec(spec: KernelSpec, params: Mapping[str, int]) -> KernelSpec:
    """One candidate of a resolved dispatch stage, as a plain stage of its own (what compiles and launches)."""
    return replace(spec, dispatch_from="", candidates=(), rule=None).with_params(**params)


def listed_candidate(spec: KernelSpec, i: int) -> KernelSpec:
    """Candidate ``i`` of a resolved dispatch stage as the config lists it (base parameters with its
    overrides), as a plain stage: what a rule names by index."""
    return candidate_spec(spec, {**spec.params, **spec.candidates[i]})


def rule_costs(spec: KernelSpec, shape: Shape) -> dict[int, int]:
    """Candidate index -> the rule's cost on ``shape``, for each candidate that can run it (``spec``
    resolved, with a rule; candidates as the config lists them, which the config keeps distinct)."""
    from ..config.geometry import evaluate, plan_names, unsupported_reason

    costs = {}
    for i in range(len(spec.candidates)):
        cand = listed_candidate(spec, i)
        if unsupported_reason(cand, shape) is None:
            costs[i] = int(evaluate(cand, "rule.cost", spec.rule.cost, plan_names(cand, shape, spec.rule.step[i])))
    return costs


def rule_choice(spec: KernelSpec, shape: Shape) -> int:
    """The candidate the rule runs on ``shape``: the lowest cost; ties go to the earlier candidate."""
    costs = rule_costs(spec, shape)
    if not costs:
        raise LabError(f"kernel {spec.id}: no candidate can run {shape}")
    return min(costs, key=lambda i: (costs[i], i))


def score_rule(spec: KernelSpec, table: list[dict], rows: "pd.DataFrame") -> list[dict]:
    """``table`` with, per shape, the rule's choice (``rule_candidate``) and its time in the shape sweep
    over the best candidate's (``rule_gap``; None where the rule's choice did not verify there)."""
    from .autotune import eligible

    ok = eligible(rows)
    out = []
    for e in table:
        pick = rule_choice(spec, Shape(m=e["m"], n=e["n"], k=e["k"]))
        hit = ok[(ok.m == e["m"]) & (ok.n == e["n"]) & (ok.k == e["k"]) & (ok.candidate == pick)]
        gap = float(hit["median_ms"].min() / e["median_ms"]) if len(hit) else None
        out.append(dict(e, rule_candidate=pick, rule_gap=gap))
    return out


def candidate_specs(cfg: LabConfig, spec: KernelSpec) -> list[KernelSpec]:
    """Every candidate of dispatch stage ``spec`` as a stage of its own, named ``<id>.<candidate>``."""
    resolved = resolve(cfg, spec)
    params = candidate_params(cfg.kernel(spec.dispatch_from), spec.candidates)
    return [replace(candidate_spec(resolved, p), id=f"{spec.id}.{i}") for i, p in enumerate(params)]


def pick_table(rows: "pd.DataFrame") -> list[dict]:
    """The dispatch table from shape-sweep rows (columns m, n, k, candidate, params, status, verified,
    within_local_budget, median_ms, tflops): for each shape the fastest eligible candidate, with the
    runner-up's time for the margin. Shapes with no eligible candidate are left out."""
    from .autotune import eligible

    ok = eligible(rows)
    table = []
    for (m, n, k), group in ok.groupby(["m", "n", "k"], sort=True):
        ranked = group.sort_values(["median_ms", "candidate"])
        best = ranked.iloc[0]
        second = ranked.iloc[1] if len(ranked) > 1 else None
        table.append(dict(m=int(m), n=int(n), k=int(k), candidate=int(best["candidate"]),
                          params=json.loads(best["params"]), tflops=float(best["tflops"]),
                          median_ms=float(best["median_ms"]),
                          runner_up=int(second["candidate"]) if second is not None else None,
                          margin=float(second["median_ms"] / best["median_ms"]) if second is not None else None))
    return table


def _distance(a: Shape, b: Mapping) -> float:
    return sum(abs(math.log2(x / y)) for x, y in ((a.m, b["m"]), (a.n, b["n"]), (a.k, b["k"])))


def choose(table: list[Mapping], shape: Shape) -> Mapping:
    """The table entry for ``shape``: its own if measured, else the nearest measured shape (sum of
    |log2| ratios of M, N and K; ties go to the earlier entry)."""
    if not table:
        raise LabError("dispatch table is empty: no candidate verified on any shape")
    return min(table, key=lambda e: _distance(shape, e))


def used_candidates(table: list[Mapping]) -> list[int]:
    """Candidates that some shape dispatches to, in order: the ones the build compiles."""
    return sorted({int(e["candidate"]) for e in table})


def pack(cubins: Mapping[int, bytes], table: list[Mapping]) -> bytes:
    """One file holding the compiled candidates (``<candidate>.cubin``) and the table (``table.json``)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as z:
        for idx, cubin in sorted(cubins.items()):
            z.writestr(f"{idx}.cubin", cubin)
        z.writestr("table.json", json.dumps(list(table), sort_keys=True))
    return buf.getvalue()


def unpack(data: bytes) -> tuple[dict[int, bytes], list[dict]]:
    """(candidate -> cubin, table) from :func:`pack`'s bundle."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            names = z.namelist()
            cubins = {int(n.split(".")[0]): z.read(n) for n in names if n.endswith(".cubin")}
            table = json.loads(z.read("table.json"))
    except (zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise LabError(f"not a dispatch bundle ({exc})") from None
    missing = sorted(set(used_candidates(table)) - set(cubins))
    if missing:
        raise LabError(f"dispatch bundle lacks the candidates {missing} that its table uses")
    return cubins, table


DISPATCH_COLUMNS = ["kernel", "m", "n", "k", "candidate", "params", "tflops", "median_ms", "runner_up", "margin",
                    "rule_candidate", "rule_gap", "registers", "local_bytes"]


def dispatch_rows(builds: list[dict]) -> list[dict]:
    """The dispatch tables of the build records as tidy rows (one per stage and measured shape)."""
    rows = []
    for b in builds:
        cands = b.get("candidates") or {}
        for e in b.get("dispatch_table") or []:
            res = cands.get(str(e["candidate"]), {})
            rows.append(dict(kernel=b["kernel"], **{"rule_candidate": None, "rule_gap": None, **e,
                                                    "params": json.dumps(e["params"], sort_keys=True)},
                             registers=res.get("registers"), local_bytes=res.get("local_bytes")))
    return rows
