"""cuBLASLt epilogue module, checked without a GPU: imports, layout mapping, references, bias_act source."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import ROOT

from sgemm_lab import cublaslt as lt
from sgemm_lab.errors import LabError, ShapeError


def test_module_imports_without_pycuda_or_nvmath():
    code = textwrap.dedent(f"""
        import importlib.abc, sys
        sys.path.insert(0, {str(ROOT / "src")!r})

        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("pycuda", "nvmath"):
                    raise ImportError(f"blocked: {{name}}")
                return None

        sys.meta_path.insert(0, Block())
        import sgemm_lab.cublaslt as m
        assert "pycuda" not in sys.modules and "nvmath" not in sys.modules
        print(m.GELU_FORM, m.bias_act_source().count("bias_act"))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] in ("tanh", "erf")


def test_lt_problem_swaps_to_column_major():
    p = lt.lt_problem(m=128, n=64, k=32, lda=40, ldb=72, ldc=80, ldd=96)
    assert (p.m, p.n, p.k) == (64, 128, 32)
    assert p.a == lt.Layout(rows=64, cols=32, ld=72)     # cuBLASLt's A is our B (N x K, ldb)
    assert p.b == lt.Layout(rows=32, cols=128, ld=40)    # cuBLASLt's B is our A (K x M, lda)
    assert p.c == lt.Layout(rows=64, cols=128, ld=80)
    assert p.d == lt.Layout(rows=64, cols=128, ld=96)
    assert p.bias_len == 64                              # one bias value per column of our D
    assert lt.lt_pointers("A", "B", "C", "D") == ("B", "A", "C", "D")


@pytest.mark.parametrize("bad", [dict(lda=31), dict(ldb=63), dict(ldc=63), dict(ldd=1), dict(k=0)])
def test_lt_problem_rejects_short_leading_dimensions(bad):
    args = dict(m=128, n=64, k=32, lda=32, ldb=64, ldc=64, ldd=64) | bad
    with pytest.raises(ShapeError):
        lt.lt_problem(**args)


def _colmajor(buf, layout):
    """The column-major view cuBLASLt takes of a float32 buffer."""
    return np.lib.stride_tricks.as_strided(buf, shape=(layout.rows, layout.cols),
                                           strides=(4, 4 * layout.ld), writeable=False)


@pytest.mark.parametrize("act", lt.ACTS)
@pytest.mark.parametrize("with_bias", [False, True])
def test_column_major_semantics_give_the_row_major_result(act, with_bias):
    """Emulate what cublasLtMatmul computes on the swapped problem (bias broadcast along the rows
    of its D, i.e. added to each of its columns) and compare with the row-major definition."""
    m, n, k = 5, 7, 3
    lda, ldb, ldc, ldd = k + 2, n + 1, n + 3, n + 4  # padded, so every ld matters
    rng = np.random.default_rng(0)
    a_buf = rng.uniform(-1, 1, m * lda).astype(np.float32)
    b_buf = rng.uniform(-1, 1, k * ldb).astype(np.float32)
    c_buf = rng.uniform(-1, 1, m * ldc).astype(np.float32)
    bias = rng.uniform(-1, 1, n).astype(np.float32) if with_bias else None
    alpha, beta = 1.5, -0.5

    p = lt.lt_problem(m, n, k, lda, ldb, ldc, ldd)
    lt_a, lt_b, lt_c, _ = lt.lt_pointers(a_buf, b_buf, c_buf, None)
    acc = alpha * (_colmajor(lt_a, p.a).astype(np.float64) @ _colmajor(lt_b, p.b)) + beta * _colmajor(lt_c, p.c)
    if bias is not None:
        assert bias.shape == (p.bias_len,)
        acc = acc + bias.astype(np.float64)[:, None]  # length = rows of cuBLASLt's D
    d_buf = np.full(m * ldd, np.nan, np.float32)
    np.lib.stride_tricks.as_strided(d_buf, shape=(p.d.rows, p.d.cols), strides=(4, 4 * p.d.ld))[:] = \
        lt.act_reference(acc, act)

    def rows(buf, r, c, ld):
        return buf.reshape(r, ld)[:, :c]

    want = lt.reference(rows(a_buf, m, k, lda), rows(b_buf, k, n, ldb), rows(c_buf, m, n, ldc),
                        bias, alpha, beta, act)
    got = rows(d_buf, m, n, ldd)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert np.isnan(d_buf.reshape(m, ldd)[:, n:]).all()  # the padding of D is never written


