"""Logging of a step: messages on stderr, and with timestamps in the step's log file."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

log = logging.getLogger("sgemm_lab")


def setup(log_path: Path | None, append: bool = False) -> None:
    log.setLevel(logging.INFO)
    for h in list(log.handlers):
        h.close()
        log.removeHandler(h)
    err = logging.StreamHandler(sys.stderr)
    err.setFormatter(logging.Formatter("%(message)s"))
    log.addHandler(err)
    if log_path is not None:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        fh = logging.FileHandler(log_path, mode="a" if append else "w")
        fh.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(fh)


def append(log_path: Path | None, text: str) -> None:
    """Detail (a traceback, a compiler log) for the log file only."""
    if log_path:
        with open(log_path, "a") as fh:
            fh.write(text.rstrip("\n") + "\n")
