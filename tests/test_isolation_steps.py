"""Isolation and durability through the real steps, with host stages (runs on the CPU, like in CI).

The same supervisor runs GPU stages: a hanging kernel, a crash or a wrong result is one row with a
status, the other points are measured, and the step still writes its complete, atomic output.
"""

import faulthandler
import shutil
import sys

import pandas as pd
import pytest

from sgemm_lab.config import load as cfgmod
from sgemm_lab.config import records
from sgemm_lab.gpu import host
from sgemm_lab.results import io
from sgemm_lab.pipeline import points
from sgemm_lab.pipeline.steps import lock_mode

BAD = r"""
#include <stddef.h>
void good(int M, int N, int K, float alpha, const float* A, const float* B, float beta, float* C) {
  for (int i = 0; i < M; ++i) for (int j = 0; j < N; ++j) { float s = 0;
    for (int k = 0; k < K; ++k) s += A[i*K+k] * B[k*N+j];
    C[i*N+j] = beta == 0 ? alpha * s : alpha * s + beta * C[i*N+j]; } }
/* hangs when M == 7, crashes when M == 9, wrong when M == 11 */
void bad(int M, int N, int K, float alpha, const float* A, const float* B, float beta, float* C) {
  volatile int spin = 1;
  if (M == 7) while (spin) {}
  if (M == 9) { volatile float* p = NULL; *p = 1.0f; }
  good(M, N, K, alpha, A, B, beta, C);
  if (M == 11) C[0] += 1.0f;
}
"""


@pytest.fixture
def setup(tmp_path, monkeypatch):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    kdir = tmp_path / "kernels"
    kdir.mkdir()
    (kdir / "00_bad.c").write_text(BAD)
    monkeypatch.setattr(cfgmod, "KERNEL_DIR", kdir)
    monkeypatch.setattr(records, "KERNEL_DIR", kdir)
    raw = {"watchdog_s": 3, "cpu": {"max_dim": 64, "min_reps": 2, "target_ms": 1},
           "check": {"shapes": [[5, 6, 7], [7, 6, 5], [9, 6, 5], [11, 6, 5], [13, 6, 5]]},
           "bench": {"square": [], "shapes": [[5, 6, 7], [7, 6, 5], [9, 6, 5], [11, 6, 5], [13, 6, 5], [65, 8, 8]],
                     "warmup_ms": 1, "target_ms": 1, "min_reps": 3},
           "kernels": [{"id": "00_bad", "title": "bad", "source": "00_bad.c", "entry": "bad", "backend": "host",
                        "geometry": "host", "shapes": "any"}]}
    cfg = cfgmod.from_dict(raw)
    spec = cfg.kernel("00_bad")
    lib, _, _ = host.compile_shared(spec, cfg.cpu.cflags)
    (tmp_path / "00_bad.bin").write_bytes(lib)
    io.write_json(tmp_path / "00_bad.json", {"kernel": "00_bad", "params": {}})
    monkeypatch.setenv("SGEMM_LAB_KERNELS", str(kdir))  # what the spawned child processes read
    # The stage segfaults on purpose at M == 9, in a forked child that inherits pytest's fault handler,
    # which would print a 50-line "Fatal Python error" dump of the expected crash into the test output.
    handler_was_on = faulthandler.is_enabled()
    faulthandler.disable()
    yield cfg, raw, tmp_path
    if handler_was_on:
        faulthandler.enable(file=sys.__stderr__)


def test_bench_keeps_going_past_hang_crash_and_wrong_result(setup, monkeypatch):
    cfg, raw, tmp = setup
    out = tmp / "bench.csv"
    points.bench(cfg, "00_bad", binary=tmp / "00_bad.bin", record=tmp / "00_bad.json", out=out,
                 gpu=lock_mode("bench", cfg, "00_bad"))
    df = pd.read_csv(out)
    assert list(df.m) == [5, 7, 9, 11, 13, 65]  # one row per configured point, in order
    assert list(df.status) == ["ok", "timeout", "crashed", "failed", "ok", "skipped"]
    assert "watchdog" in df.reason[1] and "exit code" in df.reason[2] and "relative error" in df.reason[3]
    assert list(df.verified) == [True, False, False, False, True, False]
    assert df.tflops[0] > 0 and df.tflops[4] > 0
    assert not list(tmp.glob(".*.tmp"))


