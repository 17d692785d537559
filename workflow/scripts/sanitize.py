# Thin shim: the logic lives in sgemm_lab.steps.sanitize (unit-tested without Snakemake).
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))  # noqa: F821  (injected)
from sgemm_lab.steps import main  # noqa: E402

main("sanitize", snakemake)  # noqa: F821
