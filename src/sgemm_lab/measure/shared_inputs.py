"""The check's inputs and float64 references, drawn once per run and point and shared by every
implementation's check job.

A check point's seed is the run's check seed, the shape and the distribution (``pipeline.points``), not
the implementation: every stage and cuBLAS are checked on the same inputs. Drawing them and computing the
float64 references (NumPy, on the CPU) is most of a check job's time at long K (0.4-0.5 s a point at
256 x 256 x 65536, the same for every stage), so the first job to reach a point keeps them under
``<root>/<key>/`` as .npy files (a, b, c, the two references) and the jobs after it map them read-only.

The key is a hash of everything that determines the arrays: shape, distribution (every field), seed,
alpha, beta, the NumPy version (whose generators define the draws) and the lab's code that draws,
compares and runs them (``_CODE``: a point kept by older code is made again). A folder is written under a
temporary name and renamed when complete, so a reader finds a whole entry or none; two jobs that reach a
point at once both compute it, and the second rename loses harmlessly. Without a root (tests, the
replay tool) nothing is kept.

cuBLAS's error on a point's inputs at each check mode (the basis of the FP32 class's limit) is the same for
every stage checked there, so the first check to reach the point keeps it beside the arrays
(``baseline-<tag>.json``, the tag naming the cuBLAS version and the GPU's UUID) and the others read it
instead of running cuBLAS again: 25 stages, one run of cuBLAS a point and mode.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import uuid
from dataclasses import asdict
from functools import lru_cache
from pathlib import Path
from typing import Callable

import numpy as np

from ..config.records import Distribution, Shape
from ..results import verify

ARRAYS = ("a", "b", "c", "ref", "ab")


# The code whose change changes what is kept: the draws, references and comparisons (verify), the check
# modes and the baseline's runs (runners), this module, the device buffers (poisoning) and the launchers.
_CODE = ("results/verify.py", "measure/runners.py", "measure/shared_inputs.py", "gpu/buffers.py", "gpu/launch.py")


@lru_cache(maxsize=1)
def _code_hash() -> str:
    package = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for name in _CODE:
        h.update(name.encode())
        h.update((package / name).read_bytes())
    return h.hexdigest()[:16]


def key(shape: Shape, *, alpha: float, beta: float, seed: int, dist: Distribution) -> str:
    desc = dict(m=shape.m, n=shape.n, k=shape.k, alpha=float(alpha), beta=float(beta), seed=int(seed),
                dist=asdict(dist), numpy=np.__version__, code=_code_hash())
    digest = hashlib.sha256(json.dumps(desc, sort_keys=True).encode()).hexdigest()[:20]
    return f"{shape.m}x{shape.n}x{shape.k}-{dist.name}-{digest}"


def _load(folder: Path, shape: Shape, *, alpha: float, beta: float, seed: int, dist: Distribution):
    arr = {name: np.load(folder / f"{name}.npy", mmap_mode="r") for name in ARRAYS}
    if arr["a"].shape != (shape.m, shape.k) or arr["b"].shape != (shape.k, shape.n) or arr["ref"].shape != (shape.m, shape.n):
        raise ValueError(f"{folder}: arrays of the wrong shape")
    p = verify.Problem(shape=shape, alpha=alpha, beta=beta, seed=seed, dist=dist.name, a=arr["a"], b=arr["b"], c=arr["c"])
    return p, (arr["ref"], arr["ab"])


def problem(root: Path | None, shape: Shape, *, alpha: float, beta: float, seed: int,
            dist: Distribution = verify.UNIFORM) -> tuple[verify.Problem, tuple[np.ndarray, np.ndarray]]:
    """The point's inputs (``verify.make_problem``) and references (``verify.references``): read from
    ``root`` when a job of this run has made them, else made here and kept there."""
    args = dict(alpha=alpha, beta=beta, seed=seed, dist=dist)
    folder = root / key(shape, **args) if root is not None else None
    if folder is not None and folder.is_dir():
        try:
            return _load(folder, shape, **args)
        except (OSError, ValueError):
            pass  # damaged or foreign: made again below, and not kept over it
    p = verify.make_problem(shape, **args)
    refs = verify.references(p)
    if folder is not None and not folder.exists():
        tmp = root / f".{folder.name}.{uuid.uuid4().hex}"
        try:
            tmp.mkdir(parents=True)
            for name, x in zip(ARRAYS, (p.a, p.b, p.c, *refs)):
                np.save(tmp / f"{name}.npy", x)
            os.rename(tmp, folder)  # atomic; fails if another job got there first
        except OSError:
            pass  # kept by the other job, or not at all (a full disk): this point is checked either way
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return p, refs


MODES = ("beta", "beta0_poisoned", "alpha0")


def baseline_errors(root: Path | None, shape: Shape, *, alpha: float, beta: float, seed: int, dist: Distribution,
                    tag: str | None, make: Callable[[], dict]) -> dict[str, float]:
    """The library baseline's error at each check mode on the point's inputs: read from the point's folder
    under ``root`` when a job has kept it there for ``tag`` (library and GPU), else ``make()``, kept there
    (once the folder exists: ``problem`` makes it) for the jobs after this one. A file that is not a
    whole record of every mode is not trusted: made again and replaced."""
    folder = root / key(shape, alpha=alpha, beta=beta, seed=seed, dist=dist) if root is not None and tag else None
    path = folder / f"baseline-{re.sub(r'[^A-Za-z0-9._-]', '_', tag)}.json" if folder is not None else None
    if path is not None and path.is_file():
        try:
            kept = json.loads(path.read_text())
            if isinstance(kept, dict) and set(kept) == set(MODES) and all(
                    isinstance(v, float) and (v >= 0 or math.isnan(v)) for v in kept.values()):
                return kept
        except (OSError, ValueError):
            pass  # made again below
    errs = {mode: float(v) for mode, v in make().items()}
    if path is not None and folder.is_dir():
        tmp = folder / f".{path.name}.{uuid.uuid4().hex}"
        try:
            tmp.write_text(json.dumps(errs))
            os.replace(tmp, path)  # whole or absent for a reader; the last of two writers wins harmlessly
        except OSError:
            tmp.unlink(missing_ok=True)
    return errs