def test_check_records_every_failure_mode(setup):
    cfg, raw, tmp = setup
    out = tmp / "check.json"
    points.check(cfg, "00_bad", binary=tmp / "00_bad.bin", record=tmp / "00_bad.json", out=out,
                 gpu=lock_mode("bench", cfg, "00_bad"))
    res = io.read_json(out)
    assert res["status"] == "fail"
    by_m = {}
    for r in res["points"]:
        by_m.setdefault(r["m"], []).append(r["status"])
    assert by_m == {5: ["pass"] * 3, 7: ["timeout"], 9: ["crashed"], 11: ["fail"] * 3, 13: ["pass"] * 3}


def test_bench_rows_keep_the_gpu_that_measured_them(setup, monkeypatch):
    """The device columns a GPU runner adds to each timed point survive into the step's table."""
    from sgemm_lab.pipeline import points

    cfg, raw, tmp = setup
    measured = [dict(kernel="00_bad", m=5, n=6, k=7, status="ok", verified=True, median_ms=0.5, tflops=1e-6,
                     device_index=1, device_uuid="GPU-bbbb"),
                dict(kernel="00_bad", m=13, n=6, k=5, status="ok", verified=True, median_ms=0.5, tflops=1e-6,
                     device_index=0, device_uuid="GPU-aaaa")]
    monkeypatch.setattr(points, "_isolated_points", lambda *a, **kw: measured)
    out = tmp / "bench.csv"
    points.bench(cfg, "00_bad", binary=tmp / "00_bad.bin", record=tmp / "00_bad.json", out=out, gpu=None)
    df = pd.read_csv(out)
    assert list(df.device_index) == [1, 0] and list(df.device_uuid) == ["GPU-bbbb", "GPU-aaaa"]


def test_a_batch_shares_one_child_and_a_bad_stage_ends_only_its_points(setup):
    """points.many (a batch job's check or bench): the stages' points in one supervised child; a hang and a
    crash of one stage end only those points (a fresh child carries on, with the next stage too), each
    stage gets its own table, log and verdict, and a stage whose build failed is not run."""
    cfg, raw, tmp = setup
    raw = dict(raw, kernels=raw["kernels"] + [dict(raw["kernels"][0], id="00_good", entry="good"),
                                              dict(raw["kernels"][0], id="00_unbuilt", entry="good")])
    cfg = cfgmod.from_dict(raw)
    lib, _, _ = host.compile_shared(cfg.kernel("00_good"), cfg.cpu.cflags)
    (tmp / "00_good.bin").write_bytes(lib)
    io.write_json(tmp / "00_good.json", {"kernel": "00_good", "params": {}})
    io.write_json(tmp / "00_unbuilt.json", {"kernel": "00_unbuilt", "status": "failed", "message": "nvcc said no"})
    parts = [points.Part(impl=i, binary=tmp / f"{i}.bin", record=tmp / f"{i}.json", out=tmp / f"{i}.csv",
                         log=tmp / f"{i}.log") for i in ("00_unbuilt", "00_bad", "00_good")]
    got = points.many("bench", cfg, parts, gpu=lock_mode("bench", cfg, "00_bad"))
    assert set(got) == {"00_unbuilt", "00_bad", "00_good"}
    assert type(got["00_unbuilt"][0]).__name__ == "NotRun" and not (tmp / "00_unbuilt.csv").exists()
    assert got["00_good"][0] is None and got["00_bad"][0].status == "failed"
    assert "TIMEOUT at 7x6x5" in got["00_bad"][0].message
    bad, good = pd.read_csv(tmp / "00_bad.csv"), pd.read_csv(tmp / "00_good.csv")
    assert list(bad.status) == ["ok", "timeout", "crashed", "failed", "ok", "skipped"]
    assert list(good.status) == ["ok", "ok", "ok", "ok", "ok", "skipped"] and set(good.kernel) == {"00_good"}
    assert "[bench 00_good]" in (tmp / "00_good.log").read_text()
    assert "00_good" not in (tmp / "00_bad.log").read_text()
    assert all(seconds >= 0 for _, seconds in got.values())
