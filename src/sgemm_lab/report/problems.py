"""What the report says went wrong in a run: the steps that failed, did not run or lacked a tool, the
points that other work on the GPU disturbed, and the GPU failure cases."""

from __future__ import annotations

import pandas as pd

from ..config.records import LabConfig
from .markdown import md_table, md_text

def failed_steps_section(outcomes) -> list[str]:
    """Every step that failed, did not run or had no tool, with its first error line and its log."""
    bad = [r for r in outcomes or () if r.status != "ok"]
    if not bad:
        return []
    n_failed = sum(r.status == "failed" for r in bad)
    rows = [[f"`{r.kernel}`" if r.kernel else "–", r.step, f"**{r.status}**" if r.status != "unavailable" else r.status,
             md_text(r.message), f"`{r.log}`" if r.log else "–"] for r in bad]
    head = (f"{n_failed} step{'s' if n_failed != 1 else ''} failed in this run; every other stage was still "
            "checked, timed and reported below. `not run`: an earlier step of the same stage failed; `unavailable`: "
            "a tool this machine lacks." if n_failed else
            "No step failed; some did not run or lacked a tool:")
    return ["## Failures", "", head, "", md_table(["stage", "step", "status", "first error", "log"], rows,
                                                   align="lllll"), ""]


def disturbance_summary(bench: pd.DataFrame) -> str:
    """How many GPU points of this run were watched and found clean, clean only on a retry, disturbed,
    or could not be watched (``disturbance`` column; a run from before it: not recorded)."""
    if bench is None or bench.empty or "disturbance" not in bench:
        return "This run did not record it."
    seen = bench[bench["status"].isin(["ok", "disturbed"])]["disturbance"].fillna("").astype(str)
    seen = seen[~seen.str.startswith("n/a")]  # CPU timings
    clean = seen.str.startswith("none")
    retried = clean & seen.str.contains("clean on try")
    idle = clean & seen.str.contains("seen idle")
    unchecked = seen.str.startswith("unchecked")
    disturbed = int((bench["status"] == "disturbed").sum())
    beside = (f"; {int(idle.sum())} beside an idle context of another process, which ran nothing on the SMs"
              if idle.any() else "")
    text = (f"In this run: {int(clean.sum())} of {len(seen)} GPU points clean ({int(retried.sum())} of them only on "
            f"a retry{beside}), {disturbed} disturbed")
    return text + (f", **{int(unchecked.sum())} not watched** (no NVML answer: read them as unchecked, not clean)."
                   if unchecked.any() else ".")


def failure_section(cfg: LabConfig, failures: pd.DataFrame | None) -> list[str]:
    """The GPU half of the bad-input catalogue as exercised in this run (the rest runs in CI)."""
    out = ["### Failure handling exercised on this GPU", ""]
    if not cfg.failure_tests:
        return out + ["Not run in this configuration (`failure_tests: false`); run `python -m pytest tests/gpu`.", ""]
    if failures is None or failures.empty:
        return out + ["No results.", ""]
    out += ["Deliberately broken kernels run through the real steps (`tests/gpu`, rule `failure_tests`); the cases "
            "that need no GPU (configuration, compile and constraint errors, missing tools, host-side hangs and "
            "crashes) are tested in CI.", ""]
    rows = [[str(r.case), "pass" if r.outcome == "passed" else f"**{str(r.outcome).upper()}**",
             "" if pd.isna(r.message) else md_text(r.message)] for r in failures.itertuples()]
    return out + [md_table(["case", "outcome", "detail"], rows, align="lll"), ""]