def test_epilogue_names_cover_act_and_bias():
    assert {(a, b): lt.epilogue_name(a, b) for a in lt.ACTS for b in (False, True)} == {
        ("none", False): "DEFAULT", ("none", True): "BIAS", ("relu", False): "RELU",
        ("relu", True): "RELU_BIAS", ("gelu", False): "GELU", ("gelu", True): "GELU_BIAS"}
    with pytest.raises(LabError):
        lt.epilogue_name("silu", False)


def test_strict_fp32_impl_flags():
    fma_fp32 = lt.IMPL_OP_TYPE_FMA | (0x02 << 8) | lt.IMPL_INPUT_TYPE_32F
    hmma_tf32 = 0x02 | (0x02 << 8) | (0x04 << 16)
    hmma_bf16 = 0x02 | (0x02 << 8) | (0x02 << 16)
    assert lt.is_strict_fp32_impl(fma_fp32)
    assert lt.is_strict_fp32_impl(0)
    assert not lt.is_strict_fp32_impl(hmma_tf32)
    assert not lt.is_strict_fp32_impl(hmma_bf16)
    assert lt.STRICT_FP32_IMPL_MASK & fma_fp32 == fma_fp32
    assert lt.STRICT_FP32_IMPL_MASK < 2 ** 64


def test_gelu_forms_differ_and_match_known_values():
    x = np.array([-3.0, -1.0, 0.0, 1.0, 2.0])
    tanh = lt.act_reference(x, "gelu", "tanh")
    erf = lt.act_reference(x, "gelu", "erf")
    np.testing.assert_allclose(erf[3], 0.8413447460685429, rtol=1e-12)  # x * Phi(x) at x = 1
    np.testing.assert_allclose(tanh[3], 0.8411919906082768, rtol=1e-12)
    assert np.abs(tanh - erf).max() > 1e-4  # large enough to tell the forms apart on the GPU
    assert lt.GELU_FORM in ("tanh", "erf")
    np.testing.assert_array_equal(lt.act_reference(x, "relu"), np.maximum(x, 0))


def test_bias_act_source_and_launch_shape():
    src = lt.bias_act_source()
    assert 'extern "C" __global__ void bias_act(int M, int N, const float* __restrict__ bias, float* D, int ldd)' in src
    assert "0.7978845608028654f" in src and "0.044715f" in src and "tanhf" in src
    assert lt.ACT_CODES == {"none": 0, "relu": 1, "gelu": 2}
    assert lt.bias_act_blocks(1, 1) == 1
    assert lt.bias_act_blocks(16, 16) == 1
    assert lt.bias_act_blocks(16, 17) == 2
    assert lt.bias_act_blocks(4096, 4096) == 132 * 16


@pytest.mark.parametrize("m, n, blocks", [(5, 7, 1), (3, 300, 1), (50, 3, 2), (37, 129, 3), (1, 1000, 2)])
def test_bias_act_index_walk_visits_each_element_once(m, n, blocks):
    """The kernel's division-free (row, col) stepping, replayed in Python."""
    threads = lt.BIAS_ACT_THREADS
    stride = blocks * threads
    step_rows, step_cols = divmod(stride, n)
    seen = np.zeros((m, n), np.int64)
    for first in range(stride):
        row, col = divmod(first, n)
        while row < m:
            seen[row, col] += 1
            col += step_cols
            row += step_rows
            if col >= n:
                col -= n
                row += 1
    assert (seen == 1).all()


@pytest.mark.parametrize("act", lt.ACTS)
def test_bias_act_compiles_for_sm90(nvcc, tmp_path, act):
    code = lt.ACT_CODES[act]
    src = tmp_path / "bias_act.cu"
    src.write_text(lt.bias_act_source())
    cubin = tmp_path / f"bias_act_{code}.cubin"
    out = subprocess.run([nvcc, "-cubin", "-arch=sm_90", "-O3", f"-DACT={code}", "-o", str(cubin), str(src)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert b"bias_act" in cubin.read_bytes()  # unmangled entry point (extern "C")


def test_bias_act_rejects_unknown_act(nvcc, tmp_path):
    src = tmp_path / "bias_act.cu"
    src.write_text(lt.bias_act_source())
    out = subprocess.run([nvcc, "-cubin", "-arch=sm_90", "-DACT=3", "-o", str(tmp_path / "x.cubin"), str(src)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode != 0 and "ACT must be" in out.stderr
