"""cuBLASLt epilogue module, checked without a GPU: imports, layout mapping, references, bias_act source."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import ROOT

from sgemm_lab.epilogue import cublaslt as lt
from sgemm_lab.epilogue import cublaslt_plan as plan
from sgemm_lab.epilogue import definition as em
from sgemm_lab.epilogue import unfused
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
        import sgemm_lab.epilogue.cublaslt
        import sgemm_lab.epilogue.definition as em
        import sgemm_lab.epilogue.unfused as un
        assert "pycuda" not in sys.modules and "nvmath" not in sys.modules
        print(em.GELU_FORM, un.bias_act_source().count("bias_act"))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] in ("tanh", "erf")


def test_lt_problem_swaps_to_column_major():
    p = plan.lt_problem(m=128, n=64, k=32, lda=40, ldb=72, ldc=80, ldd=96)
    assert (p.m, p.n, p.k) == (64, 128, 32)
    assert p.a == plan.Layout(rows=64, cols=32, ld=72)     # cuBLASLt's A is our B (N x K, ldb)
    assert p.b == plan.Layout(rows=32, cols=128, ld=40)    # cuBLASLt's B is our A (K x M, lda)
    assert p.c == plan.Layout(rows=64, cols=128, ld=80)
    assert p.d == plan.Layout(rows=64, cols=128, ld=96)
    assert p.bias_len == 64                              # one bias value per column of our D
    assert plan.lt_pointers("A", "B", "C", "D") == ("B", "A", "C", "D")


@pytest.mark.parametrize("bad", [dict(lda=31), dict(ldb=63), dict(ldc=63), dict(ldd=1), dict(k=0)])
def test_lt_problem_rejects_short_leading_dimensions(bad):
    args = dict(m=128, n=64, k=32, lda=32, ldb=64, ldc=64, ldd=64) | bad
    with pytest.raises(ShapeError):
        plan.lt_problem(**args)


def _colmajor(buf, layout):
    """The column-major view cuBLASLt takes of a float32 buffer."""
    return np.lib.stride_tricks.as_strided(buf, shape=(layout.rows, layout.cols),
                                           strides=(4, 4 * layout.ld), writeable=False)


@pytest.mark.parametrize("act", em.ACTS)
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

    p = plan.lt_problem(m, n, k, lda, ldb, ldc, ldd)
    lt_a, lt_b, lt_c, _ = plan.lt_pointers(a_buf, b_buf, c_buf, None)
    acc = alpha * (_colmajor(lt_a, p.a).astype(np.float64) @ _colmajor(lt_b, p.b)) + beta * _colmajor(lt_c, p.c)
    if bias is not None:
        assert bias.shape == (p.bias_len,)
        acc = acc + bias.astype(np.float64)[:, None]  # length = rows of cuBLASLt's D
    d_buf = np.full(m * ldd, np.nan, np.float32)
    np.lib.stride_tricks.as_strided(d_buf, shape=(p.d.rows, p.d.cols), strides=(4, 4 * p.d.ld))[:] = \
        em.act_reference(acc, act)

    def rows(buf, r, c, ld):
        return buf.reshape(r, ld)[:, :c]

    want = em.reference(rows(a_buf, m, k, lda), rows(b_buf, k, n, ldb), rows(c_buf, m, n, ldc),
                        bias, alpha, beta, act)
    got = rows(d_buf, m, n, ldd)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert np.isnan(d_buf.reshape(m, ldd)[:, n:]).all()  # the padding of D is never written


def test_epilogue_names_cover_act_and_bias():
    assert {(a, b): plan.epilogue_name(a, b) for a in em.ACTS for b in (False, True)} == {
        ("none", False): "DEFAULT", ("none", True): "BIAS", ("relu", False): "RELU",
        ("relu", True): "RELU_BIAS", ("gelu", False): "GELU", ("gelu", True): "GELU_BIAS"}
    with pytest.raises(LabError):
        plan.epilogue_name("silu", False)


def test_strict_fp32_impl_flags():
    fma_fp32 = plan.IMPL_OP_TYPE_FMA | (0x02 << 8) | plan.IMPL_INPUT_TYPE_32F
    hmma_tf32 = 0x02 | (0x02 << 8) | (0x04 << 16)
    hmma_bf16 = 0x02 | (0x02 << 8) | (0x02 << 16)
    assert plan.is_strict_fp32_impl(fma_fp32)
    assert plan.is_strict_fp32_impl(0)
    assert not plan.is_strict_fp32_impl(hmma_tf32)
    assert not plan.is_strict_fp32_impl(hmma_bf16)
    assert plan.STRICT_FP32_IMPL_MASK & fma_fp32 == fma_fp32
    assert plan.STRICT_FP32_IMPL_MASK < 2 ** 64


def test_gelu_forms_differ_and_match_known_values():
    x = np.array([-3.0, -1.0, 0.0, 1.0, 2.0])
    tanh = em.act_reference(x, "gelu", "tanh")
    erf = em.act_reference(x, "gelu", "erf")
    np.testing.assert_allclose(erf[3], 0.8413447460685429, rtol=1e-12)  # x * Phi(x) at x = 1
    np.testing.assert_allclose(tanh[3], 0.8411919906082768, rtol=1e-12)
    assert np.abs(tanh - erf).max() > 1e-4  # large enough to tell the forms apart on the GPU
    assert em.GELU_FORM in ("tanh", "erf")
    np.testing.assert_array_equal(em.act_reference(x, "relu"), np.maximum(x, 0))


def test_bias_act_source_and_launch_shape():
    src = unfused.bias_act_source()
    assert 'extern "C" __global__ void bias_act(int M, int N, const float* __restrict__ bias, float* D, int ldd)' in src
    assert "0.7978845608028654f" in src and "0.044715f" in src and "tanhf" in src
    assert em.ACT_CODES == {"none": 0, "relu": 1, "gelu": 2}
    assert unfused.bias_act_blocks(1, 1) == 1
    assert unfused.bias_act_blocks(16, 16) == 1
    assert unfused.bias_act_blocks(16, 17) == 2
    assert unfused.bias_act_blocks(4096, 4096) == 132 * 16


@pytest.mark.parametrize("m, n, blocks", [(5, 7, 1), (3, 300, 1), (50, 3, 2), (37, 129, 3), (1, 1000, 2)])
def test_bias_act_index_walk_visits_each_element_once(m, n, blocks):
    """The kernel's division-free (row, col) stepping, replayed in Python."""
    threads = unfused.BIAS_ACT_THREADS
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


