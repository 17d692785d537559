"""Result files: written atomically (temporary file + rename) so none is ever half-written."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _temp_beside(path: Path) -> tuple[int, str]:
    """A temporary file in the target's directory (so the rename is atomic), with normal permissions."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.chmod(tmp, 0o666 & ~_umask())
    return fd, tmp


def _atomic_write(path: Path, write) -> None:
    path = Path(path)
    fd, tmp = _temp_beside(path)
    try:
        with os.fdopen(fd, "w", newline="") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> None:
    _atomic_write(path, lambda fh: fh.write(text))


def write_json(path: Path, data: Any) -> None:
    _atomic_write(path, lambda fh: (json.dump(data, fh, indent=2, sort_keys=False, default=str), fh.write("\n")))


def read_json(path: Path) -> Any:
    with open(path) as fh:
        return json.load(fh)


def _cell(v):
    """A value as pandas writes it: None and NaN as empty cells."""
    return "" if v is None or (isinstance(v, float) and v != v) else v


def write_csv(path: Path, frame: "pd.DataFrame | list[dict]", columns: list[str] | None = None) -> None:
    """A table: a DataFrame, or a list of row dicts (written without importing pandas; ``columns`` gives
    the header and its order, and missing keys are empty cells)."""
    if isinstance(frame, list):
        import csv

        cols = columns or list(dict.fromkeys(k for row in frame for k in row))

        def write(fh):
            w = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
            w.writeheader()
            w.writerows({k: _cell(v) for k, v in row.items()} for row in frame)

        _atomic_write(path, write)
        return
    _atomic_write(path, lambda fh: frame.to_csv(fh, index=False, lineterminator="\n"))


def write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    fd, tmp = _temp_beside(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
