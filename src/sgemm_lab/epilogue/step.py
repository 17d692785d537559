"""The fused-epilogue comparison step of a stage with signature fused.
"""

from __future__ import annotations

from pathlib import Path

from ..config.records import LabConfig
from ..measure.gpulock import gpu_lock
from ..results import io
from ..results.common import Guard, base_seed, machine, point_seed
from ..results.outcome import FAILED, StepStatus, first_line

# the columns its readers select by: a table without rows (the step failed) still has them
EPILOGUE_COLUMNS = ["m", "n", "k", "act", "implementation", "padded", "verified", "tflops", "median_ms", "reason"]


def epilogue(cfg: LabConfig, kernel: str, *, env_json: Path, out: Path) -> StepStatus | None:
    """Fused-epilogue comparison of one stage with cuBLASLt and cuBLAS + a separate kernel."""
    from ..gpu.build import compile_many, prebuilt_dir
    from ..gpu.compile import compile_options, source_hash
    from . import comparison as ep

    spec = cfg.kernel(kernel)
    base = base_seed(cfg)
    env = io.read_json(env_json)
    arch = env["gpu"]["arch"]
    variants = {act: ep.variant(spec, act) for act in cfg.epilogue.acts}
    cubins = {}
    for act, (cubin, err) in zip(variants, compile_many(list(variants.values()), arch, jobs=len(variants),
                                                         prebuilt=prebuilt_dir(env_json.parent, env))):
        if err:
            raise err
        cubins[act] = cubin
    with gpu_lock(exclusive=True), Guard(f"epilogue {kernel}"):
        rows = ep.run(cfg, spec, cubins=cubins,
                      seed_for=lambda shape, padded: point_seed(base, f"{kernel}/{padded}", shape, "epilogue"))
    digest = source_hash(spec)
    libs = {"cublaslt": f"cuBLASLt {env.get('cublas')}", "cublas+bias_act": f"cuBLAS {env.get('cublas')} + bias/act kernel"}
    for r in rows:
        own = r["implementation"] == spec.id
        r.update(source_sha256=digest if own else libs.get(r["implementation"]),
                 compile_options=" ".join(compile_options(variants[r["act"]])) if own else "", **machine(env))
    io.write_csv(out, rows)
    bad = [r for r in rows if not r["verified"]]
    if bad:
        r = bad[0]
        return StepStatus(status=FAILED, message=f"NOT VERIFIED: {r['implementation']} {r['act']} at "
                                                 f"{r['m']}x{r['n']}x{r['k']}: {first_line(r.get('reason', ''), 160)}")
    disturbed = [r for r in rows if r.get("disturbed")]
    if disturbed:  # not the stage's failure; its table marks them and leaves them out of "of best"
        r = disturbed[0]
        return StepStatus(message=f"{len(disturbed)} of {len(rows)} timings disturbed by other work on the GPU "
                                  f"(first: {r['implementation']} {r['act']} at {r['m']}x{r['n']}x{r['k']})")
    return None

