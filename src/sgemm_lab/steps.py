"""The pipeline's steps. Each workflow script is a two-line shim that calls ``main``.

Every step turns expected failures (LabError) into one line on stderr naming the step, the kernel
and the log file, and keeps the detail (tracebacks, compiler output) in the log.
"""

from __future__ import annotations

import logging
import sys
import time
import traceback
import zlib
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from . import io, verify
from .config import LabConfig, Shape, from_dict
from .errors import LabError
from .geometry import unsupported_reason

log = logging.getLogger("sgemm_lab")


# ------------------------------------------------------------------------------------- helpers
def point_seed(base: int, impl: str, shape: Shape, purpose: str) -> int:
    """A reproducible per-(implementation, shape) seed derived from the run's base seed."""
    ss = np.random.SeedSequence([base, zlib.crc32(impl.encode()), zlib.crc32(purpose.encode()), shape.m, shape.n, shape.k])
    return int(ss.generate_state(1, dtype=np.uint64)[0] >> 1)


def base_seed(cfg: LabConfig) -> int:
    return cfg.seed if cfg.seed is not None else int(np.random.SeedSequence().entropy % (2**63))


def skip_reason(cfg: LabConfig, impl: str, shape: Shape) -> str | None:
    if impl == "cublas":
        return None
    return unsupported_reason(cfg.kernel(impl), shape)


def make_launcher(cfg: LabConfig, impl: str, cubin: Path | None, stream):
    from . import gpu

    if impl == "cublas":
        return gpu.CublasLauncher(stream)
    return gpu.KernelLauncher(cfg.kernel(impl), Path(cubin).read_bytes())


def verify_point(launch, bufs, shape: Shape, *, alpha: float, beta: float, factor: float, seed: int, stream) -> list[dict]:
    """Two runs on fresh inputs: C read (beta != 0), then beta = 0 on a NaN-poisoned C."""
    p = verify.make_problem(shape, alpha=alpha, beta=beta, seed=seed)
    ref_beta, ref_zero = verify.references(p)
    tol = verify.tolerance(shape.k, factor)
    rows = []
    bufs.upload(p.a, p.b, p.c)
    for mode, b, ref in (("beta", beta, ref_beta), ("beta0_poisoned", 0.0, ref_zero)):
        if mode == "beta0_poisoned":
            bufs.poison_c()
        launch(shape, alpha, bufs.a, bufs.b, b, bufs.c, stream)
        stream.synchronize()
        v = verify.compare(bufs.download_c(), ref, tol)
        rows.append(dict(mode=mode, alpha=alpha, beta=b, seed=seed, passed=v.passed, rel_err=v.rel_err,
                         max_abs_err=v.max_abs_err, nonfinite=v.nonfinite, tolerance=v.tolerance, reason=v.reason))
    return rows


def _gpu_guard(what: str):
    """Turn CUDA driver errors into one-line LabErrors naming ``what``."""
    from . import gpu

    cuda = gpu.driver()

    class Guard:
        def __enter__(self):
            return self

        def __exit__(self, et, ev, tb):
            if et is not None and issubclass(et, cuda.Error):
                raise LabError(f"{what}: CUDA error: {str(ev).splitlines()[0]}") from ev
            return False

    return Guard()


# --------------------------------------------------------------------------------------- steps
def environment(cfg: LabConfig, *, out: Path) -> None:
    from . import envinfo

    rec = envinfo.capture()
    rec["run"] = cfg.run
    log.info("GPU %s (%s), driver %s, cuBLAS %s", rec["gpu"]["name"], rec["gpu"]["arch"], rec["driver_version"], rec["cublas"])
    io.write_json(out, rec)


def build(cfg: LabConfig, kernel: str, *, env_json: Path, cubin_out: Path, record_out: Path) -> None:
    from dataclasses import asdict

    from . import gpu
    from .compile import check_resources, source_hash

    spec = cfg.kernel(kernel)
    arch = io.read_json(env_json)["gpu"]["arch"]
    t0 = time.perf_counter()
    cubin = gpu.compile_cubin(spec, arch)
    dt = time.perf_counter() - t0
    launcher = gpu.KernelLauncher(spec, cubin)
    launcher.check_launchable(gpu.device_info())
    rec = asdict(launcher.resources(arch, dt))
    rec["source"] = f"kernels/{spec.source}"
    rec["source_sha256"] = source_hash(spec)
    rec["params"] = dict(spec.params)
    if rec["local_bytes"] > spec.max_local_bytes:
        from .compile import Resources

        check_resources(spec, Resources(function=spec.entry, registers=rec["registers"], stack_bytes=rec["local_bytes"],
                                        spill_store_bytes=0, spill_load_bytes=0, shared_bytes=rec["shared_static_bytes"]))
    log.info("%s: %d registers, %d B static shared memory, %d B local memory per thread, compiled in %.2f s",
             spec.id, rec["registers"], rec["shared_static_bytes"], rec["local_bytes"], dt)
    io.write_bytes(cubin_out, cubin)
    io.write_json(record_out, rec)


