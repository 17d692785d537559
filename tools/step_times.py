"""Where a run's time went: seconds per step from reports/<run>/steps.csv (one row per step and stage: the
stages of a batch job each have their own row, sgemm_lab.pipeline.batches; a row's seconds run from the
step's start of work on that stage to its end, without the job's interpreter start-up).

    python tools/step_times.py reports/h100/steps.csv
"""

import sys

import pandas as pd
from _cli import run  # noqa: E402 - tools/ is the script's folder


def main(path: str) -> None:
    df = pd.read_csv(path)
    by = df.groupby("step").agg(stages=("seconds", "size"), seconds=("seconds", "sum"), slowest=("seconds", "max"),
                                not_ok=("status", lambda s: int((s != "ok").sum())))
    by = by.sort_values("seconds", ascending=False)
    print(by.to_string(float_format=lambda x: f"{x:.1f}"))
    print(f"all steps: {len(df)} records, {df.seconds.sum():.1f} s inside the steps")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("step_times.py: give one steps.csv, e.g. python tools/step_times.py reports/h100/steps.csv")
    sys.exit(run(main, sys.argv[1]))
