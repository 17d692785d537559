"""The out-of-sample section: shapes nobody tuned on (``suite.held_out``), drawn at random from the classes
users bring, with what the lab would run there against cuBLAS, and each dispatch rule's choice there
against the fastest of its candidates measured there."""

from __future__ import annotations

import math

import pandas as pd

from ..config.records import LabConfig
from ..dispatch.race import score as race_score
from .markdown import md_table
from .numbers import mark, unsteady_note
from .tables import over_suite, suite_point, fp32_accurate_stages, geomean, shape_label

RULE_WITHIN = 1.05  # a rule's choice within 5% of the fastest candidate's time counts as a good choice
RACE_NAMES = {"fp32": "strict-FP32", "fp32_accurate": "FP32-accurate"}


def _rule_gap(dispatch: pd.DataFrame, kernel: str, s) -> float:
    """The rule's choice's time over the fastest candidate's at ``s`` (the build's dispatch rows); NaN where
    the shape sweep has no verified candidate there or the rule's choice did not verify."""
    if dispatch is None or dispatch.empty or "rule_gap" not in dispatch:
        return math.nan
    hit = dispatch[(dispatch.kernel == kernel) & (dispatch.m == s.m) & (dispatch.n == s.n) & (dispatch.k == s.k)]
    return hit["rule_gap"].astype(float).iloc[0] if len(hit) else math.nan


def held_out_section(cfg: LabConfig, ok: pd.DataFrame, checks: pd.DataFrame | None,
                     dispatch: pd.DataFrame | None) -> list[str]:
    """Per held-out shape: cuBLAS FP32, the best verified strict-FP32 stage and the best FP32-accurate one
    among the stages with ``held_out: true`` (ratio = cuBLAS median / stage median), and for each dispatch
    stage with a rule, its choice's time over the fastest candidate's; then the geometric means, minima,
    and how often each rule was within 5%."""
    if not cfg.held_out:
        return []
    timed = {k.id for k in cfg.kernels if cfg.times_held_out(k)}
    strict = [k.id for k in cfg.kernels if k.id in timed and k.precision == "fp32"]
    accurate = [k for k in fp32_accurate_stages(cfg, checks) if k in timed]
    ruled = [k for k in cfg.kernels if k.id in timed and k.dispatched and k.rule is not None]
    # each race with a rule (LabConfig.race_rule): its members that run here, and its pick against the
    # fastest of them per shape where it can be scored
    # fastest of them per shape where it can be scored; a race with fewer than two members here has no choice
    races = {race: (rule, [m for m in rule.members if m in field], [])
             for race, field in (("fp32", strict), ("fp32_accurate", accurate))
             if (rule := cfg.race_rule(race)) is not None and sum(m in field for m in rule.members) >= 2}
    rows, over = [], {"strict": [], "accurate": []}
    by_class: dict[str, dict[str, list]] = {}  # class -> shapes drawn, and the ratios where a stage verified
    gaps: dict[str, list[tuple[float, str]]] = {k.id: [] for k in ruled}
    for cls, s in zip(cfg.held_out_classes, cfg.held_out):
        drawn = by_class.setdefault(cls, {"drawn": [], "strict": [], "accurate": []})
        drawn["drawn"].append(s)
        label = shape_label(s.m, s.n, s.k)
        row = [label, cls]
        ref = None
        for key, stages in (("strict", strict), ("accurate", accurate)):
            ref, best = suite_point(ok, stages, s)
            if ref is None or best is None:
                row += ["–", "–"]
                continue
            ratio = ref.median_ms / best.median_ms
            over[key].append((ratio, label))
            drawn[key].append(ratio)
            row += [f"`{best.kernel}`", (f"**{ratio:.3f}×**" if ratio < 1 else f"{ratio:.3f}×") + mark(ref, best)]
        row.insert(2, f"{ref.tflops:.2f}" if ref is not None else "–")
        for k in ruled:
            gap = _rule_gap(dispatch, k.id, s)
            gaps[k.id].append((gap if gap == gap else math.inf, label))
            row.append("not verified" if gap != gap else (f"**{gap:.3f}×**" if gap > RULE_WITHIN else f"{gap:.3f}×"))
        for rule, members, raced in races.values():
            got = race_score(cfg, rule, ok, [s], members)
            raced += [dict(g, label=label, ref_ms=ref.median_ms if ref is not None else math.nan) for g in got]
            gap = got[0]["gap"] if got else math.nan
            row.append("–" if not got else f"`{got[0]['pick']}` " + (
                "not verified" if math.isinf(gap) else f"**{gap:.3f}×**" if gap > RULE_WITHIN else f"{gap:.3f}×"))
        rows.append(row)
    d = cfg.held_out_draw
    out = ["## Out of sample: shapes nobody tuned on", "",
           f"{len(cfg.held_out)} shapes drawn at random ({d.per_class} of each class users bring, "
           f"`sgemm_lab.config.shape_classes`; seed {d.seed}, its score stream), none of them in the suite, the "
           "bench or the draws the dispatch rules' STEPs were fitted on (other streams and seeds, each rule's "
           "comment in the config; `tools/fit_rules.py`). On each: cuBLAS strict FP32, the best verified stage of those a shape would be "
           f"given ({', '.join(f'`{k}`' for k in sorted(timed))}), strict FP32 and FP32-accurate (ratio = cuBLAS "
           "median time / stage median time, bold below 1), and each rule's choice against the fastest of its "
           f"candidates timed on the shape (time over the fastest's, bold beyond {RULE_WITHIN:.2f}×).", "",
           md_table(["shape", "drawn as", "cuBLAS TFLOP/s", "best strict FP32", "ratio", "best FP32-accurate", "ratio"]
                    + [f"`{k.id}` rule / fastest" for k in ruled] + [f"{RACE_NAMES[r]} race's rule / fastest" for r in races],
                    rows, align="llrlrlr" + "r" * (len(ruled) + len(races)))]
    out += unsteady_note(rows)
    lines = []
    for key, name in (("strict", "Strict FP32"), ("accurate", "FP32-accurate")):
        if over[key]:
            lines.append(f"{name}: {over_suite(over[key])}")
    for k in ruled:
        g = gaps[k.id]
        within = sum(1 for x, _ in g if x <= RULE_WITHIN)
        worst, at = max(g) if g else (math.nan, "–")
        lines.append(f"`{k.id}`'s rule: within {RULE_WITHIN - 1:.0%} of the fastest candidate on **{within} of "
                     f"{len(g)}** shapes; the worst " + (f"{worst:.3f}× at {at}." if math.isfinite(worst)
                                                       else f"at {at}, where its choice did not verify."))
    for race, (rule, members, raced) in races.items():
        lines.append(_race_line(RACE_NAMES[race], rule, members, raced, [m for m in rule.members if m not in members]))
    return out + [""] + [" ".join(lines)] + [""] + _class_table(by_class)


