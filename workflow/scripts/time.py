# Thin shim: the logic is sgemm_lab.pipeline.timeshape, run by sgemm_lab.pipeline.entry.main (unit-tested without Snakemake).
# The __main__ guard matters: supervised steps start child processes that re-import this file.
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))  # noqa: F821  (injected)
    from sgemm_lab.pipeline.entry import main

    main("time", snakemake)  # noqa: F821
