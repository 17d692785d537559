"""The SLURM profile (workflow/profiles/slurm) as a site admin uses it, and tools/site_profile.py, which
puts a site's answers into it (no SLURM here: the keys against Snakemake's own parser, the jobs of a dry
run against the profile's resources)."""

import subprocess
import sys

import pytest
import yaml
from conftest import ROOT
from test_gpu_requests import _dry_run_jobs

sys.path.insert(0, str(ROOT / "tools"))
import site_profile  # noqa: E402

PROFILE = yaml.safe_load((ROOT / "workflow" / "profiles" / "slurm" / "config.yaml").read_text())


def _rules() -> set[str]:
    res = subprocess.run([sys.executable, "-m", "snakemake", "--list-rules"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return {line.split()[0] for line in res.stdout.splitlines() if line and not line[0].isspace()}


def test_every_key_of_the_profile_is_an_option_snakemake_knows():
    from snakemake.cli import get_argument_parser

    known = {o for a in get_argument_parser()._actions for o in a.option_strings}
    executor = [k for k in PROFILE if k.startswith("slurm-")]
    assert not [k for k in PROFILE if k not in executor and f"--{k}" not in known]
    assert PROFILE["slurm-status-command"] in ("sacct", "squeue")  # in the profile, not on a command line
    if f"--{executor[0]}" not in known:
        pytest.skip("the SLURM executor plugin is not installed here (env/slurm.txt): its settings unchecked")
    assert not [k for k in executor if f"--{k}" not in known]


def test_the_container_lines_a_site_uncomments_are_options_snakemake_knows():
    from snakemake.cli import get_argument_parser

    known = {o for a in get_argument_parser()._actions for o in a.option_strings}
    text = (ROOT / "workflow" / "profiles" / "slurm" / "config.yaml").read_text()
    lines = [line[2:] for line in text.splitlines() if line.startswith(("# software-deployment-method:",
                                                                        "# apptainer-args:"))]
    site = yaml.safe_load("\n".join(lines))
    assert site == {"software-deployment-method": "apptainer", "apptainer-args": "--nv"}
    assert all(f"--{k}" in known for k in site)


def test_the_profile_names_only_rules_of_the_workflow_and_the_account_only_as_a_resource():
    assert set(PROFILE["set-resources"]) <= _rules()
    assert "slurm-account" not in PROFILE  # the account is the slurm_account resource (an unknown option)


@pytest.mark.parametrize("configfile", ["config/config.yaml", ".test/config/config.yaml"])
def test_every_gpu_job_goes_to_the_gpu_partition_with_a_model_and_no_cpu_job_does(configfile):
    cpu = PROFILE["default-resources"]["slurm_partition"]
    local = {"all", "aggregate", "plot", "report", "compare", "rerender"}  # localrules: no SLURM job
    for rule, gpu in _dry_run_jobs(ROOT / configfile):
        res = {**PROFILE["default-resources"], **PROFILE["set-resources"].get(rule, {})}
        if gpu:
            assert res["slurm_partition"] != cpu and res.get("gpu_model"), rule
        else:
            assert res["slurm_partition"] == cpu and "gpu_model" not in res, rule
        assert rule not in local or not gpu
        assert res["runtime"] >= 10 and res["mem_mb"] >= 1000 and res["cpus_per_task"] >= 1, rule


def test_a_site_profile_changes_the_site_lines_only():
    out = site_profile.site(PROFILE, cpu_partition="short", gpu_partition="a100q", account="proj7", qos="lab",
                            gpu_model="a100", status_command="squeue")
    assert out["default-resources"]["slurm_partition"] == "short"
    assert out["default-resources"]["slurm_account"] == "proj7"
    assert out["slurm-qos"] == "lab" and out["slurm-status-command"] == "squeue"
    gpu_rules = {r for r, res in PROFILE["set-resources"].items() if "gpu_model" in res}
    assert gpu_rules and all(out["set-resources"][r]["slurm_partition"] == "a100q" for r in gpu_rules)
    assert all(out["set-resources"][r]["gpu_model"] == "a100" for r in gpu_rules)
    same = {k: v for k, v in out.items() if k not in ("default-resources", "set-resources", "slurm-qos",
                                                       "slurm-status-command")}
    assert same == {k: v for k, v in PROFILE.items() if k in same}
    untyped = site_profile.site(PROFILE, no_account=True, untyped_gpus=True)
    assert untyped["slurm-no-account"] is True and "slurm_account" not in untyped["default-resources"]
    assert not any("gpu_model" in res for res in untyped["set-resources"].values())
    assert PROFILE == yaml.safe_load((ROOT / "workflow" / "profiles" / "slurm" / "config.yaml").read_text())


def test_the_difference_a_site_profile_makes_names_each_changed_line_and_only_those():
    out = site_profile.site(PROFILE, account="proj7", gpu_partition="a100q", untyped_gpus=True)
    lines = site_profile.difference(out, PROFILE)
    assert "+ default-resources.slurm_account: proj7" in lines
    assert "~ set-resources.bench_gpu.slurm_partition: gpu -> a100q" in lines
    assert "- set-resources.bench_gpu.gpu_model: h100" in lines
    assert not any("cpus_per_task" in line or "runtime" in line for line in lines)
    assert site_profile.difference(PROFILE, PROFILE) == []


def test_the_gpu_request_reaches_sbatch_as_the_executor_writes_it():
    """The executor's own GRES/GPU string for every rule of the profile that asks for a GPU."""
    utils = pytest.importorskip("snakemake_executor_plugin_slurm.utils")
    from types import SimpleNamespace

    class Resources(dict):
        __getattr__ = dict.get

    for rule, res in PROFILE["set-resources"].items():
        if "gpu_model" not in res:
            continue
        job = SimpleNamespace(resources=Resources({**PROFILE["default-resources"], **res, "gpu": 1}), name=rule)
        assert utils.set_gres_string(job).strip() == f"--gpus={res['gpu_model']}:1", rule
