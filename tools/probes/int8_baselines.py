"""The vendor's INT8 GEMMs that stage 22's products are measured against, on the stage's own residues
(``count`` planes of M x KP and N x KP bytes, K-major, one INT32 product plane of M x N each out):

- ``CublasInt8``: cuBLAS's cublasGemmStridedBatchedEx (CUDA_R_8I, COMPUTE_32I, INT32 out), one strided batch;
- ``CublasLtInt8``: cuBLASLt's cublasLtMatmul, the same batch described by layouts (BATCH_COUNT and
  STRIDED_BATCH_OFFSET), its algorithm the first the heuristic offers within 32 MiB of workspace.

Both take the TN form their integer kernels need (both operands K-major): the row-major product
C_j = A_j B_j^T is, in cuBLAS's column-major terms, C_j^T = op(B_j) A_j with B_j transposed."""

from __future__ import annotations

import numpy as np


class CublasInt8:
    """cuBLAS's INT8 GEMM (cublasGemmStridedBatchedEx): one batch of ``count`` products."""

    name = "cublas_int8"

    def __init__(self, stream):
        import nvmath
        from nvmath.bindings import cublas

        self.cb, self.nv = cublas, nvmath
        self.handle = cublas.create()
        cublas.set_stream(self.handle, stream.handle)
        self.one, self.zero = np.ones(1, np.int32), np.zeros(1, np.int32)

    def __call__(self, m: int, n: int, kp: int, count: int, res_a, res_b, out) -> None:
        cb, r8, r32 = self.cb, int(self.nv.CudaDataType.CUDA_R_8I), int(self.nv.CudaDataType.CUDA_R_32I)
        cb.gemm_strided_batched_ex(self.handle, cb.Operation.T, cb.Operation.N, n, m, kp, self.one.ctypes.data,
                                   int(res_b), r8, kp, n * kp, int(res_a), r8, kp, m * kp, self.zero.ctypes.data,
                                   int(out), r32, n, m * n, count, int(cb.ComputeType.COMPUTE_32I),
                                   int(cb.GemmAlgo.DEFAULT))

    def close(self) -> None:
        if self.handle:
            self.cb.destroy(self.handle)
            self.handle = 0


class CublasLtInt8:
    """cuBLASLt's INT8 GEMM (cublasLtMatmul, COMPUTE_32I, scale type INT32): one batch of ``count``
    products, its layouts and algorithm made once per shape."""

    name = "cublaslt_int8"
    WORKSPACE = 32 << 20

    def __init__(self, stream):
        import nvmath
        from nvmath.bindings import cublas
        from nvmath.bindings import cublasLt as lt

        from sgemm_lab.gpu.device import driver

        self.lt, self.cb = lt, cublas
        self.r8, self.r32 = int(nvmath.CudaDataType.CUDA_R_8I), int(nvmath.CudaDataType.CUDA_R_32I)
        self.stream = int(stream.handle)
        self.handle = lt.create()
        self.desc = lt.matmul_desc_create(int(cublas.ComputeType.COMPUTE_32I), self.r32)
        self._set(lt.matmul_desc_set_attribute, lt.get_matmul_desc_attribute_dtype, self.desc,
                  lt.MatmulDescAttribute.TRANSA, int(cublas.Operation.T))
        self.pref = lt.matmul_preference_create()
        self._set(lt.matmul_preference_set_attribute, lt.get_matmul_preference_attribute_dtype, self.pref,
                  lt.MatmulPreferenceAttribute.MAX_WORKSPACE_BYTES, self.WORKSPACE)
        self.workspace = driver().mem_alloc(self.WORKSPACE)
        self.one, self.zero = np.ones(1, np.int32), np.zeros(1, np.int32)
        self._plans: dict[tuple, tuple] = {}
        self.algo_info: dict = {}

    @staticmethod
    def _set(setter, dtype_of, obj: int, attr, value: int) -> None:
        from sgemm_lab.epilogue.cublaslt_plan import set_attr

        set_attr(setter, dtype_of, obj, attr, value)

    def _layout(self, dtype: int, rows: int, cols: int, ld: int, count: int, stride: int) -> int:
        lt = self.lt
        layout = lt.matrix_layout_create(dtype, rows, cols, ld)
        la = lt.MatrixLayoutAttribute
        self._set(lt.matrix_layout_set_attribute, lt.get_matrix_layout_attribute_dtype, layout, la.BATCH_COUNT, count)
        self._set(lt.matrix_layout_set_attribute, lt.get_matrix_layout_attribute_dtype, layout,
                  la.STRIDED_BATCH_OFFSET, stride)
        return layout

    def _plan(self, m: int, n: int, kp: int, count: int) -> tuple:
        from sgemm_lab.epilogue.cublaslt import CublasLtEpilogue

        key = (m, n, kp, count)
        if key not in self._plans:
            lt = self.lt
            a = self._layout(self.r8, kp, n, kp, count, n * kp)  # B_j as stored: column-major KP x N, transposed
            b = self._layout(self.r8, kp, m, kp, count, m * kp)  # A_j: column-major KP x M
            d = self._layout(self.r32, n, m, n, count, m * n)    # C_j^T: column-major N x M
            results = np.zeros(8, dtype=lt.matmul_heuristic_result_dtype)
            found = np.zeros(1, dtype=np.int32)
            try:
                lt.matmul_algo_get_heuristic(self.handle, self.desc, a, b, d, d, self.pref, len(results),
                                             results.ctypes.data, found.ctypes.data)
            except lt.cuBLASLtError as exc:  # NOT_SUPPORTED when nothing fits
                found[0], why = 0, str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            else:
                why = "0 results"
            if not found[0]:
                for layout in (a, b, d):
                    lt.matrix_layout_destroy(layout)
                raise RuntimeError(f"cuBLASLt INT8 {m}x{n}x{kp} x{count}: the heuristic offered no algorithm ({why})")
            algo = CublasLtEpilogue.algo_ptr_of(results, 0)  # the first: the heuristic's choice
            self._plans[key] = (a, b, d, results, algo)
            self.algo_info[key] = dict(offered=int(found[0]), workspace_bytes=int(results["workspace_size"][0]))
        return self._plans[key]

    def close(self) -> None:
        lt = self.lt
        for a, b, d, _, _ in self._plans.values():
            for layout in (a, b, d):
                lt.matrix_layout_destroy(layout)
        self._plans.clear()
        if self.handle:
            lt.matmul_preference_destroy(self.pref)
            lt.matmul_desc_destroy(self.desc)
            lt.destroy(self.handle)
            self.handle = 0
        self.workspace.free()

    def __call__(self, m: int, n: int, kp: int, count: int, res_a, res_b, out) -> None:
        a, b, d, _, algo = self._plan(m, n, kp, count)
        self.lt.matmul(self.handle, self.desc, self.one.ctypes.data, int(res_b), a, int(res_a), b,
                       self.zero.ctypes.data, int(out), d, int(out), d, algo, int(self.workspace), self.WORKSPACE,
                       self.stream)
