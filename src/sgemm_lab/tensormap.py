"""TMA tensor maps: the descriptors of A and B that a kernel's bulk tensor copies read.

A map is encoded on the host by the driver (``cuTensorMapEncodeTiled``, through cuda-bindings, which
nvmath-python installs: typed enums and the ``CUtensorMap`` struct; PyCUDA does not wrap the call) for
one operand's address and shape, and copied into the kernel's ``__device__`` variable before the launch;
the kernel keeps the common signature. Which variables, operands, boxes and swizzle a stage wants is data
in its config entry (``tensor_maps``). No GPU is needed to build the requests (``requests``) or to name
the driver's enums, so the rules about them are tested on any machine.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import LabError

if TYPE_CHECKING:
    from .config import KernelSpec, Shape

MAP_BYTES = 128  # sizeof(CUtensorMap)
SWIZZLE = {0: "CU_TENSOR_MAP_SWIZZLE_NONE", 32: "CU_TENSOR_MAP_SWIZZLE_32B", 64: "CU_TENSOR_MAP_SWIZZLE_64B",
           128: "CU_TENSOR_MAP_SWIZZLE_128B"}  # bytes -> the driver's CUtensorMapSwizzle
MAX_BOX = 256  # elements per box dimension


@dataclass(frozen=True, kw_only=True)
class MapRequest:
    """One map of a launch: the operand's global extent (inner first), its row pitch, the box."""

    symbol: str
    operand: str
    dims: tuple[int, int]
    row_bytes: int
    box: tuple[int, int]
    swizzle: int


def requests(spec: KernelSpec, shape: Shape) -> list[MapRequest]:
    """The maps ``spec`` needs for packed row-major A (M x K) and B (K x N) of ``shape``; LabError when a
    rule of the tensor memory accelerator is broken (rows not on 16-byte boundaries, a box too large)."""
    from .geometry import env, evaluate

    names = env(spec)
    out = []
    for i, m in enumerate(spec.tensor_maps):
        dims = (shape.k, shape.m) if m["operand"] == "A" else (shape.n, shape.k)
        box = tuple(int(evaluate(spec, f"tensor_maps[{i}].box[{j}]", str(b), names)) for j, b in enumerate(m["box"]))
        swizzle = int(m.get("swizzle", 128))
        req = MapRequest(symbol=m["symbol"], operand=m["operand"], dims=dims, row_bytes=4 * dims[0], box=box,
                         swizzle=swizzle)
        problem = _problem(req)
        if problem:
            raise LabError(f"kernel {spec.id}: tensor map {req.symbol} of {req.operand} for {shape}: {problem}")
        out.append(req)
    return out


def _problem(req: MapRequest) -> str | None:
    if req.row_bytes % 16:
        return f"rows of {req.row_bytes} B are not a multiple of 16 B"
    if not all(1 <= b <= MAX_BOX for b in req.box):
        return f"box {req.box} outside 1..{MAX_BOX} per dimension"
    if (4 * req.box[0]) % 16:
        return f"the box's inner extent ({4 * req.box[0]} B) is not a multiple of 16 B"
    if req.swizzle and 4 * req.box[0] > req.swizzle:
        return f"the box's inner extent ({4 * req.box[0]} B) exceeds the {req.swizzle}-byte swizzle"
    return None


class Encoder:
    """Encodes maps with the driver's ``cuTensorMapEncodeTiled`` (cuda-bindings' ``cuda.bindings.driver``)."""

    def __init__(self):
        try:
            from cuda.bindings import driver
        except ImportError as exc:
            raise LabError(f"tensor maps need cuda-bindings (installed with nvmath-python): {exc}") from None
        self._cu = driver

    def args(self, req: MapRequest, address: int) -> tuple:
        """The arguments of ``cuTensorMapEncodeTiled`` for ``req`` over the operand at device ``address``:
        2-D FP32, rows ``row_bytes`` apart, boxes of ``req.box`` elements, L2 promotion by 256 bytes, no
        fill of elements outside (the kernels never read past the matrix)."""
        cu = self._cu
        u32, u64 = cu.cuuint32_t, cu.cuuint64_t
        return (cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, address, [u64(d) for d in req.dims],
                [u64(req.row_bytes)], [u32(b) for b in req.box], [u32(1), u32(1)],
                cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
                getattr(cu.CUtensorMapSwizzle, SWIZZLE[req.swizzle]),
                cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)

    def __call__(self, req: MapRequest, address: int) -> bytes:
        """The 128 bytes of the map of ``req`` over the operand at device ``address``."""
        if address % 16:
            raise LabError(f"tensor map {req.symbol}: operand {req.operand} at {address:#x} is not 16-byte aligned")
        err, tmap = self._cu.cuTensorMapEncodeTiled(*self.args(req, address))
        if err != self._cu.CUresult.CUDA_SUCCESS:
            raise LabError(f"tensor map {req.symbol}: cuTensorMapEncodeTiled failed with {err.name} "
                           f"(dims {req.dims}, box {req.box}, swizzle {req.swizzle})")
        return ctypes.string_at(tmap.getPtr(), MAP_BYTES)