def check(cfg: LabConfig, impl: str, *, cubin: Path | None, out: Path) -> None:
    from . import gpu

    cuda = gpu.driver()
    stream = cuda.Stream()
    launch = make_launcher(cfg, impl, cubin, stream)
    base = base_seed(cfg)
    rows = []
    shapes = cfg.check.shapes
    for i, shape in enumerate(shapes, 1):
        reason = skip_reason(cfg, impl, shape)
        if reason:
            rows.append(dict(kernel=impl, m=shape.m, n=shape.n, k=shape.k, mode="-", status="skipped", reason=reason))
            log.info("[check %s] %d/%d %s: skipped (%s)", impl, i, len(shapes), shape, reason)
            continue
        with _gpu_guard(f"check {impl} at {shape}"):
            bufs = gpu.Buffers(shape)
            try:
                results = verify_point(launch, bufs, shape, alpha=cfg.check.alpha, beta=cfg.check.beta,
                                       factor=cfg.check.tolerance_factor, seed=point_seed(base, impl, shape, "check"),
                                       stream=stream)
            finally:
                bufs.free()
        for r in results:
            rows.append(dict(kernel=impl, m=shape.m, n=shape.n, k=shape.k, status="pass" if r["passed"] else "fail", **r))
            log.info("[check %s] %d/%d %s %s: %s (rel err %.2e, tol %.2e)", impl, i, len(shapes), shape, r["mode"],
                     "pass" if r["passed"] else "FAIL " + r["reason"], r["rel_err"], r["tolerance"])
    ran = [r for r in rows if r["status"] != "skipped"]
    status = "fail" if any(r["status"] == "fail" for r in ran) else ("pass" if ran else "skipped")
    io.write_json(out, {"kernel": impl, "status": status, "base_seed": base, "points": rows})


BENCH_COLUMNS = ["kernel", "m", "n", "k", "status", "reason", "verified", "rel_err", "max_abs_err", "tolerance",
                 "median_ms", "min_ms", "q1_ms", "q3_ms", "iqr_ms", "max_ms", "reps", "tflops",
                 "l2_policy", "sm_clock_before_mhz", "sm_clock_after_mhz", "warmup_s", "warmup_launches",
                 "alpha", "beta", "seed"]


def bench(cfg: LabConfig, impl: str, *, cubin: Path | None, out: Path) -> None:
    from . import gpu
    from .stats import tflops

    cuda = gpu.driver()
    dev = gpu.device_info()
    stream = cuda.Stream()
    launch = make_launcher(cfg, impl, cubin, stream)
    flusher = gpu.L2Flusher(dev.l2_bytes) if cfg.bench.l2_policy == "flush" else None
    base = base_seed(cfg)
    b = cfg.bench
    rows = []
    for i, shape in enumerate(b.shapes, 1):
        row = dict(kernel=impl, m=shape.m, n=shape.n, k=shape.k, l2_policy=b.l2_policy)
        reason = skip_reason(cfg, impl, shape)
        if reason:
            rows.append(dict(row, status="skipped", reason=reason, verified=False))
            log.info("[bench %s] %d/%d %s: skipped (%s)", impl, i, len(b.shapes), shape, reason)
            continue
        with _gpu_guard(f"bench {impl} at {shape}"):
            bufs = gpu.Buffers(shape)
            try:
                seed = point_seed(base, impl, shape, "bench")
                checks = verify_point(launch, bufs, shape, alpha=cfg.check.alpha, beta=cfg.check.beta,
                                      factor=cfg.check.tolerance_factor, seed=seed, stream=stream)
                first = checks[0]
                ok = all(c["passed"] for c in checks)
                timing = gpu.time_launches(
                    lambda: launch(shape, cfg.check.alpha, bufs.a, bufs.b, cfg.check.beta, bufs.c, stream), stream,
                    warmup_ms=b.warmup_ms, target_ms=b.target_ms, min_reps=b.min_reps, max_reps=b.max_reps,
                    flush=flusher, pci_bus_id=dev.pci_bus_id)
            finally:
                bufs.free()
        fails = "; ".join(f"{c['mode']}: {c['reason']}" for c in checks if not c["passed"])
        row.update(status="ok" if ok else "failed", reason=fails, verified=ok, rel_err=max(c["rel_err"] for c in checks),
                   max_abs_err=max(c["max_abs_err"] for c in checks), tolerance=first["tolerance"],
                   alpha=cfg.check.alpha, beta=cfg.check.beta, seed=seed, **timing.as_row())
        row["tflops"] = tflops(shape.flops, timing.stats.median_ms)
        rows.append(row)
        log.info("[bench %s] %d/%d %s: %.2f TFLOP/s (median %.4f ms, IQR %.4f ms, %d reps, SM %s->%s MHz)%s", impl, i,
                 len(b.shapes), shape, row["tflops"], timing.stats.median_ms, timing.stats.iqr_ms, timing.stats.reps,
                 timing.sm_clock_before_mhz, timing.sm_clock_after_mhz, "" if ok else " NOT VERIFIED: " + fails)
    io.write_csv(out, pd.DataFrame(rows, columns=BENCH_COLUMNS))


