"""What became of each step of a run, and the run's verdict.

Every step that works on one stage (build, check, bench, sweep, profile, ...) writes a small status
record beside its results: ``ok``, ``failed`` (with the first meaningful error line and the log),
``not run`` (an earlier step of the same stage failed) or ``unavailable`` (a tool this machine lacks).
A failing step still writes complete, empty-but-valid results, so that every other stage is checked,
timed and reported. The report lists the records that are not ``ok``; the run's exit status is
decided from the same records once the report is written (``verdict``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable

OK, FAILED, NOT_RUN, UNAVAILABLE = "ok", "failed", "not run", "unavailable"
STATUSES = (OK, FAILED, NOT_RUN, UNAVAILABLE)
# a point's row status (not a step's): verified, but other work shared the GPU on every timed try
# (``measure.foreign``); its timing is kept for inspection only
DISTURBED = "disturbed"
COLUMNS = ["step", "kernel", "status", "message", "log", "seconds"]
# steps.csv: a run from before ``reused`` has the first six only, one from before ``gpus`` the first seven
WRITTEN = COLUMNS + ["reused", "gpus", "slurm_job"]


@dataclass(frozen=True, kw_only=True)
class StepStatus:
    """A step's own verdict on the results it wrote (``message`` says what is wrong, one line)."""

    status: str = OK
    message: str = ""

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"unknown step status {self.status!r}")


@dataclass(frozen=True, kw_only=True)
class StepRecord:
    step: str
    kernel: str | None
    status: str
    message: str
    log: str | None
    seconds: float
    reused: bool = False  # its results were kept from an earlier job of the run (``pipeline.reuse``)
    gpus: str | None = None       # a GPU step: the UUIDs of the GPUs its job was given (``gpu.discovery.allocation``)
    slurm_job: str | None = None  # the SLURM job that ran it, where SLURM did

    @property
    def what(self) -> str:
        return self.step + (f" {self.kernel}" if self.kernel else "")


class NotRun(Exception):
    """Raised by a step whose input says that an earlier step of the same stage failed."""


def first_line(text: str, limit: int = 300) -> str:
    """The first non-empty line of ``text``, shortened to ``limit`` characters."""
    line = next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def write(path: Path, record: StepRecord) -> None:
    from . import io

    io.write_json(path, asdict(record))


def read(path: Path) -> StepRecord:
    with open(path) as fh:
        data = json.load(fh)
    return StepRecord(**{k: data.get(k) for k in COLUMNS}, reused=bool(data.get("reused", False)),
                      gpus=data.get("gpus"), slurm_job=data.get("slurm_job"))


def read_all(paths: Iterable[Path]) -> list[StepRecord]:
    """The records at ``paths`` that exist (a run in progress has not written all of them yet)."""
    return [read(p) for p in map(Path, paths) if p.exists()]


def not_ok(records: Iterable[StepRecord]) -> list[StepRecord]:
    return [r for r in records if r.status != OK]


def failed(records: Iterable[StepRecord]) -> list[StepRecord]:
    return [r for r in records if r.status == FAILED]


def verdict(records: Iterable[StepRecord], *, run: str, report: Path | None) -> str | None:
    """One line for the end of a run with failed steps (None when no step failed).

    Steps that did not run because of an earlier failure are counted, not listed: the failure that
    stopped them is.
    """
    records = list(records)
    bad = failed(records)
    if not bad:
        return None
    skipped = [r for r in records if r.status == NOT_RUN]
    listed = "; ".join(f"{r.what}: {first_line(r.message, 120)}" if r.message else r.what for r in bad[:3])
    more = f"; and {len(bad) - 3} more" if len(bad) > 3 else ""
    blocked = f", {len(skipped)} not run because of them" if skipped else ""
    where = f"report: {report}" if report is not None and Path(report).exists() else "no report was written"
    n = len(bad)
    return (f"sgemm-lab: {n} failed step{'s' if n != 1 else ''} in run '{run}'{blocked} ({listed}{more}); "
            f"{where}")
