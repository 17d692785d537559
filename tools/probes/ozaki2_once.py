"""Stage 22 once at each shape given, through the package's launcher, every phase in turn: a process for a
profiler to wrap (Nsight Compute with sections or shapes of one's own choosing; the pipeline's profile step
profiles every phase at its profile shapes).

    ncu --kernel-name regex:ozaki_ --section SpeedOfLight python tools/probes/ozaki2_once.py 4096x4096x4096
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from ozaki2 import Ozaki2, build, stage_spec  # noqa: E402


def main() -> None:
    from sgemm_lab.gpu.device import driver

    spec = stage_spec()
    [cubin] = build([spec])
    cuda = driver()
    stream = cuda.Stream()
    oz = Ozaki2(spec, cubin, stream)
    rng = np.random.default_rng(7)
    for text in sys.argv[1:]:
        m, n, k = (int(x) for x in text.split("x"))
        da = cuda.to_device(rng.uniform(-1, 1, (m, k)).astype(np.float32))
        db = cuda.to_device(rng.uniform(-1, 1, (k, n)).astype(np.float32))
        dc = cuda.mem_alloc(4 * m * n)
        oz(m, n, k, 1.0, da, db, 0.0, dc)
        stream.synchronize()
        print(f"{text}: stage 22 ran once", flush=True)
        for buf in (da, db, dc):
            buf.free()


if __name__ == "__main__":
    main()
