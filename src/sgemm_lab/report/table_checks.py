"""What a finished run's bench table must hold before anything is drawn or compared from it: rows, of one
GPU and one commit (its environment record's), one row per implementation and shape, shapes of positive
whole dimensions the configuration could have asked for, and timings that can be: positive, finite
medians, a whole number of repetitions (at least one), no negative spread. A table that breaks any of it
is refused with one line naming the file, the row and the value (``io.DamagedFile``): the report or the
comparison on disk stays the previous one.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from ..results.io import DamagedFile

SHAPE = ("m", "n", "k")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
MAX_DIM = 2**24  # the largest dimension a configured shape may have (the schema's shape)


def _same_commit(a: str, b: str) -> bool:
    """The same commit, either of them possibly abbreviated."""
    return a.startswith(b) or b.startswith(a)


def one_run(frame: pd.DataFrame, env: dict | None, *, bench: Path, env_path: Path | None = None) -> None:
    """Refuse (one line naming ``bench``) a table whose rows come from more than one GPU model or commit,
    or from another GPU or commit than the run's environment record ``env`` (when there is one)."""
    env = env or {}
    gpu = env.get("gpu")
    want = {"gpu": gpu.get("name") if isinstance(gpu, dict) else None, "git_commit": env.get("git_commit")}
    for col, what in (("gpu", "GPU"), ("git_commit", "commit")):
        if col not in frame:
            continue
        seen = frame[col].dropna().astype(str).value_counts()
        if len(seen) > 1:
            found = ", ".join(f"{n} rows {v}" for v, n in seen.items())
            raise DamagedFile(f"{bench}: rows of {len(seen)} {what}s ({found}): one run holds one {what}'s results")
        if len(seen) == 1 and want[col]:
            value = str(seen.index[0])
            if not (value == want[col] if col == "gpu" else _same_commit(value, str(want[col]))):
                raise DamagedFile(f"{bench}: its rows name {what} {value}, not the {want[col]} of "
                                  f"{env_path or 'its environment.json'} (rows of another run)")


def _number(value) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x


def possible_values(frame: pd.DataFrame, *, bench: Path) -> None:
    """Refuse shapes and timings that no measurement gives (see the module docstring); the line names the
    table's line (its header is line 1)."""
    def bad(i: int, col: str, value, why: str) -> DamagedFile:
        return DamagedFile(f"{bench}: line {i + 2}: {col} = {value!r}: {why}")

    for i, row in enumerate(frame.to_dict("records")):
        for col in SHAPE:
            if col not in row:
                continue
            x = _number(row[col])
            if x is None or not math.isfinite(x) or x != int(x) or not 1 <= x <= MAX_DIM:
                raise bad(i, col, row[col], f"not a whole dimension in 1..{MAX_DIM}")
        if row.get("status") != "ok":
            continue
        for col, low, whole in (("median_ms", 0.0, False), ("reps", 1.0, True), ("iqr_ms", 0.0, False),
                                ("tflops", 0.0, False)):
            if col not in row or (col == "tflops" and row[col] is None):
                continue
            x = _number(row[col])
            if x is None or not math.isfinite(x):
                raise bad(i, col, row[col], "not a finite number in an ok row")
            if (x <= low if col in ("median_ms", "tflops") else x < low) or (whole and x != int(x)):
                need = "a whole number of at least 1" if whole else ("above 0" if col in ("median_ms", "tflops")
                                                                       else "0 or more")
                raise bad(i, col, row[col], f"an ok row's {col} must be {need}")
    if "kernel" in frame:  # (names go into the report's code spans and file names: a stage id's letters only)
        for i, name in enumerate(frame["kernel"].astype(str)):
            if not _NAME.fullmatch(name):
                raise bad(i, "kernel", name[:60], "not a stage id (letters, digits, '_', '.', '-')")
    keys = [c for c in ("kernel", *SHAPE) if c in frame]
    if len(keys) == 4:
        dup = frame[frame.duplicated(keys, keep=False)]
        if len(dup):
            first = dup.iloc[0]
            lines = [str(i + 2) for i in dup.index[:4]]
            raise DamagedFile(f"{bench}: {len(dup)} rows for one measurement ({first['kernel']} at "
                              f"{first['m']}x{first['n']}x{first['k']}, lines {', '.join(lines)}): one row an "
                              "implementation and shape")


def finished_run(frame: pd.DataFrame, env: dict | None, *, bench: Path, env_path: Path | None = None) -> None:
    """The checks for a committed run's bench table (``rerender``, ``compare``): rows, one run, possible
    values."""
    if frame.empty:
        raise DamagedFile(f"{bench}: a header and no rows: not the bench table of a finished run")
    one_run(frame, env, bench=bench, env_path=env_path)
    possible_values(frame, bench=bench)
