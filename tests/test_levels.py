"""The memory hierarchy of a profiled shape (report.levels) and its hierarchical roofline: shares of each
level's peak from known counters, the level nearest its peak, what a run without the counters gets."""

from pathlib import Path

import pandas as pd
import pytest
from matplotlib.text import Text

from sgemm_lab.profiling.ncu import METRICS
from sgemm_lab.report import levels, profile_plots
from sgemm_lab.report.run_files import FIGURES

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "h100"
SHAPE = (1024, 2048, 512)
FLOPS = 2.0 * 1024 * 2048 * 512


def _ncu(kernel: str, **values) -> list[dict]:
    m, n, k = SHAPE
    return [dict(kernel=kernel, m=m, n=n, k=k, status="ok", metric=name, value=v) for name, v in values.items()]


# one launch of 2 ms at 1.5 GHz (SM) / 1.2 GHz (L2) / 3 GHz (DRAM)
CLOCKS = dict(duration=2e6, sm_clock_hz=1.5e9, l2_clock_hz=1.2e9, dram_clock_hz=3e9, dram_peak_bytes_per_cycle=1000.0,
              l2_peak_bytes_per_cycle=8000.0, smem_peak_bytes_per_cycle=16000.0)


def _tables():
    rows = _ncu("a", **CLOCKS, dram_bytes_read=3e9, dram_bytes_write=0.6e9, l2_bytes=9.6e9, l1_bytes=19.2e9,
                smem_bytes=12e9, smem_pipe_pct=41.0)
    # b: no L1 counter (dropped by ncu), and a stage with no shared traffic at all (0 bytes: no point)
    rows += _ncu("b", **CLOCKS, dram_bytes_read=0.3e9, dram_bytes_write=0.3e9, l2_bytes=1.2e9, smem_bytes=0.0)
    rows += _ncu("untimed", **CLOCKS, dram_bytes_read=1e9, dram_bytes_write=0.0, l2_bytes=1e9, l1_bytes=1e9,
                 smem_bytes=1e9)
    ncu = pd.DataFrame(rows)
    m, n, k = SHAPE
    bench = pd.DataFrame([dict(kernel="a", m=m, n=n, k=k, status="ok", tflops=FLOPS / 2e-3 / 1e12),
                          dict(kernel="b", m=m, n=n, k=k, status="ok", tflops=FLOPS / 2e-3 / 1e12 * 2),
                          dict(kernel="untimed", m=m, n=n, k=k, status="failed", tflops=float("nan"))])
    return ncu, bench


def test_the_metrics_each_level_reads_are_collected_by_the_profile_step():
    short = set(METRICS.values())
    for lv in levels.LEVELS:
        assert {*lv.bytes, lv.per_cycle, lv.clock} <= short, lv.name
    assert set(levels.PIPE.values()) <= short


def test_shares_of_each_level_peak_from_known_counters():
    ncu, bench = _tables()
    t = levels.level_table(ncu, bench, order=["a", "b", "untimed"], shape=SHAPE, precision={"b": "tf32"})
    got = {(r.kernel, r.level): r for r in t.itertuples()}
    assert set(got) == {("a", "DRAM"), ("a", "L2"), ("a", "L1"), ("a", "shared"), ("b", "DRAM"), ("b", "L2")}
    a = {lv: got[("a", lv)] for lv in ("DRAM", "L2", "L1", "shared")}
    # DRAM: 3.6 GB in 2 ms = 1.8 TB/s of 1000 B x 3 GHz = 3 TB/s
    assert a["DRAM"].tbps == pytest.approx(1.8) and a["DRAM"].peak_tbps == pytest.approx(3.0)
    assert a["DRAM"].of_peak == pytest.approx(0.6)
    assert a["L2"].of_peak == pytest.approx(4.8 / 9.6)  # 9.6 GB / 2 ms = 4.8 TB/s of 8000 x 1.2 GHz
    assert a["L1"].of_peak == pytest.approx(9.6 / 24.0)  # L1's data path: the shared-memory banks' peak
    assert a["shared"].of_peak == pytest.approx(6.0 / 24.0)
    assert a["shared"].intensity == pytest.approx(FLOPS / 12e9)
    assert got[("b", "DRAM")].precision == "tf32" and got[("b", "DRAM")].tflops == pytest.approx(2 * a["DRAM"].tflops)
    near = levels.nearest(t)
    assert near["a"] == "DRAM" and near["b"] == "DRAM"  # b: DRAM 0.3 of 3 TB/s, L2 0.6 of 9.6
    text = levels.markdown(t, order=["b", "a"])
    lines = text.splitlines()
    assert lines[0] == "| stage | DRAM (3.0 TB/s) | L2 (9.6 TB/s) | L1 (24.0 TB/s) | shared (24.0 TB/s) | nearest its peak |"
    assert lines[2] == "| `b` | 10% | 6% | – | – | DRAM |"
    assert lines[3] == "| `a` | 60% | 50% | 40% | 25% (pipe 41%) | DRAM |"


