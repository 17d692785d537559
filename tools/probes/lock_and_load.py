"""What tools/probes/lock_and_load.sh recorded, as tables (standard library only).

    python tools/probes/lock_and_load.py turns LOCK_LOG FIRST_CHECKOUT SECOND_CHECKOUT
        who held which GPU lock when (the lines of $SGEMM_LAB_LOCK_LOG, see sgemm_lab.measure.gpulock), per
        pipeline; any hold of one pipeline that overlaps an exclusive hold of the other (or an exclusive
        hold of its own pipeline) on the same lock, which must never happen; and how often and how long
        the second pipeline waited while the first held the GPU. Exit status 1 on an overlap.

    python tools/probes/lock_and_load.py load RESULTS_DIR LOAD_JSON
        every bench row of a run (RESULTS_DIR/bench/*.csv), when its point ended (from the step's log)
        relative to the foreign load's start and end (LOAD_JSON, written by gpu_load.py), its status
        and what the disturbance check saw. Exit status 1 when a row that ended while the load ran is
        not ``disturbed``, or none did.

    python tools/probes/lock_and_load.py steps STATUS_DIR
        the step records (STATUS_DIR/*.json) that carry a message, as rows of the summary table.
"""

from __future__ import annotations

import csv
import json
import re
import sys
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/: the lock log's reader
from gpu_timeline import length as _length, program, read_holds  # noqa: E402


# --------------------------------------------------------------------------------------- turns
def _overlap(a: dict, b: dict) -> bool:
    return a["lock"] == b["lock"] and "exclusive" in (a["mode"], b["mode"]) and \
        a["got"] < b["released"] and b["got"] < a["released"]


def turns(holds: list[dict], first: str, second: str) -> tuple[list[str], bool]:
    """(lines of the report, whether any two holds overlapped where they must not)."""
    who = {first: "first", second: "second"}
    mine = {name: [h for h in holds if h["cwd"] == cwd] for cwd, name in who.items()}
    t0 = min((h["asked"] for h in holds), default=0.0)
    out = ["| pipeline | holds (exclusive/shared) | programs | lock files |", "|---|---|---|---|"]
    for name, hs in mine.items():
        ex = sum(h["mode"] == "exclusive" for h in hs)
        programs = ", ".join(sorted({program(h["program"]) for h in hs}))
        out.append(f"| {name} | {len(hs)} ({ex}/{len(hs) - ex}) | {programs} | "
                   f"{', '.join(sorted({h['lock'] for h in hs}))} |")
    bad = []
    for i, a in enumerate(holds):
        for b in holds[i + 1:]:
            if a["pid"] != b["pid"] and _overlap(a, b):
                bad.append((a, b))
    waits = [(b, a) for b in mine["second"] for a in mine["first"]
             if b["lock"] == a["lock"] and b["asked"] < a["released"] and a["got"] < b["got"]
             and "exclusive" in (a["mode"], b["mode"])]
    waited = _length([(max(b["asked"], a["got"]), min(b["got"], a["released"])) for b, a in waits])
    out += ["", f"overlapping holds (one of them exclusive) on one lock: {len(bad)}"]
    for a, b in bad:
        out.append(f"  OVERLAP {a['cwd']} pid {a['pid']} {a['mode']} {a['got'] - t0:.3f}-{a['released'] - t0:.3f} s"
                   f" / {b['cwd']} pid {b['pid']} {b['mode']} {b['got'] - t0:.3f}-{b['released'] - t0:.3f} s")
    out.append(f"second pipeline's holds that waited for a hold of the first: {len({id(b) for b, _ in waits})}"
               f" ({waited:.1f} s of wall time)")
    out += ["", "| t (s) | pipeline | program | mode | asked | got | released |", "|---|---|---|---|---|---|---|"]
    for h in holds:
        out.append(f"| {h['got'] - t0:.3f} | {who.get(h['cwd'], h['cwd'])} | {program(h['program'])} | {h['mode']} | "
                   f"{h['asked'] - t0:.3f} | {h['got'] - t0:.3f} | {h['released'] - t0:.3f} |")
    return out, bool(bad)


