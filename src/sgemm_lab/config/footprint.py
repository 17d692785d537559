"""What a point needs in memory, checked before any input is drawn.

A check point draws A, B and C on the host and keeps float64 copies and references beside them; a
timed GPU point generates its inputs on the device and builds float64 references there. A point that
would not fit is a ``skipped`` row saying how many bytes it needs and how many are free, instead of a
host killed for lack of memory or a CUDA allocation error.
"""

from __future__ import annotations

from .records import Shape

# Leave this share of what is free to everything else (the driver, the other processes of the host).
USABLE = 0.8


def host_check_bytes(shape: Shape) -> int:
    """Host bytes of one check point: A, B, C in float32, float64 copies of A and B, and about five
    float64 outputs (the two references, beta * C, a result and its difference)."""
    m, n, k = shape.m, shape.n, shape.k
    return 4 * (m * k + k * n + m * n) + 8 * (m * k + k * n) + 8 * 5 * m * n


def device_check_bytes(shape: Shape) -> int:
    """Device bytes of one check point: A, B, C in float32 (the stage and cuBLAS share them)."""
    return 4 * (shape.m * shape.k + shape.k * shape.n + shape.m * shape.n)


def device_bench_bytes(shape: Shape) -> int:
    """Device bytes of one timed point: A, B, C and a copy of C in float32, and the float64 reference
    (A, B, A @ B and alpha * A @ B + beta * C) built on the device."""
    m, n, k = shape.m, shape.n, shape.k
    return 4 * (m * k + k * n + 2 * m * n) + 8 * (m * k + k * n + 2 * m * n)


def host_available_bytes() -> int | None:
    """MemAvailable of /proc/meminfo (None where the system does not say)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def too_big(need: int, free: int | None, where: str) -> str | None:
    """The skip reason when ``need`` bytes exceed the usable part of ``free`` (None when it fits, or
    when ``free`` is unknown)."""
    if free is None or need <= USABLE * free:
        return None
    return f"needs {_gib(need)} of {where} memory, {_gib(free)} free ({USABLE:.0%} of it usable)"
