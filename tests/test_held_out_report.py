"""The report's out-of-sample section, from made-up rows (no GPU)."""

import math

import pandas as pd

from sgemm_lab.report.held_out import held_out_section
from sgemm_lab.report.tables import ladder_rows


def _row(kernel, s, ms):
    return dict(kernel=kernel, m=s.m, n=s.n, k=s.k, status="ok", verified=True, median_ms=ms, q1_ms=ms, q3_ms=ms,
                tflops=2 * s.m * s.n * s.k / ms / 1e9)


def test_held_out_section_scores_the_best_stages_and_each_rule(lab):
    held = lab.held_out
    assert len(held) >= 20
    ruled = [k for k in lab.kernels if k.held_out and k.dispatched and k.rule is not None]
    strict = next(k.id for k in ruled if k.precision == "fp32")
    accurate = next(k.id for k in ruled if k.precision == "3xtf32")
    rows, disp = [], []
    for i, s in enumerate(held):
        rows += [_row("cublas", s, 1.0), _row(strict, s, 0.8 if i else 1.25), _row(accurate, s, 0.5)]
        for k in ruled:  # the first shape's choice is 1.3x the fastest, the second's did not verify
            gap = 1.3 if i == 0 else (math.nan if i == 1 else 1.01)
            disp.append(dict(kernel=k.id, m=s.m, n=s.n, k=s.k, candidate=0, rule_candidate=0, rule_gap=gap))
    ok = pd.DataFrame(rows)
    checks = pd.DataFrame([dict(kernel=k, status="pass", fp32_limit=1e-5, m=64, n=64, k=64)
                           for k in (strict, accurate)])
    text = "\n".join(held_out_section(lab, ok, checks, pd.DataFrame(disp)))
    assert "## Out of sample" in text and f"seed {lab.held_out_draw.seed}" in text
    assert text.count("\n| ") >= len(held) + 1  # header + one row a shape (and the separator)
    first = next(line for line in text.splitlines() if line.startswith(f"| {held[0].m}"))
    assert "**0.800×**" in first and "**1.300×**" in first  # below cuBLAS and beyond 5%: bold
    n = len(held)
    geo = math.exp(((n - 1) * math.log(1.25) + math.log(0.8)) / n)
    assert f"Strict FP32: Geometric mean over {n} shapes: **{geo:.3f}×**; minimum **0.800×**" in text
    assert f"FP32-accurate: Geometric mean over {n} shapes: **2.000×**" in text
    for k in ruled:
        assert f"`{k.id}`'s rule: within 5% of the fastest candidate on **{n - 2} of {n}** shapes" in text
    assert "not verified" in text and "where its choice did not verify" in text
    # per class: the first class holds the shape at 0.8x (its minimum), the others 1.25x throughout
    classes = list(dict.fromkeys(lab.held_out_classes))
    per = {c: [0.8 if i == 0 else 1.25 for i, x in enumerate(lab.held_out_classes) if x == c] for c in classes}
    table = text.split("By class")[1]
    for c in classes:
        r = per[c]
        geo = math.exp(sum(map(math.log, r)) / len(r))
        strict_geo = f"**{geo:.3f}×**" if geo < 1 else f"{geo:.3f}×"
        strict_min = f"**{min(r):.3f}×**" if min(r) < 1 else f"{min(r):.3f}×"
        assert f"| {c} | {len(r)} | {strict_geo} | {strict_min} | 2.000× | 2.000× |" in table, (c, table)


def test_held_out_shapes_stay_out_of_the_ladder_and_the_section_is_empty_without_a_draw(lab):
    s = lab.held_out[0]
    sq = lab.bench.shapes[0]
    bench = pd.DataFrame([_row("cublas", s, 1.0), _row("cublas", sq, 1.0)])
    kept = ladder_rows(lab, bench)
    assert list(zip(kept.m, kept.n, kept.k)) == [(sq.m, sq.n, sq.k)]
    from dataclasses import replace
    assert held_out_section(replace(lab, held_out=(), held_out_classes=()), bench, None, None) == []


def test_a_class_where_no_stage_verified_is_in_the_class_table_with_dashes(lab):
    held, classes = lab.held_out, lab.held_out_classes
    ruled = [k for k in lab.kernels if k.held_out and k.dispatched and k.rule is not None]
    strict = next(k.id for k in ruled if k.precision == "fp32")
    lost = classes[0]  # no stage verified on any shape of the first class; one shape of the second neither
    second = next(c for c in classes if c != lost)
    skip_one = next(i for i, c in enumerate(classes) if c == second)
    rows = []
    for i, (c, s) in enumerate(zip(classes, held)):
        rows.append(_row("cublas", s, 1.0))
        if c != lost and i != skip_one:
            rows.append(_row(strict, s, 0.5))
    checks = pd.DataFrame([dict(kernel=strict, status="pass", fp32_limit=1e-5, m=64, n=64, k=64)])
    text = "\n".join(held_out_section(lab, pd.DataFrame(rows), checks, None))
    table = text.split("By class")[1]
    drawn = {c: classes.count(c) for c in classes}
    assert f"| {lost} | {drawn[lost]} | – | – |" in table
    assert f"| {second} | {drawn[second]} | 2.000× ({drawn[second] - 1} of {drawn[second]}) | 2.000× |" in table
    order = [line.split(" | ")[0].lstrip("| ") for line in table.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert order == list(dict.fromkeys(classes))  # the order first drawn
