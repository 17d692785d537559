"""Figures of the profile (seaborn, headless like ``plots``): the roofline, the hierarchical roofline (one
panel a memory level), the stall reasons and the memory and occupancy panels, from the Nsight Compute
metrics."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from .levels import LEVELS, level_table, roofs as level_roofs  # noqa: E402
from .plots import at_shape, place_labels, save_figure, save_or_say, placeholder  # noqa: E402

# The classes whose roof these figures draw. A stage of several kernels (ozaki2) is left out: its profile
# is of its main phase alone, whose bytes are not the stage's.
ROOFED = ("fp32", "tf32", "3xtf32")
from .stage_tables import ncu_table  # noqa: E402


def roofline(bench: pd.DataFrame, ncu: pd.DataFrame, ceilings: dict, out: Path, *, order: list[str], shape,
             precision: dict[str, str] | None = None) -> None:
    """Measured TFLOP/s against FLOPs per DRAM byte (ncu), under the measured FMA and DRAM ceilings and,
    where the ceilings step measured one, the TF32 tensor-core ceiling and its third (3xTF32's); points
    coloured by precision class and labelled with their stage; beside it, each stage's share of its roof."""
    fig = roofline_figure(bench, ncu, ceilings, order=order, shape=shape, precision=precision)
    if isinstance(fig, str):  # nothing to draw: a picture saying why
        placeholder(out, fig)
    else:
        save_figure(fig, out)


def roofline_figure(bench: pd.DataFrame, ncu: pd.DataFrame, ceilings: dict, *, order: list[str], shape,
                    precision: dict[str, str] | None = None):
    """The figure of :func:`roofline`, or a string saying why there is none. ``precision``: stage ->
    precision class (fp32, tf32, 3xtf32; a stage not in it counts as fp32)."""
    table = ncu_table(ncu, shape)
    ok = at_shape(bench[bench.status == "ok"], shape).set_index("kernel")
    if table.empty or "dram_bytes_read" not in table:
        return "roofline: no Nsight Compute metrics (profiling disabled or unavailable)"
    if "fp32_tflops" not in ceilings:
        return "roofline: no measured ceilings (the ceilings step did not run or failed)"
    m, n, k = shape
    flops = 2.0 * m * n * k
    pts = []
    for impl in order:
        if impl in table.index and impl in ok.index:
            dram = table.loc[impl, "dram_bytes_read"] + table.loc[impl].get("dram_bytes_write", 0.0)
            cls = (precision or {}).get(impl, "fp32")
            if cls not in ROOFED:  # a stage of several kernels: its profile is its main phase's alone
                continue
            if np.isfinite(dram) and dram > 0:  # a stage without both DRAM counters has no point
                pts.append(dict(kernel=impl, intensity=flops / dram, tflops=ok.loc[impl, "tflops"],
                                precision=cls))
    pts = pd.DataFrame(pts, columns=["kernel", "intensity", "tflops", "precision"])
    peak, bw = ceilings["fp32_tflops"], ceilings["dram_gbps"] / 1e3  # TB/s
    tensor = ceilings.get("tf32_tflops")
    # the roof a stage is held to: FMA for fp32; where a tensor roof was measured, that roof for tf32 and a
    # third of it for 3xtf32 (three tensor-core products for each multiply-add it delivers); a tensor-core
    # stage on a GPU without a measured tensor roof has no share (NaN), not one against the FMA roof
    roof_of = {"fp32": peak, "tf32": tensor or math.nan, "3xtf32": tensor / 3 if tensor else math.nan}
    pts["label"] = _short_labels(list(pts.kernel))
    pts["of_roof"] = [t / min(roof_of[c], i * bw) if math.isfinite(roof_of[c]) else math.nan
                      for t, c, i in zip(pts.tflops, pts.precision, pts.intensity)]
    classes = [c for c in ("fp32", "tf32", "3xtf32") if c in set(pts.precision)]
    colours = dict(zip(("fp32", "tf32", "3xtf32"), sns.color_palette("deep", 3)))
    sns.set_theme(style="whitegrid", context="notebook")
    fig, (ax, bars) = plt.subplots(1, 2, figsize=(15, 6.5), width_ratios=[1.35, 1])
    lo = min(0.05, pts.intensity.min() / 2) if len(pts) else 0.05
    hi = max(5000.0, pts.intensity.max() * 2) if len(pts) else 5000.0
    xs = np.logspace(np.log10(lo), np.log10(hi), 200)
    ax.plot(xs, np.minimum(peak, xs * bw), color="black", linewidth=2, label=f"measured roof: {peak:.1f} TFLOP/s FMA, {bw:.2f} TB/s DRAM")
    if tensor:  # the tensor-core stages' own roof (Hopper's wgmma, measured by the ceilings step)
        ax.plot(xs, np.minimum(tensor, xs * bw), color="black", linewidth=1.5, linestyle="--",
                label=f"measured roof: {tensor:.0f} TFLOP/s TF32 tensor cores (wgmma)")
        ax.plot(xs, np.minimum(tensor / 3, xs * bw), color="black", linewidth=1, linestyle=":",
                label=f"its third, {tensor / 3:.0f} TFLOP/s: the 3xTF32 roof (three products a multiply-add)")
    # one colour a precision class (a legend of three entries, not thirty); each stage named by its number
    sns.scatterplot(data=pts, x="intensity", y="tflops", hue="precision", hue_order=classes, style="precision",
                    style_order=classes, palette=colours, s=60, ax=ax)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(top=max(tensor or peak, pts.tflops.max() if len(pts) else 0.0) * 3)  # room for labels on top
    ax.set_xlabel("arithmetic intensity: 2·M·N·K / DRAM bytes (ncu)")
    ax.set_ylabel("TFLOP/s (median, bench)")
    ax.set_title(f"Roofline at {m}x{n}x{k}: CUDA-core stages under the FMA roof, tensor-core stages under the "
                 "TF32 roof\n(3xTF32 under its third)" if tensor else f"Roofline at {m}x{n}x{k} (FMA roof only: no tensor roof measured on "
                 "this GPU; tensor-core stages run above it)", fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, frameon=False)  # outside the data
    if len(pts):
        crowded = _crowded(fig, ax, pts)
        place_labels(fig, ax, pts[~crowded].assign(kernel=pts.label[~crowded]), x="intensity", y="tflops")
        if crowded.sum() > 1:
            _zoom(fig, ax, pts[crowded], pts[~crowded], colours, roofs=[(peak, "-", 2), *(
                [(tensor, "--", 1.5), (tensor / 3, ":", 1)] if tensor else [])], bw=bw)
    # each stage's share of the roof that applies to it: the reading a crowded corner of the roofline hides
    order_bars = pts.iloc[::-1]
    bars.barh(order_bars.kernel, 100 * order_bars.of_roof, color=[colours[c] for c in order_bars.precision])
    for y, (v, t) in enumerate(zip(order_bars.of_roof, order_bars.tflops)):
        text = f"{100 * v:.0f}% ({t:.0f} TFLOP/s)" if math.isfinite(v) else f"n/a: no tensor roof measured ({t:.0f} TFLOP/s)"
        bars.text(100 * v + 1 if math.isfinite(v) else 1, y, text, va="center", fontsize=7)
    shares = order_bars.of_roof.dropna()
    bars.set_xlim(0, max(125.0, 130 * shares.max()) if len(shares) else 125.0)
    bars.set_xlabel("% of its roof (fp32: FMA; tf32: TF32 tensor; 3xtf32: a third of it; DRAM where lower)")
    bars.set_title("Share of the roof", fontsize=10)
    bars.tick_params(axis="y", labelsize=8)
    return fig


def levels(bench: pd.DataFrame, ncu: pd.DataFrame, ceilings: dict, out: Path, *, order: list[str], shape,
           precision: dict[str, str] | None = None) -> None:
    """The hierarchical roofline: one panel a memory level (DRAM, L2, L1, shared memory), each stage at
    its FLOPs per byte of that level under the compute roofs and that level's peak (ncu's)."""
    fig = levels_figure(bench, ncu, ceilings, order=order, shape=shape, precision=precision)
    if isinstance(fig, str):
        placeholder(out, fig)
    else:
        save_figure(fig, out)


def levels_figure(bench: pd.DataFrame, ncu: pd.DataFrame, ceilings: dict, *, order: list[str], shape,
                  precision: dict[str, str] | None = None):
    """The figure of :func:`levels`, or a string saying why there is none."""
    table = level_table(ncu, bench, order=order, shape=shape, precision=precision)
    if table.empty:
        return ("hierarchical roofline: no L2, L1 or shared-memory byte counters in this run's profile "
                "(profiled before the lab collected them, or not profiled)")
    if "fp32_tflops" not in ceilings:
        return "hierarchical roofline: no measured ceilings (the ceilings step did not run or failed)"
    table = table[[c in ROOFED for c in table.precision]]  # (a stage of several kernels: its main phase only)
    if table.empty:
        return "hierarchical roofline: no profiled stage of a class with a roof at this shape"
    peak, tensor = ceilings["fp32_tflops"], ceilings.get("tf32_tflops")
    compute = [(peak, "-", 2.0, f"FMA {peak:.1f} TFLOP/s")]
    if tensor:
        compute += [(tensor, "--", 1.5, f"TF32 tensor {tensor:.0f} TFLOP/s"),
                    (tensor / 3, ":", 1.0, f"its third, {tensor / 3:.0f} (3xTF32)")]
    bw = level_roofs(table)
    names = [lv.name for lv in LEVELS if lv.name in bw]
    classes = [c for c in ("fp32", "tf32", "3xtf32") if c in set(table.precision)]
    colours = dict(zip(("fp32", "tf32", "3xtf32"), sns.color_palette("deep", 3)))
    markers = {"fp32": "o", "tf32": "X", "3xtf32": "s"}
    sns.set_theme(style="whitegrid", context="notebook")
    fig, axes = plt.subplots(2, 2, figsize=(16, 13), sharey=True, squeeze=False)
    y_lo = float(table.tflops.min()) / 3
    y_hi = max(tensor or peak, float(table.tflops.max())) * 3
    m, n, k = shape
    for ax, name in zip(axes.flat, names):
        part = table[table.level == name]
        lo, hi = float(part.intensity.min()) / 4, float(part.intensity.max()) * 4
        lo, hi = min(lo, 0.5 * peak / bw[name]), max(hi, 4 * (tensor or peak) / bw[name])  # both ridges shown
        xs = np.logspace(np.log10(lo), np.log10(hi), 200)
        for roof, style, width, _ in compute:
            ax.plot(xs, np.minimum(roof, xs * bw[name]), color="black", linestyle=style, linewidth=width)
        for cls in classes:
            pts = part[part.precision == cls]
            ax.scatter(pts.intensity, pts.tflops, color=colours[cls], marker=markers[cls], s=45, zorder=3)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(y_lo, y_hi)
        ax.set_title(f"{name}: peak {bw[name]:.1f} TB/s (ncu; the median over the launches' clocks)", fontsize=10)
        ax.set_xlabel(f"2·M·N·K / {name} bytes (FLOP/byte)")
        # labelled where they stand apart; where they crowd, in a zoomed inset (as on the roofline)
        part = part.assign(label=_short_labels(list(part.kernel))).reset_index(drop=True)
        crowded = _crowded(fig, ax, part)
        place_labels(fig, ax, part[~crowded].assign(kernel=part.label[~crowded]), x="intensity", y="tflops")
        if crowded.sum() > 1:
            _zoom(fig, ax, part[crowded], part[~crowded], colours, roofs=[(r, s, w) for r, s, w, _ in compute],
                  bw=bw[name])
        elif crowded.any():
            place_labels(fig, ax, part[crowded].assign(kernel=part.label[crowded]), x="intensity", y="tflops")
    for ax in list(axes.flat)[len(names):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("TFLOP/s (median, bench)")
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color="black", linestyle=s, linewidth=w, label=t) for _, s, w, t in compute]
    handles += [Line2D([], [], color=colours[c], marker=markers[c], linestyle="None", label=c) for c in classes]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    fig.suptitle(f"Hierarchical roofline at {m}x{n}x{k}: each stage once a memory level; the level where it "
                 "sits nearest the sloped roof is its tightest.\nwgmma's operand reads and TMA's copies into "
                 "shared memory are not SASS traffic: L1 and shared points of such stages count only the rest.",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0.04, 1, 0.95))
    return fig


