"""TMA tensor maps: the descriptors of A and B that a kernel's bulk tensor copies read.

A map is encoded on the host by the driver (``cuTensorMapEncodeTiled``, called through ctypes: PyCUDA
does not wrap it; cuda-bindings does, but its first call probes the driver with ``cuGetProcAddress`` for
symbols this driver lacks, which compute-sanitizer's memcheck reports as errors of every TMA stage; the
enum values typed in below are checked against cuda-bindings' by the tests) for one operand's address and shape, and copied into the kernel's ``__device__``
variable before the launch; the kernel keeps the common signature. Which variables, operands, boxes
and swizzle a stage wants is data in its config entry (``tensor_maps``). No GPU context is needed to
build the argument lists (``encode_args``), so the rules about them are tested on any machine.

An entry with ``residues`` (an expression over the parameters; nonzero: on) stands for four maps,
``<symbol>0`` .. ``<symbol>3``, through which a kernel reads its operand in place where the operand's
rows are off 16 bytes (K, for A, or N, for B, not a multiple of 4): map r sees the operand as rows of 4
times its row length (a pitch the accelerator takes), the first at the operand itself, and holds its
rows 4q + r as the end of its row q (extent: to the end of that row of the operand; rows: those q with
4q + r below the operand's row count), so that a box at a 16-byte boundary before row 4q + r's columns
brings them, and zeros past the operand's edges. Where the operand's rows are on 16-byte boundaries its
plain map is used instead, and where they are not, no plain map of it is encoded (none can be) and the
launcher does not re-pitch it.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import LabError

if TYPE_CHECKING:
    from ..config.records import KernelSpec, Shape

MAP_BYTES = 128  # sizeof(CUtensorMap)
_DATA_TYPE = {4: 7, 1: 0}  # element bytes -> CU_TENSOR_MAP_DATA_TYPE_FLOAT32, _UINT8
_SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}  # bytes -> CU_TENSOR_MAP_SWIZZLE_*
_L2_256B = 3  # CU_TENSOR_MAP_L2_PROMOTION_L2_256B
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
    elem_bytes: int = 4  # 4: FP32 operands; 1: bytes (INT8 residues)


def residue_maps(spec: KernelSpec, i: int) -> bool:
    """Whether entry ``i`` of ``spec.tensor_maps`` is on as four residue maps (its ``residues``)."""
    from ..config.geometry import env, evaluate

    expr = spec.tensor_maps[i].get("residues", 0)
    return bool(expr) and bool(evaluate(spec, f"tensor_maps[{i}].residues", str(expr), env(spec)))


def symbols(spec: KernelSpec) -> list[str]:
    """The ``__device__`` variables ``spec``'s maps are written into (each residue entry's four)."""
    out = []
    for i, m in enumerate(spec.tensor_maps):
        if m.get("residues", 0):
            out += [f"{m['symbol']}{r}" for r in range(4)] if residue_maps(spec, i) else []
        else:
            out.append(m["symbol"])
    return out


def in_place(spec: KernelSpec) -> tuple[bool, bool]:
    """Whether ``spec`` reads A and whether B in place whatever their rows (a residue entry is on)."""
    ops = {spec.tensor_maps[i]["operand"] for i in range(len(spec.tensor_maps)) if residue_maps(spec, i)}
    return "A" in ops, "B" in ops


def requests(spec: KernelSpec, shape: Shape, pitch: tuple[int, int] | None = None) -> list[MapRequest]:
    """The maps ``spec`` needs for row-major A (M x K) and B (K x N) of ``shape``, packed or, with ``pitch``
    = (lda, ldb), rows that many floats apart (the launcher's re-pitched copies for an odd N or K: the map's
    extents stay the shape's, and the accelerator reads zeros past them); LabError when a rule of the
    tensor memory accelerator is broken (rows not on 16-byte boundaries, a box too large)."""
    from ..config.geometry import env, evaluate

    names = env(spec)
    lda, ldb = pitch or (shape.k, shape.n)
    if lda < shape.k or ldb < shape.n:
        raise LabError(f"kernel {spec.id}: row pitches {lda}, {ldb} too small for {shape}")
    odd = {"A": lda % 4 != 0, "B": ldb % 4 != 0}  # rows off 16 bytes
    own = dict(zip("AB", in_place(spec)))  # operands read through residue maps where their rows are odd
    out = []
    for i, m in enumerate(spec.tensor_maps):
        box = tuple(int(evaluate(spec, f"tensor_maps[{i}].box[{j}]", str(b), names)) for j, b in enumerate(m["box"]))
        swizzle = int(m.get("swizzle", 128))
        if m.get("residues", 0):
            if not (residue_maps(spec, i) and odd[m["operand"]]):
                continue
            op = m["operand"]
            rows, cols, ld = (shape.m, shape.k, lda) if op == "A" else (shape.k, shape.n, ldb)
            reqs = [MapRequest(symbol=f"{m['symbol']}{r}", operand=op,
                               dims=(min(r, rows - 1) * ld + cols, max(1, -(-(rows - r) // 4))),
                               row_bytes=16 * ld, box=box, swizzle=swizzle) for r in range(4)]
        elif odd[m["operand"]] and own[m["operand"]]:
            continue  # read through its residue maps
        else:
            dims = (shape.k, shape.m) if m["operand"] == "A" else (shape.n, shape.k)
            row_bytes = 4 * (lda if m["operand"] == "A" else ldb)
            reqs = [MapRequest(symbol=m["symbol"], operand=m["operand"], dims=dims, row_bytes=row_bytes, box=box,
                               swizzle=swizzle)]
        for req in reqs:
            problem = _problem(req)
            if problem:
                raise LabError(f"kernel {spec.id}: tensor map {req.symbol} of {req.operand} for {shape}: {problem}")
            out.append(req)
    return out


def buffer_requests(spec: KernelSpec, names) -> list[MapRequest]:
    """The maps of a phased stage's workspace buffers (entries with ``buffer``; ``config.phases``) over the
    integer ``names`` of its plan for one shape (parameters, M, N, K, sizes); the request's ``operand`` is the
    buffer's name. LabError when a rule of the tensor memory accelerator is broken."""
    from ..config.geometry import evaluate
    from ..config.phases import map_dims

    out = []
    for i, m in enumerate(spec.tensor_maps):
        dims, row_bytes = map_dims(spec, i, names)
        box = tuple(int(evaluate(spec, f"tensor_maps[{i}].box[{j}]", str(b), names)) for j, b in enumerate(m["box"]))
        req = MapRequest(symbol=m["symbol"], operand=m["buffer"], dims=dims, row_bytes=row_bytes, box=box,
                         swizzle=int(m.get("swizzle", 128)), elem_bytes=int(m.get("elem_bytes", 4)))
        problem = _problem(req)
        if problem:
            raise LabError(f"kernel {spec.id}: tensor map {req.symbol} of {req.operand}: {problem}")
        out.append(req)
    return out


def _problem(req: MapRequest) -> str | None:
    if req.row_bytes % 16:
        return f"rows of {req.row_bytes} B are not a multiple of 16 B"
    if not all(1 <= b <= MAX_BOX for b in req.box):
        return f"box {req.box} outside 1..{MAX_BOX} per dimension"
    inner = req.elem_bytes * req.box[0]
    if inner % 16:
        return f"the box's inner extent ({inner} B) is not a multiple of 16 B"
    if req.swizzle and inner > req.swizzle:
        return f"the box's inner extent ({inner} B) exceeds the {req.swizzle}-byte swizzle"
    return None


class Encoder:
    """Encodes maps with the driver's ``cuTensorMapEncodeTiled`` (libcuda through ctypes)."""

    def __init__(self):
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            self._encode = lib.cuTensorMapEncodeTiled
        except (OSError, AttributeError) as exc:
            raise LabError(f"tensor maps need the CUDA driver's cuTensorMapEncodeTiled (CUDA 12+): {exc}") from None
        u32, u64, p = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_void_p
        self._encode.argtypes = [p, ctypes.c_int, u32, p, ctypes.POINTER(u64), ctypes.POINTER(u64),
                                 ctypes.POINTER(u32), ctypes.POINTER(u32), ctypes.c_int, ctypes.c_int,
                                 ctypes.c_int, ctypes.c_int]
        self._encode.restype = ctypes.c_int

    def __call__(self, req: MapRequest, address: int) -> bytes:
        """The 128 bytes of the map of ``req`` over the operand at device ``address``."""
        if address % 16:
            raise LabError(f"tensor map {req.symbol}: operand {req.operand} at {address:#x} is not 16-byte aligned")
        out = (ctypes.c_uint8 * MAP_BYTES)()
        dims = (ctypes.c_uint64 * 2)(*req.dims)
        strides = (ctypes.c_uint64 * 1)(req.row_bytes)
        box = (ctypes.c_uint32 * 2)(*req.box)
        steps = (ctypes.c_uint32 * 2)(1, 1)
        problem = _problem(req)
        if problem:
            raise LabError(f"tensor map {req.symbol}: {problem}")
        rc = self._encode(ctypes.addressof(out), _DATA_TYPE[req.elem_bytes], 2, ctypes.c_void_p(address), dims, strides, box, steps,
                          0, _SWIZZLE[req.swizzle], _L2_256B, 0)
        if rc != 0:
            raise LabError(f"tensor map {req.symbol}: cuTensorMapEncodeTiled failed with CUresult {rc} "
                           f"(dims {req.dims}, box {req.box}, swizzle {req.swizzle})")
        return bytes(out)
