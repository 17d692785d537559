"""A failed stage is a row in the report, never a missing report, and the exit status still tells the truth.

Host (C) stages fail the same ways GPU stages do (a compile error, wrong results), so the whole
workflow runs here on the CPU: Snakemake, the real rules and scripts, a stub environment record in
place of the GPU rule. The GPU half (nvcc errors, an autotuned stage whose only candidate is wrong)
is in tests/gpu.
"""

import shutil
import subprocess
import sys
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml
from conftest import ROOT

from sgemm_lab.pipeline import entry

from sgemm_lab.results import io, outcome

BROKEN_C = "void hostbroken(int M, int N, int K, float alpha, const float* A, const float* B, float beta, float* C) {\n" \
           "    this is not C;\n}\n"
WRONG_C = r"""
void hostwrong(int M, int N, int K, float alpha, const float* A, const float* B, float beta, float* C) {
    for (int i = 0; i < M; ++i) for (int j = 0; j < N; ++j) {
        float s = 0.f;
        for (int k = 0; k < K - 1; ++k) s += A[i * K + k] * B[k * N + j];   /* drops the last k */
        C[i * N + j] = beta == 0.f ? alpha * s : alpha * s + beta * C[i * N + j];
    }
}
"""


def _kernel(kid, source, entry_name):
    return dict(id=kid, title=kid, backend="host", source=source, entry=entry_name, geometry="host", shapes="any")


