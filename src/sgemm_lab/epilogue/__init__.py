"""The fused epilogue, D = act(alpha*A@B + beta*C + bias): a fused stage against cuBLASLt and unfused.

- ``definition``: what the epilogue computes (act, bias; GELU's form) and its float64 references
- ``cublaslt``: cuBLASLt's fused epilogue (raw bindings: nvmath's high-level Matmul takes no PyCUDA memory)
- ``cublaslt_plan``: its side without a GPU: the problem in cuBLASLt's column-major terms, strict FP32,
  attribute helpers
- ``unfused``: cuBLAS + a separate bias/activation kernel
- ``comparison``: the three verified and timed on fresh inputs, packed and padded
- ``step``: the epilogue step
"""
