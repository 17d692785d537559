"""tools/probe_patch.sh: a change on trial kept as a patch is applied for its probe, and the tree is put
back whatever the probe does (a stand-in interpreter plays Snakemake; no GPU)."""

import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

FAKE_PY = """#!/bin/bash
if [ "$1" = "-c" ]; then exec "{python}" "$@"; fi
if [ "$1" = "-m" ]; then
  cat kernels/k.cu > seen_during_probe.txt; ls kernels >> seen_during_probe.txt
  exit "${FAKE_RC:-0}"
fi
"""


@pytest.fixture
def tree(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    t = tmp_path / "lab"
    (t / "tools").mkdir(parents=True)
    for name in ("probe_patch.sh", "probe.sh"):
        shutil.copy(ROOT / "tools" / name, t / "tools" / name)
    (t / "kernels").mkdir()
    (t / "kernels" / "k.cu").write_text("int before;\n")
    probe = t / "reports" / "probes" / "trial"
    probe.mkdir(parents=True)
    (probe / "probe.yaml").write_text("run: probe-trial\nkernels:\n  - {id: old, source: k_before.cu}\n")
    (probe / "k.patch").write_text("--- a/kernels/k.cu\n+++ b/kernels/k.cu\n@@ -1 +1 @@\n-int before;\n+int after;\n")
    fake = tmp_path / "fakepy"
    fake.write_text(FAKE_PY.replace("{python}", sys.executable))
    fake.chmod(0o755)
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "tree"]):
        subprocess.run(cmd, cwd=t, check=True, env=env)
    return t, fake


def _run(t, fake, rc=0):
    env = dict(os.environ, PY=str(fake), FAKE_RC=str(rc))
    return subprocess.run(["bash", "tools/probe_patch.sh", "reports/probes/trial"], cwd=t, env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("rc", [0, 1])
def test_the_probe_sees_the_patch_and_the_tree_comes_back(tree, rc):
    """Whether the probe's pipeline succeeds or fails (its status is the script's)."""
    t, fake = tree
    assert _run(t, fake, rc).returncode == rc
    seen = (t / "seen_during_probe.txt").read_text()
    assert "int after;" in seen and "k_before.cu" in seen  # patched source and the copy of the committed one
    assert (t / "kernels" / "k.cu").read_text() == "int before;\n"
    assert not (t / "kernels" / "k_before.cu").exists()


def test_a_file_the_patch_adds_is_removed_again(tree):
    t, fake = tree
    patch = t / "reports" / "probes" / "trial" / "k.patch"
    patch.write_text(patch.read_text() + "--- /dev/null\n+++ b/kernels/new.cuh\n@@ -0,0 +1 @@\n+int added;\n")
    assert _run(t, fake).returncode == 0
    assert "new.cuh" in (t / "seen_during_probe.txt").read_text()
    assert (t / "kernels" / "k.cu").read_text() == "int before;\n" and not (t / "kernels" / "new.cuh").exists()


def test_the_before_copy_is_the_committed_source(tree):
    """k_before.cu, which probe.yaml names, is made from HEAD's kernels/k.cu for the run."""
    t, fake = tree
    fake.write_text(fake.read_text().replace("cat kernels/k.cu >", "cat kernels/k_before.cu kernels/k.cu >"))
    assert _run(t, fake).returncode == 0
    assert (t / "seen_during_probe.txt").read_text().startswith("int before;\nint after;\n")


def test_a_before_copy_of_a_source_head_lacks_is_refused(tree):
    t, fake = tree
    (t / "reports" / "probes" / "trial" / "probe.yaml").write_text("kernels:\n  - {source: gone_before.cu}\n")
    proc = _run(t, fake)
    assert proc.returncode == 2 and "HEAD has no kernels/gone.cu" in proc.stderr
    assert not (t / "seen_during_probe.txt").exists() and not (t / "kernels" / "gone_before.cu").exists()
