"""Stage 22 (kernels/22_ozaki2_int8.cu, the Ozaki scheme II on INT8 wgmma) through the package's launcher
(gpu.phased.PhasedLauncher, the phases of its config entry): its error against float64 beside cuBLAS
SGEMM's on the check's input distributions and alpha/beta modes, and its time per phase against cuBLAS
SGEMM and the INT8 GEMMs of cuBLAS and cuBLASLt on the same residues (int8_baselines), under the lab's
exclusive GPU lock.

    python tools/probes/ozaki2.py --out ozaki2.json [--set NMOD=7 ...] [--variant NAME=P=V,...]
                                  [--before FILE [--before-config CONFIG]]

``--before``: an earlier version of the stage's source (beside a copy of today's kernels/common.cuh), built with
the same parameters and launched by today's config entry (its phases, grids, arguments and workspace), or by
the entry of ``--before-config`` (the config.yaml of the same earlier commit) where its kernels were others:
its outputs on every check input compared with the current build's bit for bit, and its whole call and phases
timed on the same inputs, in the same run.

Error: relative Frobenius error against float64 (results.verify.compare), the stage's and cuBLAS's on
the same inputs; integer inputs must come back exactly. Time: CUDA events, warm-up by time, median of
many repetitions (gpu.timing.time_launches), L2 not flushed (operands of 4096^3 and up exceed it);
each phase alone and the whole call. Prints two tables; writes every row as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tools"))

from int8_baselines import CublasInt8, CublasLtInt8  # noqa: E402
from ozaki2_model import moduli  # noqa: E402

STAGE = "22_ozaki2_int8"


def bits_for(k: int, count: int) -> int:
    """The most bits an operand row (column) keeps: K 4^bits at most P/2 less 2^-20 of it (the
    reconstruction's rounding room), and at most 30 (INT32); the kernels' operand_bits(K)."""
    p = math.prod(moduli(count))
    q = (p // 2 - p // 2**21) // k
    return min(30, (q.bit_length() - 1) // 2)


def before_spec(spec, source: Path, into: Path):
    """``spec`` built from an earlier source file: copied into ``into`` beside kernels/common.cuh (its
    local include), with the id marked so that its build is told apart."""
    import dataclasses
    import shutil

    shutil.copy(ROOT / "kernels" / "common.cuh", into / "common.cuh")
    shutil.copy(source, into / spec.source)
    return dataclasses.replace(spec, id=f"{spec.id}-before", source=str(into / spec.source))


def stage_spec(config: Path = ROOT / "config" / "config.yaml"):
    """The stage's entry in ``config`` (today's config/config.yaml unless another is named)."""
    from sgemm_lab.config.files import read
    from sgemm_lab.config.load import from_dict

    return from_dict(read(config)).kernel(STAGE)


def build(specs: list) -> list[bytes]:
    """The cubins of ``specs`` for sm_90a, compiled side by side; the first compile error is raised."""
    from sgemm_lab.gpu.build import compile_many

    built = compile_many(specs, "sm_90a", jobs=len(specs))
    for _, err in built:
        if err:
            raise err
    return [cubin for cubin, _ in built]


class Ozaki2:
    """The stage's launcher, with the shape of its last plan and its workspace at hand."""

    def __init__(self, spec, cubin: bytes, stream):
        from sgemm_lab.gpu.device import driver
        from sgemm_lab.gpu.phased import PhasedLauncher

        self.cuda, self.spec, self.stream = driver(), spec, stream
        self.launcher = PhasedLauncher(spec, cubin)
        self.count = spec.params["NMOD"]
        self.shape = None

    def plan(self, m: int, n: int, k: int) -> None:
        from sgemm_lab.config.records import Shape

        self.shape = Shape(m=m, n=n, k=k)
        self.names = self.launcher.plan(self.shape).names
        self.bufs = self.launcher.workspace(self.shape)
        self.kp, self.bits = self.names["KP"], bits_for(k, self.count)

    def parts(self, alpha: float, a, b, beta: float, c_out) -> dict:
        """Each phase as a callable on the stream, in order."""
        return self.launcher.phase_calls(self.shape, alpha, a, b, beta, c_out, self.stream)

    def __call__(self, m, n, k, alpha, a, b, beta, c_out) -> None:
        self.plan(m, n, k)
        self.launcher(self.shape, alpha, a, b, beta, c_out, self.stream)


