"""Where a run's time went: seconds per rule from reports/<run>/steps.csv (one row per job; a job's
seconds run from its script's start of work to its end, without the interpreter's start-up).

    python tools/step_times.py reports/h100/steps.csv
"""

import sys

import pandas as pd


def main(path: str) -> None:
    df = pd.read_csv(path)
    by = df.groupby("step").agg(jobs=("seconds", "size"), seconds=("seconds", "sum"), slowest=("seconds", "max"),
                                not_ok=("status", lambda s: int((s != "ok").sum())))
    by = by.sort_values("seconds", ascending=False)
    print(by.to_string(float_format=lambda x: f"{x:.1f}"))
    print(f"all jobs: {len(df)}, {df.seconds.sum():.1f} s inside the steps")


if __name__ == "__main__":
    main(sys.argv[1])
