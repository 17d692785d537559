# Configuration validation (JSON schema with defaults) and every input/target function.
import json
import sys
import time
from pathlib import Path

# the package is used from the checkout (scripts add the same directory to their own path)
SRC = str(Path(workflow.basedir) / "src")
if SRC not in sys.path:
    sys.path.insert(0, SRC)

from sgemm_lab.config import from_dict
from sgemm_lab.errors import ConfigError

try:
    LAB = from_dict(config, source="config")
except ConfigError as exc:
    raise WorkflowError(f"invalid configuration: {exc}")

RUN = LAB.run
RESULTS = f"results/{RUN}"
REPORTS = f"reports/{RUN}"
ENV_JSON = f"{RESULTS}/environment.json"
START_JSON = f"{RESULTS}/pipeline_start.json"


wildcard_constraints:
    kernel="|".join(LAB.implementations),


def kernel_source(wildcards):
    return str(LAB.kernel(wildcards.kernel).source_path)


def impl_inputs(wildcards):
    """What checking or timing one implementation needs: its build, except for the library baseline."""
    if wildcards.kernel == "cublas":
        return {"env": ENV_JSON}
    return {
        "env": ENV_JSON,
        "cubin": f"{RESULTS}/build/{wildcards.kernel}.cubin",
        "record": f"{RESULTS}/build/{wildcards.kernel}.json",
    }


def all_bench():
    return expand(f"{RESULTS}/bench/{{kernel}}.csv", kernel=LAB.implementations)


def all_checks():
    return expand(f"{RESULTS}/check/{{kernel}}.json", kernel=LAB.implementations)


def all_builds():
    return expand(f"{RESULTS}/build/{{kernel}}.json", kernel=[k.id for k in LAB.kernels])


def final_outputs():
    return [f"{REPORTS}/report.md"]


onstart:
    Path(START_JSON).parent.mkdir(parents=True, exist_ok=True)
    Path(START_JSON).write_text(json.dumps({"started_unix": time.time()}) + "\n")
