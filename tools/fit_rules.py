"""Fit each dispatch rule's STEPs on the shapes of the fit draw, from a run that timed every candidate there.

    python tools/fit_rules.py reports/RUN [--config config/config.yaml] [--within 1.05] [--top 5]
                              [--cost STAGE=EXPRESSION ...] [--also reports/OTHER ...] [--cv K]
                              [--stage STAGE ...]

RUN is a run whose shape sweeps (reports/RUN/dispatch/<stage>.csv) hold the fit stream of the config's
suite.held_out draw (reports/probes/rules_fit/probe.yaml makes one). For every dispatch stage of the
config with a rule: the rule as configured scored on those shapes, then the STEPs that score best, the
first candidate's STEP held (the cost's unit), every other candidate's searched from half to twice its
configured value: every combination where there are at most EXHAUSTIVE of them, else every combination
of a coarser grid (as many values apiece as keep within EXHAUSTIVE) and then coordinate descent on the
fine grid from the best of those (each pair of STEPs in turn set to its best values with the others
held, until none moves). A rule's score on a shape is its choice's time over the fastest candidate's; the
order is: most shapes within --within, then the smallest worst ratio, then the smallest geometric mean.
Only the fit draw's shapes are read from RUN, whatever else it timed: the held-out draw stays unseen.
--also adds every shape of another run's shape sweeps (a probe's, a reference's bench and suite shapes)
except the held-out draw's, which are dropped and counted. --cost tries another cost expression for a
stage (the names of its rule, ``geometry.plan_names``) with the same search, to compare forms of a rule
before one is written into the config; --cv K scores each form by K-fold cross-validation over the
shapes (the STEPs searched on K - 1 folds, the choice scored on the one left out), which says how a form
does on shapes it was not fitted on, as the held-out draw will.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from dataclasses import replace  # noqa: E402

import pandas as pd  # noqa: E402

from _cli import run  # noqa: E402
from sgemm_lab.config import load as cfgmod  # noqa: E402
from sgemm_lab.config.geometry import evaluate, plan_names, unsupported_reason  # noqa: E402
from sgemm_lab.config.records import Shape  # noqa: E402
from sgemm_lab.dispatch import choice  # noqa: E402
from sgemm_lab.dispatch.autotune import eligible  # noqa: E402


EXHAUSTIVE = 200_000  # STEP combinations searched one by one; more (more free candidates) by descent


def _grid(step: int, ratio: float = 1.02) -> list[int]:
    """STEP values from half to twice ``step``, about ``ratio`` apart."""
    out, x = set(), step / 2
    while x <= 2 * step:
        out.add(max(1, round(x)))
        x *= ratio
    return sorted(out | {step})


def _coarse(steps: tuple, free: int) -> list[list[int]]:
    """Grids for the first pass of a search too large to take whole: the first STEP held, the others from
    half to twice their value, with ratios as fine as keep the combinations within EXHAUSTIVE."""
    ratio = 1.02
    while True:
        grids = [[steps[0]]] + [_grid(s, ratio) for s in steps[1:]]
        if math.prod(len(g) for g in grids) <= EXHAUSTIVE or free == 0:
            return grids
        ratio *= 1.05


def _score(picks: list[int], times: list[dict[int, float]], within: float) -> tuple[int, float, float]:
    gaps = [t.get(p, math.inf) / min(t.values()) for p, t in zip(picks, times)]
    finite = [g for g in gaps if math.isfinite(g)]
    geo = math.exp(sum(math.log(g) for g in finite) / len(finite)) if finite else math.inf
    return sum(g <= within for g in gaps), max(gaps), geo


def fit(spec, shapes: list[Shape], times: list[dict[int, float]], within: float, top: int, cv: int = 0) -> list[str]:
    """Lines: the configured STEPs' score, then the ``top`` best STEP sets and theirs; with ``cv`` > 1, the
    cross-validated score of the search (:func:`cross_validate`)."""
    n = len(spec.candidates)
    grids = [[spec.rule.step[0]]] + [_grid(s) for s in spec.rule.step[1:]]
    # each candidate's cost depends on its own STEP only: tabulate it once per (candidate, shape, STEP)
    cost = {}
    for i in range(n):
        cand = choice.listed_candidate(spec, i)
        for j, s in enumerate(shapes):
            if unsupported_reason(cand, s) is None:
                for st in grids[i]:
                    cost[i, j, st] = int(evaluate(cand, "rule.cost", spec.rule.cost, plan_names(cand, s, st)))

    # each STEP set's choice on every shape, once (the ranking and each fold of the cross-validation read it)
    chosen: dict[tuple, list[int]] = {}

    def picks(steps) -> list[int]:
        st = tuple(steps)
        if st not in chosen:
            chosen[st] = [min((i for i in range(n) if (i, j, st[i]) in cost), key=lambda i: (cost[i, j, st[i]], i))
                          for j in range(len(shapes))]
        return chosen[st]

    exhaustive = math.prod(len(g) for g in grids) <= EXHAUSTIVE
    if exhaustive:
        for st in itertools.product(*grids):
            picks(st)

    def line(steps, label) -> str:
        w, worst, geo = _score(picks(steps), times, within)
        return (f"  {label:12s} STEP {list(steps)}: within {within - 1:.0%} on {w} of {len(shapes)}, "
                f"worst {worst:.3f}x, geometric mean {geo:.4f}x")

    def best(idx: list[int]) -> tuple:
        """The STEP set that scores best on the shapes ``idx``; ties go to the smallest STEPs, not the
        configured ones: those were fitted on the same shapes, the left-out fold's among them."""
        sub = [times[j] for j in idx]

        def rank(st: tuple) -> tuple:
            w, worst, geo = _score([picks(st)[j] for j in idx], sub, within)
            return -w, worst, geo, st
        if exhaustive:
            return min(chosen, key=rank)
        start = min(itertools.product(*_coarse(tuple(spec.rule.step), n - 1)), key=rank)
        return descend(grids, start, rank)

    if not exhaustive:
        best(list(range(len(shapes))))  # the descent over all shapes: what it visits is ranked below
    ranked = sorted(((_score(picks(st), times, within), st) for st in list(chosen)),
                    key=lambda r: (-r[0][0], r[0][1], r[0][2], [abs(a - b) for a, b in zip(r[1], spec.rule.step)]))
    out = ([f"{spec.id}: {len(shapes)} shapes, cost {spec.rule.cost}", line(spec.rule.step, "configured")]
           + [line(st, f"fit #{i + 1}") for i, (_, st) in enumerate(ranked[:top])])
    if cv > 1:
        out.append(cross_validate(len(shapes), cv, best, picks, times, within))
    return out


