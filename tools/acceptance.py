"""Rows of the acceptance table (tools/acceptance.sh): what one user path did, from the files it left.

    python tools/acceptance.py row --csv F --path NAME --command CMD --rc RC --wall-ns W --started-ns T \
        [--run RUN] [--expect-rerun STAGE]
    python tools/acceptance.py md F          # the table as markdown, on stdout

A row: the command, its exit status and wall time; the run's step records (``results/<run>/status``):
how many are ok and how many not, how many steps ran in this path and how many stages' results were
kept from an earlier job (``reused`` in the record, ``pipeline.reuse``); the timed points of the run
that other work disturbed (bench, tile and shape sweeps, epilogue comparisons, ceilings) and how many
saw an idle context beside them; and, with ``--expect-rerun``, whether exactly that stage's build,
check and bench ran (every other stage's kept) and the run's build table names its source's hash as it
is now. ``verdict`` is ``ok`` or what did not hold.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

COLUMNS = ["path", "command", "rc", "wall_s", "steps_ok", "steps_not_ok", "steps_run", "stages_reused",
           "disturbed_points", "idle_seen_points", "timed_points", "rerun", "verdict"]
STAGE_STEPS = ("build", "check", "bench")  # the per-stage steps an edited kernel must rerun


def _records(run: str, since: float | None) -> list[dict]:
    """The run's step records; with ``since``, those written at or after it (the steps this path ran or
    restored)."""
    out = []
    for p in sorted((ROOT / "results" / run / "status").rglob("*.json")):
        if since is not None and p.stat().st_mtime < since:
            continue
        try:
            rec = json.loads(p.read_text())
        except (OSError, ValueError):
            rec = {"status": "unreadable"}
        rec.setdefault("step", p.parent.name if p.parent.name != "status" else p.stem)
        rec.setdefault("kernel", p.stem if p.parent.name != "status" else None)
        out.append(rec)
    return out


def _points(run: str) -> tuple[int, int, int]:
    """(disturbed, seen beside an idle context, all) timed GPU points of the run's tables."""
    import pandas as pd

    rep = ROOT / "reports" / run
    disturbed = idle = total = 0
    tables = [rep / "bench.csv", *sorted((rep / "sweeps").glob("*.csv")), *sorted((rep / "dispatch").glob("*.csv")),
              *sorted((rep / "epilogue").glob("*.csv"))]
    for t in tables:
        if not t.is_file():
            continue
        df = pd.read_csv(t)
        if "disturbance" not in df:
            continue
        seen = df["disturbance"].fillna("").astype(str)
        watched = ~seen.str.startswith("n/a") & (seen != "")
        total += int(watched.sum())
        if "status" in df:
            disturbed += int((df["status"] == "disturbed").sum())
        elif "disturbed" in df:
            disturbed += int(df["disturbed"].astype(str).str.lower().eq("true").sum())
        idle += int(seen.str.contains("seen idle").sum())
    ceilings = rep / "ceilings.json"
    if ceilings.is_file():
        for probe in json.loads(ceilings.read_text()).values():
            if isinstance(probe, dict) and "disturbance" in probe:
                total += 1
                disturbed += int(bool(probe.get("disturbed")))
                idle += int("seen idle" in str(probe["disturbance"]))
    return disturbed, idle, total


