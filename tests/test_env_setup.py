"""The environment set-up (env/_venv.sh): an interpreter too old for the pins is refused in one line
before pip runs, and a virtual environment whose install fails is not left half-built."""

import os
import subprocess
import sys

import pytest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASE_PYTHON = Path(sys.base_prefix) / "bin" / "python3"  # outside any venv: ensure_env creates its own


def _ensure_env(tmp_path: Path, *args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    script = f'ROOT={tmp_path}; source {ROOT}/env/_venv.sh; ensure_env {" ".join(args)}; echo "PY=$PY"'
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV",)}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if ".venv" not in p)
    env.update(PYTHON=str(BASE_PYTHON), **(env_extra or {}))
    return subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_an_interpreter_older_than_the_pins_is_refused_in_one_line(tmp_path):
    (tmp_path / "req.txt").write_text("")
    out = _ensure_env(tmp_path, "t", "req.txt", "99.0")
    assert out.returncode == 2, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs Python 99.0 or newer for req.txt" in lines[0], out.stderr
    assert "PYTHON=" in lines[0]
    assert not (tmp_path / ".venv").exists()  # refused before anything was created


def test_a_failed_install_removes_the_venv_it_created(tmp_path):
    (tmp_path / "req.txt").write_text("sgemm-lab-no-such-package==1.0\n")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    out = _ensure_env(tmp_path, "t", "req.txt", env_extra={"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels)})
    assert out.returncode == 1, out
    assert out.stderr.strip().splitlines()[-1].endswith(f"installing req.txt failed (pip's message above); "
                                                        f"{tmp_path}/.venv/t removed"), out.stderr
    assert not (tmp_path / ".venv" / "t").exists()


def test_a_good_install_keeps_the_venv_and_names_its_python(tmp_path):
    (tmp_path / "req.txt").write_text("")
    out = _ensure_env(tmp_path, "t", "req.txt", "3.0")
    assert out.returncode == 0, out
    assert (tmp_path / ".venv" / "t" / "bin" / "python").exists()
    assert out.stdout.strip().splitlines()[-1] == "PY=python"


def test_the_same_pins_again_skip_pip_and_a_changed_list_installs_again(tmp_path):
    (tmp_path / "base.txt").write_text("")
    (tmp_path / "req.txt").write_text("-r base.txt\n")
    first = _ensure_env(tmp_path, "t", "req.txt")
    assert first.returncode == 0 and "== installing req.txt" in first.stdout, first
    again = _ensure_env(tmp_path, "t", "req.txt")
    assert again.returncode == 0 and "installed in" in again.stdout and "== installing" not in again.stdout, again
    assert again.stdout.strip().splitlines()[-1] == "PY=python"
    (tmp_path / "base.txt").write_text("# a pin changed in an included list\n")
    changed = _ensure_env(tmp_path, "t", "req.txt")
    assert changed.returncode == 0 and "== installing req.txt" in changed.stdout, changed
    # a failed install leaves no stamp behind: the next call runs pip again
    (tmp_path / "req.txt").write_text("sgemm-lab-no-such-package==1.0\n")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    failed = _ensure_env(tmp_path, "t", "req.txt", env_extra={"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels)})
    assert failed.returncode == 1 and not (tmp_path / ".venv" / "t" / ".installed-from").exists()
    (tmp_path / "req.txt").write_text("-r base.txt\n")
    assert "== installing req.txt" in _ensure_env(tmp_path, "t", "req.txt").stdout


def test_the_conda_environment_holds_the_pipeline_pins_themselves():
    """Snakemake builds the conda environment from a copy of env/conda.yaml in its own folder, where a
    `-r pipeline.txt` would find nothing: the pins are written out, and they are pipeline.txt's."""
    import yaml

    env = yaml.safe_load((ROOT / "env" / "conda.yaml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    pins = [line.strip() for line in (ROOT / "env" / "pipeline.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    assert pip == pins and not any(p.startswith("-r") for p in pip)
    assert "python=3.12" in env["dependencies"]


def test_a_wheel_of_the_package_carries_what_it_reads_beside_itself(tmp_path):
    """The schema, the base config, the kernels and the reference run's tables go into the wheel
    (share/sgemm-lab), where sgemm_lab.config.records finds them once the package is installed without
    its checkout."""
    import zipfile

    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
                          capture_output=True, text=True, timeout=600)
    offline = ("Could not find a version", "No matching distribution", "nstalling build dependencies")
    if proc.returncode != 0 and any(s in proc.stderr for s in offline):
        pytest.skip("no build backend reachable to build a wheel here (pip fetches setuptools to build)")
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = tmp_path.glob("sgemm_lab-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    share = next(n.split("share/sgemm-lab/")[0] for n in names if "share/sgemm-lab/" in n) + "share/sgemm-lab/"
    assert share + "workflow/schemas/config.schema.yaml" in names and share + "config/config.yaml" in names
    kernels = {p.name for p in (ROOT / "kernels").iterdir() if p.suffix in (".cu", ".cuh", ".c")}
    assert {n.rsplit("/", 1)[1] for n in names if n.startswith(share + "kernels/")} == kernels
    # the reference run's tables, which sgemm_lab.library.matmul ranks the stages by
    assert {share + "reports/h100/bench.csv", share + "reports/h100/check.csv"} <= names
