"""Result files: written atomically (temporary file + rename) so none is ever half-written, and read
back with a check that they are what the pipeline writes (``read_table``, ``read_json_checked``): a
missing, empty, binary, cut or misshapen file is refused with one line naming it (``DamagedFile``)."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from ..errors import LabError

if TYPE_CHECKING:
    import pandas as pd


class DamagedFile(LabError):
    """A result file that cannot be what the pipeline wrote: missing, empty, binary, cut short, or with
    other columns than its writer's. Never one stage's problem: the step that reads it fails."""


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


def _atomic_write(path: Path, write, *, binary: bool = False) -> None:
    path = Path(path)
    fd, tmp = _temp_beside(path)
    try:
        with (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", newline="")) as fh:
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


def _label(path: Path, what: str | None) -> str:
    return f"{path} ({what})" if what else str(path)


MAX_FILE_BYTES = 32 * 2**20  # a result file the pipeline reads: its largest table is under 1 MB


def _read_text(path: Path, what: str | None) -> str:
    """The file's text; DamagedFile when it is missing, not a regular file (a FIFO, a device: nothing is
    waited for or streamed), over ``MAX_FILE_BYTES``, empty, binary or not UTF-8."""
    import stat

    label = _label(path, what)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # (a FIFO opens at once, with no writer)
    except FileNotFoundError:
        raise DamagedFile(f"{label}: no such file") from None
    except OSError as exc:
        raise DamagedFile(f"{label}: cannot be read ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode)
                    or stat.S_ISBLK(st.st_mode) else "a folder" if stat.S_ISDIR(st.st_mode) else "no regular file")
            raise DamagedFile(f"{label}: {kind}, not a file the pipeline wrote")
        if st.st_size > MAX_FILE_BYTES:
            raise DamagedFile(f"{label}: {st.st_size / 2**20:.0f} MiB, more than the {MAX_FILE_BYTES // 2**20} MiB "
                              "a result file of the pipeline may hold")
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise DamagedFile(f"{label}: cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:
        raise DamagedFile(f"{label}: more than the {MAX_FILE_BYTES // 2**20} MiB a result file of the pipeline "
                          "may hold")
    if not data:
        raise DamagedFile(f"{label}: empty file (0 bytes)")
    nul = data.find(b"\0")
    if nul >= 0:
        raise DamagedFile(f"{label}: binary data (a NUL byte at offset {nul}), not text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DamagedFile(f"{label}: binary data (byte 0x{data[exc.start]:02x} at offset {exc.start} "
                          "is not UTF-8), not text") from None


def _cut(label: str, text: str) -> DamagedFile:
    return DamagedFile(f"{label}: cut short: line {text.count(chr(10)) + 1} ends without a newline "
                       "(the pipeline ends every file with one)")


def read_json_checked(path: Path, *, what: str | None = None) -> Any:
    """A JSON result file; DamagedFile (one line naming it) when it is missing, empty, binary, cut short
    or not JSON."""
    label = _label(path, what)
    text = _read_text(path, what)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        if not text.endswith("\n"):
            raise _cut(label, text) from None
        raise DamagedFile(f"{label}: not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    if not text.endswith("\n"):  # write_json ends with a newline
        raise _cut(label, text)
    return data


_INTEGER = re.compile(r"[+-]?[0-9]+")


def exact_ints(values) -> "pd.api.extensions.ExtensionArray | None":
    """Integers (ints, or integer text as read from a CSV) as an exact nullable Int64 array, with None,
    NaN and empty text as missing (Python ints in an object array where one does not fit 64 bits).
    None when a value is not an integer: a float, as an older writer left a seed, is not made exact."""
    import numbers

    import pandas as pd

    cells: list[int | None] = []
    for v in values:
        if v is None or v is pd.NA or (isinstance(v, float) and v != v):
            cells.append(None)
        elif isinstance(v, numbers.Integral) and not isinstance(v, bool):
            cells.append(int(v))
        elif isinstance(v, str) and (v.strip() == "" or _INTEGER.fullmatch(v.strip())):
            cells.append(int(v) if v.strip() else None)
        else:
            return None
    try:
        return pd.array(cells, dtype="Int64")
    except (OverflowError, TypeError, ValueError):
        return pd.array(cells, dtype=object)


def read_table(path: Path, *, required: Iterable[str] = (), what: str | None = None, rows: bool = True,
               ints: Iterable[str] = (), numbers: Iterable[str] = ()) -> "pd.DataFrame":
    """A CSV table the pipeline wrote, as a DataFrame; DamagedFile, one line naming the file and the
    problem, when it is missing, empty, binary (NUL bytes, not UTF-8), cut short (no final newline, an
    unclosed quote, a row with fewer fields than the header), misshapen (a row with more fields, a blank
    line), lacks a ``required`` column, or (``rows``) holds no rows.

    ``rows=False`` accepts a table without rows, for tables that a step writes empty when it found or
    ran nothing: a header alone, or a single empty line (a table of no columns; returned as an empty
    frame with the ``required`` columns). ``ints``: columns read as exact integers (nullable Int64;
    empty cells missing) rather than as floats, which cannot hold a 64-bit seed. ``numbers``: columns
    whose every cell must be a number or empty."""
    import csv
    from io import StringIO

    import pandas as pd

    label = _label(path, what)
    text = _read_text(path, what)
    reader = csv.reader(StringIO(text), strict=True)
    records: list[tuple[int, list[str]]] = []
    try:
        for rec in reader:
            records.append((reader.line_num, rec))
    except csv.Error as exc:
        if not text.endswith("\n") or "unexpected end of data" in str(exc):
            raise DamagedFile(f"{label}: cut short: a quoted field is still open at its end (line "
                              f"{reader.line_num})") from None
        raise DamagedFile(f"{label}: not CSV: line {reader.line_num}: {exc}") from None
    if not text.endswith("\n"):
        raise _cut(label, text)
    required = list(required)
    if records == [(1, [])]:  # a table of no columns, as written for no rows at all
        if rows:
            raise DamagedFile(f"{label}: no header and no rows (a single empty line)")
        return pd.DataFrame(columns=required)
    (_, header), body = records[0], records[1:]
    if header == [] or header == [""]:
        raise DamagedFile(f"{label}: line 1 is blank where the header should be")
    missing = [c for c in required if c not in header]
    if missing:
        raise DamagedFile(f"{label}: no column {', '.join(repr(c) for c in missing)} in its header "
                          f"({len(header)} columns: not the table expected here)")
    for line, rec in body:
        if not rec:
            raise DamagedFile(f"{label}: line {line} is blank")
        if len(rec) < len(header):
            raise DamagedFile(f"{label}: cut short: line {line} has {len(rec)} of the header's {len(header)} fields")
        if len(rec) > len(header):
            raise DamagedFile(f"{label}: line {line} has {len(rec)} fields, the header {len(header)}")
    if rows and not body:
        raise DamagedFile(f"{label}: no rows (a header alone)")
    exact = [c for c in ints if c in header]
    try:
        frame = pd.read_csv(StringIO(text), dtype={c: str for c in exact} or None)
    except (ValueError, pd.errors.ParserError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DamagedFile(f"{label}: not a table ({why})") from None
    for c in exact:
        column = exact_ints(frame[c])
        if column is None:
            try:
                column = pd.to_numeric(frame[c])
            except (ValueError, TypeError):
                raise DamagedFile(f"{label}: column {c!r} holds text that is not a number") from None
        frame[c] = column
    for c in numbers:
        if c in frame and not pd.api.types.is_numeric_dtype(frame[c]) and frame[c].notna().any():
            bad = next((v for v in frame[c].dropna() if not _is_number(v)), None)
            if bad is not None:
                raise DamagedFile(f"{label}: column {c!r} holds {str(bad)[:40]!r}, not a number")
    return frame


def _is_number(v) -> bool:
    try:
        float(v)
    except (TypeError, ValueError):
        return False
    return True


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
    _atomic_write(path, lambda fh: fh.write(data), binary=True)
