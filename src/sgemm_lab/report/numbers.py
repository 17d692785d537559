"""How the report writes a measured number: its unit and digits, and whether the measurement was steady
enough to read as one number (the mark every table and figure puts beside an unsteady point)."""

from __future__ import annotations

from ..results.steadiness import UNSTEADY_CLOCK, UNSTEADY_IQR
from ..results.steadiness import unsteady as _unsteady_row

UNSTEADY_MARK = "†"
UNSTEADY_NOTE = (f"{UNSTEADY_MARK} unsteady: the point's quartiles are more than {UNSTEADY_IQR:.0%} of its median "
                 f"apart, or the SM clock fell below {UNSTEADY_CLOCK:.0%} of its starting value while it was timed "
                 "(the median is shown; `bench.csv` has the quartiles and clocks).")


def unsteady(*rows) -> bool:
    """Whether any of the bench ``rows`` is an unsteady measurement (see UNSTEADY_NOTE): still so after
    the bench timed it again (``bench.retimes``)."""
    return any(_unsteady_row(row) for row in rows)


def retime_lines(ok, retimes: int) -> list[str]:
    """The Method's line on the points the bench timed again for being unsteady (``ok``: the run's bench
    rows that ran), and how many stayed so; none for a run whose bench did not retime (no column)."""
    if "retimed" not in ok or ok["retimed"].isna().all():
        return []
    again = int((ok["retimed"].fillna(0) > 0).sum())
    still = sum(unsteady(r) for _, r in ok.iterrows())
    return [f"- **Unsteady points timed again**: a point whose quartiles were more than {UNSTEADY_IQR:.0%} of its "
            f"median apart, or whose SM clock fell below {UNSTEADY_CLOCK:.0%} of its start while it was timed, was "
            f"timed again, up to {retimes} times, until steady (the first steady timing is kept, else the last: "
            f"never the fastest): {again} of {len(ok)} timed points were, {still} stayed unsteady (marked "
            f"{UNSTEADY_MARK} wherever they are shown; column `retimed` of `bench.csv`)."]


def unsteady_note(rows_or_text) -> list[str]:
    """The legend of the unsteady mark, as lines to put under a table that shows one (else none)."""
    text = rows_or_text if isinstance(rows_or_text, str) else str(rows_or_text)
    return ["", UNSTEADY_NOTE] if UNSTEADY_MARK in text else []


def mark(*rows) -> str:
    """The unsteady mark for a number read from ``rows``, or nothing."""
    return UNSTEADY_MARK if unsteady(*rows) else ""


def rate(tflops: float) -> str:
    """A throughput as the ladder writes it: TFLOP/s, or GFLOP/s below 0.1 TFLOP/s."""
    return f"{tflops * 1e3:.2f} GFLOP/s" if tflops < 0.1 else f"{tflops:.2f} TFLOP/s"


def ratio_text(x: float) -> str:
    """A ratio with its leading digits whatever its size (0.013×, not 0.0×; 3065×)."""
    return f"{x:,.0f}×" if x >= 100 else (f"{x:.2f}×" if x >= 0.1 else f"{x:.2g}×")
