"""The size figure read at thirty stages: one panel per family of stages (from the configuration alone),
legends outside the data, tick labels that do not overlap."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.text import Text

from sgemm_lab.config import load as cfgmod
from sgemm_lab.report import plots, profile_plots
from sgemm_lab.report.step import stage_families
from sgemm_lab.report.tables import ladder_rows

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "h100"


def _overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_every_stage_has_a_family_and_the_families_follow_the_config():
    cfg = cfgmod.load(ROOT / "config" / "config.yaml")
    fam = stage_families(cfg)
    assert set(fam) >= {k.id for k in cfg.kernels}
    for k in cfg.kernels:
        if k.precision != "fp32":
            assert fam[k.id].startswith("Tensor cores")
        elif k.backend == "host":
            assert fam[k.id] == "CPU"
    assert len(set(fam.values())) >= 3


def test_size_figure_panels_legends_outside_and_no_overlapping_ticks(tmp_path):
    cfg = cfgmod.load(ROOT / "config" / "config.yaml")
    bench = ladder_rows(cfg, pd.read_csv(FIX / "bench.csv"))
    fam = stage_families(cfg)
    fig = plots.tflops_vs_size_figure(bench, order=list(cfg.implementations), families=fam)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.axison]
    timed = set(bench[bench.status == "ok"].kernel)
    expected = {fam[k] for k in cfg.implementations if k in timed and k in fam}
    assert {ax.get_title() for ax in panels} == expected
    for ax in panels:
        box = ax.get_window_extent(renderer)
        legend = ax.get_legend()
        assert legend is not None and not _overlap(legend.get_window_extent(renderer), box), ax.get_title()
        ticks = [t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_text()]
        assert len(ticks) > 3
        assert not any(_overlap(a, b) for i, a in enumerate(ticks) for b in ticks[i + 1:]), ax.get_title()
        # every stage of the family is drawn in its panel, with cuBLAS beside it
        names = {t.get_text() for t in legend.get_texts()}
        assert {k for k in timed if fam.get(k) == ax.get_title()} <= names and "cuBLAS (strict FP32)" in names
    plots.tflops_vs_size(bench, tmp_path / "size.png", order=list(cfg.implementations), families=fam)
    assert (tmp_path / "size.png").read_bytes()[:4] == b"\x89PNG"


def test_stall_figure_cycles_on_a_log_scale_beside_the_shares_legend_outside():
    cfg = cfgmod.load(ROOT / "config" / "config.yaml")
    ncu = pd.read_csv(FIX / "ncu_metrics.csv")
    shape = tuple(int(v) for v in ncu[["m", "n", "k"]].iloc[0])
    fig = profile_plots.stall_figure(ncu, order=list(cfg.implementations), shape=shape)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    cycles, ax = fig.axes
    # the stall cycles per instruction themselves, not only their shares: a stage's bar is its total
    assert cycles.get_xscale() == "log"
    at = ncu[(ncu.m == shape[0]) & (ncu.n == shape[1]) & (ncu.k == shape[2]) & ncu.metric.str.startswith("stall_")]
    totals = at.groupby("kernel").value.sum()
    labels = [t.get_text() for t in cycles.get_yticklabels()]
    drawn = {labels[round(p.get_y() + p.get_height() / 2)]: p.get_width() for p in cycles.patches}
    assert drawn and all(abs(drawn[k] - totals[k]) < 1e-6 * max(1.0, totals[k]) for k in drawn)
    assert ax.get_xscale() == "linear" and ax.get_xlim() == (0.0, 100.0)
    assert not _overlap(ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer))
    # each stage's bar adds up to 100% (its reasons as shares of its total)
    widths: dict[float, float] = {}
    for patch in ax.patches:
        y = round(patch.get_y(), 6)
        widths[y] = widths.get(y, 0.0) + patch.get_width()
    assert widths and all(abs(w - 100.0) < 1e-6 or w == 0.0 for w in widths.values())


def test_accuracy_figure_labels_never_cover_each_other():
    cfg = cfgmod.load(ROOT / "config" / "config.yaml")
    bench, checks = pd.read_csv(FIX / "bench.csv"), pd.read_csv(FIX / "check.csv")
    ok = bench[bench.status == "ok"]
    shape = tuple(int(v) for v in ok.loc[ok.m * ok.n * ok.k == (ok.m * ok.n * ok.k).max(), ["m", "n", "k"]].iloc[0])
    fig = plots.accuracy_figure(bench, checks, order=list(cfg.implementations), shape=shape, precision=cfg.precisions)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    (ax,) = fig.axes
    labels = [Text.get_window_extent(t, renderer) for t in ax.texts]  # the text alone, not its leader line
    frame = ax.get_window_extent(renderer)
    assert all(frame.x0 <= b.x0 and b.y0 >= frame.y0 and b.y1 <= frame.y1 + 40 for b in labels)  # beside its point
    assert len(labels) >= 5
    assert not any(_overlap(a, b) for i, a in enumerate(labels) for b in labels[i + 1:])
    assert not _overlap(ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer))


def test_roofline_draws_the_tensor_roof_where_it_was_measured_legend_outside():
    cfg = cfgmod.load(ROOT / "config" / "config.yaml")
    bench, ncu = pd.read_csv(FIX / "bench.csv"), pd.read_csv(FIX / "ncu_metrics.csv")
    ceilings = {"fp32_tflops": 59.8, "dram_gbps": 3010.0}
    shape = (4096, 4096, 4096)
    fig = profile_plots.roofline_figure(bench, ncu, ceilings, order=list(cfg.implementations), shape=shape)
    ax = fig.axes[0]
    drawn = [ln.get_linestyle() for ln in ax.get_lines() if ln.get_linestyle() != "None"]
    assert drawn == ["-"] and "FMA roof only" in ax.get_title()
    fig = profile_plots.roofline_figure(bench, ncu, {**ceilings, "tf32_tflops": 480.0}, order=list(cfg.implementations),
                                shape=shape)
    ax = fig.axes[0]
    roofs = {ln.get_linestyle(): max(ln.get_ydata()) for ln in ax.get_lines() if ln.get_linestyle() != "None"}
    assert roofs == {"-": 59.8, "--": 480.0, ":": 160.0}  # FMA, TF32 tensor, and its third for 3xTF32
    assert "TF32 roof" in ax.get_title()
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    assert not _overlap(legend, ax.get_window_extent())  # outside the data
    assert any("TF32 tensor cores" in t.get_text() for t in ax.get_legend().get_texts())
    legend_entries = [t.get_text() for t in ax.get_legend().get_texts()]
    assert len(legend_entries) <= 6  # the roofs and the precision classes, not one entry a stage
    renderer = fig.canvas.get_renderer()
    # every point labelled once, on the axes or, where points crowd, in the zoomed inset; no two labels
    # of one axes overlap, and the inset covers no point of the axes it sits on
    insets = ax.child_axes
    texts = [t.get_text() for a in (ax, *insets) for t in a.texts]
    assert len(texts) == len(set(texts)) >= 10
    for a in (ax, *insets):
        boxes = [Text.get_window_extent(t, renderer) for t in a.texts]
        assert not any(_overlap(p, q) for i, p in enumerate(boxes) for q in boxes[i + 1:])
    if insets:
        (inset,) = insets
        frame = inset.get_window_extent(renderer)
        outside = {t.get_text() for t in ax.texts}
        for coll in ax.collections:
            for x, y in ax.transData.transform(coll.get_offsets()):
                inside = frame.x0 <= x <= frame.x1 and frame.y0 <= y <= frame.y1
                assert not inside, "the inset covers a point drawn on the axes"
        assert outside.isdisjoint(t.get_text() for t in inset.texts)
    share = fig.axes[1]  # each stage's share of its roof: one bar a stage, none past the roof's 100%
    widths = [b.get_width() for b in share.patches]
    assert len(widths) == len(texts) and all(0 < w <= 100 for w in widths)
    assert isinstance(profile_plots.roofline_figure(bench, ncu, {}, order=list(cfg.implementations), shape=shape), str)


def test_roofline_holds_each_class_to_its_own_roof_and_says_where_none_was_measured():
    """A tensor-core stage's share is of the TF32 roof (a 3xTF32 stage's of its third); on a GPU with no
    measured tensor roof such a stage gets no share at all (not one of the FMA roof), and every point
    stays inside the axes."""
    cfg = cfgmod.load(ROOT / "config" / "config.yaml")
    bench, ncu = pd.read_csv(FIX / "bench.csv"), pd.read_csv(FIX / "ncu_metrics.csv")
    shape = (4096, 4096, 4096)
    bench.loc[(bench.kernel == "09_async_pipeline") & (bench.m == 4096) & (bench.n == 4096) & (bench.k == 4096),
              "tflops"] = 300.0  # a tensor-core speed, far above the FMA roof
    precision = {"09_async_pipeline": "tf32", "10_autotuned": "3xtf32"}
    base = {"fp32_tflops": 59.8, "dram_gbps": 3010.0}
    order = list(cfg.implementations)
    for ceilings in ({**base, "tf32_tflops": 480.0}, base):
        fig = profile_plots.roofline_figure(bench, ncu, ceilings, order=order, shape=shape, precision=precision)
        ax, share = fig.axes
        assert ax.get_ylim()[1] > 300.0  # the fast point is drawn
        bars = dict(zip([t.get_text() for t in share.get_yticklabels()], [b.get_width() for b in share.patches]))
        texts = {t.get_position()[1]: t.get_text() for t in share.texts}
        tf32_text = [t for t in texts.values() if "300 TFLOP/s" in t]
        if "tf32_tflops" in ceilings:
            assert 300.0 / 480.0 * 100 == pytest.approx(bars["09_async_pipeline"], rel=0.05)
            assert bars["10_autotuned"] == pytest.approx(50.528433 / (480.0 / 3) * 100, rel=0.05)
            assert tf32_text and "%" in tf32_text[0]
        else:
            assert np.isnan(bars["09_async_pipeline"]) and np.isnan(bars["10_autotuned"])
            assert tf32_text and "no tensor roof" in tf32_text[0]
            assert bars["08_warptiling"] == pytest.approx(48.259687 / 59.8 * 100, rel=0.05)
        assert share.get_xlim()[1] >= max(w for w in bars.values() if not np.isnan(w))


@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")  # forking a process with threads (BLAS)
def test_figures_drawn_side_by_side_are_the_figures_drawn_one_after_another(lab, tmp_path, monkeypatch):
    """The plot step's figures from forked processes: byte for byte the ones drawn in turn, a figure that
    cannot be drawn a placeholder in both (and named in the step's status)."""
    import hashlib
    import os
    from types import SimpleNamespace

    from sgemm_lab.report import step

    run = ROOT / "reports" / "h100"
    sweeps = sorted((run / "sweeps").glob("*.csv"))[:2]

    def broken_stalls(*a, **k):
        raise ValueError("no stalls today")

    monkeypatch.setattr(profile_plots, "stall_bars", broken_stalls)
    heatmap, pids = plots.sweep_heatmap, tmp_path / "pids"

    def recorded(*a, **k):  # which process drew it
        with open(pids, "a") as fh:
            fh.write(f"{os.getpid()}\n")
        return heatmap(*a, **k)

    monkeypatch.setattr(plots, "sweep_heatmap", recorded)
    drawn = {}
    for processes in (1, 3):
        out = tmp_path / str(processes)
        out.mkdir()
        outs = SimpleNamespace(size=out / "size.png", ladder=out / "ladder.png", roofline=out / "roofline.png",
                               levels=out / "levels.png", stalls=out / "stalls.png", memory=out / "memory.png", accuracy=out / "accuracy.png")
        status = step.plot(lab, bench_csv=run / "bench.csv", ncu_csv=run / "ncu_metrics.csv",
                           ceilings_json=run / "ceilings.json", outs=outs, sweeps=sweeps,
                           heatmaps=[out / f"sweep_{p.stem}.png" for p in sweeps], check_csv=run / "check.csv",
                           processes=processes)
        assert status is not None and "1 of 9 figures not drawn (stalls.png: ValueError: no stalls today)" in status.message
        drawn[processes] = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.iterdir()}
        by = set(pids.read_text().split())
        pids.unlink()
        assert by == {str(os.getpid())} if processes == 1 else str(os.getpid()) not in by  # forked: drawn elsewhere
    assert len(drawn[1]) == 9 and drawn[1] == drawn[3]


