"""Logging of a step: messages on stderr, and with timestamps in the step's log file."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

log = logging.getLogger("sgemm_lab")


def _attach(logger: logging.Logger, log_path: Path | None, append: bool) -> logging.Logger:
    logger.setLevel(logging.INFO)
    close(logger)
    err = logging.StreamHandler(sys.stderr)
    err.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(err)
    if log_path is not None:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        fh = logging.FileHandler(log_path, mode="a" if append else "w")
        fh.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(fh)
    return logger


def setup(log_path: Path | None, append: bool = False) -> None:
    _attach(log, log_path, append)


def stage_logger(stage: str, log_path: Path | None) -> logging.Logger:
    """A logger of its own for one stage of a batch job (its log file, and stderr): the points of several
    stages may come back in any order when they are dealt over several GPUs. ``close`` it when done."""
    lg = logging.getLogger(f"sgemm_lab.stage.{stage}")
    lg.propagate = False
    return _attach(lg, log_path, append=False)


def close(logger: logging.Logger) -> None:
    for h in list(logger.handlers):
        h.close()
        logger.removeHandler(h)


def file_only(text: str) -> None:
    """A line for the step's log file (set up by ``setup``) and not the console."""
    record = log.makeRecord(log.name, logging.INFO, __file__, 0, text, None, None)
    for h in log.handlers:
        if isinstance(h, logging.FileHandler):
            h.handle(record)


def append(log_path: Path | None, text: str) -> None:
    """Detail (a traceback, a compiler log) for the log file only."""
    if log_path:
        with open(log_path, "a") as fh:
            fh.write(text.rstrip("\n") + "\n")