def test_nearest_level_is_the_highest_share():
    ncu, bench = _tables()
    t = levels.level_table(ncu, bench, order=["b"], shape=SHAPE)
    shares = t.set_index("level").of_peak
    assert levels.nearest(t)["b"] == shares.idxmax() == "DRAM"


def test_a_run_profiled_without_the_counters_has_no_table_and_says_so():
    bench, ncu = pd.read_csv(FIX / "bench.csv"), pd.read_csv(FIX / "ncu_metrics.csv")
    assert not ncu.metric.isin(["l2_bytes", "smem_bytes"]).any()  # the fixture predates these counters
    order = sorted(set(bench.kernel))
    shape = (4096, 4096, 4096)
    assert levels.level_table(ncu, bench, order=order, shape=shape).empty
    lines = levels.section(ncu, bench, order=order, shape=shape, figures={"roofline_levels": "figures/roofline_levels.png"})
    assert "does not have" in lines[0] and not any(ln.startswith("![") for ln in lines)
    why = profile_plots.levels_figure(bench, ncu, {"fp32_tflops": 60.0, "dram_gbps": 3000.0}, order=order, shape=shape)
    assert isinstance(why, str) and "no L2, L1 or shared-memory byte counters" in why


def test_the_figure_has_a_panel_a_level_under_its_peak_and_labels_every_point(tmp_path):
    ncu, bench = _tables()
    ceilings = {"fp32_tflops": 60.0, "dram_gbps": 2500.0, "tf32_tflops": 480.0}
    assert isinstance(profile_plots.levels_figure(bench, ncu, {}, order=["a", "b"], shape=SHAPE), str)
    fig = profile_plots.levels_figure(bench, ncu, ceilings, order=["a", "b"], shape=SHAPE, precision={"b": "tf32"})
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title().split(":")[0] for ax in panels] == ["DRAM", "L2", "L1", "shared"]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    peaks = {"DRAM": 3.0, "L2": 9.6, "L1": 24.0, "shared": 24.0}
    for ax in panels:
        name = ax.get_title().split(":")[0]
        assert f"peak {peaks[name]:.1f} TB/s" in ax.get_title()
        lines = [ln for ln in ax.get_lines() if ln.get_linestyle() != "None"]
        assert {ln.get_linestyle() for ln in lines} == {"-", "--", ":"}  # FMA, TF32, its third
        for ln in lines:  # the sloped part of every roof is the level's peak (TFLOP/s = TB/s x FLOP/byte)
            x, y = ln.get_xdata()[0], ln.get_ydata()[0]
            assert y == pytest.approx(min(max(ln.get_ydata()), x * peaks[name]))
        texts = sorted(t.get_text() for t in ax.texts)
        assert texts == (["a", "b"] if name in ("DRAM", "L2") else ["a"])
        boxes = [Text.get_window_extent(t, renderer) for t in ax.texts]
        assert not any(p.x0 < q.x1 and q.x0 < p.x1 and p.y0 < q.y1 and q.y0 < p.y1
                       for i, p in enumerate(boxes) for q in boxes[i + 1:])
    profile_plots.levels(bench, ncu, ceilings, tmp_path / "levels.png", order=["a", "b"], shape=SHAPE)
    assert (tmp_path / "levels.png").read_bytes()[:4] == b"\x89PNG"


def test_the_report_shows_the_figure_the_plot_step_draws():
    """The report names the figure by the file the workflow's plot rule writes (run_files.FIGURES), and
    the table follows it."""
    ncu, bench = _tables()
    stem = Path(FIGURES["levels"]).stem
    lines = levels.section(ncu, bench, order=["a", "b"], shape=SHAPE, figures={stem: f"figures/{FIGURES['levels']}"})
    assert lines[0] == f"![hierarchical roofline](figures/{FIGURES['levels']})"
    assert any(ln.startswith("| `a` | 60% |") for ln in "\n".join(lines).splitlines())
