# Configuration validation (JSON schema with defaults) and every input/target function.
import json
import time
from types import SimpleNamespace

from sgemm_lab.config.files import Origins
from sgemm_lab.config.load import from_dict, validate
from sgemm_lab.config.records import BASELINES

try:
    # validated once, here, with every default filled in: the jobs receive the complete config and
    # build their records from it without the schema (sgemm_lab.config.load.from_dict(trusted=True)).
    # A refusal names the file that set the key (configfiles.smk read them).
    _origins = Origins(CONFIG_FILES, COMMAND_LINE_CONFIG)
    _validated = validate(config, source="config", origins=_origins)
    config.clear()
    config.update(_validated)
    LAB = from_dict(config, trusted=True, origins=_origins)
except ConfigError as exc:
    raise WorkflowError(f"invalid configuration: {exc}")

RUN = LAB.run
RESULTS = f"results/{RUN}"
REPORTS = f"reports/{RUN}"
ENV_JSON = f"{RESULTS}/environment.json"
PRECOMPILED = f"{RESULTS}/build/precompiled.json"  # the precompile step's record (workflow/rules/build.smk)
START_JSON = f"{RESULTS}/pipeline_start.json"


wildcard_constraints:
    kernel="|".join(LAB.implementations),


def kernel_headers():
    """The headers every CUDA stage may include (kernels/*.cuh): an edit reruns what compiles them."""
    from sgemm_lab.config.records import KERNEL_DIR

    return sorted(str(p) for p in KERNEL_DIR.glob("*.cuh"))


def build_inputs(wildcards):
    """A stage's source; an autotuned stage's candidates' sources and their tile sweeps; a dispatch
    stage's base source and its shape sweep."""
    spec = LAB.kernel(wildcards.kernel)
    if spec.dispatched:
        return {
            "env": ENV_JSON,
            "source": str(LAB.kernel(spec.dispatch_from).source_path),
            "headers": kernel_headers(),
            "shape_sweep": f"{REPORTS}/dispatch/{spec.id}.csv",
        }
    if spec.autotuned:
        return {
            "env": ENV_JSON,
            "sources": [str(LAB.kernel(k).source_path) for k in spec.tune_from],
            "headers": kernel_headers(),
            "sweeps": [f"{REPORTS}/sweeps/{k}.csv" for k in spec.tune_from],
        }
    if spec.backend == "host":
        return {"env": ENV_JSON, "source": str(spec.source_path)}
    return {"env": ENV_JSON, "source": str(spec.source_path), "headers": kernel_headers()}


def time_built():
    """The stages of the target time that it builds: named, not a baseline, and buildable without sweeps."""
    from sgemm_lab.pipeline.timeshape import needs_sweeps

    return [s for s in LAB.time_stages if s not in BASELINES and needs_sweeps(LAB, s) is None]


def time_build_files():
    return [f"{RESULTS}/time/build/{s}.{ext}" for s in time_built() for ext in ("bin", "json")]


def time_builds():
    """impl -> [binary, record] of the target time's builds."""
    return {s: [f"{RESULTS}/time/build/{s}.bin", f"{RESULTS}/time/build/{s}.json"] for s in time_built()}


def time_build_inputs(wildcards):
    """A stage's build for the target time: its source (a dispatch stage's base source) and the headers."""
    spec = LAB.kernel(wildcards.kernel)
    source = LAB.kernel(spec.dispatch_from) if spec.dispatched else spec
    if spec.backend == "host":
        return {"env": ENV_JSON, "source": str(spec.source_path)}
    return {"env": ENV_JSON, "source": str(source.source_path), "headers": kernel_headers()}


def impl_inputs(wildcards):
    """What checking or timing one implementation needs: its build, except for a library baseline."""
    if wildcards.kernel in BASELINES:
        return {"env": ENV_JSON}
    return {
        "env": ENV_JSON,
        "binary": f"{RESULTS}/build/{wildcards.kernel}.bin",
        "record": f"{RESULTS}/build/{wildcards.kernel}.json",
    }


