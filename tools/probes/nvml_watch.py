"""What the pipeline's check for other work on the GPU (sgemm_lab.measure.foreign) sees on this host, with the
real driver; needs neither PyCUDA nor the pipeline's environment (cuda-bindings' NVML, and the driver's CUDA
library through ctypes).

    python tools/probes/nvml_watch.py              # every GPU: the processes NVML lists, SM samples of 2 s
    python tools/probes/nvml_watch.py --selftest   # the check against a real foreign load, see below

--selftest: this process starts CUDA on the first GPU (after ``note_before_cuda``), as a point process
does, and must see itself as its own and nothing else; then a process outside its family (started
through a parent that exits at once) spins kernels on every SM for a few seconds, and the check must
call it foreign, with SM utilisation, and a watched measurement ``disturbed`` on every try (points of
5 ms too); once it has ended, clean again. Last, a foreign process that holds a context and runs
nothing must be seen idle, not as a disturbance. Prints what NVML gave (JSON lines) and exits 1 if any of that does not hold.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from sgemm_lab.gpu.nvml import KINDS, nvml  # noqa: E402
from sgemm_lab.measure import foreign  # noqa: E402

# one thread per lane spins on the SM clock: a kernel for the driver to JIT, no compiler needed
SPIN_PTX = b"""
.version 7.0
.target sm_52
.address_size 64
.visible .entry spin(.param .u64 cycles)
{
  .reg .pred %p<2>;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [cycles];
  mov.u64 %rd2, %clock64;
LOOP:
  mov.u64 %rd3, %clock64;
  sub.s64 %rd4, %rd3, %rd2;
  setp.lt.s64 %p1, %rd4, %rd1;
  @%p1 bra LOOP;
  ret;
}
"""


class Cuda:
    """The driver API through ctypes: the primary context of GPU 0, a module from PTX, launches."""

    def __init__(self):
        self.cu = ctypes.CDLL("libcuda.so.1")
        self._ok(self.cu.cuInit(0), "cuInit")
        self.dev = ctypes.c_int()
        self._ok(self.cu.cuDeviceGet(ctypes.byref(self.dev), 0), "cuDeviceGet")
        self.ctx = ctypes.c_void_p()
        self._ok(self.cu.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), self.dev), "cuDevicePrimaryCtxRetain")
        self._ok(self.cu.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

    @staticmethod
    def _ok(rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what}: CUDA error {rc}")

    def bus_id(self) -> str:
        buf = ctypes.create_string_buffer(32)
        self._ok(self.cu.cuDeviceGetPCIBusId(buf, len(buf), self.dev), "cuDeviceGetPCIBusId")
        return buf.value.decode()

    def attribute(self, attr: int) -> int:
        v = ctypes.c_int()
        self._ok(self.cu.cuDeviceGetAttribute(ctypes.byref(v), attr, self.dev), "cuDeviceGetAttribute")
        return v.value

    def spin(self, seconds: float) -> int:
        mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
        self._ok(self.cu.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(SPIN_PTX)), "cuModuleLoadData")
        self._ok(self.cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"spin"), "cuModuleGetFunction")
        sms = self.attribute(16)                     # CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
        cycles = ctypes.c_ulonglong(self.attribute(13) * 20)  # CLOCK_RATE (kHz) * 20 ms
        params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.pointer(cycles), ctypes.c_void_p))
        launches, t0 = 0, time.time()
        while time.time() - t0 < seconds:
            self._ok(self.cu.cuLaunchKernel(fn, 4 * sms, 1, 1, 256, 1, 1, 0, None, params, None), "cuLaunchKernel")
            self._ok(self.cu.cuCtxSynchronize(), "cuCtxSynchronize")
            launches += 1
        return launches


def listed(lib, handle) -> list[dict]:
    return [dict(kind=kind, pid=pid, used_mib=None if used is None else round(used / 2**20))
            for kind in KINDS for pid, used in (lib.processes(handle, kind) or [])]


def show() -> int:
    lib = nvml()
    if lib is None:
        print("no NVML")
        return 1
    for i in range(lib.count() or 0):
        handle = lib.handle_by_index(i)
        since = int((time.time() - 2) * 1e6)
        print(json.dumps(dict(gpu=i, processes=listed(lib, handle), samples=lib.utilisation(handle, since))))
    return 0


def selftest(seconds: float) -> int:
    failed = []

    def expect(cond: bool, what: str, **seen) -> None:
        print(json.dumps(dict(check=what, ok=bool(cond), **seen)), flush=True)
        if not cond:
            failed.append(what)

    foreign.note_before_cuda()
    cuda = Cuda()
    watch = foreign.Watch.on(cuda.bus_id())
    lib = nvml()
    mine = listed(lib, watch.handle) if lib is not None else []
    expect(watch.lib is not None, "NVML has a handle for CUDA's GPU 0", bus_id=cuda.bus_id())
    expect(any(p["pid"] for p in mine), "NVML lists this process once it holds a context", pid=os.getpid(),
           listed=mine, same_namespace=os.getpid() in {p["pid"] for p in mine})
    watch.start()
    time.sleep(0.5)
    alone = watch.seen()
    expect(alone.checked and not alone.disturbed, "alone on the GPU: checked and clean", seen=alone.describe())
    costs = []
    for _ in range(20):  # what the check adds to each try of a point: one look before, one after
        t = time.perf_counter()
        watch.start()
        watch.seen()
        costs.append((time.perf_counter() - t) * 1e3)
    costs.sort()
    print(json.dumps(dict(look_ms_median=round(costs[len(costs) // 2], 2), look_ms_max=round(costs[-1], 2))))

    ready = Path(f"/tmp/nvml_watch.{os.getpid()}.json")
    ready.unlink(missing_ok=True)
    subprocess.run([sys.executable, __file__, "--detach", str(ready), "--spin", str(seconds)], check=True)
    deadline = time.time() + 60
    while not ready.exists() and time.time() < deadline:
        time.sleep(0.05)
    other = json.loads(ready.read_text()) if ready.exists() else {}
    expect("pid" in other, "the foreign load started", load=other)
    time.sleep(0.5)
    watch.start()
    time.sleep(2.0)
    seen = watch.seen()
    expect(seen.disturbed, "the foreign load is seen", seen=seen.describe(), load_pid_here=other.get("pid"),
           listed=listed(lib, watch.handle))
    expect(any(o.sm_pct for o in seen.others), "with SM utilisation", seen=seen.describe())
    _, text, disturbed = foreign.undisturbed(lambda: time.sleep(0.3), watch, retries=1, pause_s=0.2)
    expect(disturbed, "a watched measurement meanwhile is disturbed on every try", text=text)
    short = [foreign.undisturbed(lambda: time.sleep(0.005), watch, retries=0) for _ in range(5)]
    expect(all(d for _, _, d in short), "points of 5 ms meanwhile are disturbed too (samples from "
           f"{foreign.LOOKBACK_S:g} s before them)", texts=[t for _, t, _ in short])
    while time.time() < other.get("end_by", 0) + 2:
        time.sleep(0.2)
    time.sleep(1.0)
    watch.start()
    time.sleep(1.5)
    after = watch.seen()
    expect(not after.disturbed, "clean again once it has ended", seen=after.describe(),
           listed=listed(lib, watch.handle))
    ready.unlink(missing_ok=True)
    # an idle context: a foreign process that holds one and launches nothing
    subprocess.run([sys.executable, __file__, "--detach", str(ready), "--idle", str(seconds)], check=True)
    deadline = time.time() + 60
    while not ready.exists() and time.time() < deadline:
        time.sleep(0.05)
    other = json.loads(ready.read_text()) if ready.exists() else {}
    time.sleep(foreign.LOOKBACK_S + 0.5)  # (its start-up is not in the window)
    _, text, disturbed = foreign.undisturbed(lambda: time.sleep(0.3), watch, retries=0)
    expect(not disturbed and "seen idle" in text, "an idle foreign context is seen, not a disturbance",
           text=text, idle_pid_here=other.get("pid"), listed=listed(lib, watch.handle))
    while time.time() < other.get("end_by", 0) + 1:
        time.sleep(0.2)
    ready.unlink(missing_ok=True)
    print(json.dumps(dict(selftest="failed" if failed else "passed", failed=failed)))
    return 1 if failed else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--selftest", action="store_true")
    ap.add_argument("--spin", type=float, help=argparse.SUPPRESS)    # the load itself
    ap.add_argument("--idle", type=float, help=argparse.SUPPRESS)    # an idle context
    ap.add_argument("--detach", help=argparse.SUPPRESS)            # start the load outside this family
    ap.add_argument("--ready", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.detach:
        what = ["--spin", str(args.spin)] if args.spin is not None else ["--idle", str(args.idle)]
        subprocess.Popen([sys.executable, __file__, *what, "--ready", args.detach],
                         start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return 0  # the load's parent is gone at once: it belongs to no one's family here
    if args.spin is not None:
        cuda = Cuda()
        Path(args.ready).write_text(json.dumps(dict(pid=os.getpid(), end_by=time.time() + args.spin)))
        cuda.spin(args.spin)
        return 0
    if args.idle is not None:  # a context that runs nothing
        Cuda()
        Path(args.ready).write_text(json.dumps(dict(pid=os.getpid(), end_by=time.time() + args.idle)))
        time.sleep(args.idle)
        return 0
    return selftest(6.0) if args.selftest else show()


if __name__ == "__main__":
    sys.exit(main())
