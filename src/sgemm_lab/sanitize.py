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


class Sanitizers:
    """The four tools, started at once in the background (``start``), then waited for (``wait``).

    Each tool writes straight to its own log file (no pipes to drain), so they run on by themselves
    while the caller does other work, such as the check's own child process.
    """

    def __init__(self, *, target_args: list[str], log_dir: Path, kernel: str):
        self.kernel, self.log_dir, self.target_args = kernel, Path(log_dir), target_args
        self.exe = shutil.which("compute-sanitizer")
        self.procs: dict[str, tuple[subprocess.Popen, Path, list[str]]] = {}

    def start(self) -> "Sanitizers":
        if self.exe is None:
            return self
        env = dict(os.environ)
        src = str(Path(__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for tool in TOOLS:
            cmd = [self.exe, "--tool", tool, "--error-exitcode", "86", "--target-processes", "all",
                   sys.executable, "-m", "sgemm_lab.profile_target", "--no-warmup", "--verify", *self.target_args]
            log = self.log_dir / f"{self.kernel}.{tool}.log"
            with open(log, "w") as fh:
                fh.write(" ".join(cmd) + "\n")
                fh.flush()
                proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
            self.procs[tool] = (proc, log, cmd)
        return self

    def kill(self) -> None:
        """End any tool still running (the step failed before waiting for them)."""
        for proc, _, _ in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def wait(self, timeout_s: float = 900) -> list[dict]:
        """One row per tool: clean (exit 0), errors (the tool's error exit code) or failed."""
        if self.exe is None:
            return [dict(kernel=self.kernel, tool=t, status="unavailable: compute-sanitizer not on PATH") for t in TOOLS]
        rows = []
        for tool, (proc, log, _) in self.procs.items():
            try:
                code = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
                with open(log, "a") as fh:
                    fh.write(f"\nended after {timeout_s:g} s (timeout)\n")
            status = "clean" if code == 0 else ("errors" if code == 86 else f"failed (exit {code})")
            rows.append(dict(kernel=self.kernel, tool=tool, status=status, summary=summary_line(log.read_text()),
                             log=str(log)))
        return rows


def run_tools(*, target_args: list[str], log_dir: Path, kernel: str) -> list[dict]:
    """Run the four tools concurrently and return one row per tool."""
    return Sanitizers(target_args=target_args, log_dir=log_dir, kernel=kernel).start().wait()
