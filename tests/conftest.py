import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from sgemm_lab.config import load as cfgmod  # noqa: E402


@pytest.fixture
def raw_config() -> dict:
    """The default config file as a plain dict (a fresh copy per test)."""
    import yaml

    return yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


@pytest.fixture
def lab(raw_config):
    return cfgmod.from_dict(raw_config)


def kernel_entry(**over) -> dict:
    base = dict(id="99_test", title="t", source="04_1d_blocktiling.cu", entry="sgemm_1d_blocktiling",
                geometry="block_tile", params={"BM": 64, "BN": 64, "BK": 8, "TM": 8})
    base.update(over)
    return base


@pytest.fixture
def nvcc():
    exe = shutil.which("nvcc")
    if exe is None:
        import os

        if os.environ.get("SGEMM_LAB_REQUIRE_NVCC") == "1":
            pytest.fail("nvcc is required (SGEMM_LAB_REQUIRE_NVCC=1) but not on PATH")
        pytest.skip("nvcc not on PATH: offline compile checks need the CUDA toolkit")
    return exe


def copy_workflow(dst: Path) -> Path:
    """A copy of the workflow (Snakefile, rules, config, kernels, package, env, .test) at ``dst``, so that
    runs never touch the real results/ and reports/."""
    dst.mkdir()
    for item in ("Snakefile", "workflow", "config", "kernels", "src", "env", ".test"):
        src = ROOT / item
        if src.is_dir():
            shutil.copytree(src, dst / item, ignore=shutil.ignore_patterns("__pycache__", ".venv*"))
        else:
            shutil.copy2(src, dst / item)
    return dst


def refused(raw_config: dict, patch: dict, source: str = "config/config.yaml") -> str:
    """The ConfigError line for ``raw_config`` with ``patch`` applied (sections updated key by key),
    checked to be one line that starts with ``source``."""
    from sgemm_lab.errors import ConfigError

    for key, val in patch.items():
        if isinstance(val, dict):
            raw_config.setdefault(key, {}).update(val)
        else:
            raw_config[key] = val
    with pytest.raises(ConfigError) as err:
        cfgmod.from_dict(raw_config, source=source)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(source + ": ")
    return msg

