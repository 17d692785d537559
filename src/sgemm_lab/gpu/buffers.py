"""Device buffers of one problem: A, B, C allocated, filled, poisoned with NaN, read back."""

from __future__ import annotations

import numpy as np

from ..config.records import Shape
from ..errors import LabError
from ..results.verify import NAN_BITS
from .device import driver

class Buffers:
    """Device A, B, C for one shape, plus the L2-flush buffer shared by all shapes."""

    def __init__(self, shape: Shape):
        cuda = driver()
        self.shape = shape
        self.nbytes = 4 * (shape.m * shape.k + shape.k * shape.n + shape.m * shape.n)
        free, _total = cuda.mem_get_info()
        if self.nbytes > free * 0.9:
            raise LabError(f"{shape}: needs {self.nbytes / 2**30:.2f} GiB, only {free / 2**30:.2f} GiB free on the GPU")
        self.a = cuda.mem_alloc(4 * shape.m * shape.k)
        self.b = cuda.mem_alloc(4 * shape.k * shape.n)
        self.c = cuda.mem_alloc(4 * shape.m * shape.n)

    def upload(self, a: np.ndarray, b: np.ndarray, c: np.ndarray | None) -> None:
        cuda = driver()
        cuda.memcpy_htod(self.a, np.ascontiguousarray(a))
        cuda.memcpy_htod(self.b, np.ascontiguousarray(b))
        if c is not None:
            cuda.memcpy_htod(self.c, np.ascontiguousarray(c))

    def poison_c(self) -> None:
        """Fill C with quiet NaNs: an element the kernel does not write stays NaN and fails the check."""
        driver().memset_d32(self.c, NAN_BITS, self.shape.m * self.shape.n)

    def download_c(self) -> np.ndarray:
        out = np.empty((self.shape.m, self.shape.n), np.float32)
        driver().memcpy_dtoh(out, self.c)
        return out

    def free(self) -> None:
        for buf in (self.a, self.b, self.c):
            buf.free()