def descend(grids: list[list[int]], start: tuple, rank) -> tuple:
    """Descent by pairs: from ``start``, each pair of free STEPs in turn set to the values of their grids
    that ``rank`` puts first with the others held (a pair, because two candidates' STEPs decide between
    them together), rounds repeated until a round moves none (``rank`` is a total order, so a round that
    moves one improves it, and the walk ends)."""
    here = tuple(start)
    free = [i for i, g in enumerate(grids) if len(g) > 1]
    pairs = list(itertools.combinations(free, 2)) or [(i,) for i in free]
    moved = True
    while moved:
        moved = False
        for pair in pairs:
            def at(values):
                st = list(here)
                for i, v in zip(pair, values):
                    st[i] = v
                return tuple(st)
            cand = min((at(v) for v in itertools.product(*(grids[i] for i in pair))), key=rank)
            if cand != here:
                here, moved = cand, True
    return here


def folds(count: int, k: int) -> list[list[int]]:
    """``k`` folds of the indices 0..count-1, dealt in turn (the shapes are sorted by M, N, K, so each fold
    spans the sizes)."""
    return [list(range(i, count, k)) for i in range(min(k, count))]


def cross_validate(count: int, k: int, best, picks, times, within: float) -> str:
    """The search's score on shapes it was not fitted on: for each fold, the STEPs ``best`` finds on the
    other folds, their choice scored on this one; the gaps of all folds together."""
    picked = {}
    for fold in folds(count, k):
        held = set(fold)
        steps = best([j for j in range(count) if j not in held])
        chosen = picks(steps)
        picked.update({j: chosen[j] for j in fold})
    order = sorted(picked)
    w, worst, geo = _score([picked[j] for j in order], [times[j] for j in order], within)
    return (f"  {k}-fold cv    each fold scored with the STEPs of the others: within {within - 1:.0%} on {w} "
            f"of {count}, worst {worst:.3f}x, geometric mean {geo:.4f}x")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--config", default=str(ROOT / "config" / "config.yaml"))
    ap.add_argument("--within", type=float, default=1.05)
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--cost", action="append", default=[], metavar="STAGE=EXPRESSION")
    ap.add_argument("--also", action="append", default=[], type=Path, metavar="RUN_DIR",
                    help="another run's shape sweeps: every shape but the held-out draw's")
    ap.add_argument("--cv", type=int, default=0, metavar="K", help="K-fold cross-validation of the search (K >= 2)")
    ap.add_argument("--stage", action="append", default=[], help="only this dispatch stage (repeatable)")
    args = ap.parse_args()
    if args.cv == 1 or args.cv < 0:
        raise ValueError("--cv takes the number of folds, 2 or more")
    costs = dict(c.split("=", 1) for c in args.cost if "=" in c)
    if len(costs) != len(args.cost):
        raise ValueError("--cost takes STAGE=EXPRESSION")
    cfg = cfgmod.load(args.config)
    d = cfg.held_out_draw
    if d is None:
        raise ValueError(f"{args.config} has no held-out draw (suite.held_out with per_class > 0)")
    fit_draw, score_draw = cfgmod.held_out_streams(d, cfg.suite, cfg.bench.shapes)
    wanted = {(s.m, s.n, s.k) for _, s in fit_draw}
    unseen = {(s.m, s.n, s.k) for _, s in score_draw}
    ruled = [k for k in cfg.kernels if k.dispatched and k.rule is not None]
    if not ruled:
        raise ValueError(f"{args.config} has no dispatch stage with a rule")
    unknown = (set(costs) | set(args.stage)) - {k.id for k in ruled}
    if args.stage and set(costs) - set(args.stage):
        raise ValueError(f"--cost names {', '.join(sorted(set(costs) - set(args.stage)))}, which --stage leaves out")
    if args.stage:
        ruled = [k for k in ruled if k.id in args.stage]
    if unknown:
        raise ValueError(f"--cost or --stage names {', '.join(sorted(unknown))}, not a dispatch stage with a rule")
    for spec in ruled:
        resolved = choice.resolve(cfg, spec)
        built = {i: dict(choice.listed_candidate(resolved, i).params) for i in range(len(spec.candidates))}
        by_params = {json.dumps(p, sort_keys=True): i for i, p in built.items()}
        sweeps, dropped, other_build = {}, 0, 0
        for pos, run_dir in enumerate([args.run_dir, *args.also]):
            path = run_dir / "dispatch" / f"{spec.id}.csv"
            if not path.exists():
                raise FileNotFoundError(f"no shape sweep {path}")
            rows = eligible(pd.read_csv(path))
            # only timings of the candidates as this configuration builds them (a run of another build,
            # e.g. one before a parameter changed, would fit the STEPs to other kernels), each known by its
            # parameters, so that a probe that timed more candidates, or in another order, counts too
            index = [by_params.get(json.dumps(json.loads(p), sort_keys=True)) for p in rows.params]
            same = pd.Series([i is not None for i in index], index=rows.index, dtype=bool)
            other_build += int((~same).sum())
            rows = rows.assign(candidate=[-1 if i is None else i for i in index]).loc[same]
            if pos == 0:  # the run named first: its fit draw only (an --also run may be the same folder)
                rows = rows.loc[pd.Series([key in wanted for key in zip(rows.m, rows.n, rows.k)], index=rows.index, dtype=bool)]
            for (m, n, k), g in rows.groupby(["m", "n", "k"], sort=True):
                if (m, n, k) in unseen:
                    dropped += 1
                else:
                    sweeps.setdefault((m, n, k), {int(r.candidate): float(r.median_ms) for r in g.itertuples()})
        missing = len(wanted - set(sweeps))
        shapes = [Shape(m=int(m), n=int(n), k=int(k)) for m, n, k in sorted(sweeps)]
        times = [sweeps[key] for key in sorted(sweeps)]
        if not shapes:
            print(f"{spec.id}: no shape of the sweeps has a verified candidate of this build"
                  + (f" ({other_build} rows of candidates built otherwise left out)" if other_build else ""))
            continue
        if args.cv > len(shapes):
            raise ValueError(f"{spec.id}: --cv {args.cv} needs at least {args.cv} shapes; the sweeps give {len(shapes)}")
        forms = [resolved] + ([replace(resolved, rule=replace(resolved.rule, cost=costs[spec.id]))]
                              if spec.id in costs else [])
        for form in forms:
            print("\n".join(fit(form, shapes, times, args.within, args.top, args.cv)))
        if missing:
            print(f"  ({missing} shapes of the fit draw have no verified candidate of this build in {args.run_dir})")
        if dropped:
            print(f"  ({dropped} shapes of the held-out draw in --also runs left out)")
        if other_build:
            print(f"  ({other_build} rows of candidates built otherwise than this configuration builds them left out)")
    return 0


if __name__ == "__main__":
    raise SystemExit(run(main))
