"""A stage of several kernels (geometry phases) once at each shape given, through the package's launcher,
against float64 on fresh uniform inputs: its relative Frobenius error beside the FP32 unit roundoff, and
NaN outputs counted (C is poisoned with NaN before the call, beta = 0). A quick look at a new phased stage
before a pipeline run; the pipeline's check is the test of record.

    python tools/probes/phased_once.py 23_wgmma_3xtf32_split_a 256x192x320 1000x1000x1000
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))


def main() -> int:
    from sgemm_lab.config.files import read
    from sgemm_lab.config.load import from_dict
    from sgemm_lab.config.records import Shape
    from sgemm_lab.gpu.build import compile_many
    from sgemm_lab.gpu.device import driver
    from sgemm_lab.gpu.phased import PhasedLauncher

    stage, shapes = sys.argv[1], sys.argv[2:]
    spec = from_dict(read(ROOT / "config" / "config.yaml")).kernel(stage)
    [(cubin, err)] = compile_many([spec], "sm_90a", jobs=1)
    if err:
        raise err
    cuda = driver()
    stream = cuda.Stream()
    launcher = PhasedLauncher(spec, cubin)
    rng = np.random.default_rng(23)
    worst = 0.0
    for text in shapes:
        m, n, k = (int(v) for v in text.split("x"))
        a = (rng.random((m, k), dtype=np.float32) * 2 - 1).astype(np.float32)
        b = (rng.random((k, n), dtype=np.float32) * 2 - 1).astype(np.float32)
        da, db = cuda.to_device(a), cuda.to_device(b)
        dc = cuda.to_device(np.full((m, n), np.nan, np.float32))
        launcher(Shape(m=m, n=n, k=k), 1.0, da, db, 0.0, dc, stream)
        stream.synchronize()
        c = cuda.from_device(dc, (m, n), np.float32)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        bad = int(np.count_nonzero(~np.isfinite(c)))
        err = float(np.linalg.norm(c - ref) / np.linalg.norm(ref)) if not bad else float("nan")
        worst = max(worst, err) if bad == 0 else float("inf")
        print(f"{stage} {m}x{n}x{k}: rel err {err:.3e} (FP32 unit roundoff 5.96e-08), {bad} non-finite outputs", flush=True)
    return 0 if worst < 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