# ------------------------------------------------------------------ batch jobs (sgemm_lab.pipeline.batches)
def step_batches(step):
    """Batch name -> its stages, for a step whose stages share jobs (build, check, bench, sweep)."""
    from sgemm_lab.pipeline.batches import batches

    return batches(LAB, step)


def _strings(value):
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else str(value)


def batch_inputs(members, inputs_of):
    """Every input of a batch's stages (ancient() kept), each once."""
    seen, out = set(), []
    for impl in members:
        for value in inputs_of(SimpleNamespace(kernel=impl)).values():
            for item in value if isinstance(value, (list, tuple)) else [value]:
                if str(item) not in seen:
                    seen.add(str(item))
                    out.append(item)
    return out


def batch_members(step, members, inputs_of, outputs_of, params_of=None):
    """impl -> what its part of the batch job reads and writes: its inputs by name, its outputs (the
    status record named "status"), its log and its params (sgemm_lab.pipeline.batches.member_jobs)."""
    return {
        impl: {
            "input": [[name, _strings(v)] for name, v in inputs_of(SimpleNamespace(kernel=impl)).items()],
            "output": [list(pair) for pair in outputs_of(impl)] + [["status", f"{RESULTS}/status/{step}/{impl}.json"]],
            "log": f"{RESULTS}/logs/{step}/{impl}.log",
            "params": params_of(impl) if params_of else {},
        }
        for impl in members
    }


def batch_outputs(members):
    """The flat list of a batch's outputs, from batch_members."""
    return [path for m in members.values() for _name, path in m["output"]]


def batch_logs(step, batch, members):
    """The batch's own log (progress, one line a stage) first, then each stage's log."""
    return [f"{RESULTS}/logs/{step}/{batch}.batch.log"] + [m["log"] for m in members.values()]


def batch_gpu(step, members):
    """The batch job's GPU slot: 0 for host builds and host-timed benches (they may overlap GPU jobs)."""
    from sgemm_lab.pipeline.steps import uses_gpu

    return 1 if uses_gpu(LAB, step, tuple(members)) else 0


def build_outputs(impl):
    return [["binary", f"{RESULTS}/build/{impl}.bin"], ["record", f"{RESULTS}/build/{impl}.json"]]


def build_params(impl):
    """What a stage's build depends on beyond its files: its parameters (a change reruns its batch)."""
    return dict(kernel_params=dict(LAB.kernel(impl).params), tune_from=list(LAB.kernel(impl).tune_from))


def sweep_inputs(wildcards):
    """A swept stage's source and the kernels' headers."""
    return {"env": ENV_JSON, "source": str(LAB.kernel(wildcards.kernel).source_path), "headers": kernel_headers()}


def sweep_params(impl):
    """A stage's sweep grids: a change reruns the batch (the stages whose grids did not change keep theirs)."""
    return dict(grids=[{k: list(v) for k, v in g.items()} for g in LAB.kernel(impl).sweep])


def all_cores(wildcards=None):
    """Every core Snakemake may use (--cores); 1 where it has no total, as under a cluster executor with
    --jobs, where each job's own allocation (cpus_per_task) decides."""
    try:
        return workflow.cores
    except WorkflowError:
        return 1


def swept_ids():
    return [k.id for k in LAB.swept]


def all_sweeps():
    return expand(f"{REPORTS}/sweeps/{{kernel}}.csv", kernel=swept_ids())


def all_epilogues():
    return expand(f"{REPORTS}/epilogue/{{kernel}}.csv", kernel=[k.id for k in LAB.fused])


def all_profiles():
    if not LAB.profile.enabled:
        return []
    return expand(f"{RESULTS}/profile/{{kernel}}.csv", kernel=LAB.gpu_implementations)


def profile_builds():
    """What the profile job loads: implementation -> [binary, record] (empty for cuBLAS)."""
    return {
        k: ["", ""] if k in BASELINES else [f"{RESULTS}/build/{k}.bin", f"{RESULTS}/build/{k}.json"]
        for k in LAB.gpu_implementations
    }


def profile_inputs(wildcards):
    """Every GPU stage's build: the profile job profiles them all in one Nsight Compute run."""
    builds = [p for pair in profile_builds().values() for p in pair if p]
    return {"env": ENV_JSON, "builds": builds}


