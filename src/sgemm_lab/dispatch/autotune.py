"""Tile sweeps and the autotuned stage: grid points, and the pick of the fastest verified point."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from typing import TYPE_CHECKING, Mapping

from ..config import geometry
from ..config.records import KernelSpec, LabConfig
from ..errors import LabError

if TYPE_CHECKING:
    import pandas as pd


def sweep_points(spec: KernelSpec) -> list[dict[str, int]]:
    """The union of the products of ``spec.sweep``'s grids (other parameters at their defaults),
    defaults first, no repeats; ConfigError beyond ``config.geometry.MAX_SWEEP_POINTS`` points (nothing expanded)."""
    geometry.check_sweep_size(spec)
    seen, out = set(), []
    grid = [dict(spec.params)]
    for g in spec.sweep:
        names = list(g)
        grid += [dict(spec.params, **dict(zip(names, vals))) for vals in itertools.product(*(g[n] for n in names))]
    for p in grid:
        key = tuple(sorted(p.items()))
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def eligible(df: "pd.DataFrame") -> "pd.DataFrame":
    """Sweep rows the autotuner may choose: ran, verified, and within the stage's local-memory budget."""
    if df.empty or "tflops" not in df.columns:
        return df.iloc[0:0]
    return df[(df["status"] == "ok") & (df["verified"] == True) & (df["within_local_budget"] == True)]  # noqa: E712


def pick(frames: Mapping[str, "pd.DataFrame"]) -> tuple[str, dict[str, int], "pd.Series"]:
    """(stage id, parameters, row) of the fastest eligible point over the given sweeps."""
    best = None
    for stage, df in frames.items():
        ok = eligible(df)
        if ok.empty:
            continue
        row = ok.loc[ok["tflops"].idxmax()]
        if best is None or row["tflops"] > best[2]["tflops"]:
            best = (stage, {k: int(v) for k, v in json.loads(row["params"]).items()}, row)
    if best is None:
        raise LabError(f"autotune: no verified configuration in the sweeps of {', '.join(frames)}")
    return best


def resolve(cfg: LabConfig, spec: KernelSpec, record: Mapping) -> KernelSpec:
    """The concrete spec of ``spec``: itself, or for an autotuned stage the chosen stage + parameters
    recorded by its build (``tuned_from``, ``params``)."""
    if not spec.autotuned:
        return spec
    base = cfg.kernel(record["tuned_from"])
    return replace(base, id=spec.id, title=spec.title, explain=spec.explain, sweep=(), sweep_axes=(),
                   tune_from=spec.tune_from).with_params(**record["params"])
