"""A foreign GPU load for tools/probes/lock_and_load.sh: a process of its own that keeps every SM of the
GPU busy for a while (a kernel that spins on the SM clock, launched over and over on four blocks per
SM) without taking the lab's GPU lock, as another user's job would; it writes when it ran.

    python tools/probes/gpu_load.py --seconds 20 --out load.json

``load.json``: pid, start (wall clock, after the first launch: the GPU is busy from then on), end,
launches, multiprocessors. Written at the start as well, so that a load that is killed still says
when it began.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

SPIN = r"""
extern "C" __global__ void probe_spin(float* out, long long cycles) {
    long long t0 = clock64();
    float x = threadIdx.x;
    while (clock64() - t0 < cycles) x = x * 0.999f + 1.0f;
    if (x < -1.0f) out[0] = x;  // never true: keeps the loop
}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--launch-ms", type=float, default=20.0, help="length of one launch")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    import numpy as np
    import pycuda.autoinit  # noqa: F401  (a context of its own on the first GPU)
    import pycuda.driver as cuda
    from pycuda.compiler import SourceModule

    spin = SourceModule(SPIN, no_extern_c=True).get_function("probe_spin")
    dev = cuda.Context.get_device()
    sms = dev.get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT)
    cycles = np.int64(dev.get_attribute(cuda.device_attribute.CLOCK_RATE) * args.launch_ms)  # kHz * ms
    scratch = cuda.mem_alloc(4)
    record = dict(pid=os.getpid(), asked=time.time(), multiprocessors=sms, seconds=args.seconds)
    launches = 0
    spin(scratch, cycles, block=(256, 1, 1), grid=(4 * sms, 1))
    record["start"] = time.time()
    Path(args.out).write_text(json.dumps(record) + "\n")
    while time.time() - record["start"] < args.seconds:
        spin(scratch, cycles, block=(256, 1, 1), grid=(4 * sms, 1))
        cuda.Context.synchronize()
        launches += 1
    record.update(end=time.time(), launches=launches + 1)
    Path(args.out).write_text(json.dumps(record) + "\n")
    print(json.dumps(record))


if __name__ == "__main__":
    main()
