#!/usr/bin/env bash
# One GPU call for stage 22's first measurements: which cuda-bindings the pipeline's environment has and
# whether NVML's versioned per-process utilisation call works through it (the watch's selftest against a
# real foreign load), the INT8 tensor roof (int8_roof.py), then stage 22's kernels by hand (ozaki2.py).
#   PIP_NO_INDEX=1 PIP_FIND_LINKS=$PWD/.whl bash tools/probes/ozaki2_batch.sh [CUDA_BINDINGS_WHEEL_DIR]
# With a wheel folder, cuda-bindings is installed from it when the environment's lacks the call.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD
source env/_venv.sh
ensure_env pipeline env/pipeline.txt 3.12 >/dev/null
set +e
out=${OUT:-/tmp/ozaki2-out}
mkdir -p "$out"
has_call() {
  "$PY" -c "import cuda.bindings, sys; from cuda.bindings import nvml
print('cuda-bindings', cuda.bindings.__version__, 'versioned utilisation call:', hasattr(nvml, 'device_get_processes_utilization_info'))
sys.exit(not hasattr(nvml, 'device_get_processes_utilization_info'))"
}
if ! has_call && [ -n "${1:-}" ]; then
  "$PY" -m pip install -q --no-deps --no-index "$1"/cuda_bindings-*.whl "$1"/cuda_pathfinder-*.whl && has_call
fi
start=$(date +%s)
"$PY" tools/probes/nvml_watch.py --selftest > "$out/nvml_selftest.log" 2>&1
echo "nvml selftest: exit $?, $(( $(date +%s) - start )) s"; tail -4 "$out/nvml_selftest.log"
"$PY" tools/probes/int8_roof.py --out "$out/int8_roof.json" 2>&1 | tail -3
start=$(date +%s)
timeout 400 "$PY" tools/probes/ozaki2.py --out "$out/ozaki2.json" > "$out/ozaki2.log" 2>&1
echo "ozaki2: exit $?, $(( $(date +%s) - start )) s"
tail -70 "$out/ozaki2.log"
