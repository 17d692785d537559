"""The committed reference run must come from the current kernel sources (CI fails on a stale one)."""

import re

import pandas as pd
import pytest
from conftest import ROOT

from sgemm_lab.gpu.compile import source_hash
from sgemm_lab.results import io

REF = ROOT / "reports" / "h100"
# A stage added while no H100 could be had runs first in the H200's run, which the pipeline made from the
# same sources (the README says which stages those are); it joins the H100's reference at its next run.
SECOND = ROOT / "reports" / "h200"


@pytest.fixture
def ref_builds():
    return pd.read_csv(REF / "build.csv").set_index("kernel")


def _not_in_reference(lab) -> list[str]:
    return sorted(set(lab.implementations) - set(pd.read_csv(REF / "bench.csv").kernel))


def test_reference_covers_every_configured_stage_or_the_second_run_does(lab):
    missing = _not_in_reference(lab)
    second = set(pd.read_csv(SECOND / "bench.csv").kernel)
    assert set(missing) <= second, ("no committed run has " + ", ".join(sorted(set(missing) - second))
                                    + ": regenerate the reference (bash env/pipeline.sh --config run=h100)")
    readme = (ROOT / "README.md").read_text()
    assert all(f"`{stage}`" in readme for stage in missing), "the README names every stage the reference lacks"


def _stale(lab, builds: pd.DataFrame, stages) -> list[str]:
    stale = []
    for spec in (lab.kernel(s) for s in stages):
        rec = builds.loc[spec.id]
        source_spec = (lab.kernel(rec["tuned_from"]) if spec.autotuned else
                       lab.kernel(spec.dispatch_from) if spec.dispatched else spec)
        if rec["source_sha256"] != source_hash(source_spec):
            stale.append(f"{spec.id} ({rec['source']})")
    return stale


# A stage whose source changed while no H100 could be had is held to the H200's run in the same way: that run
# must be of the current source, and the README's clause that says so (from CHANGED to the next ';') must name
# exactly the stages that changed, so that it goes when the H100's next run brings them back.
CHANGED = "changed since the H100's reference run"


def _ids(stale: list[str]) -> list[str]:
    """The stage ids of _stale's entries ("id (source)")."""
    return [s.split(" ")[0] for s in stale]


def _named_changed(lab, readme: str) -> set[str]:
    """The configured stages the README's clause on changed sources names (in backticks)."""
    at = readme.find(CHANGED)
    clause = readme[at:].split(";")[0] if at >= 0 else ""
    return set(re.findall(r"`([^`]+)`", clause)) & {k.id for k in lab.kernels}


def _not_held(lab, stale: list[str], readme: str) -> list[str]:
    """The stale stages of reports/h100 that neither the H200's run (current sources) nor the README covers."""
    ids = _ids(stale)
    second = pd.read_csv(SECOND / "build.csv").set_index("kernel")
    second_stale = set(_ids(_stale(lab, second, [i for i in ids if i in second.index])))
    named = _named_changed(lab, readme)
    return [s for s, i in zip(stale, ids) if i not in second.index or i in second_stale or i not in named]


def test_reference_was_built_from_the_current_sources(lab, ref_builds):
    stale = _stale(lab, ref_builds, [k.id for k in lab.kernels if k.id in ref_builds.index])
    readme = (ROOT / "README.md").read_text()
    not_held = _not_held(lab, stale, readme)
    assert not not_held, ("reports/h100 was produced from other kernel sources than the current ones: "
                          + ", ".join(not_held) + " — rerun the pipeline on the GPU (bash env/pipeline.sh --config"
                          " run=h100), or on an H200 (reports/h200) and name the stage in the README's clause"
                          f" with '{CHANGED}'")
    named, changed = _named_changed(lab, readme), set(_ids(stale))
    assert named == changed, (f"the README's clause with '{CHANGED}' names {sorted(named)}, the stages whose "
                              f"source changed since reports/h100 are {sorted(changed)}")


