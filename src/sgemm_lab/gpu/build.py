"""Kernel builds: PyCUDA's nvcc call (no GPU context needed), in worker processes at a lower CPU
priority, and the resource record of a build."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..config.records import KERNEL_DIR, KernelSpec
from ..errors import CompileError
from .compile import compile_options, source_text, target_arch
from .device import import_pycuda

@dataclass(frozen=True, kw_only=True)
class BuildRecord:
    kernel: str
    entry: str
    arch: str
    options: list
    registers: int
    shared_static_bytes: int
    local_bytes: int
    max_threads_per_block: int
    compile_s: float


def nvcc(kernel: str, text: str, options: list[str], arch: str) -> bytes:
    """Compile with PyCUDA's compiler (the same call SourceModule makes); needs nvcc, no GPU context."""
    cuda = import_pycuda()
    from pycuda.compiler import compile as pycuda_compile

    try:
        return pycuda_compile(text, options=options, arch=arch, no_extern_c=True, include_dirs=[str(KERNEL_DIR)])
    except cuda.CompileError as exc:
        log = f"{exc}\n--- stdout ---\n{exc.stdout or ''}\n--- stderr ---\n{exc.stderr or ''}"
        first = next((ln.strip() for ln in (exc.stderr or "").splitlines() if "error" in ln), "see log")
        raise CompileError(f"kernel {kernel}: nvcc failed: {first}", log) from None


COMPILE_NICENESS = 10


def _lower_priority() -> None:
    try:
        os.nice(COMPILE_NICENESS)
    except OSError:
        pass


def _compile_job(job: tuple) -> tuple[bytes | None, tuple | None]:
    try:
        return nvcc(*job), None
    except CompileError as exc:
        return None, exc.args


def prebuilt_dir(results: Path, env: dict) -> Path:
    """Where a run's precompile step keeps its binaries (``results/<run>/build/precompiled/<tag>``): the tag
    names the compiler versions of the run's environment record, so a binary of another nvcc or PyCUDA
    is never taken."""
    packages = env.get("packages") if isinstance(env.get("packages"), dict) else {}
    tag = hashlib.sha256(json.dumps([env.get("nvcc"), packages.get("pycuda")]).encode()).hexdigest()[:12]
    return Path(results) / "build" / "precompiled" / tag


def _key(job: tuple) -> str:
    """A binary's file name: a hash of everything the compiler sees (source text, flags, target)."""
    _kernel, text, options, arch = job
    return hashlib.sha256(json.dumps([text, options, arch]).encode()).hexdigest()[:32] + ".cubin"


def prebuilt_file(prebuilt: Path | None, spec: KernelSpec, arch: str) -> Path | None:
    """The precompiled binary of ``spec`` in ``prebuilt``, if there is one."""
    if prebuilt is None:
        return None
    try:
        f = prebuilt / _key((spec.id, source_text(spec), compile_options(spec), target_arch(spec, arch)))
    except CompileError:
        return None
    return f if f.is_file() else None


def _claim(prebuilt: Path, job: tuple, block: bool = False):
    """The lock of ``job``'s binary in ``prebuilt`` (``locks/<key>.lock``), taken exclusively: the open
    file, or None where another process holds it (it is compiling that binary now; ``block`` waits)."""
    import fcntl

    folder = prebuilt / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    fh = open(folder / _key(job).replace(".cubin", ".lock"), "a")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX if block else fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        return None
    return fh


def _keep(prebuilt: Path, job: tuple, cubin: bytes) -> None:
    prebuilt.mkdir(parents=True, exist_ok=True)
    tmp = prebuilt / f".{_key(job)}.{os.getpid()}"
    tmp.write_bytes(cubin)
    os.replace(tmp, prebuilt / _key(job))  # whole or absent for a reader


def compile_many(specs: list[KernelSpec], arch: str, jobs: int, *, prebuilt: Path | None = None,
                 keep: bool = False) -> list[tuple[bytes | None, CompileError | None]]:
    """Compile ``specs`` in worker processes at a lower CPU priority (nvcc inherits it), so that a
    measurement running at the same time in another process keeps its CPU. (cubin, None) or
    (None, CompileError) per spec, in order; a stage built for another target (``target_arch``) gets its
    error without a compile.

    ``prebuilt`` (the run's folder of binaries, ``prebuilt_dir``; each file named by what the compiler
    sees) is shared by the jobs that run at once: a binary there is read, with no worker started when all
    are; one that another process is compiling right now (it holds the binary's lock) is waited for and
    read, never compiled twice; what is compiled here is written there for the others (``keep`` is kept
    for callers and changes nothing: with ``prebuilt``, every compile is kept). Nothing is held while
    waiting: this process's own compiles end, and release their locks, first."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    results: list = [None] * len(specs)
    mine, theirs = [], []  # (index, job, lock) to compile here; (index, job) another process compiles
    try:
        for i, sp in enumerate(specs):
            try:
                job = (sp.id, source_text(sp), compile_options(sp), target_arch(sp, arch))
            except CompileError as exc:
                results[i] = (None, exc)
                continue
            found = prebuilt / _key(job) if prebuilt is not None else None
            if found is not None and found.is_file():
                results[i] = (found.read_bytes(), None)
                continue
            lock = _claim(prebuilt, job) if prebuilt is not None else None
            if prebuilt is not None and lock is None:
                theirs.append((i, job))
            elif found is not None and found.is_file():  # (finished by another just before the claim)
                results[i] = (found.read_bytes(), None)
                lock.close()
            else:
                mine.append((i, job, lock))
        if mine:
            with ProcessPoolExecutor(max_workers=max(1, min(jobs, len(mine))), mp_context=mp.get_context("spawn"),
                                     initializer=_lower_priority) as pool:
                for (i, job, lock), (cubin, err) in zip(mine, pool.map(_compile_job, [j for _, j, _ in mine])):
                    results[i] = (cubin, CompileError(*err) if err else None)
                    if prebuilt is not None and cubin:
                        _keep(prebuilt, job, cubin)
                    if lock is not None:
                        lock.close()  # (releases it: a waiter reads the binary now)
    finally:
        for _, _, lock in mine:
            if lock is not None and not lock.closed:
                lock.close()
    for i, job in theirs:
        _claim(prebuilt, job, block=True).close()  # its compiler is done (or gone)
        found = prebuilt / _key(job)
        if found.is_file():
            results[i] = (found.read_bytes(), None)
        else:  # it failed there (or its process died): compiled here, for its own error or result
            cubin, err = _compile_job(job)
            results[i] = (cubin, CompileError(*err) if err else None)
    return results
