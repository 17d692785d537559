"""The "Numbers now" section of each stage's page in kernels/notes/, written from the committed reference
run's bench table (reports/h100/bench.csv) and the config: the stage at every square size of the size
sweep against its baseline, and its geometric-mean speed against the baseline over the suite's shapes.
Nothing in that section is typed by hand; after a new reference run:

    python tools/notes_numbers.py            # rewrite the sections
    python tools/notes_numbers.py --check    # exit 1 (naming the pages) when a section is not what it writes
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import textwrap
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cli import run  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NOTES = ROOT / "kernels" / "notes"
BENCH = ROOT / "reports" / "h100" / "bench.csv"
START, END = "## Numbers now", "## History"
WIDTH = 100


def _wrap(text: str) -> list[str]:
    return textwrap.wrap(text, WIDTH, break_on_hyphens=False, break_long_words=False)


def _shape(s) -> tuple[int, int, int]:
    if isinstance(s, str):
        return tuple(int(x) for x in s.lower().split("x"))
    return tuple(int(x) for x in s)


def _num(x: float, digits: int = 2) -> str:
    return f"{x:.{digits}f}" if x >= 1 else f"{x:.2g}"


def section(stage: dict, cfg: dict, rows: dict, gpu: str, commit: str) -> list[str]:
    """The section's lines, from its heading to the line before the next one."""
    sid = stage["id"]
    out = [START, ""]
    out += _wrap(f"From the committed reference run [`reports/h100/bench.csv`](../../reports/h100/bench.csv) "
                 f"({gpu}; every row of it from commit {commit}, the commit "
                 "[`reports/h100/report.md`](../../reports/h100/report.md) names). Changes to the stage committed "
                 "after that are not in these numbers. \"% of baseline\" is the baseline's median time over the "
                 "stage's on the same shape, in the same run: cuBLAS FP32 for FP32 and FP32-accurate stages, cuBLAS "
                 "in TF32 mode for TF32 stages.")
    out += ["", "| M = N = K | status | median ms | TFLOP/s | baseline | % of baseline |",
            "| ---: | :--- | ---: | ---: | :--- | ---: |"]
    for s in cfg["bench"]["square"]:
        r = rows.get((sid, s, s, s))
        if r is None:
            out.append(f"| {s} | not timed | | | | |")
        elif r["status"] != "ok":
            out.append(f"| {s} | {r['status']}: {r['reason']} | | | `{r['baseline']}` | |")
        else:
            out.append(f"| {s} | ok | {float(r['median_ms']):.3f} | {_num(float(r['tflops']))} | `{r['baseline']}` | "
                       f"{_num(float(r['pct_cublas']), 1)}% |")
    ratios, base = [], None
    suite = [_shape(s) for s in cfg.get("suite", {}).get("shapes", [])]
    for m, n, k in suite:
        r = rows.get((sid, m, n, k))
        b = rows.get((r["baseline"], m, n, k)) if r is not None and r["status"] == "ok" else None
        if b is not None and b["status"] == "ok":
            ratios.append((float(b["median_ms"]) / float(r["median_ms"]), (m, n, k)))
            base = r["baseline"]
    out.append("")
    if not ratios:
        out.append("On the suite: not timed on its shapes (`suite: false` in the config)." if stage.get("suite", True)
                   is False else "On the suite: no shape of the suite verified and timed in this run.")
        return out + [""]
    g = math.exp(sum(math.log(x) for x, _ in ratios) / len(ratios))
    lo, hi = min(ratios), max(ratios)
    label = "×".join
    text = f"On the suite: verified and timed on {len(ratios)} of its {len(suite)} shapes"
    if stage.get("suite", True) is False:
        text += " (`suite: false`: only those the size sweep times too)"
    if len(ratios) == 1:
        text += f"; speed against `{base}` (its median time over the stage's) {g:.2f}× at {label(map(str, lo[1]))}."
    else:
        text += (f"; geometric mean of the speed against `{base}` (its median time over the stage's) {g:.2f}×, "
                 f"from {lo[0]:.2f}× at {label(map(str, lo[1]))} to {hi[0]:.2f}× at {label(map(str, hi[1]))}.")
    return out + _wrap(text) + [""]


def pages() -> dict[Path, str]:
    """Each stage page as this tool writes it (its other sections as they are)."""
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    table = list(csv.DictReader(BENCH.open()))
    rows = {(r["kernel"], int(r["m"]), int(r["n"]), int(r["k"])): r for r in table}
    commits = {r["git_commit"][:7] for r in table}
    if len(commits) != 1:
        raise ValueError(f"{BENCH} holds rows of {len(commits)} commits; a reference run is one")
    gpu, commit = table[0]["gpu"], commits.pop()
    out = {}
    for stage in cfg["kernels"]:
        page = NOTES / f"{stage['id']}.md"
        lines = page.read_text().split("\n")
        if START not in lines or END not in lines:
            raise ValueError(f"{page}: no '{START}' ... '{END}' section")
        a, b = lines.index(START), lines.index(END)
        out[page] = "\n".join(lines[:a] + section(stage, cfg, rows, gpu, commit) + lines[b:])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 when a page differs")
    args = ap.parse_args()
    stale = []
    for page, text in pages().items():
        if page.read_text() != text:
            stale.append(page.relative_to(ROOT))
            if not args.check:
                page.write_text(text)
    if args.check and stale:
        print(f"notes_numbers.py: not as reports/h100/bench.csv gives them: {', '.join(map(str, stale))} "
              "(python tools/notes_numbers.py rewrites them)", file=sys.stderr)
        return 1
    print(f"{len(stale)} page(s) {'differ' if args.check else 'rewritten'}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
