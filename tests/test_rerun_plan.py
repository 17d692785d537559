"""What Snakemake reruns over a complete run's outputs (CPU only: the plan, not the steps).

The README's "rerun individual rules for one kernel": after one kernel's source is edited, plain
`snakemake --cores 1` must rebuild, check and time that stage (its batch jobs, where the other stages'
kept results are copied back, ``pipeline.reuse``) and what reads every stage's build (profile,
sanitize, the tables and the report), and nothing else: not the precompile step, no tile or shape sweep,
no epilogue comparison. Snakemake hides, from its own check, every job that waits through an ancient()
input for a job that reruns (snakemake/snakemake#4166): the precompile step once reran for an edited
kernel and that kernel's build was never run again.
"""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import copy_workflow


def _snakemake(args, cwd):
    return subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def _planned(cwd, *args) -> set[str]:
    proc = _snakemake(["-n", *args], cwd)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return set(re.findall(r"^rule (\w+):", proc.stdout, flags=re.M))


@pytest.fixture(scope="module")
def complete(tmp_path_factory) -> Path:
    """A copy of the workflow whose default run has every output in place, each newer than its inputs."""
    lab = copy_workflow(tmp_path_factory.mktemp("rerun") / "lab")
    env = lab / "results" / "local" / "environment.json"
    env.parent.mkdir(parents=True)
    env.write_text('{"gpu": {"arch": "sm_90"}}\n')
    proc = _snakemake(["-n"], lab)
    assert proc.returncode == 0, proc.stderr[-2000:]
    outputs = {o.split(" (")[0].strip() for line in proc.stdout.splitlines() if line.startswith("    output: ")
               for o in line.removeprefix("    output: ").split(",")}  # ("path (update)": a flag)
    for out in outputs:  # (status records as a step that ended ok writes them: the verdict reads them)
        (lab / out).parent.mkdir(parents=True, exist_ok=True)
        (lab / out).write_text('{"status": "ok", "message": ""}\n' if "/status/" in out else "x\n")
    proc = _snakemake(["--cores", "1", "--touch"], lab)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _planned(lab) == {"all"}  # (it has no output: it runs every time)
    return lab


def _edited(lab: Path, rel: str):
    """Append a comment line to ``rel``; a context manager that restores it and its modification time."""
    class Edit:
        def __enter__(self):
            self.path = lab / rel
            self.text, self.stat = self.path.read_text(), self.path.stat()
            time.sleep(0.01)
            self.path.write_text(self.text + "// edited\n")
            return self

        def __exit__(self, *exc):
            self.path.write_text(self.text)
            os.utime(self.path, ns=(self.stat.st_atime_ns, self.stat.st_mtime_ns))

    return Edit()


def _own_source_stage(lab: Path) -> str:
    """A plain CUDA stage whose source no other stage compiles (not swept, not a dispatch base)."""
    from sgemm_lab.config import load

    import yaml

    cfg = load.from_dict(yaml.safe_load((lab / "config" / "config.yaml").read_text()))
    shared = [k.source for k in cfg.kernels if k.source]
    bases = {k.dispatch_from for k in cfg.kernels if k.dispatch_from} | {t for k in cfg.kernels for t in k.tune_from}
    for k in reversed(cfg.kernels):
        if k.backend == "cuda" and k.source and shared.count(k.source) == 1 and k.id not in bases \
                and not k.sweep and k.id not in {f.id for f in cfg.fused}:
            return k.source
    raise AssertionError("no stage with a source of its own")


STAGE_STEPS = {"build_gpu", "check_gpu", "bench_gpu", "profile", "sanitize", "aggregate", "plot", "report", "all"}


def test_an_edited_kernel_reruns_its_stage_s_steps_and_nothing_else(complete):
    source = _own_source_stage(complete)
    with _edited(complete, f"kernels/{source}"):
        planned = _planned(complete)
    assert planned == STAGE_STEPS, planned


def test_the_same_edit_targeted_at_the_stage_s_check_runs_its_build_first(complete):
    from sgemm_lab.config import load

    import yaml

    source = _own_source_stage(complete)
    cfg = load.from_dict(yaml.safe_load((complete / "config" / "config.yaml").read_text()))
    stage = next(k.id for k in cfg.kernels if k.source == source)
    with _edited(complete, f"kernels/{source}"):
        planned = _planned(complete, f"results/local/check/{stage}.json")
    assert planned == {"build_gpu", "check_gpu"}, planned


def test_an_edited_header_reruns_everything_that_compiles_it(complete):
    with _edited(complete, "kernels/common.cuh"):
        planned = _planned(complete)
    assert {"build_gpu", "build_tuned", "sweep_all", "shape_sweep", "epilogue", "check_gpu", "bench_gpu"} <= planned
    assert "precompile" not in planned and "build_host" not in planned and "bench_host" not in planned


def test_nothing_changed_nothing_reruns_but_the_verdict(complete):
    assert _planned(complete) == {"all"}


def test_a_rerun_of_the_precompile_step_hides_no_edited_kernel(complete):
    """Whatever makes the precompile step run again (here: forced), the builds do not wait for it through
    an ancient() input, so their own check still sees the edited source."""
    source = _own_source_stage(complete)
    with _edited(complete, f"kernels/{source}"):
        planned = _planned(complete, "--forcerun", "precompile")
    assert STAGE_STEPS | {"precompile"} <= planned, planned
    assert not planned & {"sweep_all", "shape_sweep", "epilogue", "build_tuned"}, planned
