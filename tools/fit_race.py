"""Fit a race's rule (its members' ``time_model``): each member's ns per unit of each of its terms, from timed shapes.

    python tools/fit_race.py TABLE [TABLE ...] [--race fp32_accurate] [--config config/config.yaml]
                             [--term STAGE=EXPRESSION ...] [--cv K] [--stage-tables STAGE=TABLE[,TABLE...] ...]

A TABLE is a run's bench.csv or a ``time`` target's time.csv (reports/probes/race_fit/time.csv times the
members on the fit draws). Its verified rows of the rule's members are read, except at the shapes of the
config's held-out draw (suite.held_out's score stream), which score the rule in the report and are dropped
here and counted. For each member, the coefficients of its configured terms (and any --term) are fitted by
least squares on the relative error (pred / time - 1), none negative (every subset of the terms is solved and
the best one without a negative coefficient kept); then the rule's choice is scored on every shape where all
members that can run it were timed: as configured, and as fitted (its time over the fastest member's: how
many within 5%, the worst, the geometric mean). --cv K scores the fit on shapes it was not fitted on: each
of K folds chosen by the coefficients fitted on the others. Prints each member's fitted terms as YAML to paste
into its config entry (``time_model.terms``).
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from _cli import run  # noqa: E402
from sgemm_lab.config import load as cfgmod  # noqa: E402
from sgemm_lab.config.bindings import evaluate  # noqa: E402
from sgemm_lab.config.records import RACES, Shape, frozen  # noqa: E402
from sgemm_lab.dispatch import race  # noqa: E402

WITHIN = 1.05


def fit_terms(x: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Non-negative coefficients minimising sum((x @ c / t - 1)^2): the best subset of columns whose
    unconstrained solution has no negative entry (all zero where none has)."""
    a = x / t[:, None]
    best, coef = math.inf, np.zeros(x.shape[1])
    for r in range(1, x.shape[1] + 1):
        for cols in itertools.combinations(range(x.shape[1]), r):
            c, *_ = np.linalg.lstsq(a[:, cols], np.ones(len(t)), rcond=None)
            if (c < 0).any():
                continue
            res = float(((a[:, cols] @ c - 1) ** 2).sum())
            if res < best:
                best, coef = res, np.zeros(x.shape[1])
                coef[list(cols)] = c
    return coef