def sanitized_ids():
    """The CUDA stages (with sanitize: true)."""
    return [k.id for k in LAB.kernels if k.backend == "cuda"] if LAB.sanitize else []


def all_sanitize():
    return expand(f"{RESULTS}/sanitize/{{kernel}}.csv", kernel=sanitized_ids())


def sanitize_builds():
    """What the sanitize job runs: CUDA stage -> [binary, record]."""
    return {k: [f"{RESULTS}/build/{k}.bin", f"{RESULTS}/build/{k}.json"] for k in sanitized_ids()}


def sanitize_inputs(wildcards):
    """Every CUDA stage's build: the sanitize job runs them all."""
    return {"env": ENV_JSON, "builds": [p for pair in sanitize_builds().values() for p in pair]}


def failure_tests():
    return [f"{REPORTS}/failure_tests.csv"] if LAB.failure_tests else []


def all_bench():
    return expand(f"{RESULTS}/bench/{{kernel}}.csv", kernel=LAB.implementations)


def all_checks():
    return expand(f"{RESULTS}/check/{{kernel}}.json", kernel=LAB.implementations)


def all_builds():
    return expand(f"{RESULTS}/build/{{kernel}}.json", kernel=[k.id for k in LAB.kernels])


def ceilings_input():
    """The measured ceilings, when anything runs on a GPU."""
    return [f"{REPORTS}/ceilings.json"] if LAB.gpu_implementations else []


def all_statuses():
    """The status record of every step that may fail for one stage without stopping the run
    (sgemm_lab.results.outcome); the report lists those that are not ok, the verdict counts the failed ones."""
    s = f"{RESULTS}/status"
    per_kernel = {
        "build": [k.id for k in LAB.kernels],
        "check": list(LAB.implementations),
        "bench": list(LAB.implementations),
        "sweep": swept_ids(),
        "shape_sweep": [k.id for k in LAB.kernels if k.dispatched],
        "epilogue": [k.id for k in LAB.fused],
    }
    paths = [f"{s}/{step}/{kernel}.json" for step, kernels in per_kernel.items() for kernel in kernels]
    paths += [f"{s}/ceilings.json", f"{s}/precompile.json"] if LAB.gpu_implementations else []
    paths += [f"{s}/profile.json"] if all_profiles() else []
    paths += [f"{s}/sanitize.json"] if all_sanitize() else []
    paths += [f"{s}/failure_tests.json"] if LAB.failure_tests else []
    return paths + [f"{s}/plot.json"]


def final_outputs():
    """The report, and its status record: not flagged update(), so a report refused for a damaged input
    (its last good version restored) is tried again on the next invocation."""
    return [f"{REPORTS}/report.md", f"{RESULTS}/status/report.json"]


def run_verdict():
    """One line naming the failed steps of this run (None when none failed), from their status records."""
    from sgemm_lab.results.outcome import read_all, verdict

    return verdict(read_all(all_statuses()), run=RUN, report=Path(final_outputs()[0]))


onstart:
    Path(START_JSON).parent.mkdir(parents=True, exist_ok=True)
    Path(START_JSON).write_text(json.dumps({"started_unix": time.time(),
                                            "command": " ".join(["snakemake", *sys.argv[1:]])}) + "\n")


onsuccess:
    # Every job ended, and failed stages wrote status records instead of failing their jobs. The exit
    # status still tells the truth: one line and a non-zero exit when a step failed (strict: false
    # keeps the exit at 0; the report lists the failures either way).
    line = run_verdict()
    if line and LAB.strict:
        print(line, file=sys.stderr)
        sys.exit(1)
    if line:
        print(line.replace("sgemm-lab:", "sgemm-lab (strict: false, exit 0):", 1), file=sys.stderr)


# snakemake --report packs a finished run's report; Snakemake's own refusal when there is none names one of
# the files it misses ("... marked for report but does not exist"), not what to do.
if "--report" in sys.argv and not Path(f"{REPORTS}/report.md").exists():
    raise WorkflowError(f"--report: run '{RUN}' has no report here yet ({REPORTS}/report.md): run the pipeline "
                        "first, or pack a committed run: snakemake --report reports/h100/report.html --config run=h100")
