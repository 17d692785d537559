"""Every job that opens a CUDA context asks the scheduler for a GPU, and records the GPUs it was given
(no GPU: the workflow's dry run, and the entry point with made-up Snakemake jobs)."""

import subprocess
import sys
from types import SimpleNamespace

import pytest
from conftest import ROOT

from sgemm_lab.config import load as cfgmod
from sgemm_lab.pipeline import entry
from sgemm_lab.pipeline.batches import BATCHED, batches
from sgemm_lab.pipeline.steps import lock_mode


def _dry_run_jobs(configfile):
    """(rule, gpu resource or None) of every job of a dry run of the whole workflow."""
    res = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--configfile", str(configfile)],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:] + res.stdout[-3000:]
    jobs, rule = [], None
    for line in res.stdout.splitlines():
        words = line.split()
        if len(words) == 2 and words[0] in ("rule", "localrule") and words[1].endswith(":"):
            rule = words[1][:-1]
            jobs.append([rule, None])
        elif rule and line.strip().startswith("resources:"):
            fields = dict(f.strip().split("=", 1) for f in line.split(":", 1)[1].split(","))
            jobs[-1][1] = int(fields["gpu"]) if "gpu" in fields else None
    return jobs


@pytest.mark.parametrize("configfile", ["config/config.yaml", ".test/config/config.yaml"])
def test_every_job_that_takes_the_gpu_asks_the_scheduler_for_one(configfile):
    cfg = cfgmod.load(ROOT / configfile)
    jobs = _dry_run_jobs(ROOT / configfile)
    assert {"check_host", "check_gpu", "environment", "sanitize"} <= {r for r, _ in jobs}
    for rule, gpu in jobs:
        # what the job's steps do when they run: take the GPU's lock (pipeline.steps), stage by stage
        step, _, batch = rule.partition("_")
        members = batches(cfg, step)[batch] if step in BATCHED and batch in batches(cfg, step) else (None,)
        need = any(lock_mode(step if members != (None,) else rule, cfg, m) is not None for m in members)
        assert (gpu or 0) == int(need), f"rule {rule}: resources gpu={gpu}, but its step {'takes' if need else 'does not take'} the GPU"


def test_a_job_that_uses_the_gpu_without_asking_for_one_stops_before_it_starts(raw_config, caplog):
    smk = SimpleNamespace(config=raw_config, resources=SimpleNamespace(gpu=0), wildcards=SimpleNamespace(),
                          params=SimpleNamespace(), log=[])
    with pytest.raises(SystemExit) as stop:
        entry.main("ceilings", smk)
    assert stop.value.code == 1
    assert "uses the GPU but its rule asks the scheduler for none (resources: gpu=0)" in caplog.text


def test_a_gpu_job_records_what_it_was_given(raw_config, lab, monkeypatch, tmp_path):
    from sgemm_lab.gpu import discovery

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_JOB_GPUS", "1")
    monkeypatch.setattr(discovery, "visible_gpus", lambda: [discovery.Gpu(1, "GPU-aaaa")])
    smk = SimpleNamespace(config=raw_config, resources=SimpleNamespace(gpu=1), wildcards=SimpleNamespace(),
                          params=SimpleNamespace(), log=[])
    given = entry._gpu_job("ceilings", smk, lab, [None])
    assert given == dict(gpus="GPU-aaaa", visible="1", slurm_job="4242", slurm_gpus="1")
    assert entry._allocated(given) == dict(gpus="GPU-aaaa", slurm_job="4242")
    # a CPU job records none, whatever its environment
    assert entry._gpu_job("plot", smk, lab, [None]) is None