def check(oz: Ozaki2, sgemm, shapes, dists, seed: int, before: Ozaki2 | None = None) -> list[dict]:
    from sgemm_lab.config.records import Distribution, Shape
    from sgemm_lab.results import verify

    cuda, rows = oz.cuda, []
    modes = (("alpha 1, beta 0", 1.0, 0.0), ("alpha 1.5, beta -0.75", 1.5, -0.75), ("alpha 0, beta 0.5", 0.0, 0.5))
    for m, n, k in shapes:
        for name in dists:
            for mode, alpha, beta in modes if name == "uniform" else modes[:1]:
                rng = np.random.default_rng(seed)
                dist = Distribution(name=name, kind=name)
                a, b = verify.draw(rng, m, k, dist), verify.draw(rng, k, n, dist)
                c0 = verify.draw(rng, m, n, dist)
                ref = alpha * (a.astype(np.float64) @ b.astype(np.float64)) + beta * c0.astype(np.float64)
                terms = (alpha * (a.astype(np.float64) @ b.astype(np.float64)), beta * c0.astype(np.float64))
                da, db = cuda.to_device(a), cuda.to_device(b)
                outs = {}
                for who in ("stage 22", "cublas", "before")[:3 if before else 2]:
                    dc = cuda.to_device(c0)
                    if who == "cublas":
                        sgemm(Shape(m=m, n=n, k=k), alpha, da, db, beta, dc, oz.stream)
                    else:
                        (oz if who == "stage 22" else before)(m, n, k, alpha, da, db, beta, dc)
                    oz.stream.synchronize()
                    outs[who] = cuda.from_device(dc, (m, n), np.float32)
                    dc.free()
                da.free()
                db.free()
                scale = verify.scale_of(ref, terms)
                e = {w: verify.compare(o, ref, math.inf, scale=scale) for w, o in outs.items() if w != "before"}
                rows.append(dict(shape=f"{m}x{n}x{k}", distribution=name, mode=mode, bits=oz.bits,
                                 err=e["stage 22"].rel_err, cublas_err=e["cublas"].rel_err,
                                 nonfinite=e["stage 22"].nonfinite,
                                 exact=bool(np.array_equal(outs["stage 22"], ref.astype(np.float32))),
                                 cublas_exact=bool(np.array_equal(outs["cublas"], ref.astype(np.float32)))))
                if before:  # the same bits as the earlier build's, NaN payloads included
                    rows[-1]["same_as_before"] = bool(np.array_equal(outs["stage 22"].view(np.uint32),
                                                                     outs["before"].view(np.uint32)))
                print(json.dumps(rows[-1]), flush=True)
    return rows