def test_size_figure_with_only_the_references_timed_is_no_figure_not_an_error(tmp_path):
    # a run whose stages skip every size of the ladder (narrow stages only): cuBLAS alone has rows there
    cfg = cfgmod.load(ROOT / "config" / "config.yaml")
    bench = pd.read_csv(FIX / "bench.csv")
    refs = bench[bench.kernel.isin(plots.REFERENCE_LINES) & (bench.status == "ok")]
    assert len(refs) > 0
    assert plots.tflops_vs_size_figure(refs, order=list(cfg.implementations)) is None
    plots.tflops_vs_size(refs, tmp_path / "size.png", order=list(cfg.implementations))
    assert (tmp_path / "size.png").read_bytes()[:4] == b"\x89PNG"  # the picture that says why


def test_memory_figure_names_every_stage_whole_and_shows_small_conflict_counts(tmp_path):
    cfg = cfgmod.load(ROOT / "config" / "config.yaml")
    ncu = pd.read_csv(FIX / "ncu_metrics.csv")
    shape = tuple(int(v) for v in ncu[["m", "n", "k"]].iloc[0])
    fig = profile_plots.memory_figure(ncu, order=list(cfg.implementations), shape=shape)
    conflicts, occupancy = fig.axes
    assert conflicts.get_xscale() == "symlog"  # counts from 0 to 10^8 all visible
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    labels = [t for t in conflicts.get_yticklabels() if t.get_text()]
    assert {t.get_text() for t in labels} == set(ncu[(ncu.m == shape[0]) & (ncu.n == shape[1]) & (ncu.k == shape[2])].kernel)
    boxes = sorted((t.get_window_extent(r) for t in labels), key=lambda b: b.y0)
    assert not any(_overlap(a, b) for a, b in zip(boxes, boxes[1:]))


