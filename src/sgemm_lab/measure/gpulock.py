"""GPU arbitration across the pipeline's processes: an flock per GPU, and the pinning of a process to
the GPU whose lock it holds.

Snakemake may start as many jobs as it has cores; GPU jobs do their CPU-side work (process start,
imports, compiling) in parallel and queue here for a GPU. Steps that time or profile take a lock
exclusively, steps that only need correct results (checks, sanitizers, builds) share it, so however
the pipeline is started no timing ever overlaps other GPU work on its GPU.

Where the locks are, and how a lock file is checked, opened and waited for: ``lockfiles`` (one per GPU
and host, ``/tmp/sgemm-lab-locks/gpu.<uuid>.lock``, shared by every checkout and user there).

The UUID, not the index, names a GPU: on a cluster (SLURM gives each job its own GPUs and shows it only
those) every job's one GPU is index 0 on its host. There the locks stay per host as well: jobs on
different nodes never share a GPU, jobs on one node that are given the same GPU wait for each other;
a ``SGEMM_LAB_GPU_LOCK`` on a network filesystem shared by the nodes works too, and only jobs on the
same GPU wait. A process that finds no GPU (no driver library, or none visible) locks
``results/.gpu.lock`` in its working directory: there is nothing on the host to share.

One visible GPU: its lock, and nothing else happens. Several (Snakemake assigns no device ids;
``--resources gpu=N`` only bounds how many GPU jobs run): a step takes the first lock it can get
(shared steps start their search at a different GPU each, so checks spread), and the process is pinned
to that GPU before CUDA starts in it (CUDA_VISIBLE_DEVICES = its UUID; ``PIN_ENV`` records index and
UUID for the result rows and for the point processes, which take the pin from the step that holds the
lock, see ``isolate``). A process that is pinned, or has started CUDA, only ever locks its own GPU.

A CUDA context lives as long as its process (PyCUDA's primary context, cuBLAS's handles): a process
that started CUDA under a lock keeps that lock until it ends (``gpu_lock.__exit__`` hands it to
``_KEPT``; the kernel drops it with the process), and asks for no lock it does not hold yet: waiting for
the GPU with a context of its own would put an idle context beside another step's timing (a build's,
which used to take the lock again for each stage). So no step of the pipeline is ever on the GPU
outside its lock, and a timed point sees none of them.

The lock keeps the pipeline's own steps apart; work that does not take it (another program on the
GPU) is what ``foreign`` looks for around every timed point. ``SGEMM_LAB_LOCK_LOG`` names a file that
gets one JSON line per lock held (``lockfiles.append_log``) (process, working directory, mode, lock file, wall-clock times asked,
got and released): evidence of who held the GPU when, from every pipeline of the host.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

from ..errors import LabError
from ..gpu.discovery import Gpu, visible_gpus
from .lockfiles import append_log, device_lock_path, lock_path, take

log = logging.getLogger("sgemm_lab")

# Which step takes which lock (exclusive to time, shared to check), and when: ``pipeline.steps``.
PIN_ENV = "SGEMM_LAB_DEVICE"  # "index:uuid" of the GPU this process (and its children) is pinned to
POLL_S = 0.05                 # how often a step waiting for any of several GPUs tries them again


def pinned() -> Gpu | None:
    """The GPU this process is pinned to (None: not pinned, e.g. a single-GPU machine)."""
    label = os.environ.get(PIN_ENV)
    return Gpu.from_label(label) if label else None


def _cuda_started() -> bool:
    gpu = sys.modules.get("sgemm_lab.gpu.device")
    return gpu is not None and gpu.driver_initialised()


def _context_started() -> bool:
    """Whether this process holds a CUDA context (which lives until it ends)."""
    gpu = sys.modules.get("sgemm_lab.gpu.device")
    return gpu is not None and gpu.context_started()


# Locks kept until the process ends, for the CUDA context started under them: (pid, lock); an entry
# counts for its own pid only (a forked child inherits the list).
_KEPT: list[tuple[int, "gpu_lock"]] = []


def kept_lock() -> "gpu_lock | None":
    """The lock this process keeps for its CUDA context (None: it keeps none)."""
    return next((lk for pid, lk in _KEPT if pid == os.getpid()), None)


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
        self._devices = devices if devices is not None else visible_gpus()
        # no GPU's lock; each GPU's beside it
        self.path = Path(path) if path is not None else lock_path(self._devices)
        self.exclusive = exclusive
        # pin_self=False: the lock is held for child processes only (they take the GPU by ``handoff``);
        # a process may then hold the locks of several GPUs at once, for several sets of children.
        self.pin_self = pin_self
        self.fh = None
        self.device: Gpu | None = None

    @property
    def per_gpu(self) -> bool:
        """Several GPUs: one lock each, and the holder pinned to its GPU (see the module docstring)."""
        return len(self._devices) > 1

    @classmethod
    def for_mode(cls, mode: str | None) -> "gpu_lock | None":
        """The lock for a mode of ``pipeline.steps.lock_mode`` (None: the step does not use the GPU)."""
        return None if mode is None else cls(exclusive=mode == "exclusive")

    def __enter__(self):
        import fcntl

        self._reused = False
        kept = kept_lock()
        if kept is not None:  # held since this process started CUDA: no wait, nothing to take
            if self.exclusive and not kept.exclusive:
                raise LabError("this process holds a CUDA context under a shared GPU lock and asks for the "
                               "exclusive one: it would wait for the GPU with its context on it; time in a "
                               "process of its own (measure.isolate)")
            self.device, self.fh, self._reused = kept.device, kept.fh, True
            return self
        if _context_started() and self.pin_self:
            raise LabError("CUDA started in this process before it took the GPU lock: it would wait for the "
                           "GPU with its context on it, beside another step's timing; take the lock first")
        mode = fcntl.LOCK_EX if self.exclusive else fcntl.LOCK_SH
        t0 = time.perf_counter()
        self._asked = time.time()
        if not self.per_gpu:
            self.device = self._devices[0] if self._devices else None
            self.fh = take(device_lock_path(self.device, self.path) if self.device else self.path, mode)
            if self.device is not None:
                os.environ[PIN_ENV] = self.device.label  # recorded only: the one GPU needs no pinning
        else:
            self.device, self.fh = self._first_free(mode)
            if self.pin_self:
                pin(self.device)
        self._got = time.time()
        waited = time.perf_counter() - t0
        if waited > 1:
            log.info("waited %.1f s for the GPU (%s)", waited, "exclusive" if self.exclusive else "shared")
        return self

    def _first_free(self, mode: int):
        """(GPU, open lock file) of the first GPU whose lock can be had, trying again until one can: this
        process's own GPU only, once it is pinned or has started CUDA."""
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
                fh = take(device_lock_path(gpu, self.path), mode, block=False)
                if fh is not None:
                    return gpu, fh
            time.sleep(POLL_S)

    def __exit__(self, *exc):
        import fcntl

        if self._reused:
            return False
        if self.pin_self and _context_started():  # the context outlives this block: so does the lock
            if not _KEPT or all(pid != os.getpid() for pid, _ in _KEPT):
                import atexit
                from multiprocessing import util

                atexit.register(_log_kept)
                # a multiprocessing child (a point's or a build's worker) ends by os._exit, after these
                util.Finalize(None, _log_kept, exitpriority=0)
            _KEPT.append((os.getpid(), self))
            self._close_last()
            return False
        released = time.time()  # (taken while still held: logged intervals of one lock never overlap)
        fcntl.flock(self.fh, fcntl.LOCK_UN)
        self.fh.close()
        self._log(released)
        return False

    def _close_last(self) -> None:
        """A copy of the kept lock's descriptor at a high number: an ending process's files close in order
        of number, so the lock goes after the driver's device files, and the CUDA context with them."""
        import fcntl
        import resource

        try:
            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            high = max(64, min(soft if soft > 0 else 1024, 1 << 16) - 8)
            self._late = fcntl.fcntl(self.fh.fileno(), fcntl.F_DUPFD_CLOEXEC, high)
        except (OSError, ValueError):
            self._late = None  # (the lock still holds until the process ends, a moment earlier)

    def _log(self, released: float) -> None:
        """One line in ``$SGEMM_LAB_LOCK_LOG`` (if set) for the lock just released."""
        import json

        held = device_lock_path(self.device, self.path) if self.device else self.path
        program = os.path.basename(sys.argv[0] or "")
        if program == "__main__.py":  # python -m <package>: the package (pytest, say)
            program = os.path.basename(os.path.dirname(sys.argv[0]))
        line = json.dumps(dict(pid=os.getpid(), cwd=os.getcwd(), program=program,
                               mode="exclusive" if self.exclusive else "shared", lock=str(held.resolve()),
                               device=self.device.label if self.device else None, asked=self._asked,
                               got=self._got, released=released))
        append_log(line)


def _log_kept() -> None:
    """The lock-log line of a kept lock, as its process ends (the kernel then drops the lock); once,
    whichever of the exit hooks comes first."""
    for pid, lk in _KEPT:
        if pid == os.getpid() and not getattr(lk, "_logged", False):
            lk._logged = True
            lk._log(time.time())


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
