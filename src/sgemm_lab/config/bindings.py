"""What every launch rule shares: the names a stage's expressions see (its parameters and THREADS), their
evaluation with the stage and key named in a refusal, a launch's record, and CUDA's launch limits. The
single-kernel rules are ``geometry``; stages of several kernels, ``phases``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from ..errors import ConfigError
from . import expr

if TYPE_CHECKING:  # annotations only: config imports this module, not the other way round
    from .records import KernelSpec

MAX_THREADS_PER_BLOCK = 1024
MAX_GRID_X = 2**31 - 1
MAX_GRID_YZ = 65535


@dataclass(frozen=True, kw_only=True)
class Launch:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int = 0  # dynamic shared memory

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def blocks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]


def threads_per_block(spec: KernelSpec) -> int:
    p = spec.params
    if spec.geometry == "elementwise":
        return p["BLOCK"]
    if spec.geometry == "grid2d":
        return p["BX"] * p["BY"]
    if spec.geometry == "block_tile":
        return p.get("THREADS", (p["BM"] * p["BN"]) // (p.get("TM", 1) * p.get("TN", 1)))
    # a stage of several kernels (phases) launches each with its own block; a THREADS parameter (the main
    # kernel's, also a -D macro) is what its expressions see, never a 1 in its place
    return p.get("THREADS", 1)


def env(spec: KernelSpec) -> dict[str, int]:
    """Names visible to the spec's expressions: its parameters and THREADS."""
    return {**spec.params, "THREADS": threads_per_block(spec)}


def evaluate(spec: KernelSpec, key: str, text: str, names: Mapping[str, int] | None = None) -> int | bool:
    """``text``, the value of config key ``key`` of ``spec``, over ``names`` (default :func:`env`); a
    refusal is a ConfigError naming the stage and the key."""
    try:
        return expr.evaluate(text, env(spec) if names is None else names, key=key)
    except ConfigError as exc:
        raise ConfigError(f"kernel {spec.id}: {exc}") from None