@pytest.fixture
def failing_lab(tmp_path):
    """A copy of the workflow with one good, one uncompilable and one wrong host stage."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    lab = tmp_path / "lab"
    lab.mkdir()
    for item in ("Snakefile", "workflow", "src", "env"):
        src = ROOT / item
        (shutil.copytree(src, lab / item, ignore=shutil.ignore_patterns("__pycache__", ".venv*"))
         if src.is_dir() else shutil.copy(src, lab / item))
    kdir = lab / "kernels"
    kdir.mkdir()
    shutil.copy(ROOT / "kernels" / "00_hostmult.c", kdir)
    (kdir / "00_broken.c").write_text(BROKEN_C)
    (kdir / "00_wrong.c").write_text(WRONG_C)
    cfg = {"run": "fail", "seed": 7, "watchdog_s": 30, "baseline": {"cublas": False, "numpy": True},
           "check": {"shapes": [[16, 12, 8], [9, 7, 5]]},
           "bench": {"square": [16], "shapes": [], "warmup_ms": 1, "target_ms": 1, "min_reps": 3},
           "cpu": {"max_dim": 64, "min_reps": 2, "target_ms": 1},
           "profile": {"enabled": False}, "sanitize": False, "failure_tests": False,
           "kernels": [_kernel("00_good", "00_hostmult.c", "hostmult1"), _kernel("00_broken", "00_broken.c", "hostbroken"),
                       _kernel("00_wrong", "00_wrong.c", "hostwrong")]}
    (lab / "config").mkdir()
    (lab / "config" / "config.yaml").write_text(yaml.safe_dump(cfg))
    env = lab / "results" / "fail" / "environment.json"  # stands in for the GPU rule
    env.parent.mkdir(parents=True)
    env.write_text('{"gpu": {"arch": "sm_90", "name": "none"}, "git_commit": null}\n')
    return lab


def _snakemake(lab, *args):
    return subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", *args], cwd=lab, capture_output=True,
                          text=True, timeout=900)


def _last_line(proc) -> str:
    return next(ln for ln in reversed(proc.stderr.splitlines()) if ln.strip())


def test_failed_stages_are_reported_and_the_run_exits_non_zero(failing_lab):
    lab = failing_lab
    proc = _snakemake(lab)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-4000:]
    assert "Traceback" not in out
    line = _last_line(proc)
    # the broken stage's build; the wrong stage's check and bench (its timing did not verify)
    assert line.startswith("sgemm-lab: 3 failed steps in run 'fail', 2 not run because of them (build 00_broken: "), line
    assert "check 00_wrong: FAIL at " in line and "bench 00_wrong: NOT VERIFIED at 16x16x16" in line
    assert line.endswith("report: reports/fail/report.md")
    # one console line per failure as it happens, naming the step, the stage and the log
    assert any(ln.startswith("sgemm-lab build 00_broken: ") and "(log: results/fail/logs/build/00_broken.log)" in ln
               for ln in proc.stderr.splitlines())

    report = (lab / "reports" / "fail" / "report.md").read_text()
    failures = report[report.index("## Failures"):report.index("## Ladder")]
    assert "3 steps failed in this run" in failures
    assert "| `00_broken` | build | **failed** |" in failures and "| `00_wrong` | check | **failed** |" in failures
    assert "| `00_broken` | check | **not run** | build failed: " in failures
    assert "`results/fail/logs/build/00_broken.log`" in failures
    ladder = report[report.index("## Ladder"):]
    assert "`00_broken` 00_broken | **build failed** (see Failures)" in ladder
    assert "**FAIL**" in ladder  # 00_wrong's check column
    good = pd.read_csv(lab / "reports" / "fail" / "bench.csv")
    assert good[(good.kernel == "00_good")].status.tolist() == ["ok"]  # the other stages are still timed
    steps = pd.read_csv(lab / "reports" / "fail" / "steps.csv")
    assert set(steps[steps.status == "failed"].kernel) == {"00_broken", "00_wrong"}
    assert (steps.seconds >= 0).all()

    # nothing left to do: the verdict is given again, from the same records
    again = _snakemake(lab)
    assert again.returncode == 1 and _last_line(again) == line
    # the documented escape hatch: same report, exit 0
    relaxed = _snakemake(lab, "--config", "strict=false")
    assert relaxed.returncode == 0, relaxed.stderr[-3000:]
    assert "sgemm-lab (strict: false, exit 0): 3 failed steps" in relaxed.stderr


def test_a_fixed_stage_clears_its_failure(failing_lab):
    lab = failing_lab
    assert _snakemake(lab).returncode == 1
    cfg = yaml.safe_load((lab / "config" / "config.yaml").read_text())
    cfg["kernels"] = [k for k in cfg["kernels"] if k["id"] != "00_wrong"]
    (lab / "config" / "config.yaml").write_text(yaml.safe_dump(cfg))
    (lab / "kernels" / "00_broken.c").write_text((ROOT / "kernels" / "00_hostmult.c").read_text()
                                                 .replace("hostmult1", "hostbroken"))
    proc = _snakemake(lab)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = (lab / "reports" / "fail" / "report.md").read_text()
    assert "\n## Failures\n" not in report and "00_wrong" not in report


def _smk(config, *, kernel, inputs, outputs, log):
    return SimpleNamespace(input=SimpleNamespace(**inputs), output=SimpleNamespace(**outputs), config=config,
                           wildcards=SimpleNamespace(kernel=kernel), log=[str(log)], params=SimpleNamespace())


def test_autotuned_stage_without_a_verified_candidate_is_a_failed_build(raw_config, tmp_path, capsys):
    """The sweep of its only candidate verified nothing: the build says so (a status, not a crash), and
    the steps after it record that they did not run."""
    sweep = tmp_path / "08_warptiling.csv"
    pd.DataFrame([dict(kernel="08_warptiling", m=64, n=64, k=64, params='{"BK": 8}', status="failed", verified=False,
                       within_local_budget=True, tflops=1.0, reason="relative error 1e-1 > tolerance")]).to_csv(sweep)
    raw_config["kernels"] = [k for k in raw_config["kernels"] if k["id"] in ("08_warptiling", "10_autotuned")]
    raw_config["kernels"][-1]["tune_from"] = ["08_warptiling"]
    out = dict(binary=tmp_path / "b.bin", record=tmp_path / "b.json", status=tmp_path / "status_build.json")
    entry.main("build", _smk(raw_config, kernel="10_autotuned", log=tmp_path / "build.log",
                             inputs=dict(env=tmp_path / "env.json", sweeps=[sweep]), outputs=out))
    rec = outcome.read(out["status"])
    assert rec.status == "failed" and "no verified configuration in the sweeps of 08_warptiling" in rec.message
    assert io.read_json(out["record"])["status"] == "failed" and out["binary"].read_bytes() == b""
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"sgemm-lab build 10_autotuned: {rec.message} (log: {tmp_path / 'build.log'})"]
    # a build takes the GPU: its log (not the console) says which GPUs the job was given
    assert "GPUs given to this job: " in (tmp_path / "build.log").read_text()

    check_out = _Outputs([tmp_path / "check.json"], status=tmp_path / "status_check.json")
    smk = _smk(raw_config, kernel="10_autotuned", log=tmp_path / "check.log",
               inputs=dict(env=tmp_path / "env.json", binary=out["binary"], record=out["record"]), outputs={})
    smk.output = check_out
    entry.main("check", smk)
    rec = outcome.read(check_out.status)
    assert rec.status == "not run" and rec.message.startswith("build failed: autotune: no verified configuration")
    assert io.read_json(tmp_path / "check.json") == dict(kernel="10_autotuned", status="not run", message=rec.message,
                                                        points=[])


class _Outputs(list):
    """Snakemake's output object: a list of files, some also named."""

    def __init__(self, files, **named):
        super().__init__(files + list(named.values()))
        self.__dict__.update(named)


def test_verdict_line():
    recs = [outcome.StepRecord(step="build", kernel="a", status="failed", message="nvcc failed: x", log="l", seconds=1),
            outcome.StepRecord(step="check", kernel="a", status="not run", message="build failed", log="l", seconds=0),
            outcome.StepRecord(step="profile", kernel="b", status="unavailable", message="no ncu", log="l", seconds=0),
            outcome.StepRecord(step="bench", kernel="b", status="ok", message="", log="l", seconds=2)]
    line = outcome.verdict(recs, run="r", report=None)
    assert line == ("sgemm-lab: 1 failed step in run 'r', 1 not run because of them (build a: nvcc failed: x); "
                    "no report was written")
    assert outcome.verdict(recs[2:], run="r", report=None) is None
