"""The failure_tests step: the GPU half of the bad-input catalogue (tests/gpu), as rows.
"""

from __future__ import annotations

from pathlib import Path

from ..config.records import LabConfig
from ..results import io
from ..results.common import log, machine
from ..results.outcome import FAILED, UNAVAILABLE, StepStatus, first_line

# the columns its readers select by: a table without rows (the step failed) still has them
FAILURE_COLUMNS = ["case", "test", "outcome", "message", "seconds"]


def failure_tests(cfg: LabConfig, *, env_json: Path, out: Path) -> StepStatus | None:
    """Run the GPU failure tests (they take the GPU lock themselves) and record one row per case."""
    from . import cases

    rows = cases.run(log)
    env = io.read_json(env_json)
    for r in rows:
        r.update(machine(env))
        log.info("[failure tests] %s: %s%s", r["case"], r["outcome"], f" ({r['message']})" if r["message"] else "")
    io.write_csv(out, rows)
    bad = [r for r in rows if r["outcome"] not in ("passed", "skipped")]
    if bad and all(r["outcome"] == "unavailable" for r in bad):
        return StepStatus(status=UNAVAILABLE, message=bad[0]["message"])
    if bad:
        r = bad[0]
        more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
        return StepStatus(status=FAILED, message=f"{r['outcome']}: {r['case']}: {first_line(r['message'], 160)}{more}")
    return None

