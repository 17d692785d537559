"""Dispatch across stages of different kernels: a race's rule (the ``time_model`` of its stages).

A dispatch stage (``choice``) picks among configurations of one kernel by a cost in its own units. A race
picks among different kernels (a 3xTF32 GEMM, an INT8 emulation, a strict-FP32 split-K), whose costs share
no unit, so its rule predicts each member's time in ns: the sum of the member's terms, integer expressions
over what its launch plan says of the shape (:func:`term_names`), each times a coefficient (ns per unit of
the term) fitted on shapes the race was timed on (``tools/fit_race.py``). The members of a race are the
stages of its precision classes whose config entry has a ``time_model`` (``LabConfig.race_rule``). On a
shape, the member of the least predicted time among those that can run it runs (:func:`pick`); :func:`score` says how far that pick
is from the fastest member measured there. No GPU here.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Iterable

from ..config.geometry import plan_names, unsupported_reason
from ..config.records import KernelSpec, LabConfig, RaceRule, Shape
from ..errors import LabError
from . import choice

if TYPE_CHECKING:
    import pandas as pd


def member_spec(cfg: LabConfig, stage: str) -> KernelSpec:
    """The stage as it runs: a dispatch stage resolved to its base with its candidates."""
    spec = cfg.kernel(stage)
    return choice.resolve(cfg, spec) if spec.dispatched else spec


def term_names(spec: KernelSpec, shape: Shape) -> dict[str, int]:
    """What a term may name for ``spec`` (resolved) on ``shape`` (``config.rules.term_names`` lists them):
    M, N, K, the parameters and THREADS; for a dispatch stage with a rule, the launch plan of the candidate
    its rule picks (``geometry.plan_names``, with that candidate's parameters and STEP) and ``COST``, the
    rule's cost of it; for a stage of tiles, its plan (no STEP); for a stage of several kernels, its sizes."""
    from ..config import phases
    from ..config.bindings import env

    if spec.dispatched:
        costs = choice.rule_costs(spec, shape)
        i = min(costs, key=lambda j: (costs[j], j))
        return {**plan_names(choice.listed_candidate(spec, i), shape, spec.rule.step[i]), "COST": costs[i]}
    if phases.is_phased(spec):
        return phases.shape_names(spec, shape)
    if spec.geometry == "block_tile":
        names = plan_names(spec, shape, 0)
        names.pop("STEP")
        return names
    return {**env(spec), "M": shape.m, "N": shape.n, "K": shape.k}


def runs(spec: KernelSpec, shape: Shape) -> bool:
    if spec.dispatched:
        return bool(choice.rule_costs(spec, shape))
    return unsupported_reason(spec, shape) is None


def predicted_ns(cfg: LabConfig, rule: RaceRule, stage: str, shape: Shape) -> float | None:
    """``stage``'s predicted time on ``shape`` by ``rule``, in ns; None where it cannot run the shape, or where
    a term cannot be evaluated there (a division by zero, a name a candidate's plan lacks): the rule then
    leaves the stage out at that shape rather than fail the call that asked it."""
    from ..config.bindings import evaluate
    from ..errors import ConfigError

    spec = member_spec(cfg, stage)
    if not runs(spec, shape):
        return None
    names = term_names(spec, shape)
    try:
        return sum(coef * int(evaluate(spec, "time_model.terms", term, names))
                   for term, coef in rule.members[stage].items())
    except ConfigError:
        return None


def pick(cfg: LabConfig, rule: RaceRule, shape: Shape, among: Iterable[str] | None = None) -> str | None:
    """The member of least predicted time on ``shape`` (ties: the one listed first), of those in ``among``
    (default all) that can run it; None where none can."""
    allowed = set(rule.members) if among is None else set(among) & set(rule.members)
    times = {s: t for s in rule.members if s in allowed and (t := predicted_ns(cfg, rule, s, shape)) is not None}
    return min(times, key=times.get) if times else None


def score(cfg: LabConfig, rule: RaceRule, ok: "pd.DataFrame", shapes: Iterable[Shape],
          among: Iterable[str] | None = None) -> list[dict]:
    """Per shape, the rule's pick among the members of ``among`` (default all) and its time over the fastest
    of them in ``ok`` (bench rows: ``gap``), with the pick's and the fastest's stage and median ms. Where the
    pick has no verified row the gap is infinite (its pick did not verify there, or was not timed); a shape
    where another member that can run it has none is left out (the gap would be against an incomplete
    field), and so is one where no member can run it."""
    members = [s for s in rule.members if among is None or s in set(among)]
    out = []
    for s in shapes:
        here = ok[(ok.m == s.m) & (ok.n == s.n) & (ok.k == s.k) & ok.kernel.isin(members)]
        if "verified" in here:
            here = here[here.verified.astype(bool)]
        timed = here.groupby("kernel")["median_ms"].min().to_dict()
        chosen = pick(cfg, rule, s, members)
        if chosen is None:
            continue
        can = [m for m in members if runs(member_spec(cfg, m), s)]
        if chosen in timed and any(m not in timed for m in can):
            continue
        fastest = min((m for m in can if m in timed), key=lambda m: (timed[m], m), default=None)
        if fastest is None:
            continue
        out.append(dict(m=s.m, n=s.n, k=s.k, pick=chosen, pick_ms=timed.get(chosen, math.inf), fastest=fastest,
                        fastest_ms=timed[fastest], gap=timed.get(chosen, math.inf) / timed[fastest]))
    return out


def rule_for(cfg: LabConfig, race: str) -> RaceRule:
    from ..config.records import RACES

    if race not in RACES:
        raise LabError(f"race '{race}' is none of {', '.join(RACES)}")
    rule = cfg.race_rule(race)
    if rule is None:
        raise LabError(f"the {race} race has no rule: fewer than two of its stages have a time_model")
    return rule
