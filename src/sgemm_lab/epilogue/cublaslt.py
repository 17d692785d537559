"""cuBLASLt SGEMM with a fused bias/activation epilogue (the library side of the epilogue comparison;
the unfused baseline is ``unfused``, the definition and references ``definition``). It computes, for
row-major float32 data,

    D = act(alpha * A @ B + beta * C + bias)        A: M x K (lda), B: K x N (ldb), C, D: M x N (ldc, ldd)

where ``bias`` has length N (one value per column of D) and ``act`` is ``none``, ``relu`` or
``gelu``. Imports no GPU package at module level: PyCUDA and nvmath-python are imported inside the
functions that need them, so that this module (and its CPU tests) load on a machine without a GPU.

The layout mapping (row-major problem -> cuBLASLt's column-major problem) and the bias orientation
are in ``cublaslt_plan``.

Strict FP32. The matmul descriptor is created with CUBLAS_COMPUTE_32F (not *_FAST_TF32 /
*_FAST_16F / *_FAST_16BF / *_EMULATED_16BFX9) and scale type CUDA_R_32F; the compute type is read
back and checked. The heuristic is asked only for implementations without tensor-core ops and
with FP32 inputs (CUBLASLT_MATMUL_PREF_IMPL_MASK), and the numerical-implementation flags of the
chosen algorithm (CUBLASLT_ALGO_CAP_NUMERICAL_IMPL_FLAGS) are checked again; environment
variables that could enable TF32 or BF16x9 emulation are refused, as for the cuBLAS baseline.

Alignment. The algorithm is chosen once per shape (and per set of leading dimensions) for
256-byte aligned A, B, C and D (cuBLASLt's default and what ``mem_alloc`` returns); a call with a
less aligned pointer is refused rather than run with an algorithm that may not support it.
"""

from __future__ import annotations

import numpy as np

from ..errors import LabError
from .cublaslt_plan import (ALIGN_BYTES, HEURISTIC_CANDIDATES, IMPL_ALL, STRICT_FP32_IMPL_MASK, enum_name, get_attr,
                            Plan, set_attr, epilogue_name, is_strict_fp32_impl, lt_pointers, lt_problem,
                            refuse_non_strict_env)
from .definition import check_act


