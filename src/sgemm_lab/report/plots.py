"""Figures (seaborn). Headless: the Agg backend is selected before pyplot is imported."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from .numbers import UNSTEADY_MARK, mark, unsteady  # noqa: E402
from .tables import shape_label  # noqa: E402


def save_figure(fig, out: Path) -> None:
    """The figure as PNG, written like every other output (a temporary file beside it, then a rename)."""
    import io as _bytes

    from ..results import io

    buf = _bytes.BytesIO()
    fig.savefig(buf, format="png", dpi=130, bbox_inches="tight")
    plt.close(fig)
    io.write_bytes(Path(out), buf.getvalue())


def save_or_say(fig, out: Path, why: str) -> None:
    """A figure builder's figure as PNG, or, where it had nothing to draw (None), a picture saying why."""
    if fig is None:
        placeholder(out, why)
    else:
        save_figure(fig, out)


# The library baselines, drawn as black reference lines (not as stages).
REFERENCE_LINES = {"cublas": ("cuBLAS (strict FP32)", "--"), "cublas_tf32": ("cuBLAS TF32 (tensor cores)", ":")}


def tflops_vs_size(bench: pd.DataFrame, out: Path, order: list[str], families: dict[str, str] | None = None) -> None:
    """TFLOP/s against problem size: one panel per family of stages (``families``: stage -> panel title,
    in the order first met in ``order``), one line per stage, cuBLAS as black reference lines in every
    panel; each panel's legend sits below it, outside the data."""
    save_or_say(tflops_vs_size_figure(bench, order=order, families=families), out, "no stage verified and timed at the ladder's sizes")


def _two_lines(label: str) -> str:
    """A shape label narrow enough to sit beside its neighbours unrotated: M×N over ×K."""
    head, sep, tail = label.rpartition("×")
    return f"{head}\n{sep}{tail}" if sep else label


def tflops_vs_size_figure(bench: pd.DataFrame, *, order: list[str], families: dict[str, str] | None = None):
    """The figure of :func:`tflops_vs_size` (None without verified timings), for drawing or inspection."""
    ok = bench[bench["status"] == "ok"].copy() if "status" in bench else bench.iloc[0:0]
    if ok.empty:
        return None
    ok["flops"] = 2 * ok.m * ok.n * ok.k
    sizes = ok.drop_duplicates(["m", "n", "k"]).sort_values("flops")
    labels = [shape_label(m, n, k) for m, n, k in sizes[["m", "n", "k"]].itertuples(index=False)]
    pos = {lab: i for i, lab in enumerate(labels)}
    ok["size"] = [pos[shape_label(m, n, k)] for m, n, k in ok[["m", "n", "k"]].itertuples(index=False)]
    kernels = [k for k in order if k not in REFERENCE_LINES and k in set(ok.kernel)]
    families = families or {}
    panels: dict[str, list[str]] = {}
    for k in kernels:
        panels.setdefault(families.get(k, "stages"), []).append(k)
    if not panels:  # only the reference lines timed at these sizes (a run of narrow stages, say)
        return None
    sns.set_theme(style="whitegrid", context="notebook")
    cols = min(2, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.2 * cols, 5.6 * rows), squeeze=False)
    palette = sns.color_palette("tab10") + sns.color_palette("Dark2")
    markers = ["o", "s", "^", "D", "v", "P", "X", "<", ">", "*", "h", "p"]
    shaky = ok[pd.Series([unsteady(r) for _, r in ok.iterrows()], index=ok.index, dtype=bool)]
    for ax, (family, members) in zip(axes.flat, panels.items()):
        for i, k in enumerate(members):
            line = ok[ok.kernel == k].sort_values("size")
            ax.plot(line["size"], line["tflops"], color=palette[i % len(palette)], marker=markers[i % len(markers)],
                    markersize=5, linewidth=1.6, label=k)
        for impl, (label, style) in REFERENCE_LINES.items():
            ref = ok[ok.kernel == impl].sort_values("size")
            if len(ref):
                ax.plot(ref["size"], ref["tflops"], color="black", linestyle=style, linewidth=1.8, label=label)
        here = shaky[shaky.kernel.isin([*members, *REFERENCE_LINES])]
        if len(here):  # the report's unsteady points (†), ringed where they are drawn
            ax.scatter(here["size"], here["tflops"], s=110, facecolors="none", edgecolors="red", linewidths=1.3,
                       zorder=5, label=f"unsteady ({UNSTEADY_MARK}: spread or clock drop)")
        ax.set_yscale("log")
        ax.set_title(family, fontsize=11)
        ax.set_xticks(range(len(labels)), [_two_lines(lab) for lab in labels], fontsize=7.5)
        ax.set_ylabel("TFLOP/s (median, log scale)", fontsize=9)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, fontsize=8, frameon=False)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_axis_off()
    fig.suptitle("SGEMM throughput against problem size (M×N×K), per family of stages; cuBLAS in black in every panel",
                 fontsize=12)
    fig.tight_layout()
    return fig


