"""compute-sanitizer (memcheck, racecheck, synccheck, initcheck) on one kernel at a small shape.

Each tool runs the profiling target (``python -m sgemm_lab.profiling.target --no-warmup --verify``) on
one shape: for stages that handle any shape a small shape that is a multiple of nothing (257x131x67);
for tile-multiple stages a small rectangular multiple of their tile (2*BM x 3*BN x 5*BK); for a stage
that runs neither (``runs_when``: a path for narrow outputs), the check shape with the fewest flops that
it runs. The tools of
every stage run side by side, one process per core (they check correctness, not speed, and each spends
most of its two seconds starting up under instrumentation). Clean = exit status 0 with
``--error-exitcode`` set, so a reported error can never pass silently.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from ..config.geometry import tile, unsupported_reason
from ..config.records import KernelSpec, Shape

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
ODD = Shape(m=257, n=131, k=67)


def sanitize_shape(spec: KernelSpec, check_shapes: Sequence[Shape] = ()) -> Shape:
    if unsupported_reason(spec, ODD) is None:
        return ODD
    bm, bn, bk = tile(spec)
    multiple = Shape(m=2 * bm, n=3 * bn, k=5 * bk)
    if unsupported_reason(spec, multiple) is None:
        return multiple
    runs = sorted((s for s in check_shapes if unsupported_reason(spec, s) is None), key=lambda s: s.flops)
    return runs[0] if runs else multiple  # none: the tool's run fails, naming the reason


def summary_line(text: str) -> str:
    for line in reversed(text.splitlines()):
        if "ERROR SUMMARY" in line:
            return line.strip("= \n")
    return ""


def _run_tool(exe: str, tool: str, kernel: str, target_args: list[str], log_dir: Path, env: dict,
              timeout_s: float) -> dict:
    """One tool on one stage: clean (exit 0), errors (the tool's error exit code) or failed."""
    cmd = [exe, "--tool", tool, "--error-exitcode", "86", "--target-processes", "all",
           sys.executable, "-m", "sgemm_lab.profiling.target", "--no-warmup", "--verify", *target_args]
    log = log_dir / f"{kernel}.{tool}.log"
    with open(log, "w") as fh:
        fh.write(" ".join(cmd) + "\n")
        fh.flush()
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
            fh.write(f"\nended after {timeout_s:g} s (timeout)\n")
    status = "clean" if code == 0 else ("errors" if code == 86 else f"failed (exit {code})")
    return dict(kernel=kernel, tool=tool, status=status, summary=summary_line(log.read_text()), log=str(log))


def run_all(stages: dict[str, list[str]], *, log_dir: Path, parallel: int, timeout_s: float = 900,
            on_row=None) -> dict[str, list[dict]]:
    """The four tools on every stage (``stages``: kernel -> profiling-target arguments), the tools of all
    stages side by side, at most ``parallel`` processes at a time: kernel -> one row per tool.
    ``on_row(row)`` is called as each tool ends (progress)."""
    from concurrent.futures import ThreadPoolExecutor

    exe = shutil.which("compute-sanitizer")
    if exe is None:
        return {k: [dict(kernel=k, tool=t, status="unavailable: compute-sanitizer not on PATH") for t in TOOLS]
                for k in stages}
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)

    def one(job):
        row = _run_tool(exe, job[1], job[0], stages[job[0]], log_dir, env, timeout_s)
        if on_row is not None:
            on_row(row)
        return row

    jobs = [(k, t) for k in stages for t in TOOLS]
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:  # threads only wait on the processes
        rows = list(pool.map(one, jobs))
    out: dict[str, list[dict]] = {k: [] for k in stages}
    for r in rows:
        out[r["kernel"]].append(r)
    return out