# --------------------------------------------------------------------------- fused epilogue
class CublasLtEpilogue:
    """D = act(alpha * A @ B + beta * C + bias) for row-major float32 with one cublasLtMatmul call.

    Created per shape: the algorithm is chosen in ``__init__`` by the cuBLASLt heuristic for the
    packed leading dimensions (lda=K, ldb=N, ldc=ldd=N) unless others are given; a call with other
    leading dimensions chooses (once, then cached) an algorithm for those. ``algo_info`` describes
    the algorithm of the most recently planned leading dimensions.
    """

    def __init__(self, stream, *, m: int, n: int, k: int, act: str, bias: bool,
                 workspace_bytes: int = 32 << 20, lda: int | None = None, ldb: int | None = None,
                 ldc: int | None = None, ldd: int | None = None):
        self.m, self.n, self.k = int(m), int(n), int(k)
        self.act = check_act(act)
        self.has_bias = bool(bias)
        self.epilogue = epilogue_name(act, bias)
        self.workspace_bytes = int(workspace_bytes)
        if self.workspace_bytes < 0:
            raise LabError(f"cuBLASLt: workspace_bytes must be >= 0, got {workspace_bytes}")
        lt_problem(self.m, self.n, self.k, self.k, self.n, self.n, self.n)  # ShapeError first
        self.stream = stream
        self._stream_handle = 0 if stream is None else int(stream.handle)
        self._lt = None
        self.handle = self.desc = self.pref = 0
        self.workspace = None
        self._bias_placeholder = None
        self._plans: dict[tuple[int, int, int, int], Plan] = {}
        self._alpha = np.zeros(1, np.float32)  # host pointer mode: read during the call
        self._beta = np.zeros(1, np.float32)
        self.algo_info: dict = {}
        self.version = None
        try:
            self._setup()
            self._plan(lda or self.k, ldb or self.n, ldc or self.n, ldd or self.n)
        except BaseException:
            self.close()
            raise

    @property
    def label(self) -> str:
        return f"{self.m}x{self.n}x{self.k} {self.epilogue}"

    # ---------------------------------------------------------------------------- setup
    def _setup(self) -> None:
        from ..gpu.device import driver

        cuda = driver()
        refuse_non_strict_env()
        # Raw bindings, not nvmath.linalg.advanced.Matmul: that API expresses all of this (COMPUTE_32F, the
        # BIAS/RELU/GELU epilogues, algorithm choice) but takes only NumPy, CuPy or PyTorch arrays as
        # operands, and the lab's device memory is PyCUDA's; cublasLtMatmul takes device pointers.
        import nvmath
        from nvmath.bindings import cublas
        from nvmath.bindings import cublasLt as lt

        self._lt = lt
        r32f = int(nvmath.CudaDataType.CUDA_R_32F)
        compute = int(cublas.ComputeType.COMPUTE_32F)
        self._r32f = r32f
        self.version = int(lt.get_version())
        self.handle = lt.create()

        da = lt.MatmulDescAttribute
        self.desc = lt.matmul_desc_create(compute, r32f)
        self._desc_set(da.TRANSA, cublas.Operation.N)
        self._desc_set(da.TRANSB, cublas.Operation.N)
        self._desc_set(da.POINTER_MODE, lt.PointerMode.HOST)
        self._desc_set(da.EPILOGUE, lt.Epilogue[self.epilogue])
        if self.has_bias:
            self._desc_set(da.BIAS_DATA_TYPE, r32f)
        got_compute = self._desc_get(da.COMPUTE_TYPE)
        got_scale = self._desc_get(da.SCALE_TYPE)
        if got_compute != compute or got_scale != r32f:
            raise LabError(f"cuBLASLt {self.label}: descriptor has compute type "
                           f"{enum_name(cublas.ComputeType, got_compute)} and scale type {got_scale}, "
                           f"not strict FP32 (COMPUTE_32F, CUDA_R_32F)")
        self.compute_type = cublas.ComputeType(got_compute).name

        pa = lt.MatmulPreferenceAttribute
        self.pref = lt.matmul_preference_create()
        self._pref_set(pa.MAX_WORKSPACE_BYTES, self.workspace_bytes)
        for attr in (pa.MIN_ALIGNMENT_A_BYTES, pa.MIN_ALIGNMENT_B_BYTES,
                     pa.MIN_ALIGNMENT_C_BYTES, pa.MIN_ALIGNMENT_D_BYTES):
            self._pref_set(attr, ALIGN_BYTES)

        if self.workspace_bytes:
            # a little slack past the size cuBLASLt is told about (nvmath-python pads epilogue
            # workspaces by 16 bytes to work around a library issue)
            self.workspace = cuda.mem_alloc(self.workspace_bytes + ALIGN_BYTES)
        if self.has_bias:
            # the heuristic sees a valid bias pointer; each call sets the real one
            self._bias_placeholder = cuda.mem_alloc(max(4 * self.n, ALIGN_BYTES))
            self._bias_ptr = int(self._bias_placeholder)
            self._desc_set(da.BIAS_POINTER, self._bias_ptr)
        else:
            self._bias_ptr = 0

    def _desc_set(self, attr, value: int) -> None:
        lt = self._lt
        set_attr(lt.matmul_desc_set_attribute, lt.get_matmul_desc_attribute_dtype, self.desc, attr, value)

    def _desc_get(self, attr) -> int:
        lt = self._lt
        return get_attr(lt.matmul_desc_get_attribute, lt.get_matmul_desc_attribute_dtype, self.desc, attr)

    def _pref_set(self, attr, value: int) -> None:
        lt = self._lt
        set_attr(lt.matmul_preference_set_attribute, lt.get_matmul_preference_attribute_dtype,
                  self.pref, attr, value)

    def _algo_cap(self, algo_ptr: int, attr) -> int:
        lt = self._lt
        return get_attr(lt.matmul_algo_cap_get_attribute, lt.get_matmul_algo_cap_attribute_dtype,
                         algo_ptr, attr)

    def _algo_config(self, algo_ptr: int, attr) -> int:
        lt = self._lt
        return get_attr(lt.matmul_algo_config_get_attribute, lt.get_matmul_algo_config_attribute_dtype,
                         algo_ptr, attr)

    # ----------------------------------------------------------------------------- plans
    def _plan(self, lda: int, ldb: int, ldc: int, ldd: int) -> Plan:
        lt = self._lt
        key = (int(lda), int(ldb), int(ldc), int(ldd))
        prob = lt_problem(self.m, self.n, self.k, *key)
        plan = Plan(prob)
        self._plans[key] = plan  # registered first, so that close() frees a partial plan
        try:
            plan.a = lt.matrix_layout_create(self._r32f, prob.a.rows, prob.a.cols, prob.a.ld)
            plan.b = lt.matrix_layout_create(self._r32f, prob.b.rows, prob.b.cols, prob.b.ld)
            plan.c = lt.matrix_layout_create(self._r32f, prob.c.rows, prob.c.cols, prob.c.ld)
            plan.d = lt.matrix_layout_create(self._r32f, prob.d.rows, prob.d.cols, prob.d.ld)
            self._choose_algo(plan, key)
        except BaseException:
            self._destroy_plan(self._plans.pop(key))
            raise
        self.algo_info = plan.info
        return plan

    def _heuristic(self, plan: Plan, impl_mask: int) -> tuple[np.ndarray, int, str]:
        lt = self._lt
        self._pref_set(lt.MatmulPreferenceAttribute.IMPL_MASK, impl_mask)
        results = np.zeros(HEURISTIC_CANDIDATES, dtype=lt.matmul_heuristic_result_dtype)
        count = np.zeros(1, dtype=np.int32)
        try:
            lt.matmul_algo_get_heuristic(self.handle, self.desc, plan.a, plan.b, plan.c, plan.d,
                                         self.pref, HEURISTIC_CANDIDATES, results.ctypes.data,
                                         count.ctypes.data)
        except lt.cuBLASLtError as exc:  # CUBLAS_STATUS_NOT_SUPPORTED when nothing fits
            return results, 0, str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return results, int(count[0]), "0 results"

    def _choose_algo(self, plan: Plan, key) -> None:
        lt = self._lt
        results, found, why = self._heuristic(plan, STRICT_FP32_IMPL_MASK)
        mask_applied = True
        if found == 0:
            # in case this cuBLASLt reads the mask differently: ask again unfiltered, and rely on
            # the per-algorithm check below
            results, found, why = self._heuristic(plan, IMPL_ALL)
            mask_applied = False
        if found == 0:
            raise LabError(f"cuBLASLt {self.label} (lda, ldb, ldc, ldd = {key}): the heuristic "
                           f"returned no algorithm within {self.workspace_bytes} B of workspace ({why})")
        names = results.dtype.names or ()
        rejected = []
        for i in range(found):
            if "state" in names and int(results["state"][i]) != 0:
                continue
            algo_ptr = self.algo_ptr_of(results, i)
            try:
                flags = self._algo_cap(algo_ptr, lt.MatmulAlgoCapAttribute.NUMERICAL_IMPL_FLAGS)
            except (lt.cuBLASLtError, ValueError):
                flags = 0
            if not is_strict_fp32_impl(flags):
                rejected.append(hex(flags))
                continue
            plan.results, plan.algo_ptr = results, algo_ptr
            plan.info = self._describe(results, i, found, flags, mask_applied)
            return
        raise LabError(f"cuBLASLt {self.label}: none of the {found} algorithms offered is strict FP32 "
                       f"(numerical impl flags {', '.join(rejected) or 'unavailable'})")

    def _describe(self, results: np.ndarray, i: int, found: int, flags: int, mask_applied: bool) -> dict:
        lt = self._lt
        names = results.dtype.names or ()
        info = {"epilogue": self.epilogue, "compute_type": self.compute_type, "candidates": found,
                "rank": i, "impl_flags": hex(flags), "impl_mask_applied": mask_applied,
                "workspace_limit_bytes": self.workspace_bytes}
        if "workspace_size" in names:
            info["workspace_bytes"] = int(results["workspace_size"][i])
        if "waves_count" in names:
            info["waves_count"] = round(float(results["waves_count"][i]), 4)
        ca = lt.MatmulAlgoConfigAttribute
        fields = (("algo_id", ca.ID, None), ("tile", ca.TILE_ID, lt.MatmulTile),
                  ("stages", ca.STAGES_ID, lt.MatmulStages), ("splitk", ca.SPLITK_NUM, None))
        for name, attr, enum_cls in fields:
            try:
                value = self._algo_config(self.algo_ptr_of(results, i), attr)
            except (lt.cuBLASLtError, ValueError):
                continue
            info[name] = enum_name(enum_cls, value) if enum_cls is not None else value
        return info

    @staticmethod
    def algo_ptr_of(results: np.ndarray, i: int) -> int:
        """Address of result i's cublasLtMatmulAlgo_t inside the heuristic results array."""
        return results.ctypes.data + i * results.itemsize + results.dtype.fields["algo"][1]

    # ----------------------------------------------------------------------------- launch
    def __call__(self, alpha: float, a, lda: int, b, ldb: int, beta: float, c, ldc: int,
                 bias, d, ldd: int) -> None:
        """Enqueue D = act(alpha*A@B + beta*C + bias) on the stream. Pointers: ints or pycuda
        allocations; ``c`` None means C is D (in place, ldc = ldd)."""
        d_ptr = int(d)
        if c is None:
            c_ptr, ldc = d_ptr, ldd
        else:
            c_ptr = int(c)
            if c_ptr == d_ptr and int(ldc) != int(ldd):
                raise LabError(f"cuBLASLt {self.label}: C and D share memory but ldc={ldc} != ldd={ldd}")
        a_ptr, b_ptr = int(a), int(b)
        key = (int(lda), int(ldb), int(ldc), int(ldd))
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plan(*key)
        for name, ptr in (("A", a_ptr), ("B", b_ptr), ("C", c_ptr), ("D", d_ptr)):
            if ptr % ALIGN_BYTES:
                raise LabError(f"cuBLASLt {self.label}: {name} at {ptr:#x} is not {ALIGN_BYTES}-byte aligned")
        if self.has_bias:
            if bias is None:
                raise LabError(f"cuBLASLt {self.label}: the epilogue needs a bias vector")
            bias_ptr = int(bias)
            if bias_ptr != self._bias_ptr:
                self._desc_set(self._lt.MatmulDescAttribute.BIAS_POINTER, bias_ptr)
                self._bias_ptr = bias_ptr
        elif bias is not None:
            raise LabError(f"cuBLASLt {self.label}: built without bias but a bias was given")
        self._alpha[0], self._beta[0] = alpha, beta
        lt_a, lt_b, lt_c, lt_d = lt_pointers(a_ptr, b_ptr, c_ptr, d_ptr)
        ws = int(self.workspace) if self.workspace is not None else 0
        self._lt.matmul(self.handle, self.desc, self._alpha.ctypes.data, lt_a, plan.a, lt_b, plan.b,
                        self._beta.ctypes.data, lt_c, plan.c, lt_d, plan.d, plan.algo_ptr,
                        ws, self.workspace_bytes if ws else 0, self._stream_handle)

    # ----------------------------------------------------------------------------- cleanup
    def _destroy_plan(self, plan: Plan) -> None:
        for name in ("a", "b", "c", "d"):
            handle = getattr(plan, name)
            if handle:
                self._lt.matrix_layout_destroy(handle)
                setattr(plan, name, 0)
        plan.results, plan.algo_ptr = None, 0

    def close(self) -> None:
        """Destroy every cuBLASLt object and free the device buffers (idempotent)."""
        lt = self._lt
        if lt is not None:
            for plan in self._plans.values():
                self._destroy_plan(plan)
            self._plans.clear()
            if self.pref:
                lt.matmul_preference_destroy(self.pref)
                self.pref = 0
            if self.desc:
                lt.matmul_desc_destroy(self.desc)
                self.desc = 0
            if self.handle:
                lt.destroy(self.handle)
                self.handle = 0
        buffers = [buf for buf in (self.workspace, self._bias_placeholder) if buf is not None]
        if buffers:  # no enqueued matmul may still use the workspace
            if self.stream is not None:
                self.stream.synchronize()
            else:
                from ..gpu.device import driver

                driver().Context.synchronize()
        for buf in buffers:
            buf.free()
        self.workspace = self._bias_placeholder = None

    def __enter__(self) -> "CublasLtEpilogue":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
