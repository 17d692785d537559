"""Figures (seaborn). Headless: the Agg backend is selected before pyplot is imported."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from .report import shape_label  # noqa: E402


def _save(fig, out: Path) -> None:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.tmp{out.suffix}")
    fig.savefig(tmp, dpi=130, bbox_inches="tight")
    plt.close(fig)
    tmp.replace(out)


def tflops_vs_size(bench: pd.DataFrame, out: Path, order: list[str]) -> None:
    """TFLOP/s against problem size, one line per kernel, cuBLAS as a dashed reference line."""
    ok = bench[bench["status"] == "ok"].copy()
    ok["flops"] = 2 * ok.m * ok.n * ok.k
    sizes = ok.drop_duplicates(["m", "n", "k"]).sort_values("flops")
    labels = [shape_label(m, n, k) for m, n, k in sizes[["m", "n", "k"]].itertuples(index=False)]
    pos = {lab: i for i, lab in enumerate(labels)}
    ok["size"] = [pos[shape_label(m, n, k)] for m, n, k in ok[["m", "n", "k"]].itertuples(index=False)]
    kernels = [k for k in order if k != "cublas" and k in set(ok.kernel)]
    sns.set_theme(style="whitegrid", context="notebook")
    fig, ax = plt.subplots(figsize=(9, 5.5))
    sns.lineplot(data=ok[ok.kernel.isin(kernels)], x="size", y="tflops", hue="kernel", hue_order=kernels,
                 style="kernel", markers=True, dashes=False, ax=ax, palette="viridis")
    ref = ok[ok.kernel == "cublas"].sort_values("size")
    if len(ref):
        ax.plot(ref["size"], ref["tflops"], color="black", linestyle="--", linewidth=2, marker="o",
                label="cuBLAS (strict FP32)")
    ax.set_xticks(range(len(labels)), labels)
    ax.set_yscale("log")
    ax.set_xlabel("problem size (M×N×K)")
    ax.set_ylabel("TFLOP/s (median, log scale)")
    ax.set_title("SGEMM throughput by stage")
    ax.legend(loc="upper left", fontsize=9, frameon=True)
    _save(fig, out)


def sweep_heatmap(sweep: pd.DataFrame, out: Path, *, kernel: str, axes: tuple[str, str], title: str = "") -> None:
    """Best verified TFLOP/s for each pair of values on ``axes`` (max over the other swept parameters)."""
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
    counts = sweep["status"].value_counts()
    shape = sweep.iloc[0]
    ax.set_title(f"{title or kernel}\n{int(shape.m)}x{int(shape.n)}x{int(shape.k)}: "
                 + ", ".join(f"{n} {s}" for s, n in counts.items()), fontsize=10)
    _save(fig, out)