def _expect_rerun(run: str, expect: str, ran: list[dict]) -> tuple[str, list[str]]:
    """What of the per-stage steps ran in this path, and what did not hold of 'that stage's build, check
    and bench ran (``expect`` = STAGE; ``step:STAGE``: that step alone), every other stage's were kept,
    and the build table names its source as it is now'."""
    import pandas as pd
    import yaml

    from sgemm_lab.config import load
    from sgemm_lab.gpu.compile import source_hash

    steps, stage = (tuple(expect.split(":")[:1]), expect.split(":", 1)[1]) if ":" in expect else (STAGE_STEPS, expect)
    per_stage = [r for r in ran if r.get("step") in STAGE_STEPS and r.get("kernel")]
    fresh = sorted(f"{r['step']}:{r['kernel']}" for r in per_stage if not r.get("reused"))
    problems = []
    want = {f"{s}:{stage}" for s in steps}
    if set(fresh) != want:
        problems.append(f"ran {' '.join(fresh) or 'nothing'}, expected {' '.join(sorted(want))}")
    cfg = load.from_dict(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()))
    now = source_hash(cfg.kernel(stage))
    build = pd.read_csv(ROOT / "reports" / run / "build.csv")
    recorded = build.loc[build["kernel"] == stage, "source_sha256"].tolist()
    if recorded != [now]:
        problems.append(f"build.csv names {recorded} for {stage}, the source is now {now[:12]}")
    return " ".join(fresh), problems


def row(a) -> dict:
    ran = _records(a.run, a.started_ns / 1e9) if a.run else []
    every = _records(a.run, None) if a.run else []
    disturbed, idle, total = _points(a.run) if a.run else (0, 0, 0)
    problems = [] if a.rc == 0 else [f"exit {a.rc}"]
    not_ok = [r for r in every if r.get("status") != "ok"]
    if not_ok:
        problems.append("not ok: " + ", ".join(f"{r['step']} {r.get('kernel') or ''}".strip() for r in not_ok[:5]))
    if disturbed:
        problems.append(f"{disturbed} disturbed points")
    rerun = ""
    if a.expect_rerun:
        rerun, more = _expect_rerun(a.run, a.expect_rerun, ran)
        problems += more
    return dict(path=a.path, command=a.command, rc=a.rc, wall_s=round(a.wall_ns / 1e9, 1),
                steps_ok=len(every) - len(not_ok) if a.run else "", steps_not_ok=len(not_ok) if a.run else "",
                steps_run=sum(not r.get("reused") for r in ran) if a.run else "",
                stages_reused=sum(bool(r.get("reused")) for r in ran) if a.run else "",
                disturbed_points=disturbed if a.run else "", idle_seen_points=idle if a.run else "",
                timed_points=total if a.run else "", rerun=rerun, verdict="; ".join(problems) or "ok")


def markdown(path: Path) -> str:
    with open(path) as fh:
        rows = list(csv.DictReader(fh))
    head = ["path", "command", "rc", "wall s", "steps ok / not ok", "steps run / reused", "disturbed / idle seen / timed",
            "verdict"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        lines.append("| " + " | ".join([
            r["path"], f"`{r['command']}`", r["rc"], r["wall_s"], f"{r['steps_ok']} / {r['steps_not_ok']}",
            f"{r['steps_run']} / {r['stages_reused']}",
            f"{r['disturbed_points']} / {r['idle_seen_points']} / {r['timed_points']}",
            r["verdict"] + (f" (ran: {r['rerun']})" if r["rerun"] else "")]) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    r = sub.add_parser("row")
    r.add_argument("--csv", type=Path, required=True)
    r.add_argument("--path", required=True)
    r.add_argument("--command", required=True)
    r.add_argument("--rc", type=int, required=True)
    r.add_argument("--wall-ns", type=int, required=True, help="the path's wall time, nanoseconds")
    r.add_argument("--started-ns", type=int, required=True, help="unix time the path began, nanoseconds")
    r.add_argument("--run", default="")
    r.add_argument("--expect-rerun", default="")
    m = sub.add_parser("md")
    m.add_argument("csv", type=Path)
    a = ap.parse_args(argv)
    if a.what == "md":
        sys.stdout.write(markdown(a.csv))
        return 0
    out = row(a)
    new = not a.csv.exists()
    a.csv.parent.mkdir(parents=True, exist_ok=True)
    with open(a.csv, "a", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        if new:
            w.writeheader()
        w.writerow(out)
    print(f"{out['path']}: rc {out['rc']}, {out['wall_s']} s, {out['verdict']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