CROWD_PX = 22.0  # points closer than this (pixels) to another are labelled in the zoomed inset


def _crowded(fig, ax, pts: pd.DataFrame) -> pd.Series:
    """Which points have another within CROWD_PX pixels where the axes draw them."""
    fig.canvas.draw()
    xy = ax.transData.transform(pts[["intensity", "tflops"]].to_numpy(dtype=float))
    near = [(np.hypot(*(xy - p).T) < CROWD_PX).sum() > 1 for p in xy]
    return pd.Series(near, index=pts.index, dtype=bool)


def _zoom(fig, ax, crowded: pd.DataFrame, others: pd.DataFrame, colours: dict, *, roofs, bw: float) -> None:
    """The crowded points again, in an inset that spreads them out, each labelled there; the inset goes
    where no other point is drawn (lower right, else upper left), and its frame is marked on the axes."""
    lx, ly = np.log10(crowded.intensity.to_numpy(dtype=float)), np.log10(crowded.tflops.to_numpy(dtype=float))
    pad_x, pad_y = max(0.08, 0.3 * np.ptp(lx)), max(0.08, 0.3 * np.ptp(ly))
    x0, x1, y0, y1 = 10 ** (lx.min() - pad_x), 10 ** (lx.max() + pad_x), 10 ** (ly.min() - pad_y), 10 ** (ly.max() + pad_y)
    fig.canvas.draw()
    to_axes = ax.transData + ax.transAxes.inverted()
    elsewhere = to_axes.transform(others[["intensity", "tflops"]].to_numpy(dtype=float)) if len(others) else np.empty((0, 2))
    for bounds in ([0.6, 0.03, 0.38, 0.44], [0.03, 0.53, 0.38, 0.44]):
        bx, by, bwid, bh = bounds
        if not any(bx <= u <= bx + bwid and by <= v <= by + bh for u, v in elsewhere):
            break
    ins = ax.inset_axes(bounds)
    xs = np.logspace(np.log10(x0), np.log10(x1), 50)
    for roof, style, width in roofs:
        ins.plot(xs, np.minimum(roof, xs * bw), color="black", linestyle=style, linewidth=width)
    from matplotlib.ticker import NullFormatter

    markers = {"fp32": "o", "tf32": "X", "3xtf32": "s"}  # (seaborn's first three styles, as on the axes)
    for cls, part in crowded.groupby("precision"):
        ins.scatter(part.intensity, part.tflops, color=colours[cls], marker=markers.get(cls, "o"), s=30, zorder=3)
    ins.set_xscale("log")
    ins.set_yscale("log")
    ins.set_xlim(x0, x1)
    ins.set_ylim(y0, y1)
    for axis in (ins.xaxis, ins.yaxis):
        axis.set_minor_formatter(NullFormatter())
    ins.tick_params(which="both", labelsize=6)
    ins.set_facecolor("white")
    ins.set_title("zoomed: the crowded points", fontsize=7)
    place_labels(fig, ins, crowded.assign(kernel=crowded.label), x="intensity", y="tflops")
    ax.indicate_inset_zoom(ins, edgecolor="0.4")