def sweep_heatmap(sweep: pd.DataFrame, out: Path, *, kernel: str, axes: tuple[str, str], title: str = "",
                  ladder: dict | None = None) -> None:
    """Best verified TFLOP/s for each pair of values on ``axes`` (max over the other swept parameters), the
    cell of the configuration the ladder runs (``ladder``: the stage's parameters) outlined."""
    y, x = axes
    ok = sweep[(sweep["status"] == "ok")] if "tflops" in sweep.columns else sweep.iloc[0:0]
    sns.set_theme(style="white", context="notebook")
    fig, ax = plt.subplots(figsize=(6.5, 5))
    if ok.empty:
        ax.text(0.5, 0.5, "no verified configuration", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
    else:
        grid = ok.pivot_table(index=y, columns=x, values="tflops", aggfunc="max")
        sns.heatmap(grid, annot=True, fmt=".1f", cmap="viridis", cbar_kws={"label": "TFLOP/s (best)"}, ax=ax)
        ax.invert_yaxis()
        at = ladder or {}
        if at.get(y) in list(grid.index) and at.get(x) in list(grid.columns):
            from matplotlib.patches import Rectangle

            cell = (list(grid.columns).index(at[x]), list(grid.index).index(at[y]))
            ax.add_patch(Rectangle(cell, 1, 1, fill=False, edgecolor="red", linewidth=2.5))
            ax.set_xlabel(f"{x}   (red: the ladder's {y}={at[y]}, {x}={at[x]})")
    counts = sweep["status"].value_counts() if "status" in sweep else pd.Series(dtype=int)
    where = f"{int(sweep.m.iloc[0])}x{int(sweep.n.iloc[0])}x{int(sweep.k.iloc[0])}: " if len(sweep) else ""
    ax.set_title(f"{title or kernel}\n{where}" + (", ".join(f"{n} {s}" for s, n in counts.items()) or "no points"),
                 fontsize=10)
    save_figure(fig, out)


def placeholder(out: Path, text: str) -> None:
    """A picture that says why there is no figure (the report keeps its layout)."""
    fig, ax = plt.subplots(figsize=(6, 2))
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()
    save_figure(fig, out)


def at_shape(df: pd.DataFrame, shape) -> pd.DataFrame:
    m, n, k = shape
    return df[(df.m == m) & (df.n == n) & (df.k == k)]


def ladder_bars(bench: pd.DataFrame, out: Path, *, order: list[str], shape) -> None:
    """TFLOP/s of every stage at one shape, annotated with % of cuBLAS; cuBLAS as a dashed line."""
    ok = at_shape(bench[bench.status == "ok"], shape) if "status" in bench else bench.iloc[0:0]
    kernels = [k for k in order if k in set(ok.kernel) and k not in REFERENCE_LINES]
    if not kernels:
        placeholder(out, f"no verified results at {shape}")
        return
    sns.set_theme(style="whitegrid", context="notebook")
    fig, ax = plt.subplots(figsize=(10, 5))
    data = ok.set_index("kernel").loc[kernels].reset_index()
    # each bar coloured by the baseline its label is a percentage of (TF32 stages: cuBLAS TF32)
    base = data["baseline"].fillna("cublas") if "baseline" in data else pd.Series("cublas", index=data.index)
    colours = {"cublas": "#4c72b0", "cublas_tf32": "#dd8452"}
    ax.bar(range(len(data)), data["tflops"], color=[colours.get(b, "#8c8c8c") for b in base], width=0.8)
    ax.set_xticks(range(len(data)), data["kernel"])
    for i, r in enumerate(data.itertuples()):
        if r.pct_cublas == r.pct_cublas:
            ax.text(i, r.tflops, f"{r.pct_cublas:.0f}%{mark(data.iloc[i])}", ha="center", va="bottom", fontsize=8)
    for b, label in (("cublas", "label: % of cuBLAS strict FP32"), ("cublas_tf32", "label: % of cuBLAS TF32")):
        if (base == b).any():
            ax.bar([0], [0], color=colours[b], label=label)
    for impl, (label, style) in REFERENCE_LINES.items():
        ref = ok[ok.kernel == impl]
        if len(ref):
            ax.axhline(ref.tflops.iloc[0], color="black", linestyle=style, label=f"{label} {ref.tflops.iloc[0]:.1f}")
    ax.legend(loc="upper left", fontsize=9)
    ax.set_xlabel("")
    ax.set_ylabel("TFLOP/s (median)")
    ax.set_title(f"The ladder at {shape[0]}x{shape[1]}x{shape[2]} (labels: % of cuBLAS)")
    plt.setp(ax.get_xticklabels(), rotation=35, ha="right")
    save_figure(fig, out)


def accuracy_points(bench: pd.DataFrame, checks: pd.DataFrame, *, order: list[str], shape,
                    precision: dict[str, str]) -> pd.DataFrame:
    """One row per implementation with a verified timing at ``shape`` and check runs: its TFLOP/s there,
    its worst relative error over the runs that multiply (alpha = 0 runs check beta * C only), its class."""
    ok = at_shape(bench[bench.status == "ok"], shape) if "status" in bench else bench.iloc[0:0]
    ran = checks[checks.status != "skipped"] if len(checks) and "status" in checks else checks.iloc[0:0]
    if len(ran) and "mode" in ran:
        ran = ran[ran["mode"] != "alpha0"]
    err = ran.groupby("kernel").rel_err.max() if len(ran) else pd.Series(dtype=float)
    rows = [dict(kernel=k, tflops=float(ok[ok.kernel == k].tflops.iloc[0]), rel_err=float(err[k]),
                 precision=precision.get(k, "fp32"))
            for k in order if k in set(ok.kernel) and k in err.index and err[k] > 0]
    return pd.DataFrame(rows, columns=["kernel", "tflops", "rel_err", "precision"])


def accuracy_speed(bench: pd.DataFrame, checks: pd.DataFrame, out: Path, *, order: list[str], shape,
                   precision: dict[str, str]) -> None:
    """Worst relative error over the check runs (x, log) against TFLOP/s at ``shape`` (y), one point
    per implementation that has both, coloured by precision class. Uniform inputs only: the other input
    distributions have a table of their own in the report."""
    save_or_say(accuracy_figure(bench, checks, order=order, shape=shape, precision=precision), out,
                 f"no implementation has both check runs and a timing at {shape}")


def accuracy_figure(bench: pd.DataFrame, checks: pd.DataFrame, *, order: list[str], shape, precision: dict[str, str]):
    """The figure of :func:`accuracy_speed` (None without points). Points that sit close together (stages
    of one family often share their worst error) get their labels stacked, each tied to its point by a
    thin line, so that no label covers another."""
    from .accuracy import uniform_rows

    data = accuracy_points(bench, uniform_rows(checks), order=order, shape=shape, precision=precision)
    if data.empty:
        return None
    sns.set_theme(style="whitegrid", context="notebook")
    fig, ax = plt.subplots(figsize=(9, 6))
    sns.scatterplot(data=data, x="rel_err", y="tflops", hue="precision", style="precision", s=80, ax=ax)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("worst relative error over the check runs on uniform inputs (vs float64)")
    ax.set_ylabel(f"TFLOP/s at {shape[0]}x{shape[1]}x{shape[2]} (median)")
    ax.set_title("Accuracy against speed")
    ax.legend(title="precision", loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    place_labels(fig, ax, data)
    return fig


def place_labels(fig, ax, data: pd.DataFrame, pad_px: float = 2.0, *, x: str = "rel_err", y: str = "tflops") -> None:
    """Labels (column ``kernel``) beside their points at columns ``x``, ``y`` (left of those near the right
    edge), each moved up past any label already placed that it would cover (lowest point first), with a
    leader line where one had to move."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    to_points = 72.0 / fig.dpi
    placed = []

    def covers(box) -> bool:
        return any(box.x0 < b.x1 and b.x0 < box.x1 and box.y0 < b.y1 and b.y0 < box.y1 for b in placed)

    pts = sorted(((r.kernel, (getattr(r, x), getattr(r, y))) for r in data.itertuples()),
                 key=lambda p: (ax.transData.transform(p[1])[1], p[0]))
    for kernel, at in pts:
        px, _ = ax.transData.transform(at)
        dx, ha = (-5, "right") if px > frame.x0 + 0.75 * frame.width else (5, "left")
        shift = 0.0
        while True:
            moved = dict(arrowprops=dict(arrowstyle="-", color="0.6", linewidth=0.6, shrinkA=0, shrinkB=3)) if shift else {}
            text = ax.annotate(kernel, at, textcoords="offset points",
                               xytext=(dx, 3 + shift * to_points), fontsize=7, ha=ha, **moved)
            box = _text_box(text, renderer)
            if not covers(box):
                break
            text.remove()
            shift += max(1.0, min(b.y1 for b in placed if box.x0 < b.x1 and b.x0 < box.x1 and box.y0 < b.y1
                                  and b.y0 < box.y1) - box.y0 + pad_px)
        placed.append(box)


def _text_box(text, renderer):
    """The window extent of an annotation's text alone (an Annotation's own extent includes its arrow)."""
    from matplotlib.text import Text

    text.update_positions(renderer)  # where its offset puts it (done at draw time otherwise)
    return Text.get_window_extent(text, renderer)


def compare_runs(df: pd.DataFrame, out: Path, *, order: list[str]) -> None:
    """Speed-up of each later run over the first: per implementation at the largest shape they share,
    with its 95% interval (top), and at every shape both timed, as a heatmap (bottom: hatched cells are
    within noise, framed ones unsteady); one column per later run."""
    if df.empty:
        placeholder(out, "no implementation timed and verified at the same shape in both runs")
        return
    runs = list(dict.fromkeys(df.run_b))
    sns.set_theme(style="whitegrid", context="notebook")
    n_impl = df.kernel.nunique()
    fig, axes = plt.subplots(2, len(runs), figsize=(max(9.0, 0.55 * df.groupby(["m", "n", "k"]).ngroups + 4) * len(runs),
                                                     5.5 + 0.38 * n_impl + 2.5), squeeze=False,
                             gridspec_kw={"height_ratios": [5.5, 0.38 * n_impl + 2.5]})
    for ax, run in zip(axes[1], runs):
        _speedup_heatmap(df[df.run_b == run], ax, order=order)
    for ax, run in zip(axes[0], runs):
        part = df[df.run_b == run]
        big = part.assign(f=part.m * part.n * part.k).sort_values("f").iloc[-1]
        at = part[(part.m == big.m) & (part.n == big.n) & (part.k == big.k)]
        kernels = [k for k in order if k in set(at.kernel)]
        at = at.set_index("kernel").loc[kernels].reset_index()
        y = range(len(at))
        colors = {"faster": "#2a9d8f", "slower": "#e76f51", "within noise": "#8d99ae"}
        ax.errorbar(at.speedup, y, xerr=[at.speedup - at.ci_low, at.ci_high - at.speedup], fmt="none",
                    ecolor="black", capsize=3)
        ax.scatter(at.speedup, y, c=[colors[v] for v in at.verdict], zorder=3)
        ax.axvline(1.0, color="black", linestyle="--", linewidth=1)
        ax.set_yticks(list(y), at.kernel)
        ax.invert_yaxis()
        ax.set_xlabel(f"speed-up of {run} over {at.run_a.iloc[0]} (median time ratio, 95% interval)")
        ax.set_title(f"{int(big.m)}x{int(big.n)}x{int(big.k)}: {at.gpu_b.iloc[0]} vs {at.gpu_a.iloc[0]}", fontsize=10)
    save_figure(fig, out)


def _speedup_heatmap(part: pd.DataFrame, ax, *, order: list[str]) -> None:
    """Implementations (rows, in ladder order) by shapes (columns, by FLOPs): the speed-up, centred on 1
    on a log scale; a cell whose interval contains 1 is hatched, one unsteady in a run is framed."""
    part = part.assign(flops=part.m * part.n * part.k)
    shapes = part.drop_duplicates(["m", "n", "k"]).sort_values("flops")
    labels = [shape_label(m, n, k) for m, n, k in shapes[["m", "n", "k"]].itertuples(index=False)]
    part = part.assign(shape=[shape_label(m, n, k) for m, n, k in part[["m", "n", "k"]].itertuples(index=False)])
    kernels = [k for k in order if k in set(part.kernel)] + sorted(set(part.kernel) - set(order))

    def cells(column: str) -> pd.DataFrame:  # kernels x shapes
        return part.pivot_table(index="kernel", columns="shape", values=column, aggfunc="first").reindex(
            index=kernels, columns=labels)

    grid, verdict, unsteady = cells("speedup"), cells("verdict"), cells("unsteady").fillna("")
    # colour range: 95% of the cells' |log2| (one outlier would wash out the rest; its number still shows)
    logs = np.abs(np.log2(grid.to_numpy(dtype=float)))
    span = max(float(np.nanquantile(logs, 0.95)) if np.isfinite(logs).any() else 1.0, 0.05)
    sns.heatmap(np.log2(grid), annot=grid, fmt=".2f", cmap="RdBu", vmin=-span, vmax=span, ax=ax,
                annot_kws={"fontsize": 7}, cbar_kws={"label": "log2 speed-up (right of 0: the later run is faster)"})
    for i, j in zip(*np.nonzero(verdict.to_numpy() == "within noise")):
        ax.add_patch(plt.Rectangle((j, i), 1, 1, fill=False, hatch="///", edgecolor="#8d99ae", lw=0))
    for i, j in zip(*np.nonzero(unsteady.to_numpy() != "")):
        ax.add_patch(plt.Rectangle((j + 0.04, i + 0.06), 0.92, 0.88, fill=False, edgecolor="black", lw=1.6))
    ax.grid(False)
    ax.set_xlabel("shape (M×N×K, by FLOPs)")
    ax.set_ylabel("")
    ax.set_title(f"speed-up of {part.run_b.iloc[0]} over {part.run_a.iloc[0]} at every shape both timed "
                 "(hatched: within noise; framed: unsteady in one run)", fontsize=10)