class Sampler:
    """The SM clock (MHz) and board power (W) every 10 ms on a thread, through the binding's NVML, while
    a part is timed: what a GPU at its power limit does to a long run of tensor-core work."""

    def __init__(self, pci: str):
        import threading

        from cuda.bindings import nvml

        from sgemm_lab.gpu.nvml import nvml as lab_nvml

        lab_nvml()  # initialised once in this process
        self.nvml, self.threading = nvml, threading
        self.handle = nvml.device_get_handle_by_pci_bus_id_v2(pci)

    def __enter__(self):
        self.samples, self.stop = [], self.threading.Event()

        def loop():
            while not self.stop.wait(0.01):
                self.samples.append((self.nvml.device_get_clock_info(self.handle, 1),
                                     self.nvml.device_get_power_usage(self.handle) / 1000.0))

        self.thread = self.threading.Thread(target=loop, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    def summary(self) -> dict:
        if not self.samples:
            return {}
        clock, watts = np.array(self.samples).T
        return dict(sm_mhz_median=float(np.median(clock)), sm_mhz_min=float(clock.min()),
                    watts_median=float(np.median(watts)), watts_max=float(watts.max()))


def bench(oz: Ozaki2, sgemm, int8s: list, shapes, pci: str, others: dict, before: Ozaki2 | None = None) -> list[dict]:
    """Each shape's parts, the whole chain, cuBLAS SGEMM and the vendor INT8 GEMMs (``int8s``); ``others``:
    more builds of the kernels (name -> Ozaki2) whose INT8 GEMMs are timed on the same residues; ``before``:
    an earlier source's build, its whole call and every part timed on the same inputs."""
    from sgemm_lab.config.records import Shape
    from sgemm_lab.gpu.timing import time_launches

    cuda, s, rows = oz.cuda, oz.stream, []
    rng = np.random.default_rng(7)
    sampler = Sampler(pci)
    clocks: dict[str, dict] = {}

    def t(run, name: str = "") -> float:
        with sampler:
            timing = time_launches(run, s, warmup_ms=300, target_ms=300, min_reps=10, max_reps=200, flush=None,
                                   pci_bus_id=pci)
        if name:
            clocks[name] = sampler.summary()
        return timing.stats.median_ms

    for m, n, k in shapes:
        a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
        b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
        da, db, dc = cuda.to_device(a), cuda.to_device(b), cuda.mem_alloc(4 * m * n)
        oz.plan(m, n, k)
        parts = oz.parts(1.0, da, db, 0.0, dc)
        row = dict(shape=f"{m}x{n}x{k}", moduli=oz.count, bits=oz.bits)
        row["cublas_ms"] = t(lambda: sgemm(Shape(m=m, n=n, k=k), 1.0, da, db, 0.0, dc, s), "cublas")
        row["stage22_ms"] = t(lambda: oz(m, n, k, 1.0, da, db, 0.0, dc), "stage22")
        for name, part in parts.items():
            row[f"{name} ms"] = t(part, name)
        gemm_ms = row[f"{oz.spec.entry} ms"]
        i32 = cuda.mem_alloc(4 * oz.count * m * n)
        for lib in int8s:
            row[f"{lib.name}_ms"] = t(lambda: lib(m, n, oz.kp, oz.count, oz.bufs["res_a"], oz.bufs["res_b"], i32),
                                      lib.name)
        i32.free()
        if before:
            before.plan(m, n, k)
            row["before_ms"] = t(lambda: before(m, n, k, 1.0, da, db, 0.0, dc), "before")
            for name, part in before.parts(1.0, da, db, 0.0, dc).items():
                row[f"{name} before ms"] = t(part, f"{name} before")
        for label, other in others.items():  # another build: its whole call once, then its main phase alone
            other(m, n, k, 1.0, da, db, 0.0, dc)
            row[f"{other.spec.entry} {label} ms"] = t(other.parts(1.0, da, db, 0.0, dc)[other.spec.entry], f"main {label}")
        row["clocks"] = dict(clocks)
        ops = 2.0 * m * n * oz.kp * oz.count
        row["gemm_tops"] = ops / (gemm_ms * 1e-3) / 1e12
        for lib in int8s:
            row[f"{lib.name}_tops"] = ops / (row[f"{lib.name}_ms"] * 1e-3) / 1e12
        row["x_cublas"] = row["cublas_ms"] / row["stage22_ms"]
        rows.append(row)
        print(json.dumps(row), flush=True)
        for buf in (da, db, dc):
            buf.free()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("ozaki2.json"))
    ap.add_argument("--set", nargs="*", default=[], metavar="P=V", help="parameters of the stage's config entry to change")
    ap.add_argument("--check-shapes", nargs="*", default=["256x192x320", "300x200x1004", "129x257x515", "1000x1000x1000",
                                                          "64x64x20000", "2000x2100x50", "37x3x70001", "3x37x70001"])
    ap.add_argument("--dists", nargs="+", default=["uniform", "normal", "loguniform", "positive", "extreme", "integers",
                                                   "short", "sparse"])
    ap.add_argument("--bench-shapes", nargs="*", default=["1024x1024x1024", "2048x2048x2048", "4096x4096x4096",
                                                          "8192x8192x8192", "4096x4096x1024"])
    ap.add_argument("--variant", nargs="*", default=[], metavar="NAME=P=V,...",
                    help="another build (parameters changed) whose main phase is timed too")
    ap.add_argument("--before", type=Path, help="an earlier source of the stage: outputs compared, every part timed")
    ap.add_argument("--before-config", type=Path, help="the config.yaml of --before's commit, whose entry launches it")
    args = ap.parse_args()
    shape = lambda text: tuple(int(x) for x in text.split("x"))  # noqa: E731
    params = lambda items: {k: int(v) for k, v in (i.split("=") for i in items)}  # noqa: E731
    from sgemm_lab.gpu.device import device_info, driver
    from sgemm_lab.gpu.launch import CublasLauncher
    from sgemm_lab.measure.gpulock import gpu_lock

    spec = stage_spec().with_params(**params(args.set))
    variants = {v.split("=", 1)[0]: spec.with_params(**params(v.split("=", 1)[1].split(","))) for v in args.variant}
    if args.before_config and not args.before:
        ap.error("--before-config goes with --before")
    then = spec if args.before_config is None else stage_spec(args.before_config).with_params(**params(args.set))
    earlier = [] if args.before is None else [before_spec(then, args.before, Path(tempfile.mkdtemp()))]
    built = build([spec, *variants.values(), *earlier])
    with gpu_lock(exclusive=True):
        dev = device_info()
        stream = driver().Stream()
        oz, sgemm = Ozaki2(spec, built[0], stream), CublasLauncher(stream)
        int8s = [CublasInt8(stream), CublasLtInt8(stream)]
        others = {name: Ozaki2(sp, cubin, stream) for (name, sp), cubin in zip(variants.items(), built[1:])}
        before = Ozaki2(earlier[0], built[-1], stream) if earlier else None
        checked = check(oz, sgemm, [shape(s) for s in args.check_shapes], args.dists, seed=1, before=before)
        timed = bench(oz, sgemm, int8s, [shape(s) for s in args.bench_shapes], dev.pci_bus_id, others, before)
    args.out.write_text(json.dumps(dict(gpu=dev.name, params=dict(spec.params), moduli=moduli(oz.count), check=checked,
                                        bench=timed, before=None if args.before is None else str(args.before),
                                        before_built_with="today's kernels/common.cuh and " + (
                                            "config phases" if args.before_config is None else
                                            f"the phases of {args.before_config}"),
                                        cublaslt_int8_algos={"x".join(map(str, k)): v
                                                             for k, v in int8s[1].algo_info.items()}), indent=1))
    for lib in int8s:  # after the results are written
        lib.close()
    import pandas as pd

    print(f"\n{dev.name}, {oz.count} moduli: error against float64, stage 22 and cuBLAS SGEMM")
    print(pd.DataFrame(checked).to_string(index=False, float_format=lambda v: f"{v:.2e}"))
    print("\ntime (ms, median), stage 22 per part, cuBLAS SGEMM, cuBLAS and cuBLASLt INT8 on the same residues")
    print(pd.DataFrame([{k: v for k, v in r.items() if k != "clocks"} for r in timed]).to_string(
        index=False, float_format=lambda v: f"{v:.3f}"))
    print("\nSM clock (MHz, median / min) and board power (W, median / max) while each was timed")
    for r in timed:
        for name, c in r["clocks"].items():
            if c:
                print(f"{r['shape']:>16} {name:>22}: {c['sm_mhz_median']:6.0f} / {c['sm_mhz_min']:6.0f} MHz, "
                      f"{c['watts_median']:5.0f} / {c['watts_max']:5.0f} W")


if __name__ == "__main__":
    main()
