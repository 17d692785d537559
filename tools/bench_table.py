"""Ratio to cuBLAS of every implementation on every shape of a bench.csv, as a short table.

    python tools/bench_table.py reports/RUN/bench.csv [--shapes suite|all]

One row per shape (cuBLAS TFLOP/s first), one column per GPU implementation: the ratio of cuBLAS's
median time to the implementation's (above 1: faster than cuBLAS), '-' where it did not run, 'x'
where it ran but did not verify. The last row is the geometric mean over the shapes every column ran.
"""

from __future__ import annotations

import argparse
import math

import pandas as pd
from _cli import run  # noqa: E402 - tools/ is the script's folder


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench_csv")
    args = ap.parse_args()
    df = pd.read_csv(args.bench_csv)
    df = df[df.status == "ok"]
    gpu = [k for k in dict.fromkeys(df.kernel) if not k.startswith("00_") and k not in ("numpy", "cublas")]
    ref = df[df.kernel == "cublas"].set_index(["m", "n", "k"])
    head = ["shape", "cuBLAS"] + gpu
    rows, logs = [], {k: [] for k in gpu}
    for (m, n, k), r in ref.sort_values("tflops").iterrows():
        line = [f"{m}x{n}x{k}", f"{r.tflops:.1f}"]
        for impl in gpu:
            hit = df[(df.kernel == impl) & (df.m == m) & (df.n == n) & (df.k == k)]
            if hit.empty:
                line.append("-")
            elif not bool(hit.iloc[0].verified):
                line.append("x")
            else:
                ratio = r.median_ms / hit.iloc[0].median_ms
                logs[impl].append(math.log(ratio))
                line.append(f"{ratio:.3f}")
        rows.append(line)
    rows.append(["geomean", ""] + [f"{math.exp(sum(v) / len(v)):.3f} ({len(v)})" if v else "-" for v in logs.values()])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    for line in [head, *rows]:
        print("  ".join(str(x).rjust(w) for x, w in zip(line, widths)))
    return 0


if __name__ == "__main__":
    raise SystemExit(run(main))
