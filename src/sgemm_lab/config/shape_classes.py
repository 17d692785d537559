"""The classes of shapes users bring, as rules on (M, N, K), and seeded draws from each.

The suite (``suite:`` in the config) names one shape of each class; a dispatch rule fitted on the shapes
it is scored on says little about the next user's. Drawing shapes of each class at random, from a seed the
config states, gives a set to fit a rule on and a separate set to score it on, neither of them the suite.

The classes (a shape may be in several; ``classes_of``):

``long_k``       a small output with a long K: M * N <= 16384, K >= 32768
``skinny``       GEMV-like: min(M, N) <= 16, either side (y = A x as well as y^T = x^T B)
``short_k``      K <= 256
``odd``          no dimension a multiple of 4 (rows of A and B not 16-byte aligned)
``tall_skinny``  max(M, N) >= 8192, 16 < min(M, N) <= 256, K >= 1024
``square``       M = N = K >= 1024

``draw`` picks each dimension log-uniformly within the class's ranges (``RANGES``), so that small and
large sizes are equally likely, then adjusts it into the class (an odd shape's dimensions off multiples
of 4); no operand has more than 2^31 - 1 elements. A skinny or tall-skinny class's shapes alternate
sides (narrow N first, then narrow M), so that any two of them hold both.
"""

from __future__ import annotations

import math

import numpy as np

from .records import Shape

CLASSES = ("long_k", "skinny", "short_k", "odd", "tall_skinny", "square")
FIT, SCORE = 1, 2  # the streams of a seed that fit_and_score draws from
MAX_ELEMENTS = 2**31 - 1

# (low, high) of each dimension a draw picks, log-uniformly; "narrow" and "wide" are the two sides of an
# output whose orientation is drawn (which of M and N is the narrow one)
RANGES = {
    "long_k": dict(m=(16, 1024), n=(17, 1024), k=(32768, 131072)),
    "skinny": dict(narrow=(1, 16), wide=(1024, 24576), k=(256, 16384)),
    "short_k": dict(m=(512, 8192), n=(512, 8192), k=(16, 256)),
    "odd": dict(m=(129, 6000), n=(129, 6000), k=(129, 6000)),
    "tall_skinny": dict(narrow=(17, 256), wide=(8192, 32768), k=(1024, 4096)),
    "square": dict(m=(1024, 8192)),
}


def classes_of(s: Shape) -> tuple[str, ...]:
    """Every class ``s`` is in, in the order of ``CLASSES``."""
    small, large = min(s.m, s.n), max(s.m, s.n)
    member = {
        "long_k": s.m * s.n <= 16384 and s.k >= 32768,
        "skinny": small <= 16,
        "short_k": s.k <= 256,
        "odd": all(x % 4 for x in (s.m, s.n, s.k)),
        "tall_skinny": large >= 8192 and 16 < small <= 256 and s.k >= 1024,
        "square": s.m == s.n == s.k >= 1024,
    }
    return tuple(c for c in CLASSES if member[c])


def _log_uniform(rng: np.random.Generator, lo: int, hi: int) -> int:
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))


def _one(rng: np.random.Generator, cls: str, i: int) -> Shape:
    r = RANGES[cls]
    if cls == "square":
        side = _log_uniform(rng, *r["m"])
        return Shape(m=side, n=side, k=side)
    if cls in ("skinny", "tall_skinny"):
        narrow, wide = _log_uniform(rng, *r["narrow"]), _log_uniform(rng, *r["wide"])
        m, n = (narrow, wide) if i % 2 else (wide, narrow)  # both sides, in turn: y = A x, then y^T = x^T B
        return Shape(m=m, n=n, k=_log_uniform(rng, *r["k"]))
    m, n, k = (_log_uniform(rng, *r[d]) for d in ("m", "n", "k"))
    if cls == "long_k":
        n = max(17, min(n, 16384 // m))  # the output small: M * N <= 16384
    if cls == "odd":
        m, n, k = (x + 1 if x % 4 == 0 else x for x in (m, n, k))
    return Shape(m=m, n=n, k=k)


def _fits(s: Shape) -> bool:
    return max(s.m * s.k, s.k * s.n, s.m * s.n) <= MAX_ELEMENTS


def draw(seed: int, per_class: int, classes: tuple[str, ...] = CLASSES, exclude=(),
         stream: int = 0) -> list[tuple[str, Shape]]:
    """``per_class`` shapes of each class in ``classes``, from ``seed`` and ``stream`` (the same seed and
    stream, the same shapes), none of them in ``exclude`` nor twice: (class, shape) in class order. Each
    class has its own stream of the seed, so a class's shapes do not depend on which other classes are
    drawn."""
    unknown = [c for c in classes if c not in RANGES]
    if unknown:
        raise ValueError(f"unknown shape class {', '.join(map(str, unknown))} (known: {', '.join(CLASSES)})")
    if per_class < 0:
        raise ValueError(f"per_class must be >= 0, not {per_class}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, not {seed}")
    taken = set(exclude)
    out = []
    for cls in classes:
        rng = np.random.default_rng([int(seed), int(stream), CLASSES.index(cls)])
        got, tries = 0, 0
        while got < per_class:
            tries += 1
            if tries > 1000 * (per_class + 1):
                raise ValueError(f"could not draw {per_class} distinct {cls} shapes outside the {len(exclude)} "
                                 "excluded")
            s = _one(rng, cls, got)
            if s in taken or not _fits(s) or cls not in classes_of(s):
                continue
            taken.add(s)
            out.append((cls, s))
            got += 1
    return out


def fit_and_score(seed: int, per_class: int, classes: tuple[str, ...] = CLASSES,
                  exclude=()) -> tuple[list[tuple[str, Shape]], list[tuple[str, Shape]]]:
    """Two disjoint draws from two streams of ``seed``, neither in ``exclude`` (the suite's shapes, say): the
    shapes to fit a rule on, and the held-out shapes to score it on."""
    exclude = tuple(exclude)  # (read twice: a generator would be used up by the first draw)
    fit = draw(seed, per_class, classes, exclude, stream=FIT)
    score = draw(seed, per_class, classes, tuple(exclude) + tuple(s for _, s in fit), stream=SCORE)
    return fit, score