def test_a_changed_stage_is_held_only_by_a_current_second_run_and_the_readme(lab):
    """The H200's run covers a stale H100 stage only when it has the current source and the README names it."""
    h100 = pd.read_csv(REF / "build.csv").set_index("kernel")
    h200 = pd.read_csv(SECOND / "build.csv").set_index("kernel")
    current = [k for k in h100.index if k in h200.index and k in {s.id for s in lab.kernels}
               and not _stale(lab, h200, [k])]
    assert current, "the H200's run has stages of the current sources"
    stage = current[0]
    entry = f"{stage} (kernels/x.cu)"
    assert _not_held(lab, [entry], f"Stages {CHANGED}: `{stage}`.") == []
    assert _not_held(lab, [entry], f"Stages {CHANGED}: none.") == [entry]  # not named
    assert _not_held(lab, [entry], f"`{stage}` is named, but before the clause. Stages {CHANGED}: none.") == [entry]
    assert _not_held(lab, [entry], f"Stages {CHANGED}: none; `{stage}` after it.") == [entry]
    assert _not_held(lab, ["no_such_stage (kernels/x.cu)"], f"{CHANGED}: `no_such_stage`") == [
        "no_such_stage (kernels/x.cu)"]  # not in the H200's run


def test_stages_the_reference_lacks_were_run_from_the_current_sources(lab):
    missing = [s for s in _not_in_reference(lab) if s in {k.id for k in lab.kernels}]
    stale = _stale(lab, pd.read_csv(SECOND / "build.csv").set_index("kernel"), missing)
    assert not stale, f"reports/h200 has other sources than the current ones for {', '.join(stale)}"


def test_reference_rows_carry_provenance():
    bench = pd.read_csv(REF / "bench.csv")
    env = io.read_json(REF / "environment.json")
    ran = bench[bench.status == "ok"]
    assert ran.source_sha256.notna().all() and ran.compile_options.notna().any()
    assert (ran.gpu == env["gpu"]["name"]).all() and (ran.git_commit == env["git_commit"]).all()
    text = (REF / "report.md").read_text()
    assert env["git_commit"][:12] in text


def test_stale_reference_is_detected(lab, ref_builds, tmp_path, monkeypatch):
    """Changing one kernel's source makes the check above fail."""
    from sgemm_lab.config import records

    own = [s.id for s in lab.kernels if not s.autotuned and not s.dispatched and s.id in ref_builds.index]

    def stale_now():
        return set(_ids(_stale(lab, ref_builds, own)))

    before = stale_now()  # stages changed since the H100's run, held to the H200's (the test above)
    kdir, orig = tmp_path / "kernels", records.KERNEL_DIR
    kdir.mkdir()
    for f in orig.iterdir():  # sources and the headers they include (not the notes' folder)
        if f.is_file():
            (kdir / f.name).write_text(f.read_text())
    changed = lab.kernel("05_2d_blocktiling")
    (kdir / changed.source).write_text((orig / changed.source).read_text() + "\n// edited\n")
    monkeypatch.setattr(records, "KERNEL_DIR", kdir)
    assert stale_now() - before == {"05_2d_blocktiling"}
    # the H200's run is of the old source too, so naming the stage in the README does not hold it
    entry = f"05_2d_blocktiling ({changed.source})"
    assert _not_held(lab, [entry], f"Stages {CHANGED}: `05_2d_blocktiling`.") == [entry]
    (kdir / changed.source).write_text((orig / changed.source).read_text())
    (kdir / "common.cuh").write_text((orig / "common.cuh").read_text() + "\n// edited\n")
    stale = stale_now()
    assert "05_2d_blocktiling" in stale and "01_naive" in stale  # a shared header edit reaches every includer


def test_named_commit_wins_over_the_copy_s_own_git(monkeypatch):
    """A synced copy may carry a stale .git: the commit named by SGEMM_LAB_GIT_COMMIT is what is recorded."""
    from sgemm_lab.pipeline import environment as envinfo

    monkeypatch.setenv("SGEMM_LAB_GIT_COMMIT", "0123456789abcdef0123456789abcdef01234567")
    sw = envinfo.software()
    assert sw["git_commit"] == "0123456789abcdef0123456789abcdef01234567" and sw["git_dirty"] is None
    monkeypatch.delenv("SGEMM_LAB_GIT_COMMIT")
    assert envinfo.software()["git_commit"] != "0123456789abcdef0123456789abcdef01234567"