def round3(x: float) -> float:
    return float(f"{x:.3g}") if x else 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tables", type=Path, nargs="+")
    ap.add_argument("--race", default="fp32_accurate", choices=list(RACES))
    ap.add_argument("--config", default=str(ROOT / "config" / "config.yaml"))
    ap.add_argument("--term", action="append", default=[], metavar="STAGE=EXPRESSION")
    ap.add_argument("--cv", type=int, default=0, metavar="K")
    ap.add_argument("--stage-tables", action="append", default=[], metavar="STAGE=TABLE[,TABLE...]",
                    help="read STAGE's rows from these tables only (a member whose build changed since the others "
                         "were timed: its rows elsewhere are of the earlier build)")
    args = ap.parse_args()
    cfg = cfgmod.load(args.config)
    rule = race.rule_for(cfg, args.race)
    members = {s: dict(t) for s, t in rule.members.items()}
    for item in args.term:
        stage, _, term = item.partition("=")
        if stage not in members or not term:
            raise ValueError(f"--term takes STAGE=EXPRESSION with STAGE a member of the {args.race} race "
                             f"({', '.join(members)}): got {item!r}")
        members[stage].setdefault(term, 0.0)
    held = {(s.m, s.n, s.k) for s in cfg.held_out}
    only = {}
    for item in args.stage_tables:
        stage, _, paths = item.partition("=")
        if stage not in members or not paths:
            raise ValueError(f"--stage-tables takes STAGE=TABLE[,TABLE...] with STAGE a member of the {args.race} "
                             f"race ({', '.join(members)}): got {item!r}")
        only[stage] = {str(Path(x)) for x in paths.split(",")}
    general = {str(p) for p in args.tables}  # read for every member not named in --stage-tables
    tables = list(dict.fromkeys([*map(str, args.tables), *(x for paths in only.values() for x in paths)]))
    missing = [t for t in tables if not Path(t).is_file()]
    if missing:
        raise ValueError(f"no such table: {', '.join(missing)}")
    rows = pd.concat([pd.read_csv(p).assign(table=p) for p in tables], ignore_index=True)
    rows = rows[(rows.status == "ok") & rows.verified.astype(bool) & rows.kernel.isin(list(members))]
    rows = rows[pd.Series([t in only[k] if k in only else t in general for k, t in zip(rows.kernel, rows.table)],
                          index=rows.index, dtype=bool)]
    for stage, paths in only.items():
        if not (rows.kernel == stage).any():
            raise ValueError(f"--stage-tables: no verified row of {stage} in {', '.join(sorted(paths))}")
    dropped = rows[[key in held for key in zip(rows.m, rows.n, rows.k)]]
    rows = rows.drop(dropped.index)
    # one time per stage and shape: the lowest median where several tables timed it
    times = rows.groupby(["kernel", "m", "n", "k"])["median_ms"].min()
    shapes = sorted({(m, n, k) for _, m, n, k in times.index})
    specs = {s: race.member_spec(cfg, s) for s in members}
    names = {}  # (stage, shape) -> the names its terms read
    for stage, spec in specs.items():
        for key in shapes:
            shape = Shape(m=key[0], n=key[1], k=key[2])
            if race.runs(spec, shape):
                names[stage, key] = race.term_names(spec, shape)
    # a row of a stage at a shape this configuration says it cannot run (a table of another build): left out
    foreign = [key for key in times.index if (key[0], key[1:]) not in names]
    times = times.drop(foreign)
    shapes = sorted({(m, n, k) for _, m, n, k in times.index})
    if not shapes:
        raise ValueError(f"no verified row of the {args.race} race's stages ({', '.join(members)}) in these tables "
                         "outside the held-out draw")

    def columns(stage: str, keys: list[tuple]) -> np.ndarray:
        spec, terms = specs[stage], list(members[stage])
        return np.array([[int(evaluate(spec, f"term of {stage}", t, names[stage, key])) for t in terms] for key in keys],
                        dtype=float)

    def fitted(keys: list[tuple]) -> dict[str, dict[str, float]]:
        out = {}
        for stage in members:
            mine = [key for key in keys if (stage, *key) in times.index]
            if not mine:
                out[stage] = members[stage]
                continue
            t = np.array([times[(stage, *key)] * 1e6 for key in mine])
            out[stage] = dict(zip(members[stage], map(round3, fit_terms(columns(stage, mine), t))))
        return out

    # the shapes where every member that can run was timed: where a choice can be scored
    field = [key for key in shapes if all((s, *key) in times.index for s in members if (s, key) in names)]

    def choices(coefs: dict, keys: list[tuple]) -> list[float]:
        r = replace(rule, members=frozen({s: frozen(c) for s, c in coefs.items()}))
        gaps = []
        for key in keys:
            shape = Shape(m=key[0], n=key[1], k=key[2])
            can = [s for s in members if (s, key) in names]
            chosen = race.pick(cfg, r, shape, can)  # None: no term of any member evaluates here
            gaps.append(times[(chosen, *key)] / min(times[(s, *key)] for s in can) if chosen else math.inf)
        return gaps

    def line(label: str, gaps: list[float]) -> str:
        if not gaps:
            return f"  {label:28s} no shape with every member that can run it timed"
        geo = math.exp(sum(map(math.log, gaps)) / len(gaps))
        return (f"  {label:28s} within {WITHIN - 1:.0%} on {sum(g <= WITHIN for g in gaps)} of {len(gaps)}, "
                f"worst {max(gaps):.3f}x, geometric mean {geo:.4f}x")

    coefs = fitted(shapes)
    print(f"{args.race}: {len(shapes)} shapes timed ({len(dropped)} rows at held-out shapes left out"
          + (f", {len(foreign)} of stages at shapes they cannot run" if foreign else "")
          + f"), {len(field)} with every member that can run them")
    for stage in members:
        mine = [key for key in shapes if (stage, *key) in times.index]
        if not mine:
            print(f"  {stage}: not timed in these tables")
            continue
        t = np.array([times[(stage, *key)] * 1e6 for key in mine])
        ratio = columns(stage, mine) @ np.array(list(coefs[stage].values())) / t
        print(f"  {stage}: {len(mine)} shapes, predicted / measured {ratio.min():.2f}-{ratio.max():.2f}, "
              f"rms {math.sqrt(float(((ratio - 1) ** 2).mean())):.3f}")
    print(line("choice, as configured", choices(members, field)))
    print(line("choice, as fitted", choices(coefs, field)))
    if args.cv > 1:
        gaps = []
        for i in range(args.cv):
            held_fold = field[i::args.cv]
            gaps += choices(fitted([key for key in shapes if key not in set(held_fold)]), held_fold)
        print(line(f"choice, {args.cv}-fold cv", gaps))
    for stage, c in coefs.items():
        print(f"{stage}:\n  time_model:\n    terms:")
        for term, v in c.items():
            print(f"      \"{term}\": {v:g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run(main))