# ---------------------------------------------------------------------------------------- load
LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ \[bench (\S+)\] \d+/\d+ (\d+)x(\d+)x(\d+)\b")


def point_ends(log: Path) -> dict[tuple, float]:
    """(kernel, m, n, k) -> when its point's line was logged (seconds since the epoch, local clock)."""
    out = {}
    for line in Path(log).read_text(errors="replace").splitlines():
        hit = LINE.match(line)
        if hit:
            when = datetime.strptime(hit.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            out[(hit.group(2), int(hit.group(3)), int(hit.group(4)), int(hit.group(5)))] = when
    return out


def load_rows(results: Path, load: dict) -> list[dict]:
    rows = []
    for table in sorted(Path(results, "bench").glob("*.csv")):
        log = Path(results, "logs", "bench", table.name).with_suffix(".log")
        ends = point_ends(log) if log.exists() else {}
        with open(table, newline="") as fh:
            for r in csv.DictReader(fh):
                end = ends.get((r["kernel"], int(r["m"]), int(r["n"]), int(r["k"])))
                rows.append(dict(kernel=r["kernel"], shape=f"{r['m']}x{r['n']}x{r['k']}", status=r["status"],
                                 median_ms=r.get("median_ms", ""), disturbance=r.get("disturbance", ""),
                                 ended=None if end is None else end - load["start"],
                                 during=end is not None and load["start"] <= end <= load["end"]))
    return rows


def load_report(rows: list[dict], load: dict) -> tuple[list[str], bool]:
    length = load["end"] - load["start"]
    during = [r for r in rows if r["during"]]
    hit = [r for r in during if r["status"] == "disturbed"]
    outside_disturbed = [r for r in rows if not r["during"] and r["status"] == "disturbed"]
    out = [f"foreign load: pid {load['pid']}, {length:.1f} s, {load.get('launches', '?')} launches",
           f"bench rows: {len(rows)}; ended while the load ran: {len(during)}, of them disturbed: {len(hit)}; "
           f"disturbed among the others: {len(outside_disturbed)}",
           "", "| kernel | shape | status | ended (s from load start) | median ms | disturbance |",
           "|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["ended"] is None, r["ended"] or 0)):
        ended = "?" if r["ended"] is None else f"{r['ended']:.1f}"
        text = r["disturbance"] if len(r["disturbance"]) <= 140 else r["disturbance"][:139] + "…"
        out.append(f"| {r['kernel']} | {r['shape']} | {r['status']} | {ended} | {r['median_ms']} | {text} |")
    # under the load, a GPU-timed point is disturbed (or failed, or not run); host stages time on the CPU
    wrong = [r for r in during if r["status"] not in ("disturbed", "failed", "skipped")
             and not r["disturbance"].startswith("n/a")]
    return out, bool(wrong) or not hit


def step_rows(folder: Path) -> list[str]:
    out = []
    for path in sorted(Path(folder).glob("*.json")):
        rec = json.loads(path.read_text())
        if rec.get("message"):
            out.append(f"| b | bench {rec.get('kernel')}: step {rec.get('status')} | {rec['message'][:200]} |")
    return out


def main(argv: list[str]) -> int:
    if len(argv) == 4 and argv[0] == "turns":
        lines, bad = turns(read_holds(Path(argv[1])), argv[2], argv[3])
    elif len(argv) == 2 and argv[0] == "steps":
        lines, bad = step_rows(Path(argv[1])), False
    elif len(argv) == 3 and argv[0] == "load":
        load = json.loads(Path(argv[2]).read_text())
        lines, bad = load_report(load_rows(Path(argv[1]), load), load)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    if lines:
        print("\n".join(lines))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
