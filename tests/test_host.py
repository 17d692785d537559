"""Host (CPU) stages and the NumPy baseline run for real here: compiled with cc, verified like GPU stages."""

import shutil

import numpy as np
import pytest

from sgemm_lab.config.records import Shape
from sgemm_lab.errors import CompileError
from sgemm_lab.gpu import host
from sgemm_lab.measure import runners


@pytest.fixture
def host_specs(lab):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    return [k for k in lab.kernels if k.backend == "host"]


@pytest.mark.parametrize("shape", [Shape(m=64, n=48, k=80), Shape(m=1, n=7, k=3), Shape(m=33, n=1, k=65)])
def test_host_stages_verify(lab, host_specs, tmp_path, shape):
    assert host_specs, "the default config has host stages"
    for spec in host_specs:
        lib, cmd, _ = host.compile_shared(spec, lab.cpu.cflags)
        (tmp_path / f"{spec.id}.so").write_bytes(lib)
        runner = runners.make_runner(lab, spec.id, spec, tmp_path / f"{spec.id}.so")
        rows = runner.check(shape, seed=11)
        assert [r["mode"] for r in rows] == ["beta", "beta0_poisoned", "alpha0"]
        assert all(r["passed"] for r in rows), rows


def test_numpy_baseline_verifies_and_times(lab):
    runner = runners.make_runner(lab, "numpy", None, None)
    assert all(r["passed"] for r in runner.check(Shape(m=40, n=30, k=20), seed=3))
    row = runner.bench(Shape(m=64, n=64, k=64), 5, runners.TimingSettings(warmup_ms=1, target_ms=1, min_reps=3,
                                                                          max_reps=5))
    assert row["verified"] and row["reps"] >= lab.cpu.min_reps and row["tflops"] > 0
    assert row["min_ms"] <= row["median_ms"] <= row["max_ms"]
    assert "CPU library limited" in runner.skip_reason(Shape(m=4096, n=64, k=64))


def test_a_wrong_host_kernel_is_caught(lab, tmp_path, monkeypatch):
    """A plausible bug (alpha applied to beta*C too) fails verification."""
    from sgemm_lab.config import records

    src = tmp_path / "kernels"
    src.mkdir()
    (src / "00_bad.c").write_text(
        "void bad(int M, int N, int K, float alpha, const float* A, const float* B, float beta, float* C) {\n"
        "  for (int i = 0; i < M; ++i) for (int j = 0; j < N; ++j) { float s = 0;\n"
        "    for (int k = 0; k < K; ++k) s += A[i*K+k] * B[k*N+j];\n"
        "    C[i*N+j] = alpha * (s + (beta == 0 ? 0 : beta * C[i*N+j])); } }\n")
    monkeypatch.setattr(records, "KERNEL_DIR", src)
    spec = records.KernelSpec(id="00_bad", title="bad", source="00_bad.c", entry="bad", geometry="host",
                             backend="host", shapes="any", max_dim=1024)
    lib, _, _ = host.compile_shared(spec, lab.cpu.cflags)
    (tmp_path / "bad.so").write_bytes(lib)
    rows = runners.make_runner(lab, spec.id, spec, tmp_path / "bad.so").check(Shape(m=32, n=32, k=32), seed=1)
    assert not rows[0]["passed"] and "relative error" in rows[0]["reason"]
    assert rows[1]["passed"]  # beta = 0: the bug is invisible, which is why both runs exist


def test_host_compile_errors_are_one_line(lab, tmp_path, monkeypatch):
    from sgemm_lab.config import records

    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    (tmp_path / "00_x.c").write_text("void f( {\n")
    monkeypatch.setattr(records, "KERNEL_DIR", tmp_path)
    spec = records.KernelSpec(id="00_x", title="x", source="00_x.c", entry="f", geometry="host", backend="host")
    with pytest.raises(CompileError) as err:
        host.compile_shared(spec, lab.cpu.cflags)
    assert str(err.value).startswith("kernel 00_x: C compiler failed:") and "\n" not in str(err.value)
    assert "error" in err.value.args[1]


def test_host_launcher_rejects_wrong_arrays(lab, host_specs, tmp_path):
    spec = host_specs[0]
    lib, _, _ = host.compile_shared(spec, lab.cpu.cflags)
    (tmp_path / "h.so").write_bytes(lib)
    launch = host.HostLauncher(spec, tmp_path / "h.so")
    a = np.ones((4, 4), np.float64)
    with pytest.raises(ValueError, match="float32"):
        launch(Shape(m=4, n=4, k=4), 1.0, a, a, 0.0, a)


def test_a_point_that_would_not_fit_is_skipped_before_its_inputs_are_drawn(lab, monkeypatch):
    """The check's host memory is weighed before any input is drawn: the row says bytes needed and free."""
    from sgemm_lab.config import footprint
    from sgemm_lab.results import verify
    from sgemm_lab.pipeline import points

    monkeypatch.setattr(footprint, "host_available_bytes", lambda: 2**30)  # 1 GiB free
    drawn = []
    monkeypatch.setattr(verify, "make_problem", lambda *a, **k: drawn.append(a) or pytest.fail("inputs drawn"))
    work = points.point_worker(_unlimited(lab), "numpy", None, None, "check")
    shape = Shape(m=512, n=512, k=512)
    need = footprint.host_check_bytes(Shape(m=8192, n=8192, k=8192))
    assert need > footprint.USABLE * 2**30
    rows = work(((8192, 8192, 8192), 1, "uniform"))
    assert rows[0]["status"] == "skipped" and not drawn
    assert "needs" in rows[0]["reason"] and "host memory, 1.0 GiB free" in rows[0]["reason"]
    assert footprint.too_big(footprint.host_check_bytes(shape), 2**40, "host") is None
    assert footprint.too_big(10, None, "host") is None  # unknown free memory: not refused on a guess


def _unlimited(lab):
    """The run's configuration with the host stages' size limit out of the way."""
    import yaml
    from conftest import ROOT

    from sgemm_lab.config import load as cfgmod

    raw = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    raw["cpu"] = dict(raw.get("cpu", {}), max_dim=100000)  # the size limit is not what skips it here
    return cfgmod.from_dict(raw)
