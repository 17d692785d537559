"""tools/fit_rules.py and tools/draw_shapes.py on shape sweeps made up on the CPU (no GPU)."""

import json
import subprocess
import sys

import pandas as pd
import yaml
from conftest import ROOT

from sgemm_lab.config import load as cfgmod
from sgemm_lab.config.geometry import evaluate, plan_names, unsupported_reason
from sgemm_lab.dispatch import choice

TOOL = ROOT / "tools" / "fit_rules.py"


def _sweep_rows(cfg, spec, shapes, steps, *, slow=None):
    """Shape-sweep rows whose times are the rule's cost under ``steps`` (so that those STEPs choose the
    fastest candidate everywhere); ``slow``: a shape -> candidate made 3x slower than its cost."""
    resolved = choice.resolve(cfg, spec)
    rows = []
    for s in shapes:
        for i in range(len(spec.candidates)):
            cand = choice.listed_candidate(resolved, i)
            if unsupported_reason(cand, s) is not None:
                continue
            t = float(evaluate(cand, "rule.cost", spec.rule.cost, plan_names(cand, s, steps[i])))
            if slow and slow.get(s) == i:
                t *= 3
            rows.append(dict(kernel=spec.id, candidate=i, params=json.dumps(dict(cand.params)), m=s.m, n=s.n, k=s.k, status="ok",
                             verified=True, within_local_budget=True, median_ms=t, tflops=1.0))
    return pd.DataFrame(rows)


def _run(run_dir, *extra):
    return subprocess.run([sys.executable, str(TOOL), str(run_dir), *extra], capture_output=True, text=True,
                          timeout=600)


def test_fit_finds_steps_that_choose_the_fastest_candidate_and_reads_only_the_fit_draw(lab, tmp_path):
    d = lab.held_out_draw
    fit, score = cfgmod.held_out_streams(d, lab.suite, lab.bench.shapes)
    fit_shapes, score_shapes = [s for _, s in fit], [s for _, s in score]
    (tmp_path / "dispatch").mkdir()
    ruled = [k for k in lab.kernels if k.dispatched and k.rule is not None]
    assert ruled
    for spec in ruled:
        truth = [spec.rule.step[0]] + [round(s * 1.3) for s in spec.rule.step[1:]]  # within the searched range
        rows = _sweep_rows(lab, spec, fit_shapes, truth)
        # the held-out shapes, timed too, are made to contradict the truth: a fit that read them would differ
        wrong = _sweep_rows(lab, spec, score_shapes, truth, slow={s: 0 for s in score_shapes})
        pd.concat([rows, wrong]).to_csv(tmp_path / "dispatch" / f"{spec.id}.csv", index=False)
    res = _run(tmp_path)
    assert res.returncode == 0, res.stderr
    for spec in ruled:
        block = res.stdout.split(f"{spec.id}:")[1]
        assert f"{len(fit_shapes)} shapes" in block.splitlines()[0]
        best = next(line for line in block.splitlines() if "fit #1" in line)
        # the best fit chooses the fastest candidate on every fit shape
        assert f"on {len(fit_shapes)} of {len(fit_shapes)}, worst 1.000x" in best


def test_fit_refuses_a_run_without_shape_sweeps_in_one_line(tmp_path):
    res = _run(tmp_path)
    assert res.returncode == 1 and "no shape sweep" in res.stderr and "Traceback" not in res.stderr