@pytest.mark.parametrize("act", em.ACTS)
def test_bias_act_compiles_for_sm90(nvcc, tmp_path, act):
    code = em.ACT_CODES[act]
    src = tmp_path / "bias_act.cu"
    src.write_text(unfused.bias_act_source())
    cubin = tmp_path / f"bias_act_{code}.cubin"
    out = subprocess.run([nvcc, "-cubin", "-arch=sm_90", "-O3", f"-DACT={code}", "-o", str(cubin), str(src)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert b"bias_act" in cubin.read_bytes()  # unmangled entry point (extern "C")


def test_bias_act_rejects_unknown_act(nvcc, tmp_path):
    src = tmp_path / "bias_act.cu"
    src.write_text(unfused.bias_act_source())
    out = subprocess.run([nvcc, "-cubin", "-arch=sm_90", "-DACT=3", "-o", str(tmp_path / "x.cubin"), str(src)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode != 0 and "ACT must be" in out.stderr


# --------------------------------------------------------------------------------------------
# Fake nvmath / PyCUDA: the call sequence and argument order of the GPU classes, checked on the
# CPU against a stand-in written from the nvmath-python 1.0.0 binding signatures
# (cublasLt.matmul(handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo,
# workspace, workspace_size, stream), matmul_algo_get_heuristic(handle, desc, Adesc, Bdesc,
# Cdesc, Ddesc, pref, requested, results_ptr, count_ptr), *_set_attribute(obj, attr, buf, size),
# *_get_attribute(obj, attr, buf, size, size_written_ptr)). It cannot prove the real library
# behaves the same; it does catch slips in this module's own Python.
import ctypes  # noqa: E402
import enum  # noqa: E402
import types  # noqa: E402

HEURISTIC_DTYPE = np.dtype([("algo", [("data", np.uint64, (8,))]), ("workspace_size", np.uint64),
                            ("state", np.int32), ("waves_count", np.float32), ("reserved", np.int32, (4,))])
FMA_FP32 = 0x01 | (0x02 << 8) | (0x08 << 16)
HMMA_TF32 = 0x02 | (0x02 << 8) | (0x04 << 16)


def _view(ptr, dtype, count=1):
    dtype = np.dtype(dtype)
    raw = (ctypes.c_char * (dtype.itemsize * count)).from_address(ptr)
    return np.ndarray((count,), dtype=dtype, buffer=raw)


class FakeLtError(Exception):
    pass


def _fake_lt(rec):
    lt = types.ModuleType("nvmath.bindings.cublasLt")
    lt.cuBLASLtError = FakeLtError
    lt.MatmulDescAttribute = enum.IntEnum("MatmulDescAttribute", dict(
        COMPUTE_TYPE=0, SCALE_TYPE=1, POINTER_MODE=2, TRANSA=3, TRANSB=4, EPILOGUE=7, BIAS_POINTER=8,
        BIAS_DATA_TYPE=26))
    lt.MatmulPreferenceAttribute = enum.IntEnum("MatmulPreferenceAttribute", dict(
        MAX_WORKSPACE_BYTES=1, MIN_ALIGNMENT_A_BYTES=5, MIN_ALIGNMENT_B_BYTES=6, MIN_ALIGNMENT_C_BYTES=7,
        MIN_ALIGNMENT_D_BYTES=8, IMPL_MASK=12))
    lt.MatmulAlgoCapAttribute = enum.IntEnum("MatmulAlgoCapAttribute", dict(NUMERICAL_IMPL_FLAGS=15))
    lt.MatmulAlgoConfigAttribute = enum.IntEnum("MatmulAlgoConfigAttribute", dict(
        ID=0, TILE_ID=1, SPLITK_NUM=2, STAGES_ID=6))
    lt.MatmulTile = enum.IntEnum("MatmulTile", dict(UNDEFINED=0, TILE_128x128=20))
    lt.MatmulStages = enum.IntEnum("MatmulStages", dict(UNDEFINED=0))
    lt.PointerMode = enum.IntEnum("PointerMode", dict(HOST=0, DEVICE=1))
    lt.Epilogue = enum.IntEnum("Epilogue", dict(DEFAULT=1, RELU=2, BIAS=4, RELU_BIAS=6, GELU=32, GELU_BIAS=36))
    lt.matmul_heuristic_result_dtype = HEURISTIC_DTYPE
    desc_types = {0: np.int32, 1: np.int32, 2: np.int32, 3: np.int32, 4: np.int32, 7: np.uint32,
                  8: np.int64, 26: np.int32}
    pref_types = {1: np.uint64, 5: np.uint32, 6: np.uint32, 7: np.uint32, 8: np.uint32, 12: np.uint64}
    lt.get_matmul_desc_attribute_dtype = lambda attr: desc_types[int(attr)]
    lt.get_matmul_preference_attribute_dtype = lambda attr: pref_types[int(attr)]
    lt.get_matmul_algo_cap_attribute_dtype = lambda attr: np.uint64
    lt.get_matmul_algo_config_attribute_dtype = lambda attr: np.int32 if int(attr) == 0 else np.uint32
    handles = iter(range(1000, 100000, 8))

    def new(kind, *args):
        h = next(handles)
        rec.live[h] = (kind, args)
        return h

    def destroy(kind):
        def fn(h):
            assert rec.live.pop(h)[0] == kind
        return fn

    lt.get_version = lambda: 130100
    lt.create = lambda: new("handle")
    lt.destroy = destroy("handle")

    def desc_create(compute, scale):
        h = new("desc")
        rec.attrs[h] = {0: compute, 1: scale, 2: 0, 3: 0, 4: 0, 7: 1}
        return h

    lt.matmul_desc_create = desc_create
    lt.matmul_desc_destroy = destroy("desc")

    def setter(obj, attr, buf, size):
        dt = np.dtype((desc_types if rec.live[obj][0] == "desc" else pref_types)[attr])
        assert size == dt.itemsize
        rec.attrs.setdefault(obj, {})[attr] = int(_view(buf, dt)[0])

    def getter(obj, attr, buf, size, written):
        dt = np.dtype(desc_types[attr])
        assert size == dt.itemsize
        _view(buf, dt)[0] = rec.attrs[obj][attr]
        _view(written, np.uint64)[0] = size

    lt.matmul_desc_set_attribute = setter
    lt.matmul_desc_get_attribute = getter
    lt.matmul_preference_create = lambda: new("pref")
    lt.matmul_preference_destroy = destroy("pref")
    lt.matmul_preference_set_attribute = setter
    lt.matrix_layout_create = lambda dtype, rows, cols, ld: new("layout", dtype, rows, cols, ld)
    lt.matrix_layout_destroy = destroy("layout")

    def heuristic(handle, desc, a, b, c, d, pref, requested, results, count):
        rec.heuristic_calls.append(dict(layouts=[rec.live[x][1] for x in (a, b, c, d)],
                                        mask=rec.attrs[pref].get(12), bias=rec.attrs[desc].get(8)))
        flags = rec.offer(rec.attrs[pref].get(12))
        if not flags:
            raise FakeLtError("CUBLAS_STATUS_NOT_SUPPORTED")
        out = _view(results, HEURISTIC_DTYPE, requested)
        for i, _ in enumerate(flags[:requested]):
            out[i]["algo"]["data"][0] = 100 + i
            out[i]["workspace_size"] = 4096 * (i + 1)
            out[i]["waves_count"] = 0.5
        _view(count, np.int32)[0] = min(len(flags), requested)

    lt.matmul_algo_get_heuristic = heuristic

    def cap(algo, attr, buf, size, written):
        idx = int(_view(algo, np.uint64)[0]) - 100
        _view(buf, np.uint64)[0] = rec.offer(None)[idx]

    def config(algo, attr, buf, size, written):
        dt = np.int32 if int(attr) == 0 else np.uint32
        _view(buf, dt)[0] = int(_view(algo, np.uint64)[0]) if int(attr) == 0 else (20 if int(attr) == 1 else 0)

    lt.matmul_algo_cap_get_attribute = cap
    lt.matmul_algo_config_get_attribute = config

    def matmul(*args):
        assert len(args) == 16
        (handle, desc, alpha, a, adesc, b, bdesc, beta, c, cdesc, d, ddesc, algo, ws, ws_size, stream) = args
        rec.matmuls.append(dict(
            alpha=float(_view(alpha, np.float32)[0]), beta=float(_view(beta, np.float32)[0]),
            a=a, b=b, c=c, d=d, layouts=[rec.live[x][1] for x in (adesc, bdesc, cdesc, ddesc)],
            algo=int(_view(algo, np.uint64)[0]), ws=ws, ws_size=ws_size, stream=stream,
            bias=rec.attrs[desc].get(8), epilogue=rec.attrs[desc][7]))

    lt.matmul = matmul
    return lt


class FakeAlloc:
    def __init__(self, rec, addr, size):
        self.rec, self.addr, self.size = rec, addr, size
        rec.allocs[addr] = size

    def __int__(self):
        return self.addr

    def free(self):
        del self.rec.allocs[self.addr]


class FakeStream:
    handle = 0x5EED

    def synchronize(self):
        pass


@pytest.fixture
def fake(monkeypatch):
    from sgemm_lab.gpu import device

    rec = types.SimpleNamespace(live={}, attrs={}, allocs={}, heuristic_calls=[], matmuls=[], launches=[],
                                next_addr=[0x7000_0000], offer=lambda mask: [FMA_FP32, FMA_FP32])

    def mem_alloc(size):
        addr = rec.next_addr[0]
        rec.next_addr[0] += (size + 255) // 256 * 256 + 256
        return FakeAlloc(rec, addr, size)

    cuda = types.SimpleNamespace(mem_alloc=mem_alloc, CompileError=RuntimeError,
                                 Context=types.SimpleNamespace(synchronize=lambda: None))
    monkeypatch.setattr(device, "driver", lambda: cuda)
    nvmath = types.ModuleType("nvmath")
    nvmath.CudaDataType = enum.IntEnum("CudaDataType", dict(CUDA_R_32F=0, CUDA_R_64F=1))
    bindings = types.ModuleType("nvmath.bindings")
    cublas = types.ModuleType("nvmath.bindings.cublas")
    cublas.ComputeType = enum.IntEnum("ComputeType", dict(COMPUTE_32F=68, COMPUTE_32F_FAST_TF32=77))
    cublas.Operation = enum.IntEnum("Operation", dict(N=0, T=1))
    bindings.cublas, bindings.cublasLt, nvmath.bindings = cublas, _fake_lt(rec), bindings
    for name, mod in (("nvmath", nvmath), ("nvmath.bindings", bindings),
                      ("nvmath.bindings.cublas", cublas), ("nvmath.bindings.cublasLt", bindings.cublasLt)):
        monkeypatch.setitem(sys.modules, name, mod)
    for var in plan.NON_STRICT_ENV:
        monkeypatch.delenv(var, raising=False)
    return rec


def test_epilogue_class_drives_cublaslt_in_the_swapped_layout(fake):
    m, n, k = 96, 64, 32
    op = lt.CublasLtEpilogue(FakeStream(), m=m, n=n, k=k, act="gelu", bias=True, workspace_bytes=1 << 20)
    assert op.version == 130100 and op.compute_type == "COMPUTE_32F" and op.epilogue == "GELU_BIAS"
    (desc,) = [h for h, (kind, _) in fake.live.items() if kind == "desc"]
    attrs = fake.attrs[desc]
    assert (attrs[0], attrs[1], attrs[3], attrs[4], attrs[2], attrs[7], attrs[26]) == (68, 0, 0, 0, 0, 36, 0)
    (call,) = fake.heuristic_calls
    assert call["layouts"] == [(0, n, k, n), (0, k, m, k), (0, n, m, n), (0, n, m, n)]  # packed lds
    assert call["mask"] == plan.STRICT_FP32_IMPL_MASK and call["bias"] != 0
    assert op.algo_info["algo_id"] == 100 and op.algo_info["workspace_bytes"] == 4096
    assert op.algo_info["tile"] == "TILE_128x128" and op.algo_info["impl_flags"] == hex(FMA_FP32)

    A, B, C, D, BIAS = 0x1000_0000, 0x2000_0000, 0x3000_0000, 0x4000_0000, 0x5000_0000
    op(1.25, A, k, B, n, 0.5, C, n, BIAS, D, n)
    mm = fake.matmuls[-1]
    assert (mm["a"], mm["b"], mm["c"], mm["d"]) == (B, A, C, D)  # cuBLASLt's A is our B
    assert mm["layouts"] == call["layouts"] and (mm["alpha"], mm["beta"]) == (1.25, 0.5)
    assert mm["bias"] == BIAS and mm["epilogue"] == 36 and mm["algo"] == 100
    assert mm["ws"] in fake.allocs and mm["ws_size"] == 1 << 20 and mm["stream"] == FakeStream.handle

    op(1.0, A, k + 64, B, n, 0.0, None, 0, BIAS, D, n + 64)  # new lds: planned once, C is D
    assert len(fake.heuristic_calls) == 2
    assert fake.heuristic_calls[-1]["layouts"] == [(0, n, k, n), (0, k, m, k + 64), (0, n, m, n + 64),
                                                   (0, n, m, n + 64)]
    assert fake.matmuls[-1]["c"] == D
    op(1.0, A, k + 64, B, n, 0.0, None, 0, BIAS, D, n + 64)
    assert len(fake.heuristic_calls) == 2

    with pytest.raises(LabError, match="aligned"):
        op(1.0, A + 4, k, B, n, 0.0, C, n, BIAS, D, n)
    with pytest.raises(LabError, match="bias"):
        op(1.0, A, k, B, n, 0.0, C, n, None, D, n)
    op.close()
    op.close()
    assert fake.live == {} and fake.allocs == {}


def test_epilogue_class_skips_tensor_core_algorithms(fake):
    fake.offer = lambda mask: [HMMA_TF32, FMA_FP32]
    op = lt.CublasLtEpilogue(FakeStream(), m=64, n=64, k=64, act="relu", bias=False)
    assert op.algo_info["rank"] == 1 and op.algo_info["algo_id"] == 101
    op(1.0, 0x1000, 64, 0x2000, 64, 0.0, 0x3000, 64, None, 0x4000, 64)
    assert fake.matmuls[-1]["algo"] == 101 and fake.matmuls[-1]["bias"] is None
    op.close()
    assert fake.live == {} and fake.allocs == {}


def test_epilogue_class_reports_no_algorithm_and_cleans_up(fake):
    fake.offer = lambda mask: []
    with pytest.raises(LabError, match="no algorithm"):
        lt.CublasLtEpilogue(FakeStream(), m=64, n=64, k=64, act="none", bias=True)
    assert len(fake.heuristic_calls) == 2 and fake.heuristic_calls[1]["mask"] == plan.IMPL_ALL
    assert fake.live == {} and fake.allocs == {}

    fake.offer = lambda mask: [HMMA_TF32]
    with pytest.raises(LabError, match="strict FP32"):
        lt.CublasLtEpilogue(FakeStream(), m=64, n=64, k=64, act="none", bias=False)
    assert fake.live == {} and fake.allocs == {}


def test_epilogue_class_refuses_tf32_override(fake, monkeypatch):
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "1")
    with pytest.raises(LabError, match="NVIDIA_TF32_OVERRIDE"):
        lt.CublasLtEpilogue(FakeStream(), m=64, n=64, k=64, act="none", bias=False)
    assert fake.live == {} and fake.allocs == {}


def test_cublas_plus_bias_act_compiles_and_launches(fake, monkeypatch):
    from sgemm_lab.config.records import Shape
    from sgemm_lab.gpu import launch

    class FakeLauncher:
        version, math_mode = 130100, "DEFAULT_MATH"

        def __init__(self, stream):
            fake.launches.append(("cublas_init", stream))

        def __call__(self, shape, alpha, a, b, beta, c, stream):
            fake.launches.append(("sgemm", shape, alpha, a, b, beta, c))

        def close(self):
            fake.launches.append(("cublas_close",))

    class FakeFunc:
        def prepare(self, fmt):
            fake.launches.append(("prepare", fmt))

        def prepared_async_call(self, grid, block, stream, *args):
            fake.launches.append(("bias_act", grid, block, args))

    class FakeModule:
        def __init__(self, src, options, no_extern_c):
            fake.launches.append(("compile", options, no_extern_c, "bias_act" in src))

        def get_function(self, name):
            assert name == "bias_act"
            return FakeFunc()

    compiler = types.ModuleType("pycuda.compiler")
    compiler.SourceModule = FakeModule
    pycuda = types.ModuleType("pycuda")
    pycuda.compiler = compiler
    monkeypatch.setitem(sys.modules, "pycuda", pycuda)
    monkeypatch.setitem(sys.modules, "pycuda.compiler", compiler)
    monkeypatch.setattr(launch, "CublasLauncher", FakeLauncher)

    stream = FakeStream()
    op = unfused.CublasPlusBiasAct(stream, act="gelu")
    assert ("compile", ["-O3", "-DACT=2"], True, True) in fake.launches
    assert ("prepare", "iiPPi") in fake.launches
    shape = Shape(m=4096, n=1000, k=64)
    op(shape, 1.0, 0x100, 0x200, 0.0, 0x300, 0x400, stream)
    assert fake.launches[-2] == ("sgemm", shape, 1.0, 0x100, 0x200, 0.0, 0x300)
    assert fake.launches[-1] == ("bias_act", (132 * 16, 1), (256, 1, 1), (4096, 1000, 0x400, 0x300, 1000))
    op(Shape(m=10, n=10, k=8), 1.0, 0x100, 0x200, 0.0, 0x300, None, stream)
    assert fake.launches[-1] == ("bias_act", (1, 1), (256, 1, 1), (10, 10, 0, 0x300, 10))
    with pytest.raises(LabError, match="stream"):
        other = FakeStream()
        other.handle = 1
        op(shape, 1.0, 0x100, 0x200, 0.0, 0x300, None, other)
    op.close()

    plain = unfused.CublasPlusBiasAct(stream, act="none")
    n_before = len(fake.launches)
    plain(shape, 1.0, 0x100, 0x200, 0.0, 0x300, None, stream)
    assert [e[0] for e in fake.launches[n_before:]] == ["sgemm"]  # nothing to add or activate
    plain.close()
