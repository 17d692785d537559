"""The process Nsight Compute profiles (and compute-sanitizer checks): one launch per implementation
and shape, each after a warm-up.

    python -m sgemm_lab.profiling.target --config results/<run>/profile/ladder.config.pickle --plan results/<run>/profile/ladder.plan.json
    python -m sgemm_lab.profiling.target --config results/<run>/profile/ladder.config.pickle --impl <kernel> \\
        --binary results/<run>/build/<kernel>.bin --record results/<run>/build/<kernel>.json \\
        --shapes 1024x1024x1024 4096x4096x4096

A plan is a JSON list of {impl, binary, record, shapes}; the launches follow its order (implementation
by implementation, shapes in order), which is how the profile step attributes ncu's rows.
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


WARMUP_S = 0.2  # load before the first launch, so that the SM clock is up, as when timed
REWARM_S = 0.05  # before each later launch: the clock is already up, this keeps it there


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True, help="the run's configuration, as the step wrote it (config.handoff)")
    ap.add_argument("--plan", default="", help="JSON list of {impl, binary, record, shapes}, launched in order")
    ap.add_argument("--impl", default="")
    ap.add_argument("--binary", default="")
    ap.add_argument("--record", default="")
    ap.add_argument("--shapes", nargs="+", default=[])
    ap.add_argument("--no-warmup", action="store_true", help="skip the spin warm-up (sanitizer runs)")
    ap.add_argument("--verify", action="store_true", help="also check the result against float64 (sanitizer runs)")
    ap.add_argument("--gpu-lock", default="", help="take the pipeline's GPU lock (this file, exclusive) for the GPU part")
    args = ap.parse_args(argv)

    from contextlib import ExitStack

    from ..config import handoff
    from ..config.records import Shape
    from ..measure.gpulock import gpu_lock
    from ..dispatch.resolve import load_spec

    cfg = handoff.read(Path(args.config))
    if args.plan:
        plan = json.loads(Path(args.plan).read_text())
    elif args.impl and args.shapes:
        plan = [dict(impl=args.impl, binary=args.binary, record=args.record, shapes=args.shapes)]
    else:
        ap.error("give --plan, or --impl with --shapes")
    items = []
    for it in plan:
        spec = load_spec(cfg, it["impl"], Path(it["record"]) if it.get("record") else None)
        shapes = [Shape.of([int(x) for x in s.split("x")]) for s in it["shapes"]]
        items.append((it["impl"], spec, it.get("binary", ""), shapes))
    rng = np.random.default_rng(0)
    hosts = {}  # one set of inputs per distinct shape, shared by the implementations
    for _, _, _, shapes in items:
        for s in shapes:
            if s not in hosts:
                hosts[s] = [rng.random(d, dtype=np.float32) * 2 - 1 for d in ((s.m, s.k), (s.k, s.n), (s.m, s.n))]
    from ..gpu.device import init_driver
    from ..gpu.discovery import visible_gpus
    from ..measure.gpulock import pinned

    # With several GPUs the lock picks the GPU, which must happen before CUDA starts in this process.
    choose_first = bool(args.gpu_lock) and len(visible_gpus()) > 1 and pinned() is None
    with ExitStack() as stack:
        if choose_first:
            stack.enter_context(gpu_lock(exclusive=True, path=Path(args.gpu_lock)))
        init_driver()  # driver start-up (and the profiler's, which hooks in here) creates no context yet
        if args.gpu_lock and not choose_first:  # everything before this (interpreter, imports, inputs,
            stack.enter_context(gpu_lock(exclusive=True, path=Path(args.gpu_lock)))  # driver) overlaps other GPU work
        _run_on_gpu(args, cfg, items, hosts)


def _run_on_gpu(args, cfg, items, hosts) -> None:
    from ..dispatch.launch import launcher_for
    from ..gpu.buffers import Buffers
    from ..gpu.device import driver
    from ..gpu.launch import library_launcher

    cuda = driver()
    stream = cuda.Stream()
    spin = scratch = None
    if not args.no_warmup:  # sanitizer runs need no warm-up, nor the nvcc call that builds it
        from pycuda.compiler import SourceModule

        spin = SourceModule(SPIN, no_extern_c=True).get_function("lab_spin")
        scratch = cuda.mem_alloc(4)
    bufs = {}
    for shape, host in hosts.items():
        b = Buffers(shape)
        b.upload(*host)
        bufs[shape] = b
    libraries = {}  # one handle per library baseline
    warm = args.no_warmup
    used = set()  # shapes whose C an earlier launch has overwritten
    for impl, spec, binary, shapes in items:
        if spec is None:
            if impl not in libraries:
                libraries[impl] = library_launcher(impl, stream)
            launch = libraries[impl]
        else:
            launch = launcher_for(spec, Path(binary).read_bytes())
        for shape in shapes:
            b = bufs[shape]
            if args.verify and shape in used:
                b.upload(*hosts[shape])  # C as generated: the check below assumes it
            used.add(shape)
            t0, spell = time.perf_counter(), (REWARM_S if warm else WARMUP_S)
            while not args.no_warmup and time.perf_counter() - t0 < spell:
                spin(scratch, np.int32(1 << 16), block=(256, 1, 1), grid=(1024, 1), stream=stream)
                stream.synchronize()
            warm = True
            launch(shape, cfg.check.alpha, b.a, b.b, cfg.check.beta, b.c, stream)
            stream.synchronize()
            if args.verify:
                _verify(impl, spec, cfg, shape, b, hosts[shape])


def _verify(impl, spec, cfg, shape, b, host) -> None:
    from ..measure.runners import precision_of
    from ..results.verify import Problem, compare, references, tolerance_for

    ha, hb, hc = host
    p = Problem(shape=shape, alpha=cfg.check.alpha, beta=cfg.check.beta, a=ha, b=hb, c=hc, seed=0)
    v = compare(b.download_c(), references(p)[0], tolerance_for(precision_of(spec, impl), shape.k, cfg.check))
    if not v.passed:
        raise SystemExit(f"{impl} at {shape}: {v.reason}")


if __name__ == "__main__":
    main()
