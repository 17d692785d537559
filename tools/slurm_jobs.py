"""The SLURM jobs of a run as a tidy table: `squeue --json` (every job the controller still holds: the
configuration behind tools/slurm_gpu_host.sh keeps finished jobs for an hour) on stdin, one CSV row per
job on stdout, and a summary of what SLURM itself added (submission to start) on stderr.

    squeue --json | python tools/slurm_jobs.py > reports/RUN/slurm_jobs.csv
"""

import csv
import json
import statistics
import sys
from _cli import run  # noqa: E402 - tools/ is the script's folder

COLUMNS = ["job_id", "rule", "state", "gres", "submit_time", "start_time", "end_time", "wait_s", "run_s"]


def rows(doc: dict) -> list[dict]:
    out = []
    for job in doc.get("jobs", []):
        submit, start, end = job.get("submit_time", 0), job.get("start_time", 0), job.get("end_time", 0)
        state = job.get("job_state", "")
        out.append({
            "job_id": job.get("job_id"),
            "rule": (job.get("comment") or "").removeprefix("rule_"),  # the executor names the rule there
            "state": state if isinstance(state, str) else ",".join(state),
            "gres": job.get("tres_per_job") or job.get("tres_per_node") or "",
            "submit_time": submit,
            "start_time": start,
            "end_time": end,
            "wait_s": start - submit if start and submit else "",
            "run_s": end - start if end and start and end >= start else "",
        })
    return sorted(out, key=lambda r: r["job_id"])


def main() -> int:
    try:
        doc = json.load(sys.stdin)
    except json.JSONDecodeError as exc:
        print(f"slurm_jobs: stdin is not squeue --json output ({exc})", file=sys.stderr)
        return 1
    table = rows(doc)
    writer = csv.DictWriter(sys.stdout, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(table)
    waits = [r["wait_s"] for r in table if r["wait_s"] != ""]
    if waits:
        print(f"slurm_jobs: {len(table)} jobs; submission to start median {statistics.median(waits)} s, "
              f"max {max(waits)} s (1-s resolution; GPU jobs also queue behind each other for the one GPU)",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
