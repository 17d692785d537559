"""GPU arbitration across the pipeline's processes: an flock per GPU, and the pinning of a process to
the GPU whose lock it holds.

Snakemake may start as many jobs as it has cores; GPU jobs do their CPU-side work (process start,
imports, compiling) in parallel and queue here for a GPU. Steps that time or profile take a lock
exclusively, steps that only need correct results (checks, sanitizers, builds) share it, so however
the pipeline is started no timing ever overlaps other GPU work on its GPU.

A GPU's lock is named by its UUID, ``results/.gpu.<uuid>.lock``: the UUID is unique across hosts, so
jobs of a cluster (SLURM gives each job its own GPUs and shows it only those) that share ``results/`` on
a network filesystem wait only for jobs on the same GPU, wherever its index. ``results/.gpu.lock``
stays for a process that finds no GPU (no driver library).

One visible GPU: its lock, and nothing else happens. Several (Snakemake assigns no device ids;
``--resources gpu=N`` only bounds how many GPU jobs run): a step takes the first lock it can get
(shared steps start their search at a different GPU each, so checks spread), and the process is pinned
to that GPU before CUDA starts in it (CUDA_VISIBLE_DEVICES = its UUID; ``PIN_ENV`` records index and
UUID for the result rows and for the point processes, which take the pin from the step that holds the
lock, see ``isolate``). A process that is pinned, or has started CUDA, only ever locks its own GPU.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

from .config import BASELINES, LabConfig
from .devices import Gpu, visible_gpus  # noqa: F401  (Gpu: for callers)
from .errors import LabError

log = logging.getLogger("sgemm_lab")

# How each step uses the GPU. "exclusive": it times something, so nothing else may run on the GPU
# meanwhile. "shared": it only needs correct results (checks, sanitizers, device queries), so several
# such steps may run at once, but never next to a timing step. The steps in SELF_LOCKING take the
# lock themselves, after their part that needs no GPU (compiling, process start, imports).
GPU_LOCK = {"environment": "shared", "build": "shared", "check": "shared", "sanitize": "shared", "bench": "exclusive",
            "profile": "exclusive", "sweep": "exclusive", "shape_sweep": "exclusive", "epilogue": "exclusive",
            "ceilings": "exclusive"}
SELF_LOCKING = {"build", "sweep", "shape_sweep", "check", "sanitize", "bench", "profile", "epilogue"}


def lock_path() -> Path:
    """``results/.gpu.lock`` in the working directory, or ``$SGEMM_LAB_GPU_LOCK`` (a pipeline started by
    a test inside a running pipeline shares its lock): the lock of a process that finds no GPU, and the
    folder of the per-GPU locks."""
    return Path(os.environ.get("SGEMM_LAB_GPU_LOCK") or "results/.gpu.lock")


PIN_ENV = "SGEMM_LAB_DEVICE"  # "index:uuid" of the GPU this process (and its children) is pinned to
POLL_S = 0.05                 # how often a step waiting for any of several GPUs tries them again


def device_lock_path(gpu: Gpu, base: Path | None = None) -> Path:
    """The lock of one GPU: ``.gpu.<uuid>.lock`` beside ``base`` (the index would not do: on a cluster
    every job's one GPU is index 0 on its host)."""
    base = base if base is not None else lock_path()
    return base.with_name(f".gpu.{gpu.uuid}.lock")


def pinned() -> Gpu | None:
    """The GPU this process is pinned to (None: not pinned, e.g. a single-GPU machine)."""
    label = os.environ.get(PIN_ENV)
    return Gpu.from_label(label) if label else None


def _cuda_started() -> bool:
    gpu = sys.modules.get("sgemm_lab.gpu")
    return gpu is not None and gpu.driver_initialised()


def pin(gpu: Gpu) -> None:
    """Pin this process (and the processes it starts) to ``gpu``; before CUDA starts in it."""
    if pinned() == gpu:
        return
    if _cuda_started():
        raise LabError(f"cannot move this process to GPU {gpu.index}: CUDA has started in it on another GPU")
    os.environ["CUDA_VISIBLE_DEVICES"] = gpu.uuid
    os.environ[PIN_ENV] = gpu.label


class gpu_lock:
    """A GPU's lock, exclusive for steps that time, shared for steps that only check; with several GPUs
    the first free one, and this process pinned to it (``device``)."""

    def __init__(self, exclusive: bool = True, path: Path | None = None, devices: list[Gpu] | None = None,
                 pin_self: bool = True):
        self.path = Path(path) if path is not None else lock_path()  # no GPU's lock; each GPU's beside it
        self.exclusive = exclusive
        # pin_self=False: the lock is held for child processes only (they take the GPU by ``handoff``);
        # a process may then hold the locks of several GPUs at once, for several sets of children.
        self.pin_self = pin_self
        self.fh = None
        self.device: Gpu | None = None
        self._devices = devices if devices is not None else visible_gpus()

    @property
    def per_gpu(self) -> bool:
        """Several GPUs: one lock each, and the holder pinned to its GPU (see the module docstring)."""
        return len(self._devices) > 1

    @classmethod
    def for_mode(cls, mode: str | None) -> "gpu_lock | None":
        """The lock for a ``lock_mode`` result (None: the step does not use the GPU)."""
        return None if mode is None else cls(exclusive=mode == "exclusive")

    def __enter__(self):
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        mode = fcntl.LOCK_EX if self.exclusive else fcntl.LOCK_SH
        t0 = time.perf_counter()
        if not self.per_gpu:
            self.device = self._devices[0] if self._devices else None
            self.fh = open(device_lock_path(self.device, self.path) if self.device else self.path, "a")
            fcntl.flock(self.fh, mode)
            if self.device is not None:
                os.environ[PIN_ENV] = self.device.label  # recorded only: the one GPU needs no pinning
        else:
            self.device, self.fh = self._first_free(mode)
            if self.pin_self:
                pin(self.device)
        waited = time.perf_counter() - t0
        if waited > 1:
            log.info("waited %.1f s for the GPU (%s)", waited, "exclusive" if self.exclusive else "shared")
        return self

    def _first_free(self, mode: int):
        """(GPU, open lock file) of the first GPU whose lock can be had, trying again until one can: this
        process's own GPU only, once it is pinned or has started CUDA."""
        import fcntl

        own = pinned() if self.pin_self else None
        if own is not None:
            order = [g for g in self._devices if g == own] or [own]
        elif self.pin_self and _cuda_started():
            raise LabError("CUDA started in this process before it took a GPU lock: its GPU is unknown")
        else:
            start = os.getpid() % len(self._devices) if not self.exclusive else 0
            order = self._devices[start:] + self._devices[:start]
        while True:
            for gpu in order:
                fh = open(device_lock_path(gpu, self.path), "a")
                try:
                    fcntl.flock(fh, mode | fcntl.LOCK_NB)
                    return gpu, fh
                except BlockingIOError:
                    fh.close()
            time.sleep(POLL_S)

    def __exit__(self, *exc):
        import fcntl

        fcntl.flock(self.fh, fcntl.LOCK_UN)
        self.fh.close()
        return False


def child_gates(exclusive: bool = True) -> list["gpu_lock"]:
    """Locks for splitting one step's points over the GPUs: one per visible GPU when there are several
    (held for child processes, ``pin_self=False``), else the one ordinary lock."""
    gpus = visible_gpus()
    if len(gpus) <= 1 or pinned_elsewhere():
        return [gpu_lock(exclusive=exclusive)]
    return [gpu_lock(exclusive=exclusive, pin_self=False) for _ in gpus]


def pinned_elsewhere() -> bool:
    """This process is pinned to one GPU already (its points must stay there)."""
    return len(visible_gpus()) > 1 and pinned() is not None


def handoff(lock) -> str:
    """What a step holding ``lock`` tells the point processes it started before it had the lock:
    'pin <index:uuid>' (several GPUs: use that one), 'record <index:uuid>' (one GPU) or ''."""
    device = getattr(lock, "device", None)  # (a gate may be any context manager)
    if device is None:
        return ""
    return f"{'pin' if lock.per_gpu else 'record'} {device.label}"


def take_handoff(text: str) -> None:
    """In a point process, before CUDA starts: follow the step's ``handoff``."""
    if not text:
        return
    kind, label = text.split(" ", 1)
    if kind == "pin":
        pin(Gpu.from_label(label))
    else:
        os.environ[PIN_ENV] = label


def device_columns() -> dict:
    """The GPU a result row was measured on, as columns (empty values when unknown: no driver)."""
    gpu = pinned()
    return dict(device_index=gpu.index if gpu else None, device_uuid=gpu.uuid if gpu else None)


def lock_mode(step: str, cfg: LabConfig, impl: str | None) -> str | None:
    """'exclusive', 'shared' or None (no GPU: host stages, the NumPy baseline, plots, report)."""
    if impl == "numpy":
        return None
    if impl and impl not in BASELINES and step in ("build", "check", "bench"):
        spec = cfg.kernel(impl)
        if spec.backend == "host" and not spec.autotuned:
            return None
    return GPU_LOCK.get(step)
