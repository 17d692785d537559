import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from sgemm_lab import config as cfgmod  # noqa: E402


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
