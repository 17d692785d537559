"""The run's configuration for a child process started as a command (the profiler's and the sanitizers'
target, under ncu or compute-sanitizer): the ``LabConfig`` itself, pickled into a file that the step
writes beside its outputs and names on the command line. A child started by ``multiprocessing`` receives
the object directly."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

from ..errors import ConfigError
from .records import LabConfig


def write(cfg: LabConfig, path: Path) -> Path:
    """``cfg`` into ``path`` (replaced whole, never seen half-written); returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(pickle.dumps(cfg, protocol=pickle.HIGHEST_PROTOCOL))
    os.replace(tmp, path)
    return path


def read(path: Path) -> LabConfig:
    """The ``LabConfig`` that ``write`` put in ``path``; ConfigError naming the file for anything else."""
    try:
        cfg = pickle.loads(Path(path).read_bytes())
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as exc:
        raise ConfigError(f"{path}: not a configuration written by the pipeline ({type(exc).__name__}: {exc})") from None
    if not isinstance(cfg, LabConfig):
        raise ConfigError(f"{path}: holds a {type(cfg).__name__}, not the run's configuration")
    return cfg