def _race_line(name: str, rule, members: list[str], raced: list[dict], absent: list[str]) -> str:
    """A race's rule over the held-out shapes: how often its pick was within 5% of the fastest member timed
    there, the worst and the geometric mean of its time over the fastest's, and its picks' speed against
    cuBLAS beside the fastest members'; ``absent``: members not timed on these shapes or without the race's
    label in this run's checks, which the rule here chooses without."""
    fitted = "; ".join(rule.fitted) or "shapes not recorded"
    head = (f"The {name} race's rule (the least predicted time of {', '.join(f'`{m}`' for m in members)}, by the "
            f"`time_model` of each; fitted by {fitted}"
            + (f"; without {', '.join(f'`{m}`' for m in absent)}, not timed here or not verified in the race"
               if absent else "") + ")")
    if not raced:
        return head + ": no held-out shape had every member that can run it timed and verified."
    gaps = [g["gap"] for g in raced]
    worst = max(raced, key=lambda g: g["gap"])
    at = (f"{worst['gap']:.3f}× at {worst['label']}" if math.isfinite(worst["gap"])
          else f"at {worst['label']}, where its pick `{worst['pick']}` did not verify")
    if math.isfinite(worst["gap"]) and worst["pick"] != worst["fastest"]:
        at += f" (`{worst['pick']}` for `{worst['fastest']}`)"
    finite = [x for x in gaps if math.isfinite(x)]
    line = (f"{head}: within {RULE_WITHIN - 1:.0%} of the fastest member on **{sum(x <= RULE_WITHIN for x in gaps)} of "
            f"{len(gaps)}** shapes, the worst {at}"
            + (f", geometric mean {geomean(finite):.4f}×" if finite else "")
            + (f" over the {len(finite)} where its pick verified" if finite and len(finite) < len(gaps) else "") + ".")
    vs = [(g["ref_ms"] / g["pick_ms"], g["ref_ms"] / g["fastest_ms"]) for g in raced
          if math.isfinite(g["ref_ms"]) and math.isfinite(g["pick_ms"])]
    if vs:
        line += (f" Its picks against cuBLAS: geometric mean **{geomean(p for p, _ in vs):.3f}×** over {len(vs)} shapes "
                 f"(the fastest members': {geomean(b for _, b in vs):.3f}×).")
    return line


def _class_table(by_class: dict[str, dict[str, list]]) -> list[str]:
    """Per class of the draw, in the order first drawn: the shapes drawn, and the geometric mean and minimum
    of the best strict-FP32 and the best FP32-accurate ratio to cuBLAS over the shapes where a stage
    verified (how many, where fewer than drawn; "–" where none did), so that a loss reads as a class's."""
    def cells(r: list[float], drawn: int) -> list[str]:
        if not r:
            return ["–", "–"]
        geo = geomean(r)
        of = "" if len(r) == drawn else f" ({len(r)} of {drawn})"
        return [(f"**{geo:.3f}×**" if geo < 1 else f"{geo:.3f}×") + of,
                f"**{min(r):.3f}×**" if min(r) < 1 else f"{min(r):.3f}×"]
    rows = [[cls, str(len(v["drawn"]))] + cells(v["strict"], len(v["drawn"])) + cells(v["accurate"], len(v["drawn"]))
            for cls, v in by_class.items()]
    if not rows:
        return []
    return ["By class (geometric mean and minimum of the ratios above):", "",
            md_table(["class", "shapes", "strict FP32", "minimum", "FP32-accurate", "minimum"], rows, align="lrrrrr"), ""]
