"""Kernel builds: PyCUDA's nvcc call (no GPU context needed), in worker processes at a lower CPU
priority, and the resource record of a build."""

from __future__ import annotations

import os
from dataclasses import dataclass

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


def compile_many(specs: list[KernelSpec], arch: str, jobs: int) -> list[tuple[bytes | None, CompileError | None]]:
    """Compile ``specs`` in worker processes at a lower CPU priority (nvcc inherits it), so that a
    measurement running at the same time in another process keeps its CPU. (cubin, None) or
    (None, CompileError) per spec, in order; a stage built for another target (``target_arch``) gets its
    error without a compile."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    results: list = [None] * len(specs)
    work, where = [], []
    for i, sp in enumerate(specs):
        try:
            work.append((sp.id, source_text(sp), compile_options(sp), target_arch(sp, arch)))
            where.append(i)
        except CompileError as exc:
            results[i] = (None, exc)
    if work:
        with ProcessPoolExecutor(max_workers=max(1, min(jobs, len(work))), mp_context=mp.get_context("spawn"),
                                 initializer=_lower_priority) as pool:
            for i, (cubin, err) in zip(where, pool.map(_compile_job, work)):
                results[i] = (cubin, CompileError(*err) if err else None)
    return results
