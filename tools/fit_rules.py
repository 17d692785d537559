"""Fit each dispatch rule's STEPs on the shapes of the fit draw, from a run that timed every candidate there.

    python tools/fit_rules.py reports/RUN [--config config/config.yaml] [--within 1.05] [--top 5]
                              [--cost STAGE=EXPRESSION ...]

RUN is a run whose shape sweeps (reports/RUN/dispatch/<stage>.csv) hold the fit stream of the config's
suite.held_out draw (reports/probes/rules_fit/probe.yaml makes one). For every dispatch stage of the
config with a rule: the rule as configured scored on those shapes, then the STEPs that score best, the
first candidate's STEP held (the cost's unit), every other candidate's searched from half to twice its
configured value. A rule's score on a shape is its choice's time over the fastest candidate's; the
order is: most shapes within --within, then the smallest worst ratio, then the smallest geometric mean.
Only the fit draw's shapes are read, whatever else the run timed: the held-out draw stays unseen.
--cost tries another cost expression for a stage (the names of its rule, ``geometry.plan_names``) with the
same search, to compare forms of a rule before one is written into the config.
"""

from __future__ import annotations

import argparse
import itertools
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


def _grid(step: int) -> list[int]:
    """STEP values from half to twice ``step``, about 2% apart."""
    out, x = set(), step / 2
    while x <= 2 * step:
        out.add(max(1, round(x)))
        x *= 1.02
    return sorted(out | {step})


def _score(picks: list[int], times: list[dict[int, float]], within: float) -> tuple[int, float, float]:
    gaps = [t.get(p, math.inf) / min(t.values()) for p, t in zip(picks, times)]
    finite = [g for g in gaps if math.isfinite(g)]
    geo = math.exp(sum(math.log(g) for g in finite) / len(finite)) if finite else math.inf
    return sum(g <= within for g in gaps), max(gaps), geo


def fit(spec, shapes: list[Shape], times: list[dict[int, float]], within: float, top: int) -> list[str]:
    """Lines: the configured STEPs' score, then the ``top`` best STEP sets and theirs."""
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

    def picks(steps) -> list[int]:
        return [min((i for i in range(n) if (i, j, steps[i]) in cost), key=lambda i: (cost[i, j, steps[i]], i))
                for j in range(len(shapes))]

    def line(steps, label) -> str:
        w, worst, geo = _score(picks(steps), times, within)
        return (f"  {label:12s} STEP {list(steps)}: within {within - 1:.0%} on {w} of {len(shapes)}, "
                f"worst {worst:.3f}x, geometric mean {geo:.4f}x")

    ranked = sorted(((_score(picks(st), times, within), st) for st in itertools.product(*grids)),
                    key=lambda r: (-r[0][0], r[0][1], r[0][2], [abs(a - b) for a, b in zip(r[1], spec.rule.step)]))
    return ([f"{spec.id}: {len(shapes)} shapes, cost {spec.rule.cost}", line(spec.rule.step, "configured")]
            + [line(st, f"fit #{i + 1}") for i, (_, st) in enumerate(ranked[:top])])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--config", default=str(ROOT / "config" / "config.yaml"))
    ap.add_argument("--within", type=float, default=1.05)
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--cost", action="append", default=[], metavar="STAGE=EXPRESSION")
    args = ap.parse_args()
    costs = dict(c.split("=", 1) for c in args.cost if "=" in c)
    if len(costs) != len(args.cost):
        raise ValueError("--cost takes STAGE=EXPRESSION")
    cfg = cfgmod.load(args.config)
    d = cfg.held_out_draw
    if d is None:
        raise ValueError(f"{args.config} has no held-out draw (suite.held_out with per_class > 0)")
    fit_draw, _ = cfgmod.held_out_streams(d, cfg.suite, cfg.bench.shapes)
    wanted = {(s.m, s.n, s.k) for _, s in fit_draw}
    ruled = [k for k in cfg.kernels if k.dispatched and k.rule is not None]
    if not ruled:
        raise ValueError(f"{args.config} has no dispatch stage with a rule")
    unknown = set(costs) - {k.id for k in ruled}
    if unknown:
        raise ValueError(f"--cost names {', '.join(sorted(unknown))}, not a dispatch stage with a rule")
    for spec in ruled:
        path = args.run_dir / "dispatch" / f"{spec.id}.csv"
        if not path.exists():
            raise FileNotFoundError(f"no shape sweep {path}")
        ok = eligible(pd.read_csv(path))
        ok = ok[[key in wanted for key in zip(ok.m, ok.n, ok.k)]]
        shapes, times = [], []
        for (m, n, k), g in ok.groupby(["m", "n", "k"], sort=True):
            shapes.append(Shape(m=int(m), n=int(n), k=int(k)))
            times.append({int(r.candidate): float(r.median_ms) for r in g.itertuples()})
        missing = len(wanted) - len(shapes)
        resolved = choice.resolve(cfg, spec)
        if spec.id in costs:
            resolved = replace(resolved, rule=replace(resolved.rule, cost=costs[spec.id]))
        print("\n".join(fit(resolved, shapes, times, args.within, args.top)))
        if missing:
            print(f"  ({missing} shapes of the fit draw have no verified candidate in {path})")
    return 0


if __name__ == "__main__":
    raise SystemExit(run(main))
