"""Offline compile of every configured kernel with the harness's own flags (needs nvcc, no GPU)."""

import pytest
from conftest import ROOT, kernel_entry

from sgemm_lab.config import load as cfgmod
from sgemm_lab.config import records
from sgemm_lab.dispatch import choice as dispatch
from sgemm_lab.errors import CompileError
from sgemm_lab.gpu import compile as comp

PTXAS_SAMPLE = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'sgemm_tiled' for 'sm_90'
ptxas info    : Function properties for sgemm_tiled
    256 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 128 registers, used 1 barriers, 8192 bytes smem, 400 bytes cmem[0]
ptxas info    : Compiling entry function 'other' for 'sm_90'
ptxas info    : Function properties for other
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 0 barriers
"""


def test_parse_ptxas_info():
    info = comp.parse_ptxas_info(PTXAS_SAMPLE)
    t = info["sgemm_tiled"]
    assert (t.registers, t.stack_bytes, t.spill_store_bytes, t.spill_load_bytes, t.shared_bytes) == (128, 256, 8, 12, 8192)
    assert t.local_bytes == 256
    assert info["other"].registers == 10 and info["other"].local_bytes == 0


def test_compile_options_are_the_single_source_of_flags(lab):
    k = lab.kernel("04_1d_blocktiling")
    opts = comp.compile_options(k)
    assert opts[:2] == ["-O3", "-lineinfo"]
    assert {"-DBM=64", "-DBN=64", "-DBK=8", "-DTM=8"} <= set(opts)


def compiled_specs(cfg):
    """The stages as the build compiles them: a dispatch stage as each of its candidates."""
    return [c for k in cfg.kernels for c in (dispatch.candidate_specs(cfg, k) if k.dispatched else [k])]


def test_every_configured_kernel_compiles_for_sm90_without_spills(lab, nvcc, tmp_path):
    configs = [lab, cfgmod.load(ROOT / ".test" / "config" / "config.yaml")]
    specs = {k.id: k for c in configs for k in compiled_specs(c)}.values()
    results = comp.compile_check(specs, "sm_90", tmp_path, lab.cpu.cflags)
    errors = [err for _, _, err in results if err]
    assert not errors, "\n".join(errors)
    assert {s.id for s, _, _ in results} == {s.id for s in specs if not s.autotuned}
    for spec, res, _ in results:
        if spec.backend == "host":
            continue
        assert res.registers > 0
        assert res.local_bytes <= spec.max_local_bytes
        assert (tmp_path / f"{spec.id}.log").read_text().startswith(nvcc)


@pytest.mark.parametrize("probe", sorted((ROOT / "tools" / "probes").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_probe_kernel_compiles_for_sm90_without_spills(probe, nvcc, tmp_path):
    """Probe configurations (stages on trial, not yet in the ladder) hold to the same standard."""
    cfg = cfgmod.load(probe)
    results = comp.compile_check(compiled_specs(cfg), "sm_90", tmp_path, cfg.cpu.cflags)
    errors = [err for _, _, err in results if err]
    assert not errors, "\n".join(errors)
    assert all(res.local_bytes <= spec.max_local_bytes for spec, res, _ in results if spec.backend != "host")


def test_every_sweep_point_that_passes_the_filter_compiles(lab, nvcc, tmp_path):
    """What the tile sweep will compile on the GPU compiles here (spills are allowed: the sweep records
    them and the autotuner never picks such a point)."""
    from sgemm_lab.config import geometry
    from sgemm_lab.dispatch import autotune

    failures = []
    specs = []
    for k in lab.swept:
        for p in autotune.sweep_points(k):
            sp = k.with_params(**p)
            if not geometry.violations(sp, max_shared=227 * 1024):
                specs.append(sp)
    import dataclasses

    renamed = [dataclasses.replace(sp, id=f"{sp.id}__{i}") for i, sp in enumerate(specs)]
    for spec, res, err in comp.compile_check(renamed, "sm_90", tmp_path):
        if err and "bytes of local memory per thread" not in err:
            failures.append(f"{spec.id} {dict(spec.params)}: {err}")
    assert not failures, "\n".join(failures)


def _spec_with_source(tmp_path, monkeypatch, text, **over):
    kdir = tmp_path / "kernels"
    kdir.mkdir()
    (kdir / "99_test.cu").write_text(text)
    monkeypatch.setattr(cfgmod, "KERNEL_DIR", kdir)
    monkeypatch.setattr(records, "KERNEL_DIR", kdir)
    monkeypatch.setattr(comp, "KERNEL_DIR", kdir)
    return cfgmod.from_dict({"kernels": [kernel_entry(source="99_test.cu", entry="k", **over)]}).kernels[0]


def test_compile_error_is_one_line_and_log_is_kept(tmp_path, monkeypatch, nvcc):
    spec = _spec_with_source(tmp_path, monkeypatch, 'extern "C" __global__ void k() { this is not cuda; }\n')
    [(_, res, err)] = comp.compile_check([spec], "sm_90", tmp_path / "logs")
    assert res is None and err.startswith("kernel 99_test: nvcc failed:") and "\n" not in err
    assert f"(log: {tmp_path / 'logs' / '99_test.log'})" in err
    assert "error" in (tmp_path / "logs" / "99_test.log").read_text()


def test_local_memory_fails_unless_allowed(tmp_path, monkeypatch, nvcc):
    # a run-time-indexed array lives in local memory
    src = ('extern "C" __global__ void k(int n, float* x) {\n float a[64];\n'
           ' for (int i = 0; i < n; ++i) a[i % 64] = x[i];\n x[0] = a[n % 64];\n}\n')
    spec = _spec_with_source(tmp_path, monkeypatch, src)
    [(_, _, err)] = comp.compile_check([spec], "sm_90", tmp_path / "logs")
    assert err and "bytes of local memory per thread" in err and "config allows 0" in err
    spec_ok = cfgmod.from_dict({"kernels": [kernel_entry(source="99_test.cu", entry="k", max_local_bytes=1024)]}).kernels[0]
    [(_, res, err)] = comp.compile_check([spec_ok], "sm_90", tmp_path / "logs")
    assert err is None and res.local_bytes == 256


def test_missing_entry_point(tmp_path, monkeypatch, nvcc):
    spec = _spec_with_source(tmp_path, monkeypatch, 'extern "C" __global__ void other(float* x) { x[0] = 1; }\n')
    [(_, _, err)] = comp.compile_check([spec], "sm_90", tmp_path / "logs")
    assert "entry 'k' not in 99_test.cu (found: other)" in err


def test_source_hash_changes_with_source(lab):
    k = lab.kernel("01_naive")
    h = comp.source_hash(k)
    assert len(h) == 64 and h == comp.source_hash(k)
    with pytest.raises(CompileError, match="not found"):
        comp.source_hash(records.KernelSpec(id="x", source="gone.cu", entry="e", title="t", geometry="elementwise"))


def test_local_headers_are_inlined_once_and_covered_by_the_hash(tmp_path, monkeypatch, nvcc):
    src = ('#include "util.cuh"\n#include "util.cuh"\n#include <cstdint>\n'
           'extern "C" __global__ void k(float* x) { x[0] = twice(x[0]); }\n')
    spec = _spec_with_source(tmp_path, monkeypatch, src)
    (tmp_path / "kernels" / "util.cuh").write_text("#pragma once\n__device__ float twice(float x) { return 2 * x; }\n")
    text = comp.source_text(spec)
    assert text.count("__device__ float twice") == 1 and "#pragma once" not in text
    assert '#include "util.cuh"' not in text and "#include <cstdint>" in text
    assert '#line 1 "util.cuh"' in text and '#line 2 "99_test.cu"' in text
    [(_, res, err)] = comp.compile_check([spec], "sm_90", tmp_path / "logs")
    assert err is None and res is not None
    before = comp.source_hash(spec)
    (tmp_path / "kernels" / "util.cuh").write_text("#pragma once\n__device__ float twice(float x) { return x + x; }\n")
    assert comp.source_hash(spec) != before  # a header edit makes the reference stale too


def test_compile_errors_in_a_header_name_the_header(tmp_path, monkeypatch, nvcc):
    spec = _spec_with_source(tmp_path, monkeypatch, '#include "bad.cuh"\nextern "C" __global__ void k() {}\n')
    (tmp_path / "kernels" / "bad.cuh").write_text("// fine\n__device__ int oops() { return undefined_name; }\n")
    [(_, _, err)] = comp.compile_check([spec], "sm_90", tmp_path / "logs")
    assert err and "bad.cuh(2)" in (tmp_path / "logs" / "99_test.log").read_text()
