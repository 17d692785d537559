"""compute-sanitizer (memcheck, racecheck, synccheck, initcheck) on one kernel at a small shape.

Each tool runs the profiling target (``python -m sgemm_lab.profile_target --no-warmup --verify``) on
one shape: for stages that handle any shape a small shape that is a multiple of nothing (257x131x67);
for tile-multiple stages a small rectangular multiple of their tile (2*BM x 3*BN x 5*BK). The four tools
run concurrently (they check correctness, not speed). Clean = exit status 0 with
``--error-exitcode`` set, so a reported error can never pass silently.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .config import KernelSpec, Shape
from .geometry import tile, unsupported_reason

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
ODD = Shape(m=257, n=131, k=67)


def sanitize_shape(spec: KernelSpec) -> Shape:
    if unsupported_reason(spec, ODD) is None:
        return ODD
    bm, bn, bk = tile(spec)
    return Shape(m=2 * bm, n=3 * bn, k=5 * bk)


def summary_line(text: str) -> str:
    for line in reversed(text.splitlines()):
        if "ERROR SUMMARY" in line:
            return line.strip("= \n")
    return ""


def run_tools(*, target_args: list[str], log_dir: Path, kernel: str) -> list[dict]:
    exe = shutil.which("compute-sanitizer")
    if exe is None:
        return [dict(kernel=kernel, tool=t, status="unavailable: compute-sanitizer not on PATH") for t in TOOLS]
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    log_dir.mkdir(parents=True, exist_ok=True)

    def one(tool: str) -> dict:
        cmd = [exe, "--tool", tool, "--error-exitcode", "86", "--target-processes", "all",
               sys.executable, "-m", "sgemm_lab.profile_target", "--no-warmup", "--verify", *target_args]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        log = log_dir / f"{kernel}.{tool}.log"
        log.write_text(" ".join(cmd) + "\n" + proc.stdout + proc.stderr)
        text = proc.stdout + proc.stderr
        if proc.returncode == 0:
            status = "clean"
        elif proc.returncode == 86:
            status = "errors"
        else:
            status = f"failed (exit {proc.returncode})"
        return dict(kernel=kernel, tool=tool, status=status, summary=summary_line(text), log=str(log))

    with ThreadPoolExecutor(len(TOOLS)) as pool:
        return list(pool.map(one, TOOLS))
