"""Whether two runs wrote the same result rows, timings aside: for a refactor that must not change
behaviour (same config and seed, e.g. `--config seed=1`). Compares check.csv, bench.csv and build.csv of
reports/<run> for each run, dropping the columns that measure time or name the commit or the card.

    python tools/same_rows.py test-before test-after
    python tools/same_rows.py --unseeded one-gpu two-gpus   # runs that drew their inputs with different seeds

With --unseeded the values that depend on the drawn inputs (seed, errors and the limits scaled from them)
are set aside too: what is left is which rows exist and what became of each (status, verified, reason).
"""

import sys
from pathlib import Path

import pandas as pd
from _cli import run  # noqa: E402 - tools/ is the script's folder

VOLATILE = {"median_ms", "min_ms", "q1_ms", "q3_ms", "iqr_ms", "max_ms", "reps", "tflops", "pct_cublas", "warmup_s",
            "warmup_launches", "sm_clock_before_mhz", "sm_clock_after_mhz", "compile_s", "tuned_tflops", "git_commit", "date",
            "source", "options", "compile_options",  # (paths and flags name the checkout's directory)
            "device_uuid", "device_index"}  # (which card of one model ran it: two runs of one commit may land on two)
# what the drawn inputs decide: set aside when the runs drew with different seeds (--unseeded)
SEEDED = {"seed", "rel_err", "max_abs_err", "cublas_rel_err", "fp32_limit", "tolerance"}


def table(run: str, name: str, unseeded: bool = False) -> pd.DataFrame:
    df = pd.read_csv(Path("reports") / run / f"{name}.csv")
    drop = VOLATILE | SEEDED if unseeded else VOLATILE
    keep = [c for c in df.columns if c not in drop]
    return df[keep].sort_values([c for c in ("kernel", "m", "n", "k", "mode") if c in keep]).reset_index(drop=True)


def main(*args: str) -> int:
    unseeded = "--unseeded" in args
    runs = [a for a in args if a != "--unseeded"]
    if len(runs) != 2:
        raise ValueError("usage: same_rows.py [--unseeded] RUN_A RUN_B (folders under reports/)")
    a, b = runs
    bad = 0
    for name in ("check", "bench", "build"):
        x, y = table(a, name, unseeded), table(b, name, unseeded)
        added = [c for c in y.columns if c not in x.columns] + [c for c in x.columns if c not in y.columns]
        if added:  # a column one run has and the other lacks (a newer version records more): listed, not compared
            print(f"{name}.csv: only in one run: {', '.join(added)}")
            common = [c for c in x.columns if c in y.columns]
            x, y = x[common], y[common]
        if list(x.columns) != list(y.columns) or len(x) != len(y):
            print(f"{name}.csv: different shape: {x.shape} {list(x.columns)} vs {y.shape} {list(y.columns)}")
            bad += 1
            continue
        diff = (x != y) & ~(x.isna() & y.isna())
        rows = diff.any(axis=1)
        if rows.any():
            bad += 1
            cols = sorted(diff.columns[diff.any()])
            print(f"{name}.csv: {int(rows.sum())} of {len(x)} rows differ in {', '.join(cols)}")
            print(pd.concat([x[rows][cols].add_suffix(f" ({a})"), y[rows][cols].add_suffix(f" ({b})")], axis=1)
                  .head(10).to_string())
        else:
            aside = "timings, commit and drawn inputs aside" if unseeded else "timings and commit aside"
            print(f"{name}.csv: {len(x)} rows, the same in {len(x.columns)} columns ({aside})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(run(main, *sys.argv[1:]))
