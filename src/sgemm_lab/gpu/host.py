"""Host (CPU) stages: C functions compiled into a shared library and called through ctypes."""

from __future__ import annotations

import ctypes
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from ..config.records import KernelSpec, Shape
from ..errors import CompileError

_FLOAT_P = ctypes.POINTER(ctypes.c_float)


def compiler() -> str:
    cc = os.environ.get("CC", "cc")
    exe = shutil.which(shlex.split(cc)[0]) if cc else None
    if exe is None:
        raise CompileError(f"no C compiler: '{cc}' not on PATH (set CC)")
    return cc


def compile_options(spec: KernelSpec, cflags) -> list[str]:
    return [*cflags, "-shared", "-fPIC", *(f"-D{k}={v}" for k, v in sorted(spec.params.items()))]


def compile_shared(spec: KernelSpec, cflags) -> tuple[bytes, list[str], str]:
    """Compile ``spec``'s C source into a shared library; return (bytes, command, compiler log)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / f"{spec.id}.so"
        cmd = [*shlex.split(compiler()), *compile_options(spec, cflags), "-o", str(out), str(spec.source_path)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        log = " ".join(cmd) + "\n" + proc.stdout + proc.stderr
        if proc.returncode != 0:
            first = next((ln for ln in proc.stderr.splitlines() if "error" in ln), proc.stderr.strip()[:200])
            raise CompileError(f"kernel {spec.id}: C compiler failed: {first.strip()}", log)
        return out.read_bytes(), cmd, log


class HostLauncher:
    """Calls one exported C function ``entry(M, N, K, alpha, A, B, beta, C)`` on NumPy arrays."""

    def __init__(self, spec: KernelSpec, library: Path):
        self.spec = spec
        lib = ctypes.CDLL(str(Path(library).resolve()))
        try:
            fn = getattr(lib, spec.entry)
        except AttributeError:
            raise CompileError(f"kernel {spec.id}: entry '{spec.entry}' not exported by {spec.source}") from None
        fn.restype = None
        fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_float, _FLOAT_P, _FLOAT_P,
                       ctypes.c_float, _FLOAT_P]
        self._fn, self._lib = fn, lib

    def __call__(self, shape: Shape, alpha: float, a: np.ndarray, b: np.ndarray, beta: float, c: np.ndarray) -> None:
        for arr, rows, cols in ((a, shape.m, shape.k), (b, shape.k, shape.n), (c, shape.m, shape.n)):
            if arr.dtype != np.float32 or arr.shape != (rows, cols) or not arr.flags.c_contiguous:
                raise ValueError(f"{self.spec.id}: expected C-contiguous float32 {rows}x{cols}")
        self._fn(shape.m, shape.n, shape.k, alpha, a.ctypes.data_as(_FLOAT_P), b.ctypes.data_as(_FLOAT_P),
                 beta, c.ctypes.data_as(_FLOAT_P))


def numpy_gemm(shape: Shape, alpha: float, a: np.ndarray, b: np.ndarray, beta: float, c: np.ndarray) -> None:
    """The CPU library reference: NumPy's BLAS (float32), C = alpha*A@B + beta*C in place."""
    ab = np.matmul(a, b)
    if beta == 0.0:
        np.multiply(ab, np.float32(alpha), out=c)
    else:
        c *= np.float32(beta)
        c += np.float32(alpha) * ab