def test_sweep_heatmap_outlines_the_configuration_the_ladder_runs(tmp_path, monkeypatch):
    sweep = pd.DataFrame([dict(kernel="s", m=64, n=64, k=64, status="ok", TM=tm, TN=tn, BM=bm, tflops=tm * tn + bm)
                          for tm in (4, 8) for tn in (4, 8) for bm in (64, 128)])
    drawn = {}
    monkeypatch.setattr(plots, "save_figure", lambda fig, out: drawn.setdefault("fig", fig))
    plots.sweep_heatmap(sweep, tmp_path / "s.png", kernel="s", axes=("TM", "TN"), ladder={"TM": 8, "TN": 4, "BM": 64})
    (ax, _cbar) = drawn["fig"].axes
    from matplotlib.patches import Rectangle

    boxes = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_edgecolor()[:3] == (1.0, 0.0, 0.0)]
    assert [(b.get_x(), b.get_y()) for b in boxes] == [(0, 1)]  # column TN=4, row TM=8
    assert "the ladder's TM=8, TN=4" in ax.get_xlabel()


def test_the_figures_read_the_main_kernels_rows_only(lab, tmp_path, monkeypatch):
    """Rows of other phases of a stage of several (``phase`` set) never reach the figures: the roofline is drawn
    from the main kernels' rows, as from a table without phases."""
    from types import SimpleNamespace

    import pandas as pd

    from sgemm_lab.report import step

    run = ROOT / "reports" / "h100"
    ncu = pd.read_csv(run / "ncu_metrics.csv")
    other = ncu[ncu.kernel == ncu.kernel.iloc[0]].assign(phase="some_other_kernel", value=-12345.0)
    table = tmp_path / "ncu_metrics.csv"
    pd.concat([other, ncu.assign(phase="")], ignore_index=True).to_csv(table, index=False)
    seen = []
    monkeypatch.setattr(profile_plots, "roofline", lambda bench, df, *a, **k: seen.append(df))
    outs = SimpleNamespace(**{n: tmp_path / f"{n}.png" for n in
                              ("size", "ladder", "roofline", "levels", "stalls", "memory", "accuracy")})
    step.plot(lab, bench_csv=run / "bench.csv", ncu_csv=table, ceilings_json=run / "ceilings.json", outs=outs,
              sweeps=[], heatmaps=[], check_csv=run / "check.csv", processes=1)
    (drawn,) = seen
    assert "phase" not in drawn and len(drawn) == len(ncu) and not (drawn["value"] == -12345.0).any()