def _short_labels(impls: list[str]) -> list[str]:
    """Each stage by its number (a stage id "NN_words" -> "NN") where no other stage shares it; a library
    baseline, or a stage whose number another shares, by its name."""
    heads = [i.split("_", 1)[0] for i in impls]
    return [h if h.isdigit() and heads.count(h) == 1 else i for h, i in zip(heads, impls)]


STALL_ORDER = ["long_scoreboard", "short_scoreboard", "mio_throttle", "barrier", "math_pipe_throttle", "not_selected",
               "selected", "wait", "lg_throttle", "dispatch_stall", "no_instruction", "branch_resolving", "membar",
               "drain", "sleeping", "tex_throttle", "imc_miss", "misc"]


def stall_bars(ncu: pd.DataFrame, out: Path, *, order: list[str], shape) -> None:
    """Warp stalls per stage: the stall cycles per issued instruction (log axis), and beside them each
    reason's share of those cycles (linear, 100% a bar); legend outside the data."""
    save_or_say(stall_figure(ncu, order=order, shape=shape), out, "warp stalls: no Nsight Compute metrics")


def stall_figure(ncu: pd.DataFrame, *, order: list[str], shape):
    """The figure of :func:`stall_bars` (None without metrics), for drawing or inspection."""
    table = ncu_table(ncu, shape)
    cols = [f"stall_{s}" for s in STALL_ORDER if f"stall_{s}" in table.columns]
    if table.empty or not cols:
        return None
    rows = [k for k in order if k in table.index]
    data = table.loc[rows, cols].fillna(0.0)
    data.columns = [c.removeprefix("stall_") for c in cols]
    total = data.sum(axis=1)
    shares = data.div(total.where(total > 0, 1.0), axis=0) * 100.0
    sns.set_theme(style="whitegrid", context="notebook")
    # left: the stall cycles per issued instruction themselves (a log axis: the naive stage's hundreds beside
    # cuBLAS's two); right: how they divide among the reasons
    fig, (cycles, ax) = plt.subplots(1, 2, figsize=(13, 1.2 + 0.32 * len(rows)), sharey=True,
                                     gridspec_kw={"width_ratios": [1, 3]})
    cycles.barh(range(len(rows)), total[rows[::-1]].to_numpy(), color="#4c72b0", height=0.8)
    cycles.set_xscale("log")
    for y, k in enumerate(rows[::-1]):
        cycles.text(total[k], y, f" {total[k]:.1f}", va="center", fontsize=7)
    cycles.set_xlim(right=float(total.max()) * 8 if total.max() > 0 else 10)
    cycles.set_xlabel("stall cycles per issued instruction (log)")
    shares.iloc[::-1].plot(kind="barh", stacked=True, ax=ax, colormap="tab20", width=0.8)
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of those cycles by reason (%)")
    ax.set_ylabel("")
    ax.set_title(f"Why warps wait, at {shape[0]}x{shape[1]}x{shape[2]}")
    ax.legend(fontsize=7, ncol=1, loc="upper left", bbox_to_anchor=(1.07, 1.0), frameon=False)
    cycles.set_yticks(range(len(rows)), rows[::-1])
    plt.setp(cycles.get_yticklabels(), fontsize=8)
    fig.tight_layout()
    return fig


