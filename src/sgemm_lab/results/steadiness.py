"""When one timed point is too unsteady to read as one number: the rule the bench applies to time a point
again (``measure.runners``) and the report applies to mark what stays unsteady (``report.numbers``)."""

from __future__ import annotations

import math
from collections.abc import Mapping

UNSTEADY_IQR = 0.10    # quartiles more than 10% of the median apart
UNSTEADY_CLOCK = 0.90  # or the SM clock after the timed launches below 90% of where it was before them


def unsteady(row: Mapping | None) -> bool:
    """Whether a timed point (a bench row, or the timing's own columns) is unsteady: its quartiles more
    than UNSTEADY_IQR of its median apart, or the SM clock fallen below UNSTEADY_CLOCK of its start while
    it was timed (a host timing has no clocks: its spread alone)."""
    if row is None:
        return False
    iqr, median = row.get("iqr_ms", math.nan), row.get("median_ms", math.nan)
    if median and iqr == iqr and median == median and iqr / median > UNSTEADY_IQR:
        return True
    before, after = row.get("sm_clock_before_mhz", math.nan), row.get("sm_clock_after_mhz", math.nan)
    return bool(before == before and after == after and before and after < UNSTEADY_CLOCK * before)
