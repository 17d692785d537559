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
from .device import _import_pycuda

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


def _nvcc(kernel: str, text: str, options: list[str], arch: str) -> bytes:
    """Compile with PyCUDA's compiler (the same call SourceModule makes); needs nvcc, no GPU context."""
    cuda = _import_pycuda()
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
        return _nvcc(*job), None
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


def compile_many(specs: list[KernelSpec], arch: str, jobs: int, *, prebuilt: Path | None = None,
                 keep: bool = False) -> list[tuple[bytes | None, CompileError | None]]:
    """Compile ``specs`` in worker processes at a lower CPU priority (nvcc inherits it), so that a
    measurement running at the same time in another process keeps its CPU. (cubin, None) or
    (None, CompileError) per spec, in order; a stage built for another target (``target_arch``) gets its
    error without a compile. A spec whose binary is in ``prebuilt`` (the precompile step's folder,
    ``prebuilt_dir``; the file named by what the compiler would see) is read from there, with no worker
    started when all are; with ``keep``, what is compiled here is written there."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    results: list = [None] * len(specs)
    work, where = [], []
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
        work.append(job)
        where.append(i)
    if work:
        with ProcessPoolExecutor(max_workers=max(1, min(jobs, len(work))), mp_context=mp.get_context("spawn"),
                                 initializer=_lower_priority) as pool:
            for i, job, (cubin, err) in zip(where, work, pool.map(_compile_job, work)):
                results[i] = (cubin, CompileError(*err) if err else None)
                if keep and prebuilt is not None and cubin:
                    prebuilt.mkdir(parents=True, exist_ok=True)
                    tmp = prebuilt / f".{_key(job)}.{os.getpid()}"
                    tmp.write_bytes(cubin)
                    os.replace(tmp, prebuilt / _key(job))  # whole or absent for a reader
    return results