def memory_occupancy(ncu: pd.DataFrame, out: Path, *, order: list[str], shape) -> None:
    """Shared-memory bank conflicts (extra wavefronts per request) and achieved vs theoretical occupancy."""
    save_or_say(memory_figure(ncu, order=order, shape=shape), out,
                 "bank conflicts / occupancy: no Nsight Compute metrics")


def memory_figure(ncu: pd.DataFrame, *, order: list[str], shape):
    """The figure of :func:`memory_occupancy` (None without metrics), for drawing or inspection."""
    table = ncu_table(ncu, shape)
    if table.empty:
        return None
    rows = [k for k in order if k in table.index]
    t = table.loc[rows[::-1]]  # (horizontal bars, the first stage at the top)
    sns.set_theme(style="whitegrid", context="notebook")
    # stages along y, so that every name reads whole; conflicts on a log axis (counts span 0 to 10^8)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 1.2 + 0.32 * len(rows)), sharey=True)
    conflicts = pd.DataFrame({"loads": t.get("smem_bank_conflicts_ld", 0.0), "stores": t.get("smem_bank_conflicts_st", 0.0)})
    conflicts.plot(kind="barh", ax=a1, color=["#4c72b0", "#dd8452"], width=0.8)
    a1.set_xscale("symlog", linthresh=1)
    a1.set_xlim(0, max(10.0, float(conflicts.to_numpy().max()) * 3))
    a1.set_title("shared-memory bank conflicts (count, log scale; 0 at the axis)")
    a1.set_ylabel("")
    occ = pd.DataFrame({"achieved": t.get("achieved_occupancy_pct", 0.0),
                        "theoretical": t.get("theoretical_occupancy_pct", 0.0)})
    occ.plot(kind="barh", ax=a2, color=["#55a868", "#c7c7c7"], width=0.8)
    a2.set_xlim(0, max(100.0, float(occ.to_numpy().max()) * 1.05))
    a2.set_title("occupancy (% of the SM's warp slots)")
    a2.set_ylabel("")
    for ax in (a1, a2):
        ax.legend(loc="lower right", fontsize=9)
        ax.tick_params(axis="y", labelsize=9)
    fig.tight_layout()
    return fig
