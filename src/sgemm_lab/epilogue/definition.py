"""What the fused epilogue computes, defined once for every implementation of it (cuBLASLt, the
unfused baseline, the fused stages) and for their references:

    D = act(alpha * A @ B + beta * C + bias)      bias: length N, one value per column of D

with ``act`` one of ``none``, ``relu``, ``gelu``; the float64 references the comparison checks against.

GELU form. The cuBLAS documentation only says "Apply GELU point-wise transform to the results
(x := GELU(x))" and does not name the formula. Two independent users that must preserve
semantics treat the epilogue as the tanh approximation
0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))):
  * PyTorch (aten/src/ATen/native/cuda/Blas.cpp, addmm_out_cuda_impl): when it cannot use the
    cuBLASLt GELU epilogue it applies ``at::gelu_(result, "tanh")`` instead ("manually performing
    a post-GELU because we weren't able to use the GELU epilogue");
  * XLA (xla/service/gpu/transforms/gemm_rewriter.cc): only the tanh-approximation pattern
    ("approx_gelu(x) = x * cdf(x), cdf(x) = 0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 *
    x**3))") is rewritten into the cuBLASLt GELU / BIAS_GELU epilogue.
Hence ``GELU_FORM = "tanh"``, and the separate bias_act kernel uses the same formula. The two
forms differ by up to ~5e-4 in absolute value near |x| ~ 2, far above FP32 GEMM error for
O(1) data, so ``act_reference(x, "gelu", form)`` with both forms tells them apart on the GPU.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import LabError

GELU_FORM = "tanh"  # see the module docstring for the evidence
GELU_SQRT_2_OVER_PI = 0.7978845608028654
GELU_CUBIC = 0.044715

ACTS = ("none", "relu", "gelu")
ACT_CODES = {"none": 0, "relu": 1, "gelu": 2}  # the ACT macro of the fused stages and of bias_act


def check_act(act: str) -> str:
    if act not in ACTS:
        raise LabError(f"activation '{act}' is not one of {', '.join(ACTS)}")
    return act


def act_reference(x: np.ndarray, act: str, gelu_form: str = GELU_FORM) -> np.ndarray:
    """The activation in float64 (``gelu_form`` 'tanh' or 'erf'; 'erf' is slow on large arrays)."""
    x = np.asarray(x, dtype=np.float64)
    if check_act(act) == "none":
        return x.copy()
    if act == "relu":
        return np.maximum(x, 0.0)
    if gelu_form == "tanh":
        return 0.5 * x * (1.0 + np.tanh(GELU_SQRT_2_OVER_PI * (x + GELU_CUBIC * x ** 3)))
    if gelu_form == "erf":
        erf = np.frompyfunc(math.erf, 1, 1)
        return 0.5 * x * (1.0 + np.asarray(erf(x / math.sqrt(2.0)), dtype=np.float64))
    raise LabError(f"GELU form '{gelu_form}' is not 'tanh' or 'erf'")


def reference(a: np.ndarray, b: np.ndarray, c: np.ndarray | None, bias: np.ndarray | None,
              alpha: float, beta: float, act: str, gelu_form: str = GELU_FORM) -> np.ndarray:
    """act(alpha * A @ B + beta * C + bias) in float64 for row-major A (M x K), B (K x N)."""
    out = alpha * (np.asarray(a, np.float64) @ np.asarray(b, np.float64))
    if c is not None and beta != 0.0:
        out += beta * np.asarray(c, np.float64)
    if bias is not None:
        out += np.asarray(bias, np.float64)[None, :]
    return act_reference(out, act, gelu_form)