def test_draw_shapes_prints_the_pipelines_held_out_draw(lab):
    res = subprocess.run([sys.executable, str(ROOT / "tools" / "draw_shapes.py"), "--stream", "score"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    listed = yaml.safe_load(res.stdout)["shapes"]
    assert [tuple(s) for s in listed] == [(s.m, s.n, s.k) for s in lab.held_out]
    fit = yaml.safe_load(subprocess.run([sys.executable, str(ROOT / "tools" / "draw_shapes.py")],
                                        capture_output=True, text=True, timeout=120).stdout)["shapes"]
    assert not {tuple(s) for s in fit} & {tuple(s) for s in listed}


def test_held_out_shapes_are_timed_for_cublas_and_the_stages_that_ask_only(tmp_path):
    raw = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    cfg = cfgmod.from_dict(raw)
    assert len(cfg.held_out) == 6 * raw["suite"]["held_out"]["per_class"] >= 20
    held = set(cfg.held_out)
    assert not held & (set(cfg.suite) | set(cfg.bench.shapes))
    assert held <= set(cfg.bench_shapes("cublas"))
    assert not held & set(cfg.bench_shapes("cublas_tf32"))
    for k in cfg.kernels:
        if k.backend == "cuda" or k.autotuned:
            assert (held <= set(cfg.bench_shapes(k.id))) == k.held_out, k.id
    # a skinny class holds both sides
    skinny = [s for c, s in zip(cfg.held_out_classes, cfg.held_out) if c == "skinny"]
    assert any(s.m <= 16 for s in skinny) and any(s.n <= 16 for s in skinny)
    raw["suite"]["held_out"]["per_class"] = 0
    assert cfgmod.from_dict(raw).held_out == ()


def test_a_held_out_point_is_timed_with_the_draws_budget_where_lower():
    raw = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    cfg = cfgmod.from_dict(raw)
    held, other = cfg.held_out[0], cfg.bench.shapes[0]
    budget = cfg.held_out_draw.target_ms
    assert budget < cfg.bench.target_ms and budget < cfg.sweep.target_ms
    assert cfg.point_target_ms(held, cfg.bench.target_ms) == budget
    assert cfg.point_target_ms(held, cfg.sweep.target_ms) == budget
    assert cfg.point_target_ms(other, cfg.bench.target_ms) == cfg.bench.target_ms
    assert cfg.point_target_ms(held, budget / 2) == budget / 2  # never above the step's own
    raw["suite"]["held_out"]["target_ms"] = 500
    assert cfgmod.from_dict(raw).point_target_ms(held, 150) == 150
    raw["suite"]["held_out"]["per_class"] = 0
    assert cfgmod.from_dict(raw).point_target_ms(held, 150) == 150


def test_also_adds_other_runs_shapes_but_never_the_held_out_ones_and_cv_scores_the_search(lab, tmp_path):
    fit, score = cfgmod.held_out_streams(lab.held_out_draw, lab.suite, lab.bench.shapes)
    fit_shapes, score_shapes = [s for _, s in fit], [s for _, s in score]
    extra_shapes = list(lab.bench.shapes)[:5]  # another run's shapes, none of them held out
    assert not {(s.m, s.n, s.k) for s in extra_shapes} & {(s.m, s.n, s.k) for s in score_shapes}
    spec = next(k for k in lab.kernels if k.dispatched and k.rule is not None)
    truth = [spec.rule.step[0]] + [round(s * 1.3) for s in spec.rule.step[1:]]
    for run, shapes in (("fit", fit_shapes), ("other", extra_shapes + score_shapes[:3])):
        (tmp_path / run / "dispatch").mkdir(parents=True)
        _sweep_rows(lab, spec, shapes, truth).to_csv(tmp_path / run / "dispatch" / f"{spec.id}.csv", index=False)
    res = _run(tmp_path / "fit", "--stage", spec.id, "--also", str(tmp_path / "other"), "--cv", "4", "--top", "1")
    assert res.returncode == 0, res.stderr
    n = len({(s.m, s.n, s.k) for s in fit_shapes + extra_shapes})
    assert res.stdout.splitlines()[0] == f"{spec.id}: {n} shapes, cost {spec.rule.cost}"
    assert "(3 shapes of the held-out draw in --also runs left out)" in res.stdout
    cv = next(line for line in res.stdout.splitlines() if "4-fold cv" in line)
    assert f" of {n}, worst " in cv
    assert sum("cost " in line for line in res.stdout.splitlines()) == 1  # --stage: that stage alone


def test_cv_and_stage_are_refused_in_one_line_when_wrong(lab, tmp_path):
    (tmp_path / "dispatch").mkdir()
    spec = next(k for k in lab.kernels if k.dispatched and k.rule is not None)
    other = next(k for k in lab.kernels if k.dispatched and k.rule is not None and k.id != spec.id)
    for extra, words in ((["--cv", "1"], "--cv takes the number of folds"), (["--stage", "no_such"], "no_such"),
                         (["--stage", spec.id, "--cost", f"{other.id}=STEP"], "which --stage leaves out")):
        res = _run(tmp_path, *extra)
        assert res.returncode == 1 and words in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_cross_validation_scores_each_fold_with_steps_found_without_it():
    sys.path.insert(0, str(ROOT / "tools"))
    import fit_rules

    assert fit_rules.folds(10, 3) == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    # three shapes; candidate 0 is fastest on shapes 0 and 1, candidate 1 on shape 2
    times = [{0: 1.0, 1: 2.0}, {0: 1.0, 1: 2.0}, {0: 3.0, 1: 1.0}]
    seen = []

    def best(train):  # "fitted" on the training shapes: the candidate fastest on most of them
        seen.append(sorted(train))
        return (0,) if sum(min(times[j], key=times[j].get) == 0 for j in train) * 2 >= len(train) else (1,)

    def picks(steps):  # a rule that always picks the candidate its STEPs name
        return [steps[0]] * len(times)

    line = fit_rules.cross_validate(3, 3, best, picks, times, 1.05)
    assert seen == [[1, 2], [0, 2], [0, 1]]  # each fold's STEPs come from the others alone
    # shape 2 is scored with the STEPs of shapes 0 and 1 (candidate 0: 3x its fastest); shapes 0 and 1
    # with those of {1, 2} and {0, 2}, a tie that picks candidate 0: right
    assert "within 5% on 2 of 3, worst 3.000x" in line


def test_only_timings_of_the_configured_build_are_fitted_and_cv_needs_enough_shapes(lab, tmp_path):
    fit, _ = cfgmod.held_out_streams(lab.held_out_draw, lab.suite, lab.bench.shapes)
    fit_shapes = [s for _, s in fit]
    spec = next(k for k in lab.kernels if k.dispatched and k.rule is not None)
    rows = _sweep_rows(lab, spec, fit_shapes, spec.rule.step)
    # the first half of the shapes timed on a build with another parameter: they must not count
    half = {(s.m, s.n, s.k) for s in fit_shapes[: len(fit_shapes) // 2]}
    old = [(m, n, k) in half for m, n, k in zip(rows.m, rows.n, rows.k)]
    rows.loc[old, "params"] = [json.dumps({**json.loads(p), "GROUP_M": 99}) for p in rows.params[old]]
    (tmp_path / "dispatch").mkdir()
    rows.to_csv(tmp_path / "dispatch" / f"{spec.id}.csv", index=False)
    res = _run(tmp_path, "--stage", spec.id, "--top", "1")
    assert res.returncode == 0, res.stderr
    kept = len(fit_shapes) - len(half)
    assert res.stdout.splitlines()[0].startswith(f"{spec.id}: {kept} shapes")
    assert f"({sum(old)} rows of candidates built otherwise than this configuration builds them left out)" in res.stdout
    res = _run(tmp_path, "--stage", spec.id, "--cv", str(kept + 1))
    assert res.returncode == 1 and f"needs at least {kept + 1} shapes" in res.stderr and "Traceback" not in res.stderr
