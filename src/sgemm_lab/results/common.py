"""What every step shares: seeds, CUDA errors as one line, the verdict on a list of points, and the
provenance columns of result rows (one GPU model per run). (The concrete spec of an implementation is
``dispatch.resolve.load_spec``; a runner for one, ``measure.runners.runner_for``.)
"""

from __future__ import annotations

import logging
import zlib
from typing import TYPE_CHECKING

import numpy as np

from ..config.records import LabConfig, Shape
from ..errors import LabError
from .outcome import DISTURBED, FAILED, StepStatus, first_line

if TYPE_CHECKING:
    import pandas as pd


log = logging.getLogger("sgemm_lab")


def point_seed(base: int, impl: str, shape: Shape, purpose: str) -> int:
    """A reproducible per-(implementation, shape) seed derived from the run's base seed."""
    ss = np.random.SeedSequence([base, zlib.crc32(impl.encode()), zlib.crc32(purpose.encode()), shape.m, shape.n, shape.k])
    return int(ss.generate_state(1, dtype=np.uint64)[0] >> 1)


def base_seed(cfg: LabConfig) -> int:
    return cfg.seed if cfg.seed is not None else int(np.random.SeedSequence().entropy % (2**63))


class Guard:
    """Turns CUDA driver errors into one-line LabErrors naming what was running."""

    def __init__(self, what: str):
        self.what = what

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        if et is not None and type(ev).__module__.startswith("pycuda"):
            raise LabError(f"{self.what}: CUDA error: {str(ev).splitlines()[0]}") from ev
        return False


def point_problems(rows: list[dict], good: tuple[str, ...], what: str = "points") -> StepStatus | None:
    """A failed status naming the first bad point, when any row's status is not in ``good``.

    A ``disturbed`` point (verified, but timed while other work shared the GPU, see ``measure.foreign``) is no
    failure of the kernel: the step stays ``ok``, its message counts those points and names the first,
    and the log warns; beside a failure, the failure's message counts them too."""
    def where(r: dict) -> str:
        return r["params"] if "params" in r else f"{r['m']}x{r['n']}x{r['k']}"

    disturbed = [r for r in rows if r.get("status") == DISTURBED]
    bad = [r for r in rows if r.get("status") not in good and r.get("status") != DISTURBED]
    note = ""
    if disturbed:
        first = disturbed[0]
        note = (f"{len(disturbed)} of {len(rows)} {what} disturbed by other work on the GPU, timings kept for "
                f"inspection only (first at {where(first)}: "
                f"{first_line(first.get('disturbance') or first.get('reason', ''), 160)})")
        log.warning("%s", note)
    if not bad:
        return StepStatus(message=note) if note else None
    r = bad[0]
    mode = f" ({r['mode']})" if r.get("mode") not in (None, "-") else ""
    more = f" (+{len(bad) - 1} more of {len(rows)} {what})" if len(bad) > 1 else ""
    label = "NOT VERIFIED" if r["status"] == "failed" else str(r["status"]).upper()
    also = f"; and {note}" if note else ""
    return StepStatus(status=FAILED,
                      message=f"{label} at {where(r)}{mode}: {first_line(r.get('reason', ''), 160)}{more}{also}")


def machine(env: dict) -> dict:
    """The environment columns every result row carries."""
    return dict(gpu=env.get("gpu", {}).get("name"), driver=env.get("driver_version"), git_commit=env.get("git_commit"))


def add_provenance(df: pd.DataFrame, builds: list[dict], env: dict) -> pd.DataFrame:
    """Every result row carries what produced it: source hash, compile flags, GPU, driver, commit."""
    src = {b["kernel"]: (b.get("source_sha256"), " ".join(map(str, b.get("options") or []))) for b in builds}
    lib = {"cublas": (f"cuBLAS {env.get('cublas')} ({env.get('cublas_math_mode')})", ""),
           "cublas_tf32": (f"cuBLAS {env.get('cublas')} (TF32_TENSOR_OP_MATH)", ""),
           "numpy": (f"numpy {env.get('packages', {}).get('numpy')}", "")}
    out = df.copy()
    if out.empty:
        return out
    out["source_sha256"] = [src.get(k, lib.get(k, (None, None)))[0] for k in out.kernel]
    out["compile_options"] = [src.get(k, lib.get(k, (None, None)))[1] for k in out.kernel]
    for col, value in machine(env).items():
        out[col] = value
    return out


def one_gpu_model(tables: list["pd.DataFrame"], env: dict, run: str) -> None:
    """A run holds one GPU model's results: every row that names the GPU that measured it
    (``device_name``) names the model of the environment record. Jobs of a cluster that landed on
    nodes of another model would otherwise be reported, and compared, as this one's."""
    want = env.get("gpu", {}).get("name")
    other: dict[str, int] = {}
    for t in tables:
        if "device_name" in t:
            for name in t["device_name"].dropna():
                if name != want:
                    other[name] = other.get(name, 0) + 1
    if other:
        found = ", ".join(f"{n} rows from {name}" for name, n in other.items())
        raise LabError(f"run '{run}' mixes GPU models: {found}, beside the {want} of its environment record; "
                       "one run per model (--config run=<name>; on SLURM pin the model with gpu_model)")
