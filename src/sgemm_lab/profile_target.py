"""The process Nsight Compute profiles: one launch of one implementation per shape, after a warm-up.

    python -m sgemm_lab.profile_target --config-json '{...}' --impl <kernel> \\
        --binary results/<run>/build/<kernel>.bin --record results/<run>/build/<kernel>.json \\
        --shapes 1024x1024x1024 4096x4096x4096
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

SPIN = r"""
extern "C" __global__ void lab_spin(float* out, int iters) {
    float x = threadIdx.x;
    for (int i = 0; i < iters; ++i) x = x * 0.999f + 1.0f;
    if (x == 12345.f) out[0] = x;  // never true; keeps the loop alive
}
"""


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config-json", required=True)
    ap.add_argument("--impl", required=True)
    ap.add_argument("--binary", default="")
    ap.add_argument("--record", default="")
    ap.add_argument("--shapes", nargs="+", required=True)
    ap.add_argument("--no-warmup", action="store_true", help="skip the spin warm-up (sanitizer runs)")
    ap.add_argument("--verify", action="store_true", help="also check the result against float64 (sanitizer runs)")
    ap.add_argument("--gpu-lock", default="", help="take the pipeline's GPU lock (this file, exclusive) for the GPU part")
    args = ap.parse_args(argv)

    from contextlib import ExitStack

    from .config import Shape, from_dict
    from .gpulock import gpu_lock
    from .steps import load_spec

    cfg = from_dict(json.loads(args.config_json), trusted=True)
    spec = load_spec(cfg, args.impl, Path(args.record) if args.record else None)
    shapes = [Shape.of([int(x) for x in s.split("x")]) for s in args.shapes]
    rng = np.random.default_rng(0)
    hosts = [[rng.random(d, dtype=np.float32) * 2 - 1 for d in ((s.m, s.k), (s.k, s.n), (s.m, s.n))] for s in shapes]
    from . import gpu

    gpu.init_driver()  # driver start-up (and the profiler's, which hooks in here) creates no context yet
    with ExitStack() as stack:
        if args.gpu_lock:  # everything before this (interpreter, imports, inputs) overlaps other GPU work
            stack.enter_context(gpu_lock(exclusive=True, path=Path(args.gpu_lock)))
        _run_on_gpu(args, cfg, spec, shapes, hosts)


def _run_on_gpu(args, cfg, spec, shapes, hosts) -> None:
    from . import gpu

    cuda = gpu.driver()
    stream = cuda.Stream()
    if spec is None:
        launch = gpu.CublasLauncher(stream)
    else:
        launch = gpu.KernelLauncher(spec, Path(args.binary).read_bytes())
    from pycuda.compiler import SourceModule

    spin = SourceModule(SPIN, no_extern_c=True).get_function("lab_spin")
    scratch = cuda.mem_alloc(4)
    bufs = []
    for shape, host in zip(shapes, hosts):
        b = gpu.Buffers(shape)
        b.upload(*host)
        bufs.append(b)
    for shape, b in zip(shapes, bufs):
        t0 = time.perf_counter()  # ~200 ms of load so the SM clock is up, as when timed
        while not args.no_warmup and time.perf_counter() - t0 < 0.2:
            spin(scratch, np.int32(1 << 16), block=(256, 1, 1), grid=(1024, 1), stream=stream)
            stream.synchronize()
        launch(shape, cfg.check.alpha, b.a, b.b, cfg.check.beta, b.c, stream)
        stream.synchronize()
    if args.verify:
        from .verify import Problem, compare, references, tolerance

        for shape, b, (ha, hb, hc) in zip(shapes, bufs, hosts):
            p = Problem(shape=shape, alpha=cfg.check.alpha, beta=cfg.check.beta, a=ha, b=hb, c=hc, seed=0)
            v = compare(b.download_c(), references(p)[0], tolerance(shape.k, cfg.check.tolerance_factor))
            if not v.passed:
                raise SystemExit(f"{args.impl} at {shape}: {v.reason}")


if __name__ == "__main__":
    main()