def aggregate(cfg: LabConfig, *, bench_csvs, check_jsons, build_jsons, env_json: Path,
              bench_out: Path, check_out: Path, build_out: Path, env_out: Path) -> None:
    from .report import collect_bench

    bench_df = collect_bench([pd.read_csv(p) for p in bench_csvs], order=list(cfg.implementations))
    checks = [r for p in check_jsons for r in io.read_json(p)["points"]]
    builds = [io.read_json(p) for p in build_jsons]
    io.write_csv(bench_out, bench_df)
    io.write_csv(check_out, pd.DataFrame(checks))
    io.write_csv(build_out, pd.DataFrame(builds).drop(columns=["options"], errors="ignore"))
    io.write_json(env_out, io.read_json(env_json))


def plot(cfg: LabConfig, *, bench_csv: Path, out: Path) -> None:
    from .plots import tflops_vs_size

    tflops_vs_size(pd.read_csv(bench_csv), out, order=list(cfg.implementations))


def report(cfg: LabConfig, *, bench_csv: Path, check_csv: Path, build_csv: Path, env_json: Path, figure: Path,
           start_json: Path | None, out: Path) -> None:
    from .report import render

    started = io.read_json(start_json)["started_unix"] if start_json and Path(start_json).exists() else None
    text = render(cfg, bench=pd.read_csv(bench_csv), checks=pd.read_csv(check_csv), builds=pd.read_csv(build_csv),
                  env=io.read_json(env_json), figure=Path(figure).relative_to(Path(out).parent),
                  wall_s=(time.time() - started) if started else None)
    io.write_text(out, text)


# ----------------------------------------------------------------------------------- dispatch
def _setup_logging(log_path: Path | None) -> None:
    log.setLevel(logging.INFO)
    for h in list(log.handlers):
        h.close()
        log.removeHandler(h)
    err = logging.StreamHandler(sys.stderr)
    err.setFormatter(logging.Formatter("%(message)s"))
    log.addHandler(err)
    if log_path is not None:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        fh = logging.FileHandler(log_path, mode="w")
        fh.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(fh)


def _from_snakemake(step: str, smk) -> Callable[[LabConfig], None]:
    i, o, w = smk.input, smk.output, smk.wildcards
    impl = getattr(w, "kernel", None)
    cubin = getattr(i, "cubin", None) or None
    table: dict[str, Callable[[LabConfig], None]] = {
        "environment": lambda c: environment(c, out=Path(o[0])),
        "build": lambda c: build(c, impl, env_json=Path(i.env), cubin_out=Path(o.cubin), record_out=Path(o.record)),
        "check": lambda c: check(c, impl, cubin=cubin, out=Path(o[0])),
        "bench": lambda c: bench(c, impl, cubin=cubin, out=Path(o[0])),
        "aggregate": lambda c: aggregate(c, bench_csvs=list(i.bench), check_jsons=list(i.check),
                                         build_jsons=list(i.build), env_json=Path(i.env), bench_out=Path(o.bench),
                                         check_out=Path(o.check), build_out=Path(o.build), env_out=Path(o.env)),
        "plot": lambda c: plot(c, bench_csv=Path(i.bench), out=Path(o[0])),
        "report": lambda c: report(c, bench_csv=Path(i.bench), check_csv=Path(i.check), build_csv=Path(i.build),
                                   env_json=Path(i.env), figure=Path(i.figure), start_json=Path(smk.params.start),
                                   out=Path(o[0])),
    }
    return table[step]


def main(step: str, smk) -> None:
    """Entry point for ``workflow/scripts/<step>.py``: run the step, one clear line on failure."""
    log_path = Path(smk.log[0]) if smk.log else None
    _setup_logging(log_path)
    what = step + (f" {smk.wildcards.kernel}" if hasattr(smk.wildcards, "kernel") else "")
    where = f" (log: {log_path})" if log_path else ""
    try:
        cfg = from_dict(smk.config)
        _from_snakemake(step, smk)(cfg)
    except LabError as exc:
        if len(exc.args) > 1:
            log.debug("%s", exc.args[1])
            if log_path:
                with open(log_path, "a") as fh:
                    fh.write(str(exc.args[1]) + "\n")
        log.error("sgemm-lab %s: %s%s", what, exc, where)
        sys.exit(1)
    except Exception as exc:  # unexpected: keep the traceback in the log, one line on the console
        if log_path:
            with open(log_path, "a") as fh:
                fh.write(traceback.format_exc())
        print(f"sgemm-lab {what}: unexpected {type(exc).__name__}: {exc}{where}", file=sys.stderr)
        sys.exit(1)