def test_a_named_commit_that_is_the_copy_s_head_still_shows_its_changes(monkeypatch, tmp_path):
    """Naming the commit a stale .git holds must not hide that the files are not that commit's: where git's
    HEAD is the commit named, its status is read; where it is another commit, the state is unknown (None)."""
    import subprocess

    from sgemm_lab.pipeline import environment as envinfo

    git = ["git", "-c", "user.name=lab", "-c", "user.email=lab@example.invalid", "-c", "commit.gpgsign=false",
           "-C", str(tmp_path)]
    subprocess.run(git[:7] + ["init", "-q", str(tmp_path)], check=True)
    (tmp_path / "kernel.cu").write_text("// the committed source\n")
    subprocess.run(git + ["add", "kernel.cu"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "one"], check=True)
    head = subprocess.run(git + ["rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    (tmp_path / "kernel.cu").write_text("// a newer source, synced over the old .git\n")
    monkeypatch.setattr(envinfo, "ROOT", tmp_path)
    for named in (head, head[:7]):
        monkeypatch.setenv("SGEMM_LAB_GIT_COMMIT", named)
        sw = envinfo.software()
        assert sw["git_commit"] == named and sw["git_dirty"] is True
    monkeypatch.setenv("SGEMM_LAB_GIT_COMMIT", head[:3])  # too short to say which commit it is
    assert envinfo.software()["git_dirty"] is None
    monkeypatch.setenv("SGEMM_LAB_GIT_COMMIT", "0123456789abcdef0123456789abcdef01234567")
    assert envinfo.software()["git_dirty"] is None
    monkeypatch.delenv("SGEMM_LAB_GIT_COMMIT")
    assert envinfo.software()["git_commit"] == head
    subprocess.run(git + ["checkout", "-q", "kernel.cu"], check=True)
    assert envinfo.software()["git_dirty"] is False


def test_environment_record_names_the_container(monkeypatch):
    from sgemm_lab.pipeline import environment as envinfo

    monkeypatch.delenv("SGEMM_LAB_IMAGE_BASE", raising=False)
    monkeypatch.setenv("SGEMM_LAB_CONTAINER_IMAGE", "localhost/sgemm-lab:test@sha256:abc")
    assert envinfo.container() is None  # not the lab's image: no record, whatever else is set
    monkeypatch.setenv("SGEMM_LAB_IMAGE_BASE", "localhost/sgemm-lab-base:cuda13.0")
    assert envinfo.container() == {"image": "localhost/sgemm-lab:test@sha256:abc",
                                   "base": "localhost/sgemm-lab-base:cuda13.0"}
    assert envinfo.software()["container"]["base"] == "localhost/sgemm-lab-base:cuda13.0"


def test_environment_record_names_the_slurm_job(monkeypatch):
    from sgemm_lab.pipeline import environment as envinfo

    for var in ("SLURM_JOB_ID", "SLURM_CLUSTER_NAME", "SLURMD_NODENAME", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS"):
        monkeypatch.delenv(var, raising=False)
    assert envinfo.software()["slurm"] is None  # not in a SLURM job
    monkeypatch.setenv("SLURM_JOB_ID", "17")
    monkeypatch.setenv("SLURM_CLUSTER_NAME", "gpuhost")
    monkeypatch.setenv("SLURM_JOB_GPUS", "0")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    rec = envinfo.software()["slurm"]
    assert rec["job_id"] == "17" and rec["cluster"] == "gpuhost" and rec["gpus"] == "0"
    assert rec["cuda_visible_devices"] == "0" and rec["node"] is None


def test_a_run_holds_one_gpu_model():
    """Rows measured on another model than the environment record's (a cluster job on other nodes)
    stop the aggregation with one line naming them; host rows (no device) and the same model pass."""
    import pandas as pd

    from sgemm_lab.errors import LabError
    from sgemm_lab.results.common import one_gpu_model

    env = {"gpu": {"name": "NVIDIA H100 80GB HBM3"}}
    same = pd.DataFrame({"kernel": ["a", "b", "00_hostmult1"],
                         "device_name": ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", None]})
    one_gpu_model([same, pd.DataFrame({"kernel": ["c"]})], env, "h100")  # no device columns at all: fine
    mixed = pd.DataFrame({"kernel": ["a", "b"], "device_name": ["NVIDIA H200", "NVIDIA H200"]})
    with pytest.raises(LabError, match=r"run 'h100' mixes GPU models: 2 rows from NVIDIA H200, beside the NVIDIA H100"):
        one_gpu_model([same, mixed], env, "h100")
