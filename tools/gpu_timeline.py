"""Who held the GPU when, in one run: the lines of ``$SGEMM_LAB_LOCK_LOG`` (see sgemm_lab.measure.gpulock)
as a table per step and the gaps in which no step held it.

    python tools/gpu_timeline.py LOCK_LOG [--gap SECONDS]

Per step (the script Snakemake ran, ``tmpXXXXXXXX.bench.py`` read as ``bench``): holds, exclusive /
shared, when its first hold began and its last ended (seconds from the first request in the log), the
seconds it held a lock, and the seconds it waited for one. Then the span from the first hold to the
last release, the part of it in which some step held the GPU, and every gap longer than ``--gap``
(default 1 s) in which none did, with the steps that were waiting then. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cli import run  # noqa: E402

MAX_BYTES = 32 << 20


def program(name: str) -> str:
    """A step's script as Snakemake runs it (``tmpXXXXXXXX.bench.py``) named by its script: ``bench.py``."""
    hit = re.match(r"^tmp\w{8}\.(.+)$", name or "")
    return hit.group(1) if hit else (name or "?")


def step_name(name: str) -> str:
    """A step's script as Snakemake runs it (``tmpXXXXXXXX.bench.py``) named by its step: ``bench``."""
    return Path(program(name)).stem or "?"


def read_holds(path: Path) -> list[dict]:
    """The lock log's holds, each line as written plus its ``step``, in the order they were got; a line
    that is not a hold (or times out of order) is a ValueError naming the line."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{p}: not a regular file")
    if p.stat().st_size > MAX_BYTES:
        raise ValueError(f"{p}: over {MAX_BYTES >> 20} MiB; not a lock log")
    holds = []
    for n, line in enumerate(p.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            h = json.loads(line)
            h = dict(h, step=step_name(h.get("program")), mode=str(h["mode"]), pid=int(h["pid"]),
                     asked=float(h["asked"]), got=float(h["got"]), released=float(h["released"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{p} line {n}: not a lock-log line ({type(exc).__name__})") from None
        if not h["asked"] <= h["got"] <= h["released"]:
            raise ValueError(f"{p} line {n}: times out of order")
        holds.append(h)
    if not holds:
        raise ValueError(f"{p}: no holds")
    return sorted(holds, key=lambda h: h["got"])


def union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The intervals merged where they overlap or touch."""
    out: list[list[float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def length(spans: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in union(spans))


def timeline(holds: list[dict], gap: float = 1.0) -> list[str]:
    t0 = min(h["asked"] for h in holds)
    steps: dict[str, list[dict]] = {}
    for h in holds:
        steps.setdefault(h["step"], []).append(h)
    out = ["| step | holds (excl./shared) | first got s | last released s | held s | waited s |",
           "|---|---|---|---|---|---|"]
    for name, hs in sorted(steps.items(), key=lambda kv: min(h["got"] for h in kv[1])):
        ex = sum(h["mode"] == "exclusive" for h in hs)
        out.append(f"| {name} | {len(hs)} ({ex}/{len(hs) - ex}) | {min(h['got'] for h in hs) - t0:.1f} | "
                   f"{max(h['released'] for h in hs) - t0:.1f} | "
                   f"{length([(h['got'], h['released']) for h in hs]):.1f} | "
                   f"{length([(h['asked'], h['got']) for h in hs]):.1f} |")
    held = union([(h["got"], h["released"]) for h in holds])
    first, last = held[0][0], held[-1][1]
    busy = sum(b - a for a, b in held)
    out += ["", f"span {first - t0:.1f}-{last - t0:.1f} s ({last - first:.1f} s); some step held the GPU "
                f"{busy:.1f} s of it ({100 * busy / max(last - first, 1e-9):.0f}%)"]
    gaps = [(a[1], b[0]) for a, b in zip(held, held[1:]) if b[0] - a[1] > gap]
    out.append(f"gaps over {gap:g} s with no hold: {len(gaps)}, {sum(b - a for a, b in gaps):.1f} s")
    for a, b in gaps:
        waiting = sorted({h["step"] for h in holds if h["asked"] < b and h["got"] >= b})
        out.append(f"  {a - t0:.1f}-{b - t0:.1f} s ({b - a:.1f} s); next: {', '.join(waiting) or '-'}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", type=Path, help="a $SGEMM_LAB_LOCK_LOG file")
    ap.add_argument("--gap", type=float, default=1.0, help="report gaps longer than this (s)")
    a = ap.parse_args()
    if not a.gap >= 0:
        raise ValueError("--gap must be a number >= 0")
    print("\n".join(timeline(read_holds(a.log), a.gap)))
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
