"""tools/fit_rules.py and tools/draw_shapes.py on shape sweeps made up on the CPU (no GPU)."""

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
            rows.append(dict(kernel=spec.id, candidate=i, params="{}", m=s.m, n=s.n, k=s.k, status="ok",
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
